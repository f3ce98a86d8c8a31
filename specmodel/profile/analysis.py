"""The profiler's side of all-reduce isolation: a thin caller of the one attribution engine
(:mod:`specmodel.trace.attribution`, which ``specmodel ingest`` uses too), plus per-rank skew,
the aggregation of repetitions × ranks into one cost row, and trace slimming. Pure Python: no torch.

One measured forward is a ``specmodel.<kind>[bs=B,toks=T]`` span (the annotation seam). The
engine's definitions apply: CPU/gloo = what the caller loses to each collective (until it runs
its next op); GPU = the union of collective-kernel time in the forward's device window.
Compute = the forward's time − all-reduce time. **Skew**: a rank that reaches a collective early
waits inside it for the slowest; the last to arrive waits for no one, so its duration is the
transfer itself. Matching the i-th collective of a repetition across ranks, skew on rank r =
Σᵢ (durᵣᵢ − minᵣ' durᵣ'ᵢ); transfer = all-reduce time − skew (the rule ingest applies too:
``attribution.collective_skew``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specmodel.stats import iqr, median
from specmodel.trace import attribution as engine
from specmodel.trace.collectives import ALL_GATHER, ALL_REDUCE, classify_cpu_op


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
    msg_bytes: list[int] = field(default_factory=list)  # of each all-reduce whose size the trace tells

    @property
    def n_allreduce(self) -> int:
        return sum(1 for c in self.calls if c.collective == ALL_REDUCE)

    @property
    def n_allgather(self) -> int:
        return sum(1 for c in self.calls if c.collective == ALL_GATHER)


def _end(e: dict[str, Any]) -> float:
    return float(e["ts"]) + float(e.get("dur", 0.0) or 0.0)


def spans(events: Sequence[dict[str, Any]], label: str, cat: str = "user_annotation") -> list[dict[str, Any]]:
    return sorted((e for e in events if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == cat
                   and e.get("name") == label and isinstance(e.get("ts"), (int, float))), key=lambda e: e["ts"])


def _collect(events: Sequence[dict[str, Any]], label: str) -> engine.Collector:
    col = engine.Collector(path="profiled forward", span_name=label.__eq__)
    for e in events:
        col.on_event(e)
    return col


def _phases(spans_: Sequence[engine.Span], label: str) -> list[engine.PhaseSpan]:
    return [engine.PhaseSpan(span=s, kind="", batch=1, tokens=1, label=label) for s in sorted(spans_, key=lambda s: s.ts)]


def _reps(records: Sequence[engine.PassRecord]) -> list[RepMeasure]:
    return [RepMeasure(span_ts=r.t0_us, span_end=r.t1_us, comm_s=r.comm_s,
                       calls=[Call(c, d) for c, d in zip(r.coll_names, r.coll_durs_s, strict=True)],
                       msg_bytes=list(r.msg_bytes)) for r in records]


def analyse_cpu(events: Sequence[dict[str, Any]], label: str) -> list[RepMeasure]:
    """Per repetition of ``label``: caller-side collective time (gloo traces)."""
    col = _collect(events, label)
    return _reps(engine.cpu_passes(col, _phases(col.cpu_spans, label)))


def analyse_gpu(events: Sequence[dict[str, Any]], label: str) -> list[RepMeasure]:
    """Per repetition of ``label``: union of collective-kernel time in its device window."""
    col = _collect(events, label)
    gpu = engine.merge_gpu_spans(col.gpu_spans)
    use_gpu = bool(gpu) and len(gpu) == len(col.cpu_spans)
    _, records = engine.gpu_passes(col, _phases(gpu, label) if use_gpu else [], _phases(col.cpu_spans, label))
    return _reps(records)


def trace_window(cpu_spans: Sequence[dict[str, Any]], reps: Sequence[RepMeasure]) -> tuple[float, float]:
    """[t0, t1] (µs) covering every repetition, host spans and device windows alike: the written
    trace keeps them all, so ``specmodel ingest`` of it re-derives the profile's rows."""
    t0 = min([float(s["ts"]) for s in cpu_spans] + [r.span_ts for r in reps])
    t1 = max([_end(s) for s in cpu_spans] + [r.span_end for r in reps])
    return t0, t1


