"""Kineto / torch.profiler traces -> per-forward-pass costs -> a :class:`Profile`.

Reads one trace per rank (``.json`` or ``.json.gz``: SGLang's ``/start_profile``,
``specmodel profile``, any ``torch.profiler`` run), streaming each file with bounded memory
(:mod:`specmodel.trace._jsonstream`) in a process pool (one file per worker).

A *forward pass* is a span named ``step[VERIFY bs=4]`` / ``step[DECODE bs=8]`` /
``step[EXTEND bs=2 toks=300]`` / ``step[DRAFT bs=N]`` (SGLang 0.5.23), a stage span ``draft`` /
``draft_extend`` with no pass inside, our own ``specmodel.<kind>[bs=B,toks=T(,fwd=N)]``, or —
only when a file has none of those — ``ProfilerStep#N`` (rules: :func:`_phase_spans`). The
numbers themselves come from the one attribution engine, :mod:`specmodel.trace.attribution`. For each pass on each rank:

* GPU traces: the pass window is its ``gpu_user_annotation`` span (kernels starting inside it
  on the same device), or, without one, the kernels launched (``correlation``) from inside the
  CPU span. ``busy`` = union of kernel/memcpy/memset time; ``comm`` = union of collective-kernel
  time (:mod:`specmodel.trace.collectives`); ``exposed`` = comm not overlapped by any
  non-collective GPU activity (other streams); ``compute = busy - comm``; ``other = span - busy``.
* CPU (gloo) traces have no kernels: ``comm`` = the gloo collective ops inside the span (they run
  on gloo's own threads; the caller blocks on them), ``busy`` = the whole span, all comm exposed.
* ``skew`` (per rank) = Σ over the pass's collectives of (its duration - the shortest duration of
  the same collective on any rank); collectives are matched by ``Seq`` (record_param_comms) or
  by order. A rank that arrives early waits inside the collective, so this is its wait.

Per phase (kind, batch, tokens) every figure is the median over passes × ranks.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.procs import die_with_parent
from specmodel.schema.phases import TARGET_KINDS, parse_phase_forwards, parse_phase_label
from specmodel.schema.profile import KINDS, CostRow, Profile, SpecConfig
from specmodel.stats import iqr, median
from specmodel.trace._jsonstream import scan_trace
from specmodel.trace.attribution import (
    Collector,
    PassRecord,
    PhaseSpan,
    Span,
    cpu_passes,
    gpu_passes,
    median_of_rank_means,
    merge_gpu_spans,
)

TRACE_SUFFIXES = (".json", ".json.gz")
#: Traces of one run start within seconds of each other; further apart = different runs.
MAX_BASE_TIME_APART_S = 600.0

_SGLANG_STEP = re.compile(r"^step\[(?P<mode>[A-Z_0-9]+) bs=(?P<bs>\d{1,12})(?!\d)(?: toks=(?P<toks>\d{1,12})(?!\d))?[^\]]*\]$")
_SGLANG_MODES = {
    "VERIFY": "verify", "TARGET_VERIFY": "verify", "DECODE": "decode", "EXTEND": "extend",
    "DRAFT": "draft", "DRAFT_EXTEND": "draft_extend", "DRAFT_EXTEND_V2": "draft_extend",
}
#: SGLang 0.5.23 stage spans (speculative/spec_utils.spec_stage_span) around a whole stage.
_STAGE_SPANS = {"draft_extend": "draft_extend", "draft": "draft"}
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
_SGLANG_FILE = re.compile(r"(?:^|-)(?P<pid>[^-]+)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?"
                          r"(?:-EP-(?P<ep>\d+))?(?:-(?:EXTEND|DECODE))?\.trace\.json(?:\.gz)?$")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class IngestOptions:
    """How to read spans that do not carry their own token count."""

    num_draft_tokens: int = 4  # tokens per request in a verify (SGLang --speculative-num-draft-tokens)
    topk: int = 1  # tokens per request in one draft step (--speculative-eagle-topk)
    steps: int | None = None  # --speculative-num-steps (default: from draft tokens and topk)
    step_kind: str = "decode"  # what a ProfilerStep# span is, when a file has no other labels
    step_batch: int = 1

    def __post_init__(self) -> None:
        if self.num_draft_tokens < 1:
            raise SpecmodelError(f"--num-draft-tokens: must be >= 1, got {self.num_draft_tokens}")
        if self.topk < 1:
            raise SpecmodelError(f"--topk: must be >= 1, got {self.topk}")
        if self.step_kind not in KINDS:
            raise SpecmodelError(f"--step-kind: expected one of {', '.join(KINDS)}, got {self.step_kind!r}")
        if self.step_batch < 1:
            raise SpecmodelError(f"--batch: must be >= 1, got {self.step_batch}")
        if self.steps is not None and self.steps < 1:
            raise SpecmodelError(f"--steps: must be >= 1, got {self.steps}")

    @property
    def draft_steps(self) -> int:
        """Draft depth: --steps, else what the draft tokens and topk imply (a chain: ndt - 1)."""
        return self.steps if self.steps is not None else max(1, math.ceil((self.num_draft_tokens - 1) / self.topk))

    def tokens(self, kind: str, batch: int) -> int:
        if kind in ("verify", "draft_extend"):
            return batch * self.num_draft_tokens
        if kind == "draft":
            return batch * self.topk
        return batch


def phase_of(name: str, opts: IngestOptions, last_batch: int | None = None) -> tuple[str, int, int] | None:
    """(kind, batch, tokens) of a forward-pass span name, or ``None`` when it is not one."""
    ours = parse_phase_label(name)
    if ours is not None:
        return ours if ours[0] in KINDS else None
    m = _SGLANG_STEP.match(name)
    if m:
        kind = _SGLANG_MODES.get(m.group("mode"))
        if kind is None:
            return None
        bs = int(m.group("bs"))
        if bs < 1:
            return None
        toks = int(m.group("toks")) if m.group("toks") else opts.tokens(kind, bs)
        return kind, bs, max(toks, bs)
    if name in _STAGE_SPANS:
        kind = _STAGE_SPANS[name]
        bs = last_batch or opts.step_batch
        return kind, bs, opts.tokens(kind, bs)
    if _PROFILER_STEP.match(name):
        return opts.step_kind, opts.step_batch, opts.tokens(opts.step_kind, opts.step_batch)
    return None


def _is_span_name(name: str) -> bool:
    return name.startswith(("step[", "specmodel.", "ProfilerStep#")) or name in _STAGE_SPANS


def _label_key(name: str) -> str:
    return "ProfilerStep" if _PROFILER_STEP.match(name) else name


# ------------------------------------------------------------------------------------------------
# per-file results (picklable; returned by the worker processes)


@dataclass(frozen=True, kw_only=True)
class TraceMeta:
    """What a trace's header and file name say about where it came from."""

    path: str
    rank: int
    rank_source: str  # "distributedInfo" | "file name" | "single file"
    world_size: int | None
    backend: str
    base_time_ns: int | None
    profile_id: str | None
    nccl_version: str
    device_name: str
    device_count: int


