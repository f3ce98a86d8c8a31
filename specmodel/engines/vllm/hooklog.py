"""Reading back what the vLLM hook (:mod:`specmodel.engines.vllm.hook`) wrote -- one
``specmodel.vllm_step`` JSONL file per rank -- and turning it into a profile. Runs anywhere: no
vLLM, no torch.

What a vLLM profile row means (the cycle model's T_base and T_cycle must both carry what the
engine does around a forward, or a small model's host overhead -- a large share of its step --
would make every drafter look better than it is):

* ``decode`` / ``verify`` / ``extend`` rows are engine steps without the drafter: ``total_s`` =
  median over steps (every rank) of forward + the step's host work (``overhead_s``: input
  preparation, sampling / rejection, bookkeeping) + the gap before the step (the engine core's
  scheduling and output processing); ``allreduce_s`` = the all-reduces timed inside the forward,
  ``compute_s`` = the rest of the forward, ``other_s`` = the host part.
* ``draft_extend`` / ``draft`` rows (drafters that run a forward: ``draft_model``, EAGLE, ...):
  vLLM's proposer runs its first forward over the verified tokens (B·(k+1)) and the other k − 1
  over one token per request. Where the hook split the proposal (``draft_first_s``, V1), the
  first forward with the proposal's set-up is a ``draft_extend`` row at the step's tokens and each
  later one a ``draft`` row at B tokens: (draft_s − draft_first_s)/(k − 1). Older logs (and V2)
  carry only the whole proposal: one ``draft`` row = draft_s / k, every forward the mean.
* host-side drafters (``ngram``): no draft row; the median lookup time over *every* step that ran
  the lookup (a miss costs one too) is the profile's ``overhead_s`` and ``host_proposer.lookup_s``;
  the share of request-steps that proposed is ``host_proposer.proposal_rate``; the speculative
  server's own decode-shaped steps (no request proposed) are ``host_proposer.decode`` rows.

Each server's steps stay apart: ``decode`` / ``extend`` rows come from steps without speculation
(``draft_method`` null) only, ``verify`` and ``draft`` rows from the speculative server. Rows are
split by the steps' ``context_tokens`` into the context bands of
:data:`specmodel.model.accept.BAND_EDGES` (each row at its steps' median context).

What a request costs beside its decode steps (the profile's ``requests``): the prompt length
profiled, the speculative server's own prefill rows (its ``extend`` steps, the drafter's proposal
included) and, from each server's ``metrics.prom`` (its last ``/metrics`` page, kept by ``specmodel
vllm``), the time per finished request spent outside the engine's steps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specmodel.engines.hook.records import METRICS_FILE, Drops, check_place, dp_replica
from specmodel.errors import SpecmodelError
from specmodel.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_HOOK_STEP_S,
    MAX_METRICS_PAGE_BYTES,
    MAX_STEP_TOKENS,
    MAX_TP,
)
from specmodel.schema.formats import PROBE, VLLM_STEP
from specmodel.schema.phases import VLLM_FORWARD_DRAFTERS, is_host_proposer
from specmodel.stats import iqr, median, series_median_ci95_rel
from specmodel.units import ms

STEP_KINDS = ("decode", "verify", "extend")
COMMAND = "specmodel vllm"
#: vLLM's per-request histograms (seconds): arrival to finish, waiting for the scheduler, running
_E2E, _QUEUE, _INFER = ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                        "vllm:request_inference_time_seconds")

#: the seconds fields of a step record (null allowed where the part did not run)
_SECONDS = ("forward_s", "forward_allreduce_s", "draft_s", "draft_allreduce_s", "gap_s", "draft_first_s",
            "draft_first_allreduce_s", "host_step_s", "gpu_step_s", "gpu_gap_s")
_COUNTS = ("forward_n_allreduce", "draft_n_allreduce", "spec_tokens", "draft_first_n_allreduce", "dropped_steps")
#: ``step_clock`` of a v2 step: the clock ``step_s`` / ``overhead_s`` (and the gap a row adds) are on
CLOCKS = ("cuda_event", "perf_counter")
#: the meta line's place of the process (v2): ranks and sizes
_PLACE = ("tp_rank", "pp_rank", "dp_rank", "pp_size", "dp_size", "max_pending_steps")


@dataclass(frozen=True, kw_only=True)
class StepLog:
    """One rank file, validated. ``runs``: (meta, its steps) per server process that wrote to the
    file (a meta line starts one; steps before any meta belong to an empty one)."""

    path: str
    meta: tuple[dict[str, Any], ...]
    steps: tuple[dict[str, Any], ...]
    truncated: bool = False
    runs: tuple[tuple[dict[str, Any], tuple[dict[str, Any], ...]], ...] = ()
    #: the calibration probes (:mod:`specmodel.engines.hook.probe`), in file order
    probes: tuple[dict[str, Any], ...] = ()


def _num(rec: dict[str, Any], key: str, where: str, *, optional: bool = False, hi: float = MAX_HOOK_STEP_S) -> None:
    v = rec.get(key)
    if v is None and optional:
        return
    # (a range test, not math.isfinite: NaN fails it, and a 400-digit integer does not overflow it)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
        raise SpecmodelError(f"{where}: {key}: expected a finite number in 0..{hi:g}, got {v!r}")


def _int(rec: dict[str, Any], key: str, where: str, *, lo: int, hi: int, optional: bool = False) -> None:
    v = rec.get(key)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SpecmodelError(f"{where}: {key}: expected an integer in {lo}..{hi}, got {v!r}")


def _str(rec: dict[str, Any], key: str, where: str) -> None:
    v = rec.get(key)
    if v is not None and not isinstance(v, str):
        raise SpecmodelError(f"{where}: {key}: expected a string or null, got {v!r}")


def _check_step(rec: dict[str, Any], where: str) -> None:
    """Every field :func:`summarize` reads, checked (a string, NaN or infinity is one line, not a crash)."""
    if rec.get("kind") not in STEP_KINDS:
        raise SpecmodelError(f"{where}: kind: expected one of {', '.join(STEP_KINDS)}, got {rec.get('kind')!r}")
    _int(rec, "batch", where, lo=1, hi=MAX_BATCH)
    _int(rec, "tokens", where, lo=1, hi=MAX_STEP_TOKENS)
    if rec["tokens"] < rec["batch"]:
        raise SpecmodelError(f"{where}: tokens: must be >= batch ({rec['batch']}), got {rec['tokens']}")
    for k in ("step_s", "overhead_s"):
        _num(rec, k, where)
    for k in _SECONDS:
        _num(rec, k, where, optional=True)
    _num(rec, "context_tokens", where, optional=True, hi=MAX_CONTEXT_TOKENS)
    for k in _COUNTS:
        _int(rec, k, where, lo=0, hi=MAX_STEP_TOKENS, optional=True)
    _int(rec, "draft_k", where, lo=1, hi=MAX_DRAFT_TOKENS, optional=True)
    _str(rec, "draft_method", where)
    if rec.get("step_clock") is not None and rec["step_clock"] not in CLOCKS:
        raise SpecmodelError(f"{where}: step_clock: expected one of {', '.join(CLOCKS)} or null, "
                             f"got {rec['step_clock']!r}")
    if rec.get("step_clock") == "cuda_event" and rec.get("gpu_step_s") is None:
        raise SpecmodelError(f"{where}: gpu_step_s: a step on the cuda_event clock needs its GPU span")


def _check_meta(rec: dict[str, Any], where: str) -> None:
    _int(rec, "tp_size", where, lo=1, hi=MAX_TP, optional=True)
    for k in ("vllm_version", "model_path", "served_model_name", "device", "device_name", "cpu_name", "clock",
              "model_runner", "model_runner_changed"):
        _str(rec, k, where)
    rank = rec.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, (str, int))):
        raise SpecmodelError(f"{where}: rank: expected a string or an integer, got {rank!r}")
    check_place(rec, where, _PLACE)
    spec = rec.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise SpecmodelError(f"{where}: spec: expected an object or null, got {spec!r}")
        _str(spec, "method", f"{where}: spec")
        _int(spec, "num_speculative_tokens", f"{where}: spec", lo=1, hi=MAX_DRAFT_TOKENS, optional=True)


def read_step_log(path: str | os.PathLike[str]) -> StepLog:
    """Read one rank file (``rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl``, or v1's ``rank<k>.jsonl``; see
    :func:`specmodel.engines.hook.records.read_records`)."""
    from specmodel.engines.hook.probe import check_probe
    from specmodel.engines.hook.records import Runs, read_records

    recs, truncated = read_records(path, VLLM_STEP, "specmodel vllm step log")
    runs = Runs()
    steps: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    for where, rec in recs:
        kind = rec.get("type")
        if PROBE.matches(rec):
            check_probe(rec, where)
            probes.append(rec)
        elif kind == "meta":
            _check_meta(rec, where)
            runs.meta(rec)
        elif kind == "step":
            _check_step(rec, where)
            steps.append(rec)
            runs.add(rec)
        else:
            raise SpecmodelError(f"{where}: type: expected 'meta' or 'step', got {kind!r}")
    return StepLog(path=str(path), meta=tuple(runs.metas), steps=tuple(steps), truncated=truncated,
                   runs=runs.frozen(), probes=tuple(probes))


MIN_SAMPLES = 5


def context_band(context_tokens: float) -> int:
    """Index of the context band (:data:`specmodel.model.accept.BAND_EDGES`, the bands acceptance
    is split by) that holds ``context_tokens``."""
    from specmodel.model.accept import BAND_EDGES

    return max(i for i, lo in enumerate(BAND_EDGES) if context_tokens >= lo)


@dataclass
class _Cell:
    total: list[float]
    ar: list[float]
    fwd: list[float]
    n_ar: list[float]
    ctx: list[float]


def _cell() -> _Cell:
    return _Cell(total=[], ar=[], fwd=[], n_ar=[], ctx=[])


def _band_contexts(*groups: dict[tuple[str, int, int, int], _Cell]) -> dict[tuple[bool, int], int]:
    """One context per band, (is_prefill, band) -> the median context of every step in it: the rows of
    a band share it, so each band's token curve is one curve of the cost surface (a context per cell
    would make every cell its own curve, and a lookup between them an extrapolation)."""
    ctx: dict[tuple[bool, int], list[float]] = {}
    for cells in groups:
        for (kind, _b, _t, band), g in cells.items():
            ctx.setdefault((kind == "extend", band), []).extend(g.ctx)
    return {k: round(median(v)) for k, v in ctx.items() if v}


def _rows(cells: dict[tuple[str, int, int, int], _Cell], *, min_samples: int, n_ranks: int, tp: int,
          dropped: list[str], few_kinds: list[str], band_ctx: dict[tuple[bool, int], int],
          shares: dict[tuple[str, int, int], float] | None = None, capture_tp: int = 1) -> tuple[list[Any], int]:
    """Cost rows of step cells ((kind, batch, tokens, band) -> samples); (rows, rows at TP ``tp`` > 1
    without a timed all-reduce). A row the wrapper timed no all-reduce of, at ``capture_tp`` > 1,
    takes its phase's capture share (:mod:`specmodel.engines.vllm.capture_ingest`) × its forward time."""
    from specmodel.engines.vllm.capture_ingest import share_for_row
    from specmodel.schema.profile import CostRow

    for kind in sorted({k[0] for k in cells}):
        keys = [c for c in cells if c[0] == kind]
        if all(len(cells[c].total) < min_samples * n_ranks for c in keys):
            few_kinds.append(kind)
            continue
        for c in keys:
            if len(cells[c].total) < min_samples * n_ranks:
                dropped.append(f"{kind} b{c[1]} t{c[2]} ({len(cells[c].total)})")
                del cells[c]
    rows = []
    no_ar = 0
    for (kind, b, t, _band), g in sorted(cells.items()):
        total = median(g.total)
        if total <= 0:
            continue
        ar = min(median(g.ar), total)
        source = "wrapper" if max(g.n_ar) > 0 else ""
        share = share_for_row(shares, kind, b, t) if shares and capture_tp > 1 and not source else None
        if share:  # (a capture that found no all-reduce in a TP > 1 forward missed it: still unknown)
            ar, source = min(share * median(g.fwd), total), "capture"
        compute = min(max(median(g.fwd) - ar, 0.0), total - ar)
        if tp > 1 and not source:
            no_ar += 1
        rows.append(CostRow(kind=kind, batch=b, tokens=t, total_s=total, allreduce_s=ar, compute_s=compute,
                            other_s=max(total - ar - compute, 0.0), n_allreduce=round(median(g.n_ar)),
                            spread_s=iqr(g.total), samples=len(g.total),
                            # steps in log order: the interval allows for the box's drift between them
                            ci95_rel=series_median_ci95_rel(g.total),
                            context_tokens=band_ctx.get((kind == "extend", _band), 0),
                            allreduce_source=source))
    return rows, no_ar


