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

One module: the span grammar, a file's metadata and its parse are what each pool worker runs on
one file, and read together as that one path.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specmodel.errors import FieldError, SpecmodelError
from specmodel.schema.costrows import KINDS
from specmodel.schema.phases import (
    KIND,
    SGLANG_MODE_KINDS,
    TARGET_KINDS,
    draft_steps,
    forward_tokens,
    parse_phase_context,
    parse_phase_forwards,
    parse_phase_label,
)
from specmodel.trace._jsonstream import gc_paused, scan_trace
from specmodel.trace.attribution import (
    Collector,
    PassRecord,
    PhaseSpan,
    Span,
    cpu_passes,
    gpu_passes,
    merge_gpu_spans,
)
from specmodel.units import from_ns

TRACE_SUFFIXES = (".json", ".json.gz")
#: Traces of one run start within seconds of each other; further apart = different runs.
MAX_BASE_TIME_APART_S = 600.0

SGLANG_STEP = re.compile(r"^step\[(?P<mode>[A-Z_0-9]+) bs=(?P<bs>\d{1,12})(?!\d)(?: toks=(?P<toks>\d{1,12})(?!\d))?[^\]]*\]$")
_SGLANG_MODES = SGLANG_MODE_KINDS  # (the forward-kind table: one home for the mode names)
#: SGLang 0.5.23 stage spans (speculative/spec_utils.spec_stage_span) around a whole stage.
_STAGE_SPANS = {"draft_extend": "draft_extend", "draft": "draft"}
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
# vLLM V1 with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 (vllm 0.32 v1/worker/gpu_worker.py annotate_profile,
# gpu_model_runner.py record_function_or_nullcontext): one step span per engine step,
# execute_context_N(T)_generation_M(U) (N prefill requests / T tokens, M decoding requests / U
# tokens), or with detailed_trace_annotation execute_S_context_N(sqT sk.. sqsq.. sqsk..)_generation_M(sqU
# skK ...); inside it the scopes "gpu_model_runner: preprocess|forward|postprocess"; the drafter
# runs after the step span, in "gpu_model_runner: draft".
_N = r"(\d{1,12})"
VLLM_STEP = re.compile(rf"^execute_(?:{_N}_)?context_{_N}\((?:sq)?{_N}(?:sk{_N}sqsq\d{{1,24}}sqsk\d{{1,24}})?\)"
                       rf"_generation_{_N}\((?:sq)?{_N}(?:sk{_N}sqsq\d{{1,24}}sqsk\d{{1,24}})?\)$")
VLLM_FORWARD = "gpu_model_runner: forward"
VLLM_DRAFT = "gpu_model_runner: draft"
VLLM_SCOPES_ENV = "VLLM_CUSTOM_SCOPES_FOR_PROFILING"
_SGLANG_FILE = re.compile(r"(?:^|-)(?P<pid>[^-]+)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?"
                          r"(?:-EP-(?P<ep>\d+))?(?:-(?:EXTEND|DECODE))?\.trace\.json(?:\.gz)?$")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
#: vLLM 0.32's frontend (API server) trace, <host>_<pid>.async_llm.<ns>.pt.trace.json.gz: no engine steps
_VLLM_FRONTEND = re.compile(r"\.async_llm\.\d+\.pt\.trace\.json(?:\.gz)?$")


