"""All-reduce isolation from torch.profiler (Kineto / Chrome trace) events, per-rank skew, and
the aggregation of repetitions × ranks into one cost row. Pure Python: no torch.

One measured forward is a ``specmodel.<kind>[bs=B,toks=T]`` span (the annotation seam). Inside it:

* **CPU / gloo.** The caller issues ``c10d::allreduce_`` (enqueue only) and blocks in
  ``work.wait()`` while a ``pt_gloo_runloop`` thread runs ``gloo:all_reduce``. A collective's
  time is what the *caller* loses: from its ``c10d::`` op to the next op the caller runs (at the
  earliest the end of the gloo work). Summed over the collectives in the span (no overlap: they
  are synchronous).
* **GPU / NCCL.** The union of NCCL (or custom all-reduce) kernel time inside the forward's
  device window (its ``gpu_user_annotation``, else the kernels launched from the CPU span).

Compute = the forward's time − all-reduce time. **Skew**: a rank that reaches a collective early
waits inside it for the slowest; the last to arrive waits for no one, so its duration is the
transfer itself. Matching the i-th collective of a repetition across ranks, skew on rank r =
Σᵢ (durᵣᵢ − minᵣ' durᵣ'ᵢ); transfer = all-reduce time − skew.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specmodel.stats import iqr, median
from specmodel.trace import _intervals as iv
from specmodel.trace.collectives import ALL_GATHER, ALL_REDUCE, classify_cpu_op, classify_kernel

US = 1e-6


@dataclass(frozen=True)
class Call:
    collective: str
    dur_s: float


@dataclass
class RepMeasure:
    """What the trace says about one repetition of one forward on one rank."""

    span_ts: float  # µs, trace clock
    span_end: float
    comm_s: float
    calls: list[Call] = field(default_factory=list)

    @property
    def n_allreduce(self) -> int:
        return sum(1 for c in self.calls if c.collective == ALL_REDUCE)

    @property
    def n_allgather(self) -> int:
        return sum(1 for c in self.calls if c.collective == ALL_GATHER)


def _x_events(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)):
            out.append(e)
    return out


def _end(e: dict[str, Any]) -> float:
    return float(e["ts"]) + float(e.get("dur", 0.0) or 0.0)


def spans(events: Sequence[dict[str, Any]], label: str, cat: str = "user_annotation") -> list[dict[str, Any]]:
    return sorted((e for e in _x_events(events) if e.get("cat") == cat and e.get("name") == label),
                  key=lambda e: e["ts"])


def analyse_cpu(events: Sequence[dict[str, Any]], label: str) -> list[RepMeasure]:
    """Per repetition of ``label``: caller-side collective time (gloo traces)."""
    xs = _x_events(events)
    reps = spans(xs, label)
    if not reps:
        return []
    tid = reps[0].get("tid")
    main = sorted((e for e in xs if e.get("tid") == tid and e.get("cat") in ("cpu_op", "user_annotation")),
                  key=lambda e: e["ts"])
    main_ts = [float(e["ts"]) for e in main]
    callers: list[tuple[float, float, str]] = []
    work: list[tuple[float, float, str]] = []
    for e in xs:
        c = classify_cpu_op(str(e.get("name", "")), e.get("args"))
        if c is None:
            continue
        if e.get("tid") == tid and c.implementation != "gloo":
            callers.append((float(e["ts"]), _end(e), c.collective))
        elif c.implementation == "gloo":
            work.append((float(e["ts"]), _end(e), c.collective))
    callers.sort()
    outer: list[tuple[float, float, str]] = []  # record_param_comms > c10d::allreduce_: count once
    for op in callers:
        if outer and op[0] >= outer[-1][0] and op[1] <= outer[-1][1]:
            if outer[-1][2] not in (ALL_REDUCE, ALL_GATHER) and op[2] != outer[-1][2]:
                outer[-1] = (outer[-1][0], outer[-1][1], op[2])
            continue
        outer.append(op)
    work.sort()
    work_starts = [w[0] for w in work]
    used = [False] * len(work)
    out = []
    for sp in reps:
        s0, s1 = float(sp["ts"]), _end(sp)
        calls: list[Call] = []
        blocked: list[tuple[float, float]] = []
        for ts, te, coll in outer:
            if ts < s0 or ts >= s1:
                continue
            end = te
            j = bisect.bisect_left(work_starts, ts - 1.0)  # the gloo work this call enqueued
            while j < len(work) and (used[j] or work[j][2] != coll):
                j += 1
            if j < len(work) and work[j][0] < s1:
                used[j] = True
                end = max(end, work[j][1])
            k = bisect.bisect_left(main_ts, te)  # the caller resumes at its next op
            while k < len(main) and _end(main[k]) <= te:
                k += 1
            nxt = main_ts[k] if k < len(main) else s1
            end = max(end, min(nxt, s1))
            end = min(end, s1)
            blocked.append((ts, end))
            calls.append(Call(coll, (end - ts) * US))
        comm = iv.length(iv.merge(blocked)) * US
        out.append(RepMeasure(span_ts=s0, span_end=s1, comm_s=comm, calls=calls))
    return out


def analyse_gpu(events: Sequence[dict[str, Any]], label: str) -> list[RepMeasure]:
    """Per repetition of ``label``: union of collective-kernel time in its device window."""
    xs = _x_events(events)
    cpu = spans(xs, label)
    gpu = spans(xs, label, cat="gpu_user_annotation")
    kernels = sorted((e for e in xs if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    k_ts = [float(e["ts"]) for e in kernels]
    windows: list[tuple[float, float]] = []
    if gpu and len(gpu) == len(cpu):
        windows = [(float(g["ts"]), _end(g)) for g in gpu]
    else:  # kernels launched (correlation) from inside each CPU span
        launches = [(float(e["ts"]), (e.get("args") or {}).get("correlation")) for e in xs
                    if e.get("cat") in ("cuda_runtime", "cuda_driver")]
        by_corr: dict[Any, dict[str, Any]] = {(k.get("args") or {}).get("correlation"): k for k in kernels}
        for sp in cpu:
            s0, s1 = float(sp["ts"]), _end(sp)
            ks = [by_corr[c] for t, c in launches if s0 <= t < s1 and c in by_corr]
            windows.append((min(float(k["ts"]) for k in ks), max(_end(k) for k in ks)) if ks else (s0, s0))
    out = []
    for w0, w1 in windows:
        i0, i1 = bisect.bisect_left(k_ts, w0), bisect.bisect_left(k_ts, w1)
        calls, ivs = [], []
        for k in kernels[i0:i1]:
            c = classify_kernel(str(k.get("name", "")), k.get("args"))
            if c is None:
                continue
            e = min(_end(k), w1)
            ivs.append((float(k["ts"]), e))
            calls.append(Call(c.collective, (e - float(k["ts"])) * US))
        out.append(RepMeasure(span_ts=w0, span_end=w1, comm_s=iv.length(iv.merge(ivs)) * US, calls=calls))
    return out


#: Host-side ops shorter than this are left out of the kept traces (views, strides: thousands
#: of them, no time) — they stay in the measurement, only the written trace is slimmer.
TRACE_MIN_US = 5.0
_SLIM_CATS = ("cpu_op", "cuda_runtime", "cuda_driver", "python_function")


def slice_events(events: Sequence[dict[str, Any]], t0: float, t1: float) -> list[dict[str, Any]]:
    """Events of one repetition (every thread/stream) plus the trace's metadata events, slimmed
    for a small file: short host ops dropped, args kept only where they say something (collectives,
    kernels, annotations), flow arrows dropped."""
    keep = []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M":
            keep.append(e)
            continue
        ts = e.get("ts")
        if ph != "X" or not isinstance(ts, (int, float)) or _end(e) < t0 or ts > t1:
            continue
        cat = e.get("cat")
        if cat in _SLIM_CATS:
            name = str(e.get("name", ""))
            coll = classify_cpu_op(name, e.get("args")) is not None
            if not coll and float(e.get("dur", 0.0) or 0.0) < TRACE_MIN_US:
                continue
            if not coll:
                e = {k: v for k, v in e.items() if k != "args"}
        keep.append(e)
    return keep


# ---------------------------------------------------------------- aggregation over ranks × reps


def profiler_scale(bare_totals: Sequence[float], profiled_totals: Sequence[float]) -> float:
    """median(bare) / median(profiled): how much the profiler stretched a forward (≤ 1 normally).

    Collective seconds read from the profiled pass are multiplied by it, i.e. the all-reduce
    share measured under the profiler is applied to the unprofiled forward time.
    """
    prof = median(profiled_totals)
    if prof <= 0 or not bare_totals:
        return 1.0
    return median(bare_totals) / prof


def representative(totals: Sequence[float]) -> int:
    """Index of the repetition closest to the median (the one kept in the trace)."""
    m = median(totals)
    return min(range(len(totals)), key=lambda i: (abs(totals[i] - m), i)) if totals else 0


def skews(per_rank_calls: Sequence[Sequence[Sequence[float]]]) -> tuple[list[list[float]], bool]:
    """``per_rank_calls[w][r]`` = durations of repetition r's collectives on rank w, in order.

    Returns (skew[w][r], matched) — skew 0 where the call lists do not line up across ranks.
    """
    W = len(per_rank_calls)
    R = min((len(x) for x in per_rank_calls), default=0)
    out = [[0.0] * R for _ in range(W)]
    matched = True
    for r in range(R):
        lists = [per_rank_calls[w][r] for w in range(W)]
        n = len(lists[0])
        if any(len(x) != n for x in lists):
            matched = False
            continue
        for i in range(n):
            lo = min(x[i] for x in lists)
            for w in range(W):
                out[w][r] += lists[w][i] - lo
    return out, matched


@dataclass(frozen=True, kw_only=True)
class PointStats:
    """One cost row's numbers (SI) + per-rank detail."""

    total_s: float
    allreduce_s: float
    compute_s: float
    skew_s: float
    spread_s: float
    samples: int
    n_allreduce: int
    n_allgather: int
    calls_matched: bool
    per_rank: list[dict[str, float]]