@dataclass(frozen=True, kw_only=True)
class RankTrace:
    meta: TraceMeta
    mode: str  # "gpu" | "cpu"
    attribution: str  # "gpu_user_annotation" | "correlation" | "cpu span"
    n_events: int
    n_kernels: int
    passes: tuple[PassRecord, ...]
    #: ``specmodel profile`` traces: per label, the forward's totals from the unprofiled timing passes
    bare_totals_s: tuple[tuple[str, tuple[float, ...]], ...] = ()


# ------------------------------------------------------------------------------------------------
# header / identity


def _sglang_name(path: Path) -> re.Match[str] | None:
    return _SGLANG_FILE.search(path.name)


def meta_from_header(path: Path, header: dict[str, Any], *, single: bool) -> TraceMeta:
    dist = header.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    rank: int | None = None
    source = ""
    r = dist.get("rank")
    if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
        rank, source = r, "distributedInfo"
    m = _sglang_name(path)
    if rank is None and m:
        rank, source = int(m.group("tp")), "file name"
    if rank is None:
        mr = _RANK_IN_NAME.search(path.name)
        if mr:
            rank, source = int(mr.group(1)), "file name"
    if rank is None:
        if not single:
            raise SpecmodelError(f"{path}: cannot tell which rank this trace is (no distributedInfo.rank in it, "
                                 "no -TP-<n> or rank<n> in its name)")
        rank, source = 0, "single file"
    ws = dist.get("world_size")
    world = ws if isinstance(ws, int) and not isinstance(ws, bool) and ws >= 1 else None
    base = header.get("baseTimeNanoseconds")
    devs = header.get("deviceProperties")
    devs = devs if isinstance(devs, list) else []
    dev_name = ""
    if devs and isinstance(devs[0], dict):
        dev_name = str(devs[0].get("name", ""))
    return TraceMeta(
        path=str(path), rank=rank, rank_source=source, world_size=world,
        backend=str(dist.get("backend", "") or ""),
        base_time_ns=base if isinstance(base, int) and not isinstance(base, bool) else None,
        profile_id=m.group("pid") if m else None,
        nccl_version=str(dist.get("nccl_version", "") or ""),
        device_name=dev_name, device_count=len(devs),
    )