@dataclass(frozen=True, kw_only=True)
class IngestOptions:
    """How to read spans that do not carry their own token count."""

    num_draft_tokens: int = 4  # tokens per request in a verify (SGLang --speculative-num-draft-tokens)
    topk: int = 1  # tokens per request in one draft step (--speculative-eagle-topk)
    steps: int | None = None  # --speculative-num-steps (default: from draft tokens and topk)
    step_kind: str = "decode"  # what a ProfilerStep# span is, when a file has no other labels
    step_batch: int = 1
    #: drafter forwards in one vLLM ``gpu_model_runner: draft`` span (default: the draft depth);
    #: 0 = a host-side proposer (ngram): its spans are proposal time, no drafter forward
    draft_forwards: int | None = None

    def __post_init__(self) -> None:
        if self.num_draft_tokens < 1:
            raise FieldError("num_draft_tokens", f"must be >= 1, got {self.num_draft_tokens}")
        if self.topk < 1:
            raise FieldError("topk", f"must be >= 1, got {self.topk}")
        if self.step_kind not in KINDS:
            raise FieldError("step_kind", f"expected one of {', '.join(KINDS)}, got {self.step_kind!r}")
        if self.step_batch < 1:
            raise FieldError("batch", f"must be >= 1, got {self.step_batch}")  # (the flag --batch sets it)
        if self.steps is not None and self.steps < 1:
            raise FieldError("steps", f"must be >= 1, got {self.steps}")
        if self.draft_forwards is not None and self.draft_forwards < 0:
            raise FieldError("draft_forwards", f"must be >= 0, got {self.draft_forwards}")

    @property
    def draft_steps(self) -> int:
        """Draft depth: --steps, else what the draft tokens and topk imply (a chain: ndt - 1)."""
        return self.steps if self.steps is not None else draft_steps(self.num_draft_tokens, self.topk)

    def tokens(self, kind: str, batch: int) -> int:
        # prefill's tokens are the prompt, which a span without toks= does not say: one per request
        return forward_tokens(kind, batch, self) if KIND[kind].per_request != "prompt" else batch


def phase_of(name: str, opts: IngestOptions, last_batch: int | None = None) -> tuple[str, int, int] | None:
    """(kind, batch, tokens) of a forward-pass span name, or ``None`` when it is not one."""
    ours = parse_phase_label(name)
    if ours is not None:
        return ours if ours[0] in KINDS else None
    m = SGLANG_STEP.match(name)
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
    return (name.startswith(("step[", "specmodel.", "ProfilerStep#", "execute_")) or name in _STAGE_SPANS
            or name == VLLM_FORWARD or name == VLLM_DRAFT)


def vllm_step(name: str) -> tuple[str, int, int, int | None] | None:
    """(kind, batch, tokens, context) of a vLLM step span name, or None (not one, or an empty step).

    The hook's rule (docs/vllm.md): prefill requests in the step -> ``extend`` over all of them;
    else more tokens than requests (drafts scheduled) -> ``verify``; else ``decode``. ``context``
    (mean KV length per decoding request) only from the detailed form's ``sk``."""
    m = VLLM_STEP.match(name)
    if m is None:
        return None
    n_ctx, t_ctx, m_gen, t_gen = int(m.group(2)), int(m.group(3)), int(m.group(5)), int(m.group(6))
    sk = m.group(7)
    if n_ctx:
        return "extend", n_ctx + m_gen, t_ctx + t_gen, None
    if not m_gen:
        return None
    ctx = max(0, round(int(sk) / m_gen) - t_gen // m_gen) if sk is not None else None
    return ("verify" if t_gen > m_gen else "decode"), m_gen, t_gen, ctx


def _vllm_phase_spans(spans: list[Span], opts: IngestOptions) -> list[PhaseSpan]:
    """The passes of a vLLM trace from its own scopes: each ``gpu_model_runner: forward`` inside a
    step span is a target forward of the step's kind; each ``gpu_model_runner: draft`` (after the
    step span) a proposal of ``opts.draft_steps`` drafter forwards over the last step's requests
    (none when ``opts.draft_forwards`` is 0: a host-side proposer such as ngram)."""
    by_pid: dict[Any, list[Span]] = defaultdict(list)
    for s in spans:
        by_pid[s.pid].append(s)
    out: list[PhaseSpan] = []
    k = opts.draft_steps if opts.draft_forwards is None else opts.draft_forwards
    for ss in by_pid.values():
        ss.sort(key=lambda s: (s.ts, -s.end))
        step: Span | None = None
        step_ph: tuple[str, int, int, int | None] | None = None
        last_batch: int | None = None
        for s in ss:
            if s.name.startswith("execute_"):
                ph = vllm_step(s.name)
                if ph is not None or VLLM_STEP.match(s.name):
                    step, step_ph = s, ph
                    if ph is not None:
                        last_batch = ph[1]
            elif s.name == VLLM_FORWARD:
                if step is None or step_ph is None or not (step.ts <= s.ts and s.end <= step.end + 1e-3):
                    continue  # a forward outside any step (a dummy / profiling run)
                kind, bs, toks, ctx = step_ph
                out.append(PhaseSpan(span=s, kind=kind, batch=bs, tokens=toks, label=step.name, context=ctx))
            elif s.name == VLLM_DRAFT and k > 0 and last_batch:
                bs = last_batch
                out.append(PhaseSpan(span=s, kind="draft", batch=bs, tokens=opts.tokens("draft", bs),
                                     label=f"{VLLM_DRAFT} bs={bs}", forwards=k))
    return sorted(out, key=lambda p: p.span.ts)


def _pass_spans(spans: list[Span], opts: IngestOptions) -> list[PhaseSpan]:
    """The passes among the CPU-side spans: our own / SGLang's labels when there are any, else vLLM's scopes."""
    ours = _phase_spans([s for s in spans if not _is_vllm_scope(s.name)], opts)
    if ours or not any(_is_vllm_scope(s.name) for s in spans):
        return ours
    return _vllm_phase_spans(spans, opts)


def _is_vllm_scope(name: str) -> bool:
    return name.startswith("execute_") or name == VLLM_FORWARD or name == VLLM_DRAFT


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
    #: the engine that wrote the trace ("vllm" when its header says so) and its version
    engine: str = ""
    engine_version: str = ""
    #: a vLLM speculative server whose draft scope ran no drafter forward: a host proposer (ngram / suffix)
    host_proposer: bool = False


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
            apart = from_ns(abs(first.base_time_ns - m.base_time_ns))
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
    ctx: int | None = None  # the label's ctx=

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
        node = _Node(span=s, ph=ph, forwards=parse_phase_forwards(s.name), parent=stack[-1] if stack else None,
                     ctx=parse_phase_context(s.name))
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
            inner[0].ph, inner[0].forwards, inner[0].ctx = n.ph, n.forwards, n.ctx
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
                             forwards=fwd, context=n.ctx))
    return out