def _add_draft(r: dict[str, Any], k: int, ctx: float, drafts: dict[tuple[int, int], _Cell],
               extends: dict[tuple[int, int, int], _Cell]) -> None:
    """A verify step's proposal as drafter-forward samples: split at the first forward when the hook
    timed it (``draft_first_s``), else k forwards of the mean (see the module docstring)."""
    total, ar = float(r["draft_s"]), float(r.get("draft_allreduce_s") or 0.0)
    n_ar = float(r.get("draft_n_allreduce") or 0)
    first = r.get("draft_first_s")
    band = context_band(ctx)
    if first is not None:
        f_ar = min(float(r.get("draft_first_allreduce_s") or 0.0), ar)
        f_n = min(float(r.get("draft_first_n_allreduce") or 0), n_ar)
        e = extends.setdefault((r["batch"], r["tokens"], band), _cell())
        e.total.append(float(first))
        e.ar.append(f_ar)
        e.fwd.append(float(first))
        e.n_ar.append(f_n)
        e.ctx.append(ctx)
        if k == 1:
            return
        total, ar, n_ar, k = max(total - float(first), 0.0), max(ar - f_ar, 0.0), max(n_ar - f_n, 0.0), k - 1
    d = drafts.setdefault((r["batch"], band), _cell())
    d.total.append(total / k)
    d.ar.append(ar / k)
    d.fwd.append(total / k)
    d.n_ar.append(n_ar / k)
    d.ctx.append(ctx)