def read_meta(path: str | Path, *, single: bool) -> TraceMeta:
    """Identity of a trace from its header only (stops at ``traceEvents``: cheap on big files)."""
    p = Path(path)
    header = scan_trace(p, None)
    if "traceEvents" not in header:
        raise SpecmodelError(f"{p}: no traceEvents array (not a Kineto / torch.profiler trace)")
    return meta_from_header(p, header, single=single)


def check_same_run(metas: Sequence[TraceMeta]) -> None:
    """Duplicate ranks or traces from different runs: one error naming both files."""
    by_rank: dict[int, TraceMeta] = {}
    for m in metas:
        other = by_rank.get(m.rank)
        if other is not None:
            raise SpecmodelError(f"{other.path} and {m.path} are both rank {m.rank} (duplicate rank; "
                                 "pass one trace per rank from one run)")
        by_rank[m.rank] = m
    first = metas[0]
    def diff(m: TraceMeta, what: str, a: object, b: object) -> SpecmodelError:
        return SpecmodelError(f"{first.path} and {m.path} come from different runs ({what} {a} vs {b})")

    for m in metas[1:]:
        if first.world_size and m.world_size and first.world_size != m.world_size:
            raise diff(m, "world_size", first.world_size, m.world_size)
        if first.backend and m.backend and first.backend != m.backend:
            raise diff(m, "backend", first.backend, m.backend)
        if first.profile_id and m.profile_id and first.profile_id != m.profile_id:
            raise diff(m, "SGLang profile id", first.profile_id, m.profile_id)
        if first.nccl_version and m.nccl_version and first.nccl_version != m.nccl_version:
            raise diff(m, "nccl_version", first.nccl_version, m.nccl_version)
        if first.base_time_ns is not None and m.base_time_ns is not None:
            apart = abs(first.base_time_ns - m.base_time_ns) / 1e9
            if apart > MAX_BASE_TIME_APART_S:
                raise SpecmodelError(f"{first.path} and {m.path} come from different runs (their traces start "
                                     f"{apart:.0f} s apart, baseTimeNanoseconds)")
    for m in metas:
        if m.world_size is not None and m.rank >= m.world_size:
            raise SpecmodelError(f"{m.path}: rank {m.rank} is outside world_size {m.world_size}")


# ------------------------------------------------------------------------------------------------
# one file


@dataclass(eq=False)
class _Node:
    span: Span
    ph: tuple[str, int, int] | None  # None: a stage span (its batch comes from its neighbours)
    forwards: int
    parent: _Node | None
    n_inner: int = 0  # forward-pass spans nested inside (at any depth)
    drop: bool = False

    def stage(self) -> str | None:
        n: _Node | None = self
        while n is not None:
            if n.ph is None:
                return n.span.name
            n = n.parent
        return None