def _gpu_phase_spans(col: Collector, opts: IngestOptions) -> list[PhaseSpan]:
    """Device windows of the passes. Nesting is read on the host spans (Kineto may leave out the
    device span of an annotation whose kernels all belong to an inner one) and carried over to the
    device spans by External id; without ids, the device spans are read the same way."""
    gpu = merge_gpu_spans(col.gpu_spans)
    if not gpu:
        return []
    if col.cpu_spans and all(g.ext is not None for g in gpu):
        decided = {(p.span.name, p.span.ext): p for p in _pass_spans(col.cpu_spans, opts)}
        return [replace(decided[(g.name, g.ext)], span=g) for g in gpu if (g.name, g.ext) in decided]
    return _pass_spans(gpu, opts)


def _vllm_cycle_drafts(records: list[PassRecord]) -> list[PassRecord]:
    """A vLLM engine proposes at the end of each step: the proposal after a prefill (``extend``)
    step runs over the prompt, not a cycle's verified tokens. Left out, as the hook leaves it out
    (`specmodel vllm --summarize` keys draft rows on verify steps), so both read one cycle."""
    out: list[PassRecord] = []
    last_target = ""
    for r in sorted(records, key=lambda r: r.t0_us):
        if r.kind in TARGET_KINDS:
            last_target = r.kind
        elif r.kind == "draft" and last_target == "extend":
            continue
        out.append(r)
    return out


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



def _is_vllm(header: dict[str, Any]) -> bool:
    """vLLM writes its version into its torch-profiler traces (``vllm_version``, 0.32)."""
    return "vllm_version" in header or "vllm_version_tuple" in header


def _cpu_single_rank(header: dict[str, Any]) -> bool:
    """A one-rank CPU (gloo) run: no collective to find, its forwards still measurable."""
    dist = header.get("distributedInfo")
    devs = header.get("deviceProperties")
    return (isinstance(dist, dict) and dist.get("world_size") == 1 and dist.get("backend") == "gloo"
            and not devs)


def _no_vllm_scopes(path: str) -> SpecmodelError:
    return SpecmodelError(f"{path}: a vLLM trace without its step scopes (execute_context_…, "
                          f"'{VLLM_FORWARD}'): restart the server with {VLLM_SCOPES_ENV}=1 and profile again")