def aggregate_point(totals: Sequence[Sequence[float]], comms: Sequence[Sequence[float]],
                    calls: Sequence[Sequence[Sequence[Call]]]) -> PointStats:
    """``totals[w][r]``, ``comms[w][r]``, ``calls[w][r]`` for W ranks × R repetitions.

    Per repetition the ranks are averaged (a "typical rank"); the row takes the median over
    repetitions of total, all-reduce and skew (all-reduce ≤ total, skew ≤ all-reduce), compute =
    total − all-reduce, spread = IQR of the repetition totals.
    """
    W = len(totals)
    R = min(len(t) for t in totals)
    comm_c = [[min(comms[w][r], totals[w][r]) for r in range(R)] for w in range(W)]
    sk, matched = skews([[[c.dur_s for c in calls[w][r]] for r in range(R)] for w in range(W)])
    sk = [[min(sk[w][r], comm_c[w][r]) for r in range(R)] for w in range(W)]
    rep_total = [sum(totals[w][r] for w in range(W)) / W for r in range(R)]
    rep_comm = [sum(comm_c[w][r] for w in range(W)) / W for r in range(R)]
    rep_skew = [sum(sk[w][r] for w in range(W)) / W for r in range(R)]
    total = median(rep_total)
    ar = min(median(rep_comm), total)
    skew = min(median(rep_skew), ar)
    per_rank = []
    for w in range(W):
        ar_w = median(comm_c[w][:R])
        sk_w = min(median(sk[w][:R]), ar_w)
        per_rank.append({"rank": w, "total_s": median(totals[w][:R]), "allreduce_s": ar_w, "skew_s": sk_w,
                         "transfer_s": ar_w - sk_w})
    first = calls[0][0] if calls and calls[0] else []
    return PointStats(total_s=total, allreduce_s=ar, compute_s=total - ar, skew_s=skew, spread_s=iqr(rep_total),
                      samples=R, n_allreduce=sum(1 for c in first if c.collective == ALL_REDUCE),
                      n_allgather=sum(1 for c in first if c.collective == ALL_GATHER), calls_matched=matched,
                      per_rank=per_rank)


def allreduce_latency(durs: Sequence[Sequence[float]]) -> tuple[float, float]:
    """Pure all-reduce sweep: ``durs[w][r]`` per rank per repetition (each after a barrier).
    Latency = median over repetitions of the fastest rank (the last to arrive: transfer only);
    spread = IQR of those."""
    R = min(len(d) for d in durs)
    per_rep = [min(d[r] for d in durs) for r in range(R)]
    return median(per_rep), iqr(per_rep)