def _phase_spans(spans: list[Span], opts: IngestOptions) -> list[PhaseSpan]:
    """The forward passes among ``spans``, in time order.

    * ``step[DRAFT ..]`` (SGLang 0.5.23 labels every forward of the draft runner so) is a draft
      step inside a ``draft`` stage and a draft-extend inside a ``draft_extend`` stage.
    * A draft-extend right after a prefill (the last target forward was EXTEND) extends the
      prompt, not a decode step: dropped, with everything inside it.
    * Nested pass spans are one forward: the innermost is kept (Kineto gives each kernel to the
      innermost annotation only). A hook span (``specmodel.*``) around exactly one SGLang span
      lends it its own kind/tokens/forward count.
    * A stage span with no pass inside is the pass: a ``draft`` stage with CUDA graphs is one
      replay of ``steps - 1`` forwards.
    """
    spans = sorted(spans, key=lambda s: (s.ts, -s.end))
    labelled = [s for s in spans if not _PROFILER_STEP.match(s.name)]
    if not labelled:  # ProfilerStep# only when nothing better is there
        out = []
        for s in spans:
            ph = phase_of(s.name, opts)
            if ph is not None:
                out.append(PhaseSpan(span=s, kind=ph[0], batch=ph[1], tokens=ph[2], label=_label_key(s.name)))
        return out
    nodes: list[_Node] = []
    stacks: dict[Any, list[_Node]] = defaultdict(list)
    for s in labelled:
        is_stage = s.name in _STAGE_SPANS
        ph = None if is_stage else phase_of(s.name, opts)
        if ph is None and not is_stage:
            continue
        stack = stacks[s.pid]
        while stack and not (stack[-1].span.ts <= s.ts and s.end <= stack[-1].span.end + 1e-3):
            stack.pop()
        node = _Node(span=s, ph=ph, forwards=parse_phase_forwards(s.name), parent=stack[-1] if stack else None)
        stack.append(node)
        nodes.append(node)
    last_target: str | None = None
    for n in nodes:
        if n.ph is not None and n.ph[0] in TARGET_KINDS:
            last_target = n.ph[0]
        kind = n.span.name if n.ph is None else n.ph[0]
        stage = n.stage()
        if n.ph is not None and n.ph[0] == "draft" and stage == "draft_extend" and n.span.name.startswith("step["):
            bs = n.ph[1]
            n.ph = ("draft_extend", bs, opts.tokens("draft_extend", bs))
            kind = "draft_extend"
        if (kind == "draft_extend" or stage == "draft_extend") and last_target == "extend":
            n.drop = True  # the prefill's draft-extend
        if n.parent is not None and n.parent.drop:
            n.drop = True
    for n in nodes:
        if not n.drop:
            p = n.parent
            while p is not None:
                p.n_inner += 1
                p = p.parent
    for n in nodes:
        if n.drop or n.n_inner == 0:
            continue
        n.drop = True  # an outer span: its forwards are the ones inside
        inner = [c for c in nodes if c.parent is n and not c.drop]
        if n.ph is not None and n.n_inner == 1 and len(inner) == 1 and n.span.name.startswith("specmodel."):
            inner[0].ph, inner[0].forwards = n.ph, n.forwards
    out = []
    last_batch: int | None = None
    for n in nodes:
        if n.ph is not None:
            last_batch = n.ph[1]
        if n.drop or n.n_inner:
            continue
        if n.ph is None:  # a stage span with no pass inside: the stage is the pass
            kind = _STAGE_SPANS[n.span.name]
            bs = last_batch or opts.step_batch
            ph = (kind, bs, opts.tokens(kind, bs))
            fwd = max(1, opts.draft_steps - 1) if kind == "draft" else 1
        else:
            ph, fwd = n.ph, n.forwards
        out.append(PhaseSpan(span=n.span, kind=ph[0], batch=ph[1], tokens=ph[2], label=_label_key(n.span.name),
                             forwards=fwd))
    return out


def _gpu_phase_spans(col: Collector, opts: IngestOptions) -> list[PhaseSpan]:
    """Device windows of the passes. Nesting is read on the host spans (Kineto may leave out the
    device span of an annotation whose kernels all belong to an inner one) and carried over to the
    device spans by External id; without ids, the device spans are read the same way."""
    gpu = merge_gpu_spans(col.gpu_spans)
    if not gpu:
        return []
    if col.cpu_spans and all(g.ext is not None for g in gpu):
        decided = {(p.span.name, p.span.ext): p for p in _phase_spans(col.cpu_spans, opts)}
        return [replace(decided[(g.name, g.ext)], span=g) for g in gpu if (g.name, g.ext) in decided]
    return _phase_spans(gpu, opts)


def _timed(r: PassRecord, total_s: float) -> PassRecord:
    """A pass whose duration its own stopwatch measured (``specmodel profile``): parts bounded by it."""
    return replace(r, span_s=total_s, busy_s=min(r.busy_s, total_s), comm_s=min(r.comm_s, total_s),
                   exposed_s=min(r.exposed_s, total_s))


def _per_forward(r: PassRecord) -> PassRecord:
    """A pass that holds N forwards (a CUDA-graph draft replay) as the cost of one of them."""
    if r.forwards <= 1:
        return r
    f = r.forwards
    return replace(r.scaled(1.0 / f), n_collectives=round(r.n_collectives / f), n_allreduce=round(r.n_allreduce / f))