def _request_costs(base_prompts: list[tuple[int, int, int]], spec_prompts: list[tuple[int, int, int]],
                   spec_prefill_cells: dict[tuple[str, int, int, int], _Cell], spec_dirs: dict[str, bool], *,
                   min_samples: int, n_ranks: int, tp: int) -> tuple[Any, str]:
    """The profile's ``requests`` (None when no prefill step was recorded) and its note."""
    from specmodel.schema.profile import RequestCosts, prompt_tokens_of

    prompts = base_prompts or spec_prompts
    if not prompts:
        return None, "requests: not recorded (no prefill step in the logs)"
    prompt = min(prompt_tokens_of(prompts), MAX_CONTEXT_TOKENS)
    # its own context per band: the baseline's rows keep theirs, whatever this server recorded
    rows, _ = _rows(spec_prefill_cells, min_samples=min_samples, n_ranks=n_ranks, tp=tp, dropped=[],
                    few_kinds=[], band_ctx=_band_contexts(spec_prefill_cells))
    outside: dict[bool, tuple[float | None, int]] = {}
    kept = False
    for spec in (False, True):
        sums: list[tuple[float, int]] = []
        for d in sorted(x for x, s in spec_dirs.items() if s == spec):
            page = os.path.join(d, METRICS_FILE)
            if not os.path.exists(page):
                continue
            kept = True
            sec, n = outside_per_request(page)
            if sec is not None:
                sums.append((sec * n, n))
        n_all = sum(n for _, n in sums)
        outside[spec] = (sum(t for t, _ in sums) / n_all, n_all) if n_all else (None, 0)
    (b_s, b_n), (s_s, s_n) = outside[False], outside[True]
    req = RequestCosts(prompt_tokens=prompt, spec_prefill=tuple(rows), baseline_outside_s=b_s, spec_outside_s=s_s,
                       baseline_requests=b_n, spec_requests=s_n)
    head = f"requests: prompt {prompt} tokens; {len(rows)} prefill row(s) of the speculative server"
    if not kept:
        return req, (f"{head}; time outside the engine's steps not recorded (no {METRICS_FILE}: rerun under this "
                     "specmodel's `vllm`)")

    def per(sec: float | None, n: int) -> str:
        return f"{ms(sec, 1)} over {n} request(s)" if sec is not None else "not recorded"

    return req, (f"{head}; outside the engine's steps per request: baseline {per(b_s, b_n)}, speculative "
                 f"{per(s_s, s_n)} (from /metrics)")