def parse_rank_file(path: str, opts: IngestOptions, single: bool = False, *, full_decode: bool = False,
                    hold: list[Any] | None = None) -> RankTrace:
    """Stream one rank's trace and measure each forward pass in it (runs in a worker process).

    Events the attribution cannot use are counted, not decoded (:meth:`Collector.decide`);
    ``full_decode`` decodes every one (the reference the pre-filter is tested against).
    ``hold``: what was collected is appended to it instead of freed here (a process about to
    end with ``os._exit`` need not free ~10^5 tuples one by one: ~10 ms of a rank)."""
    col = Collector(path=path, span_name=_is_span_name)
    if hold is not None:
        hold.append(col)
    with gc_paused():  # (the attribution, too, builds ~10^5 short-lived tuples and no cycle)
        return _parse_rank_file(col, path, opts, single, full_decode)


def _parse_rank_file(col: Collector, path: str, opts: IngestOptions, single: bool, full_decode: bool) -> RankTrace:
    header = scan_trace(path, col.on_event, keep=None if full_decode else col, on_skipped=col.skipped)
    if "traceEvents" not in header:
        raise SpecmodelError(f"{path}: no traceEvents array (not a Kineto / torch.profiler trace)")
    meta = meta_from_header(Path(path), header, single=single)
    if col.n_kernels:
        gpu_ph = _gpu_phase_spans(col, opts)
        cpu_ph = [] if gpu_ph else _pass_spans(col.cpu_spans, opts)
        if not gpu_ph and not cpu_ph:
            raise SpecmodelError(f"{path}: {col.n_kernels} GPU kernels but no forward-pass spans "
                                 "(step[...], specmodel.<kind>[...], ProfilerStep#N): cannot tell passes apart")
        attribution, records = gpu_passes(col, gpu_ph, cpu_ph)
        if not records:
            raise SpecmodelError(f"{path}: no GPU kernel is linked (correlation) to any forward-pass span")
        mode = "gpu"
    elif col.cpu_colls or _cpu_single_rank(header):
        phases = _pass_spans(col.cpu_spans, opts)
        if not phases:
            if _is_vllm(header):
                raise _no_vllm_scopes(path)
            if not col.cpu_colls:
                raise SpecmodelError(f"{path}: no CPU-side collectives and no forward-pass spans "
                                     "(step[...], specmodel.<kind>[...], ProfilerStep#N): nothing to measure")
            raise SpecmodelError(f"{path}: CPU collectives but no forward-pass spans "
                                 "(step[...], specmodel.<kind>[...], ProfilerStep#N)")
        records, attribution, mode = cpu_passes(col, phases), "cpu span", "cpu"
    elif col.n_events == 0:
        raise SpecmodelError(f"{path}: traceEvents is empty")
    elif _is_vllm(header):
        raise _no_vllm_scopes(path)
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
    vllm = _is_vllm(header)
    if vllm:
        records = _vllm_cycle_drafts(records)
        # the vLLM hook labels a proposal of k drafter forwards with toks = B·k (its whole proposal);
        # a draft row is one forward over B tokens (what `specmodel vllm --summarize` keys)
        records = [replace(r, tokens=r.tokens // r.forwards) if r.kind == "draft" and r.forwards > 1
                   and r.tokens == r.batch * r.forwards else r for r in records]
    records = [_per_forward(r) for r in records]
    kinds = {r.kind for r in records}
    host = vllm and "verify" in kinds and "draft" not in kinds and any(sp.name == VLLM_DRAFT for sp in col.cpu_spans)
    version = header.get("vllm_version") if vllm else None
    return RankTrace(meta=meta, mode=mode, attribution=attribution, n_events=col.n_events,
                     n_kernels=col.n_kernels, passes=tuple(records),
                     bare_totals_s=tuple((k, tuple(v)) for k, v in sorted(bare.items())),
                     engine="vllm" if vllm else "", engine_version=version if isinstance(version, str) else "",
                     host_proposer=host)


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
            # vLLM's API-server process writes its own near-empty trace beside the workers'
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(TRACE_SUFFIXES)
                           and not _VLLM_FRONTEND.search(q.name))
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