def profiler_scales(path: str | Path, header: dict[str, Any]) -> dict[str, float]:
    """``otherData.specmodel.profiler_scale`` of a trace written by ``specmodel profile``: per
    label, how much the profiler stretched that forward (bare / profiled time). The profile's
    rows apply it; so does ingest, so both report the same seconds."""
    other = header.get("otherData")
    sm = other.get("specmodel") if isinstance(other, dict) else None
    scales = sm.get("profiler_scale") if isinstance(sm, dict) else None
    if scales is None:
        return {}
    if not isinstance(scales, dict):
        raise SpecmodelError(f"{path}: otherData.specmodel.profiler_scale: expected an object")
    out = {}
    for k, v in scales.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SpecmodelError(f"{path}: otherData.specmodel.profiler_scale[{k!r}]: expected a number > 0, "
                                 f"got {v!r}")
        out[str(k)] = float(v)
    return out


def bare_totals(path: str | Path, header: dict[str, Any], key: str = "bare_totals_s") -> dict[str, list[float]]:
    """``otherData.specmodel.bare_totals_s``: per label, the forward's totals from ``specmodel
    profile``'s unprofiled timing passes (its rows are the profiled all-reduce share of those);
    ``profiled_totals_s``: each profiled repetition's own stopwatch total (the share's base)."""
    other = header.get("otherData")
    sm = other.get("specmodel") if isinstance(other, dict) else None
    raw = sm.get(key) if isinstance(sm, dict) else None
    if raw is None:
        return {}
    where = f"{path}: otherData.specmodel.{key}"
    if not isinstance(raw, dict):
        raise SpecmodelError(f"{where}: expected an object")
    out: dict[str, list[float]] = {}
    for k, v in raw.items():
        if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                              and math.isfinite(x) and x > 0 for x in v):
            raise SpecmodelError(f"{where}[{k!r}]: expected a list of numbers > 0")
        out[str(k)] = [float(x) for x in v]
    return out



def parse_rank_file(path: str, opts: IngestOptions, single: bool = False) -> RankTrace:
    """Stream one rank's trace and measure each forward pass in it (runs in a worker process)."""
    col = Collector(path=path, span_name=_is_span_name)
    header = scan_trace(path, col.on_event)
    if "traceEvents" not in header:
        raise SpecmodelError(f"{path}: no traceEvents array (not a Kineto / torch.profiler trace)")
    meta = meta_from_header(Path(path), header, single=single)
    if col.n_kernels:
        gpu_ph = _gpu_phase_spans(col, opts)
        cpu_ph = [] if gpu_ph else _phase_spans(col.cpu_spans, opts)
        if not gpu_ph and not cpu_ph:
            raise SpecmodelError(f"{path}: {col.n_kernels} GPU kernels but no forward-pass spans "
                                 "(step[...], specmodel.<kind>[...], ProfilerStep#N): cannot tell passes apart")
        attribution, records = gpu_passes(col, gpu_ph, cpu_ph)
        if not records:
            raise SpecmodelError(f"{path}: no GPU kernel is linked (correlation) to any forward-pass span")
        mode = "gpu"
    elif col.cpu_colls:
        phases = _phase_spans(col.cpu_spans, opts)
        if not phases:
            raise SpecmodelError(f"{path}: CPU collectives but no forward-pass spans "
                                 "(step[...], specmodel.<kind>[...], ProfilerStep#N)")
        records, attribution, mode = cpu_passes(col, phases), "cpu span", "cpu"
    elif col.n_events == 0:
        raise SpecmodelError(f"{path}: traceEvents is empty")
    else:
        raise SpecmodelError(f"{path}: no GPU kernels and no CPU-side collectives (gloo:*, c10d::*) in "
                             f"{col.n_events} events: nothing to measure (was the GPU activity recorded?)")
    if not records:
        raise SpecmodelError(f"{path}: no forward-pass spans with any duration")
    scales = profiler_scales(path, header)
    if scales:
        records = [r.scaled(scales.get(r.label, 1.0)) for r in records]
    bare = bare_totals(path, header)
    profiled = bare_totals(path, header, "profiled_totals_s")
    if profiled:  # the share's base: each repetition's stopwatch total (the span adds the annotation's own cost)
        records = [_timed(r, profiled[r.label][r.occurrence] * scales.get(r.label, 1.0))
                   if r.occurrence < len(profiled.get(r.label, [])) else r for r in records]
    records = [_per_forward(r) for r in records]
    return RankTrace(meta=meta, mode=mode, attribution=attribution, n_events=col.n_events,
                     n_kernels=col.n_kernels, passes=tuple(records),
                     bare_totals_s=tuple((k, tuple(v)) for k, v in sorted(bare.items())))


# ------------------------------------------------------------------------------------------------
# many files