def outside_per_request(path: str | os.PathLike[str]) -> tuple[float | None, int]:
    """(seconds per finished request the server spent outside the engine's steps, finished
    requests) from a kept ``/metrics`` page: end-to-end latency less queue and inference time,
    summed over every label set (engines); (None, 0) when no request finished or a series is
    missing. A page that does not parse is one line naming the file."""
    from specmodel.engines.prom import parse_page, total
    from specmodel.io import read_bytes

    where = str(path)
    body = read_bytes(path, "a /metrics page", max_bytes=MAX_METRICS_PAGE_BYTES, decompress=False)
    page = parse_page(body.decode("utf-8", errors="replace"), where)
    count = total(page, f"{_E2E}_count")
    parts = [total(page, f"{name}_sum") for name in (_E2E, _QUEUE, _INFER)]
    if count is None or count < 1 or any(v is None for v in parts):
        return None, 0
    e2e, queue, infer = (float(v or 0.0) for v in parts)
    n = round(count)
    outside = max(e2e - queue - infer, 0.0) / n
    if outside > 1e3:
        raise SpecmodelError(f"{where}: {outside:.3g} s per request outside the engine's steps "
                             f"({_E2E} less queue and inference time): not a page of one run")
    return outside, n


def capture_note(caps: Sequence[Any], from_capture: Sequence[Any], in_capture: int) -> str:
    """The profile's note on the captures it read (:mod:`specmodel.engines.vllm.capture_ingest`)."""
    kinds = sorted({r.kind for r in from_capture})
    used = (f"{len(from_capture)} row(s) ({', '.join(kinds)}) take all-reduce = capture share × forward time "
            "(allreduce_source 'capture')") if from_capture else "no row needed it (the wrapper timed every row)"
    shares = "; ".join(f"{k[0]} b{k[1]} t{k[2]} {s:.1%}" for c in caps for k, s in c.shares[:6])
    return (f"torch.profiler capture ({', '.join(sorted({c.mode for c in caps}))}, {sum(len(c.files) for c in caps)} "
            f"trace(s)): all-reduce share per phase {shares}; {used}; {in_capture} step record(s) inside the capture "
            "window left out of the rows (the profiler stretches them).")