#: Host-side ops shorter than this are left out of the kept traces (views, strides: thousands
#: of them, no time) — they stay in the measurement, only the written trace is slimmer.
TRACE_MIN_US = 5.0
_SLIM_CATS = ("cpu_op", "cuda_runtime", "cuda_driver", "python_function")


def slice_events(events: Sequence[dict[str, Any]], t0: float, t1: float) -> list[dict[str, Any]]:
    """Events in [t0, t1] (every thread/stream) plus the trace's metadata events, slimmed for a
    small file: short host ops dropped — except the one a blocked caller resumes with after each
    collective (where the engine ends the caller's wait) — args kept only where they say something
    (collectives, kernels, annotations), flow arrows dropped."""
    inside = []
    meta = []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M":
            meta.append(e)
            continue
        ts = e.get("ts")
        if ph != "X" or not isinstance(ts, (int, float)) or _end(e) < t0 or ts > t1:
            continue
        inside.append(e)
    host: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    colls = []
    for e in inside:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            host.setdefault((e.get("pid"), e.get("tid")), []).append(e)
            kind = classify_cpu_op(str(e.get("name", "")), e.get("args"))
            if kind is not None and kind.implementation != "gloo":
                colls.append(e)
    resumes: set[int] = set()
    starts: dict[tuple[Any, Any], list[float]] = {}
    for key, ops in host.items():
        ops.sort(key=lambda e: float(e["ts"]))
        starts[key] = [float(e["ts"]) for e in ops]
    for c in colls:
        key = (c.get("pid"), c.get("tid"))
        ops, st = host[key], starts[key]
        te = _end(c)
        k = bisect.bisect_left(st, te)
        while k < len(ops) and _end(ops[k]) <= te:
            k += 1
        if k < len(ops):
            resumes.add(id(ops[k]))
    keep = list(meta)
    for e in inside:
        cat = e.get("cat")
        if cat in _SLIM_CATS:
            coll = classify_cpu_op(str(e.get("name", "")), e.get("args")) is not None
            if not coll and float(e.get("dur", 0.0) or 0.0) < TRACE_MIN_US and id(e) not in resumes:
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


def skews(per_rank_calls: Sequence[Sequence[Sequence[float | Call]]]) -> tuple[list[list[float]], bool]:
    """``per_rank_calls[w][r]`` = repetition r's collectives on rank w, in order (durations, or
    :class:`Call` so a different collective at the same position is a mismatch too).

    Returns (skew[w][r], matched) by the one rule (:func:`specmodel.trace.attribution.collective_skew`,
    positional keys): skew 0 where the call lists do not line up across ranks.
    """
    W = len(per_rank_calls)
    R = min((len(x) for x in per_rank_calls), default=0)
    out = [[0.0] * R for _ in range(W)]
    matched = True
    for r in range(R):
        keyed = {w: tuple((("ord", i, c.collective if isinstance(c, Call) else ""),
                           c.dur_s if isinstance(c, Call) else c) for i, c in enumerate(per_rank_calls[w][r]))
                 for w in range(W)}
        sk, ok = engine.collective_skew(keyed)
        matched = matched and ok
        for w in range(W):
            out[w][r] = sk[w]
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
    # each repetition's all-reduce is bounded by that repetition's (unprofiled) total; the trace
    # carries those totals (otherData.specmodel.bare_totals_s), so ingest applies the same bound
    comm_c = [[min(comms[w][r], totals[w][r]) for r in range(R)] for w in range(W)]
    sk, matched = skews([[list(calls[w][r]) for r in range(R)] for w in range(W)])
    sk = [[min(sk[w][r], comm_c[w][r]) for r in range(R)] for w in range(W)]
    rep_total = [sum(totals[w][r] for w in range(W)) / W for r in range(R)]
    total = engine.median_of_rank_means([totals[w][r] for w in range(W)] for r in range(R))
    ar = min(engine.median_of_rank_means([comm_c[w][r] for w in range(W)] for r in range(R)), total)
    skew = min(engine.median_of_rank_means([sk[w][r] for w in range(W)] for r in range(R)), ar)
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