def find_traces(inputs: Sequence[str | Path]) -> list[Path]:
    """Expand directories (their ``*.json`` / ``*.json.gz``); explicit files must be traces."""
    if not inputs:
        raise SpecmodelError("ingest: give at least one trace file or directory")
    out: list[Path] = []
    seen: set[Path] = set()
    for raw in inputs:
        p = Path(raw)
        if not p.exists():
            raise SpecmodelError(f"{p}: no such file or directory")
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise SpecmodelError(f"{p}: no trace files (*.json, *.json.gz) in this directory")
        else:
            if not p.name.endswith(TRACE_SUFFIXES):
                raise SpecmodelError(f"{p}: not a trace file (expected .json or .json.gz)")
            found = [p]
        for q in found:
            key = q.resolve()
            if key not in seen:
                seen.add(key)
                out.append(q)
    return out


@dataclass(frozen=True, kw_only=True)
class PhaseStats:
    """Medians over passes × ranks of one (kind, batch, tokens)."""

    kind: str
    batch: int
    tokens: int
    labels: tuple[str, ...]
    samples: int
    ranks: int
    span_s: float
    busy_s: float
    allreduce_s: float
    exposed_s: float
    compute_s: float
    other_s: float
    skew_s: float
    spread_s: float
    n_collectives: int
    n_allreduce: int
    allreduce_msg_bytes: int
    comm_by_impl_s: tuple[tuple[str, float], ...]

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["labels"] = list(self.labels)
        d["comm_by_impl_s"] = dict(self.comm_by_impl_s)
        return d

    def cost_row(self) -> CostRow:
        """The profile row: ``total_s`` = median span; the medians of the parts, which need not add
        up to it (they may come from different passes), are scaled to sum to it."""
        parts = self.allreduce_s + self.compute_s + self.other_s
        f = self.span_s / parts if parts > 0 else 0.0
        ar, comp, other = self.allreduce_s * f, self.compute_s * f, self.other_s * f
        if parts <= 0:
            other = self.span_s
        return CostRow(kind=self.kind, batch=self.batch, tokens=self.tokens, total_s=self.span_s,
                       allreduce_s=ar, compute_s=comp, other_s=other,
                       n_allreduce=self.n_allreduce, allreduce_msg_bytes=self.allreduce_msg_bytes,
                       spread_s=self.spread_s, skew_s=min(self.skew_s * f, ar), samples=self.samples)


@dataclass(frozen=True, kw_only=True)
class RankStats:
    rank: int
    path: str
    passes: int
    busy_s: float
    comm_s: float
    skew_s: float


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    traces: tuple[RankTrace, ...]
    phases: tuple[PhaseStats, ...]
    ranks: tuple[RankStats, ...]
    mode: str
    world_size: int
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "world_size": self.world_size,
            "files": [t.meta.path for t in self.traces],
            "phases": [p.to_dict() for p in self.phases],
            "ranks": [r.__dict__ for r in self.ranks],
            "notes": list(self.notes),
        }


def skews(traces: Sequence[RankTrace]) -> dict[tuple[int, str, int], float]:
    """(rank, label, occurrence) -> seconds this rank waited in the pass's collectives."""
    groups: dict[tuple[str, int], dict[int, PassRecord]] = defaultdict(dict)
    for t in traces:
        for p in t.passes:
            groups[(p.label, p.occurrence)][t.meta.rank] = p
    out: dict[tuple[int, str, int], float] = {}
    for (label, occ), by_rank in groups.items():
        durs = {r: dict(zip(p.coll_keys, p.coll_durs_s, strict=True)) for r, p in by_rank.items()}
        common = set.intersection(*(set(d) for d in durs.values())) if len(durs) > 1 else set()
        fastest = {k: min(d[k] for d in durs.values()) for k in common}
        for r, d in durs.items():
            out[(r, label, occ)] = sum(d[k] - fastest[k] for k in common)
    return out