@dataclass(kw_only=True)
class _Recording:
    """What :func:`summarize` gathers from every step of every rank file before it builds a row
    (filled by :meth:`add_log`, then read once)."""

    base_cells: dict[tuple[str, int, int, int], _Cell] = field(default_factory=dict)
    spec_cells: dict[tuple[str, int, int, int], _Cell] = field(default_factory=dict)
    nodraft_cells: dict[tuple[str, int, int, int], _Cell] = field(default_factory=dict)  # a host proposer's decode-shaped steps
    drafts: dict[tuple[int, int], _Cell] = field(default_factory=dict)
    extends: dict[tuple[int, int, int], _Cell] = field(default_factory=dict)  # (batch, tokens, band): first drafter forwards
    spec_prefill_cells: dict[tuple[str, int, int, int], _Cell] = field(default_factory=dict)  # the speculative server's extend steps
    base_prompts: list[tuple[int, int, int]] = field(default_factory=list)  # (batch, tokens, 1) of the extend steps, each server apart
    spec_prompts: list[tuple[int, int, int]] = field(default_factory=list)
    spec_dirs: dict[str, bool] = field(default_factory=dict)  # --summarize directory -> whether its server speculates
    lookups: list[float] = field(default_factory=list)
    request_steps: int = 0
    proposed: int = 0
    versions: dict[str, str] = field(default_factory=dict)
    tps: dict[int, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    served: set[str] = field(default_factory=set)
    runners: set[str] = field(default_factory=set)
    clocks: set[str] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    cpu_names: set[str] = field(default_factory=set)
    spec_meta: dict[str, Any] = field(default_factory=dict)
    run_ranks: dict[tuple[str, int, int], set[str]] = field(default_factory=dict)  # (directory, DP replica, segment) -> ranks
    n_steps: int = 0
    step_spec: set[tuple[str, int]] = field(default_factory=set)  # (method, k) of the speculative steps: what actually ran
    probes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # --summarize directory -> its servers' probes
    step_clocks: set[str] = field(default_factory=set)  # "cuda_event" / "perf_counter" (v2), "host_less_gpu" (a v1 GPU step)
    drops: Drops = field(default_factory=lambda: Drops("step"))  # steps the hook dropped (its queue of GPU records full)
    in_capture: int = 0  # steps run under the torch.profiler capture: left out of the rows

    def add_log(self, lg: StepLog, *, replica: int | None, captures: dict[str, Any], max_gap_s: float) -> None:
        run_dir = str(os.path.dirname(lg.path))
        self.spec_dirs.setdefault(run_dir, False)
        if replica is None or all(dp_replica(m) == replica for m, _ in lg.runs):
            self.probes.setdefault(run_dir, []).extend(lg.probes)
        for seg, (m, steps) in enumerate(lg.runs):
            if replica is not None and dp_replica(m) != replica:
                continue  # another DP replica: another engine
            self.drops.add_run(m, steps, "kind")
            if m:
                self.versions.setdefault(str(m.get("vllm_version")), lg.path)
                self.clocks.add(str(m.get("clock") or "perf_counter"))
                if m.get("tp_size") is not None:
                    self.tps.setdefault(m["tp_size"], lg.path)
                if m.get("model_path"):
                    self.models.setdefault(str(m["model_path"]), lg.path)
                if m.get("served_model_name"):
                    self.served.add(str(m["served_model_name"]))
                if m.get("model_runner"):
                    changed = m.get("model_runner_changed")
                    self.runners.add(str(m["model_runner"]) + (f" (chosen by specmodel: {changed})" if changed else
                                                          " (vLLM's choice)"))
                if m.get("device_name"):
                    self.devices.add(str(m["device_name"]))
                if str(m.get("device") or "").startswith("cpu"):
                    self.cpu_names.add(str(m.get("cpu_name") or "CPU"))
                if isinstance(m.get("spec"), dict) and not self.spec_meta:
                    self.spec_meta = m["spec"]
            self.run_ranks.setdefault((run_dir, dp_replica(m), seg), set()).add(str(m.get("rank", lg.path)))
            self.n_steps += len(steps)
            cap = captures.get(run_dir)
            for r in steps:
                if cap is not None and cap.holds(r):
                    self.in_capture += 1
                    continue
                self._add_step(r, m, run_dir, max_gap_s)

    def _add_step(self, r: dict[str, Any], m: dict[str, Any], run_dir: str, max_gap_s: float) -> None:
        """One step into its cell: the baseline's, the speculative server's, its prefill or drafts."""
        method, k = r.get("draft_method"), r.get("draft_k")
        speculative = method is not None
        if speculative:
            self.spec_dirs[run_dir] = True
        if speculative and k is not None:
            self.step_spec.add((str(method), int(k)))
        if r.get("forward_s") is None:
            return  # the forward was not seen (a step that ran no model)
        # the host part on the step's own clock: a GPU step's overhead and gap are the GPU's
        on_gpu = r.get("step_clock") == "cuda_event"
        self.step_clocks.add(str(r.get("step_clock") or
                                 ("host_less_gpu" if m.get("clock") == "cuda_event" else "perf_counter")))
        gap = r.get("gpu_gap_s") if on_gpu else r.get("gap_s")
        # the gap before a prefill is mostly the engine waiting for the request (queue time on
        # /metrics), not scheduling: a prefill step's cost is its own time
        host = float(r["overhead_s"]) + (float(gap) if gap is not None and gap <= max_gap_s
                                         and r["kind"] != "extend" else 0.0)
        ctx = float(r.get("context_tokens") or 0.0)
        host_prop = speculative and is_host_proposer(str(method))
        spec_tokens = int(r.get("spec_tokens") or 0)
        if speculative and r.get("draft_s") is not None:
            if host_prop and r["kind"] in ("decode", "verify"):
                self.lookups.append(float(r["draft_s"]))  # every lookup: a miss costs one too
            self.request_steps += r["batch"]
            if spec_tokens:
                # a proposing request brings 1..k drafts; at least ceil(spec / k) of them proposed
                self.proposed += min(r["batch"], -(-spec_tokens // k) if k else r["batch"])
        if not speculative:
            cells = self.base_cells if r["kind"] != "verify" else self.spec_cells
        elif r["kind"] == "verify":
            cells = self.spec_cells
        elif r["kind"] == "decode" and host_prop:
            cells = self.nodraft_cells
        elif r["kind"] == "extend":
            # the speculative server's prefill: requests.spec_prefill, never the baseline's rows.
            # The proposal after it (draft_s) is the drafter over the prompt -- a forward drafter's
            # prefill and first k drafts, an ngram's lookup -- so it is part of this step's cost
            self.spec_prompts.append((r["batch"], r["tokens"], 1))
            d_s = float(r.get("draft_s") or 0.0)
            g = self.spec_prefill_cells.setdefault(("extend", r["batch"], r["tokens"], context_band(ctx)), _cell())
            g.total.append(float(r["forward_s"]) + d_s + host)
            g.ar.append(float(r.get("forward_allreduce_s") or 0.0) + float(r.get("draft_allreduce_s") or 0.0))
            g.fwd.append(float(r["forward_s"]) + d_s)
            g.n_ar.append(float(r.get("forward_n_allreduce") or 0) + float(r.get("draft_n_allreduce") or 0))
            g.ctx.append(ctx)
            return
        else:
            return  # a speculative server's post-prefill step: not the baseline's
        if not speculative and r["kind"] == "extend":
            self.base_prompts.append((r["batch"], r["tokens"], 1))
        g = cells.setdefault((r["kind"], r["batch"], r["tokens"], context_band(ctx)), _cell())
        g.total.append(float(r["forward_s"]) + host)
        g.ar.append(float(r.get("forward_allreduce_s") or 0.0))
        g.fwd.append(float(r["forward_s"]))
        g.n_ar.append(float(r.get("forward_n_allreduce") or 0))
        g.ctx.append(ctx)
        if r["kind"] == "verify" and r.get("draft_s") is not None and method in VLLM_FORWARD_DRAFTERS \
                and k:
            _add_draft(r, int(k), ctx, self.drafts, self.extends)


def summarize(dirs: Sequence[str | os.PathLike[str]], *, name: str, tp: int | None = None,
              max_gap_s: float = 1.0, min_samples: int = MIN_SAMPLES, dp_rank: int | None = None) -> Any:
    """Aggregate rank logs into an "ingested" :class:`~specmodel.schema.profile.Profile`
    (see the module docstring for what the rows mean). Steps whose ``gap_s`` exceeds
    ``max_gap_s`` follow an idle engine: their gap is not scheduling and is left out of the host
    time. Several directories are combined: the baseline server's (``decode``, ``extend``) and the
    speculative server's (``verify``, ``draft``, a host proposer's rate, lookup and no-proposal
    steps). Logs of different TP degrees, models or vLLM versions, or a ``tp`` the logs contradict,
    are refused.

    A (kind, batch, tokens, context band) cell seen fewer than ``min_samples`` times (per rank) is
    left out: such cells are the ramp of a request wave (batch 3 on the way from 4 to 0), one step
    each, and a single slow one (a 78 ms step, measured) would otherwise become a cost row that the
    running-max cost surface carries to every larger batch. A kind is kept whole when none of its
    cells reaches the bound (a short run still yields a profile, with a note).

    Each process's file is its own series (one file per process since v2); a recording of several
    data-parallel replicas is summarized one replica at a time (``dp_rank``), a pipeline-parallel
    one is refused (:func:`specmodel.engines.hook.records.pick_replica`). A row's host part is on its
    steps' own clock: on a GPU (``step_clock`` cuda_event) the GPU's overhead and GPU gap, never a
    host span less GPU forwards."""
    from specmodel.engines.hook.probe import conditions_note, conditions_of
    from specmodel.engines.hook.records import check_one_server_kind, log_files, pick_replica
    from specmodel.engines.vllm.capture_ingest import merged_shares, read_capture
    from specmodel.schema.profile import HostProposer, Profile, Source, SpecConfig

    files = log_files(dirs, COMMAND)
    logs = [read_step_log(f) for f in files]
    # each run directory's torch.profiler capture: its steps ran under the profiler (left out of the
    # rows); its shares price the all-reduce of the rows the wrapper did not see
    captures = {d: read_capture(d) for d in dict.fromkeys(str(os.path.dirname(lg.path)) for lg in logs)}
    where = ", ".join(str(d) for d in dirs)
    replica = pick_replica([(m, lg.path) for lg in logs for m, _ in lg.runs if m], dp_rank, where)
    a = _Recording()
    for lg in logs:
        a.add_log(lg, replica=replica, captures=captures, max_gap_s=max_gap_s)
    check_one_server_kind(tp=tp, tp_sizes=a.tps, models=a.models, versions=a.versions, version_key="vllm_version",
                          engine="vLLM")
    if not (a.base_cells or a.spec_cells or a.nodraft_cells):
        raise SpecmodelError(f"{where}: no engine steps recorded (the logs hold only meta lines; did the server "
                             "serve a request under `specmodel vllm`?)")
    if not any(k[0] == "decode" for k in a.base_cells):
        raise SpecmodelError(f"{where}: no decode steps recorded without speculation; a profile needs the baseline "
                             "step: also run the server without --speculative-config under `specmodel vllm` and "
                             "pass both directories to --summarize")
    if len(a.step_spec) > 1:
        raise SpecmodelError(f"{where}: the logs mix speculative configurations "
                             f"({', '.join(f'{m} k={k}' for m, k in sorted(a.step_spec))}); summarize one at a time")
    ranks_per_run = max(len(v) for v in a.run_ranks.values()) if a.run_ranks else 1
    tp_val = tp if tp is not None else (next(iter(a.tps)) if a.tps else max(1, ranks_per_run))
    n_ranks = max(1, min(tp_val, ranks_per_run))
    dropped: list[str] = []
    few_kinds: list[str] = []
    draft_cells = {("draft", b, b, band): d for (b, band), d in a.drafts.items()}
    draft_cells.update({("draft_extend", b, t, band): d for (b, t, band), d in a.extends.items()})
    band_ctx = _band_contexts(a.base_cells, a.spec_cells, a.nodraft_cells)
    caps = [c for c in captures.values() if c is not None]
    shares = merged_shares(caps)
    costs, no_ar_timed = _rows({**a.base_cells, **a.spec_cells}, min_samples=min_samples, n_ranks=n_ranks, tp=tp_val,
                               dropped=dropped, few_kinds=few_kinds, band_ctx=band_ctx, shares=shares,
                               capture_tp=tp_val)
    nodraft, _ = _rows(dict(a.nodraft_cells), min_samples=min_samples, n_ranks=n_ranks, tp=tp_val,
                       dropped=dropped, few_kinds=[], band_ctx=band_ctx, shares=shares, capture_tp=tp_val)
    draft_rows, _ = _rows(draft_cells, min_samples=min_samples, n_ranks=n_ranks, tp=1, dropped=dropped,
                          few_kinds=few_kinds, band_ctx=band_ctx, shares=shares, capture_tp=tp_val)
    costs += draft_rows
    requests, requests_note = _request_costs(a.base_prompts, a.spec_prompts, a.spec_prefill_cells, a.spec_dirs,
                                             min_samples=min_samples, n_ranks=n_ranks, tp=tp_val)
    # each directory is one server's recording (a speculative one if any of its steps speculated)
    conditions = conditions_of([p for d, ps in a.probes.items() if not a.spec_dirs[d] for p in ps],
                               [p for d, ps in a.probes.items() if a.spec_dirs[d] for p in ps])
    method, k = next(iter(a.step_spec)) if a.step_spec else (a.spec_meta.get("method"), a.spec_meta.get("num_speculative_tokens"))
    method = method if isinstance(method, str) else None
    k = k if isinstance(k, int) else None
    spec = SpecConfig(algorithm=str(method).upper(), steps=k, topk=1, num_draft_tokens=k + 1) if method and k else SpecConfig()
    host_method = method if method and is_host_proposer(method) else None
    overhead = median(a.lookups) if host_method and a.lookups else 0.0
    hp = None
    if host_method and a.request_steps:
        proposed = min(a.proposed, a.request_steps)
        hp = HostProposer(method=host_method, proposal_rate=proposed / a.request_steps, request_steps=a.request_steps,
                          proposed_request_steps=proposed, lookup_s=overhead, lookup_steps=len(a.lookups),
                          decode=tuple(nodraft))
    clock = "cuda_event" if a.clocks == {"cuda_event"} else "perf_counter"
    notes = ["vLLM rows are engine steps: forward (all-reduce split timed around vLLM's all-reduce) + the step's "
             "host work (sampling/rejection, bookkeeping, input prep, scheduling gap) in other_s; draft rows are "
             "one drafter forward (draft_extend: the first, over the verified tokens, with the proposal's set-up, "
             "where the hook split it; else proposal time / k). decode rows come from the server without "
             "speculation.",
             "rows are split by context band (0, 1K, 2K, 4K, ... tokens of KV per request), each at its steps' "
             "median context."]
    if hp is not None:
        notes.append(f"host proposer ({host_method}): proposed on {hp.proposal_rate:.0%} of "
                     f"{hp.request_steps} request-steps that ran the lookup (the default --proposal-rate); "
                     f"median lookup {ms(overhead, 3)} over {hp.lookup_steps} steps (every lookup, hit or miss) "
                     f"is the profile's overhead_s; {len(hp.decode)} no-proposal decode row(s) of the "
                     "speculative server in host_proposer.decode.")
    notes.append(requests_note)
    if conditions is not None:
        notes.append(conditions_note(conditions))
    if a.runners:
        notes.append(f"vLLM model runner: {', '.join(sorted(a.runners))}")
    if clock == "perf_counter":
        notes.append("Timed with perf_counter on the host (a CPU engine): not GPU figures.")
    if "cuda_event" in a.step_clocks:
        notes.append("GPU steps: other_s (the step's host work) is on the CUDA events' clock: the GPU's span of the "
                     "step less its forward and proposal, plus the GPU's gap since the previous step; the host's "
                     "span (host_step_s in the logs) is not used: under async scheduling it ends before the GPU's.")
    if "host_less_gpu" in a.step_clocks:
        notes.append("older GPU logs (vllm_step v1): other_s is the host's step less the GPU's forwards, two clocks; "
                     "under async scheduling the GPU's time past the host's step end is lost (clamped at 0): "
                     "re-record under this specmodel for the GPU's own overhead.")
    dropped_note = a.drops.note()
    if dropped_note:
        notes.append(dropped_note)
    if no_ar_timed:
        notes.append(f"{no_ar_timed} row(s) at TP {tp_val} timed no all-reduce (CUDA-graph replays bypass Python): "
                     "their all-reduce share is unknown, not zero"
                     + (" (the capture held no pass of their phase)." if caps else
                        "; `specmodel vllm --capture-steps N` measures it from a torch.profiler capture."))
    from_capture = [r for r in costs if r.allreduce_source == "capture"]
    if caps:
        notes.append(capture_note(caps, from_capture, a.in_capture))
    if dropped:
        notes.append(f"{len(dropped)} cell(s) seen fewer than {min_samples} times per rank left out (ramp steps): "
                     + ", ".join(sorted(dropped)[:8]) + (" …" if len(dropped) > 8 else ""))
    if few_kinds:
        notes.append(f"{', '.join(sorted(few_kinds))}: no cell seen {min_samples} times per rank; every cell kept "
                     "(a short run: costs rest on few steps)")
    n_runs = len(a.run_ranks)
    source = Source.hook_summary(engine="vllm", engine_version=", ".join(sorted(a.versions)),
                                 files=tuple(str(f) for f in files), clock=clock,
                                 description=f"vLLM step hook (hook): {a.n_steps} steps from {n_runs} server run(s), "
                                             f"{len(files)} rank file(s), TP {tp_val}")
    if no_ar_timed:
        source = source.with_origins({"allreduce": "unknown for some rows: CUDA-graph replays bypass the hook"})
    elif from_capture:
        source = source.with_origins({"allreduce": "capture share × forward time for the rows the hook's wrapper did "
                                                   "not see (torch.profiler capture)"})
    # the keys the model/device checks read (validation.profile_device, check_log_model_matches_profile):
    # vLLM logs the model as the --model value, which is what the hook recorded
    hardware: dict[str, Any] = {}
    if a.devices:
        hardware = {"gpu_name": sorted(a.devices)[0], "gpu_count": tp_val}
    elif a.cpu_names:
        hardware = {"cpu_name": sorted(a.cpu_names)[0]}
    model: dict[str, Any] = {}
    if a.models:
        path = next(iter(a.models))
        model = {"name": path, "path": path}
        if a.served:
            model["served_name"] = ", ".join(sorted(a.served))
    return Profile(name=name, source=source, tp=tp_val, costs=tuple(costs), spec=spec, overhead_s=overhead,
                   hardware=hardware, model=model, notes=tuple(notes), host_proposer=hp, requests=requests,
                   conditions=conditions)