def aggregate(traces: Sequence[RankTrace], opts: IngestOptions) -> IngestResult:
    modes = {t.mode for t in traces}
    if len(modes) > 1:
        gpu = next(t for t in traces if t.mode == "gpu")
        cpu = next(t for t in traces if t.mode == "cpu")
        raise SpecmodelError(f"{gpu.meta.path} and {cpu.meta.path} come from different runs "
                             "(one has GPU kernels, the other none)")
    mode = modes.pop()
    sk = skews(traces)
    bare_by_rank = {t.meta.rank: dict(t.bare_totals_s) for t in traces}
    by_phase: dict[tuple[str, int, int], list[tuple[int, PassRecord]]] = defaultdict(list)
    for t in traces:
        for p in t.passes:
            by_phase[(p.kind, p.batch, p.tokens)].append((t.meta.rank, p))
    phases = []
    for (kind, batch, tokens), items in sorted(by_phase.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1:])):
        recs = [p for _, p in items]
        # one repetition = one (label, occurrence) across ranks: the engine's aggregation (a
        # typical rank per repetition, median over repetitions), the same as `specmodel profile`
        reps: dict[tuple[str, int], list[tuple[int, PassRecord]]] = defaultdict(list)
        for r, p in items:
            reps[(p.label, p.occurrence)].append((r, p))

        def agg(f: Callable[[int, PassRecord], float], reps: dict[tuple[str, int], list[tuple[int, PassRecord]]]
                = reps) -> float:
            return median_of_rank_means([f(r, p) for r, p in rep] for rep in reps.values())

        allreduce_s = agg(lambda r, p: p.comm_s)
        labels = {p.label for p in recs}
        timed = [bare_by_rank.get(r, {}).get(lbl) for r in {r for r, _ in items} for lbl in labels]
        if len(labels) == 1 and timed and all(timed):
            # a `specmodel profile` trace: as its rows, the profiled all-reduce share (typical rank,
            # median repetition) applied to the unprofiled total (rank mean per timing pass, median)
            prof_total = agg(lambda r, p: p.span_s)
            share = min(allreduce_s, prof_total) / prof_total if prof_total > 0 else 0.0
            n = min(len(t) for t in timed if t)
            allreduce_s = median_of_rank_means([t[j] for t in timed if t] for j in range(n)) * min(share, 1.0)
        impl: dict[str, list[float]] = defaultdict(list)
        for p in recs:
            for name, s in p.comm_by_impl_s:
                impl[name].append(s)
        msg = [b for p in recs for b in p.msg_bytes]
        phases.append(PhaseStats(
            kind=kind, batch=batch, tokens=tokens, labels=tuple(sorted({p.label for p in recs})),
            samples=len(recs), ranks=len({r for r, _ in items}),
            span_s=agg(lambda r, p: p.span_s), busy_s=agg(lambda r, p: p.busy_s),
            allreduce_s=allreduce_s, exposed_s=agg(lambda r, p: p.exposed_s),
            compute_s=agg(lambda r, p: p.busy_s - p.comm_s), other_s=agg(lambda r, p: p.span_s - p.busy_s),
            skew_s=agg(lambda r, p: sk.get((r, p.label, p.occurrence), 0.0)),
            spread_s=iqr([p.span_s for p in recs]),
            n_collectives=round(median([p.n_collectives for p in recs])),
            n_allreduce=round(median([p.n_allreduce for p in recs])),
            allreduce_msg_bytes=round(median(msg)) if msg else 0,
            comm_by_impl_s=tuple((k, median(v + [0.0] * (len(recs) - len(v)))) for k, v in sorted(impl.items())),
        ))
    ranks = tuple(RankStats(
        rank=t.meta.rank, path=t.meta.path, passes=len(t.passes),
        busy_s=median([p.busy_s for p in t.passes]), comm_s=median([p.comm_s for p in t.passes]),
        skew_s=median([sk.get((t.meta.rank, p.label, p.occurrence), 0.0) for p in t.passes]),
    ) for t in sorted(traces, key=lambda t: t.meta.rank))
    world = max((t.meta.world_size or 0 for t in traces), default=0) or len(traces)
    notes = [f"per-phase figures: per forward pass the mean over ranks, then the median over passes "
             f"({len(traces)} rank trace(s)); "
             "a profile row's total is the median span, its parts the medians scaled to add up to it"]
    if mode == "cpu":
        notes.append("CPU trace (no GPU kernels): communication = gloo collective ops inside each span; "
                     "busy = the whole span; all communication counted as exposed")
    else:
        attrs = sorted({t.attribution for t in traces})
        notes.append(f"GPU kernels attributed to forward passes by {', '.join(attrs)}; "
                     "allreduce_s = all collective-kernel time (all-reduce, all-gather, ...) in the pass")
    if any(p.kind in ("verify", "draft_extend") and not any(_SGLANG_STEP.match(lbl) and "toks=" in lbl
                                                              or lbl.startswith("specmodel.") for lbl in p.labels)
           for p in phases):
        notes.append(f"verify / draft_extend tokens = batch x --num-draft-tokens ({opts.num_draft_tokens})")
    if any(p.kind == "draft" for p in phases) and opts.topk != 1:
        notes.append(f"draft tokens = batch x --topk ({opts.topk})")
    if any("ProfilerStep" in p.labels for p in phases):
        notes.append(f"ProfilerStep# spans read as {opts.step_kind} forwards at batch {opts.step_batch} "
                     "(--step-kind/--batch)")
    if len(traces) < world:
        notes.append(f"only {len(traces)} of {world} ranks' traces were given")
    return IngestResult(traces=tuple(sorted(traces, key=lambda t: t.meta.rank)), phases=tuple(phases),
                        ranks=ranks, mode=mode, world_size=world, notes=tuple(notes))


def _parse_one(args: tuple[str, IngestOptions, bool]) -> RankTrace:
    return parse_rank_file(*args)


def ingest(inputs: Sequence[str | Path], opts: IngestOptions | None = None, *, jobs: int | None = None,
           progress: Callable[[str], None] | None = None) -> IngestResult:
    """Read every rank's trace (in parallel), check they are one run, aggregate per phase."""
    opts = opts or IngestOptions()
    paths = find_traces(inputs)
    single = len(paths) == 1
    check_same_run([read_meta(p, single=single) for p in paths])  # fail fast, before the heavy pass
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    work = [(str(p), opts, single) for p in paths]
    if jobs == 1:
        traces = [_parse_one(w) for w in work]
    else:
        ctx = get_context("fork") if "fork" in _start_methods() else None
        # workers die with this process: a SIGKILLed `ingest` must not leave them parsing for minutes
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            traces = list(pool.map(_parse_one, work))
    if progress:
        for t in traces:
            progress(f"{t.meta.path}: rank {t.meta.rank}, {len(t.passes)} passes, {t.n_kernels} kernels")
    check_same_run([t.meta for t in traces])
    return aggregate(traces, opts)


def _start_methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()


def build_profile(result: IngestResult, *, name: str, opts: IngestOptions, steps: int | None = None,
                  baseline: Profile | None = None) -> Profile:
    """The :class:`Profile` (``source.kind = "ingested"``) for an ingest result.

    A speculative server's trace holds verify/draft passes only; its baseline decode step
    comes from ``baseline`` (a profile of a non-speculative run: its decode rows are copied
    in when the traces have none).
    """
    rows = tuple(p.cost_row() for p in result.phases)
    notes = tuple(result.notes)
    if not any(r.kind == "decode" for r in rows) and baseline is not None:
        rows = rows + baseline.rows("decode")
        notes += (f"decode rows (the baseline step) copied from profile {baseline.name} ({baseline.path})",)
    if not any(r.kind == "decode" for r in rows):
        found = ", ".join(sorted({r.kind for r in rows}))
        raise SpecmodelError(f"no decode forward passes in the traces (found: {found}); a profile needs the "
                             "baseline decode step: also trace a non-speculative run and pass its profile with "
                             "--baseline (or use `specmodel profile`)")
    first = result.traces[0].meta
    tp = result.world_size
    backend = first.backend or ("gloo" if result.mode == "cpu" else "nccl")
    hardware: dict[str, Any] = {"gpu_count": tp} if result.mode == "gpu" else {"device": "cpu"}
    if first.device_name:
        hardware["gpu_name"] = first.device_name
    if first.nccl_version:
        hardware["nccl_version"] = first.nccl_version
    if steps is None:
        steps = max(1, math.ceil((opts.num_draft_tokens - 1) / opts.topk))
    spec = SpecConfig(steps=steps, topk=opts.topk, num_draft_tokens=max(2, opts.num_draft_tokens))
    files = [Path(t.meta.path).name for t in result.traces]
    source = {
        "kind": "ingested",
        "tool": "specmodel ingest",
        "description": f"ingested from {len(files)} Kineto trace(s) ({'GPU kernels' if result.mode == 'gpu' else 'CPU/gloo'}"
                       f", TP{tp})",
        "mode": result.mode,
        "files": files,
        "phases": [p.to_dict() for p in result.phases],
        "ranks": [{"rank": r.rank, "file": Path(r.path).name, "passes": r.passes, "busy_s": r.busy_s,
                   "comm_s": r.comm_s, "skew_s": r.skew_s} for r in result.ranks],
    }
    return Profile(name=name, source=source, tp=tp, costs=rows, spec=spec, hardware=hardware, backend=backend,
                   notes=notes)
