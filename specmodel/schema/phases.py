"""The phase vocabulary and the span-label grammar, defined once.

A *phase* is what a span of work on a rank is: a forward of some kind, an all-reduce, or idle.
The profiler (``profile/``), the SGLang hook, the trace readers (``trace/``), the model
(``model/``) and the profile format (``schema/profile.py``) all speak it; each imports it from here.

A span label is ``specmodel.<kind>[bs=B,toks=T]``, or ``specmodel.<kind>[bs=B,toks=T,fwd=N]`` when
the span holds N > 1 forwards. The same label is the ``record_function`` name in a Kineto trace,
the NVTX range name in Nsight Systems and what ``specmodel ingest`` parses back.
"""

from __future__ import annotations

import re

from specmodel.errors import SpecmodelError

#: Forward kinds, in cycle order. decode: one token per request (the non-speculative baseline
#: step); verify: target forward over batch × num_draft_tokens; draft: one drafter forward (batch ×
#: topk tokens); draft_extend: drafter forward over the accepted tokens after a verify; extend:
#: prefill (kept for completeness; not used by the cycle model).
FORWARD_KINDS = ("decode", "verify", "draft", "draft_extend", "extend")
#: The forwards the profiler sweeps and the cycle model uses (no prefill).
CYCLE_KINDS = tuple(k for k in FORWARD_KINDS if k != "extend")
#: The drafter's forwards (their costs scale with the drafter, not the target).
DRAFT_KINDS = tuple(k for k in FORWARD_KINDS if k.startswith("draft"))
#: The target model's forwards.
TARGET_KINDS = tuple(k for k in FORWARD_KINDS if k not in DRAFT_KINDS)
#: vLLM speculative methods whose proposal runs a drafter forward (paying all-reduces at the same TP);
#: the others (``ngram``, ``suffix``) propose on the host: no draft forward, host time per proposal.
#: Read the hook (profile/vllm.py) writes and the summarizer (trace/vllm_forward.py) reads.
VLLM_FORWARD_DRAFTERS = ("draft_model", "eagle", "eagle3", "mtp", "medusa", "dflash")
#: Every phase a span can be: the forward kinds, plus time in all-reduce and idle time.
PHASES = (*FORWARD_KINDS, "allreduce", "idle")

_LABEL_RE = re.compile(r"^specmodel\.(?P<kind>[a-z_]+)\[bs=(?P<batch>\d+),toks=(?P<tokens>\d+)(?:,fwd=(?P<fwd>\d+))?\]$")


def phase_label(kind: str, batch: int, tokens: int, forwards: int = 1) -> str:
    """``specmodel.verify[bs=1,toks=4]``: parseable back by :func:`parse_phase_label`.

    ``forwards`` > 1 (``...,fwd=N]``): the span holds N forwards, e.g. the hook around a draft
    CUDA-graph replay (steps - 1 drafter forwards). Kineto gives a kernel to the innermost
    annotation only, so the span is the only place that count can travel; ingest divides by it."""
    fwd = f",fwd={forwards}" if forwards != 1 else ""
    return f"specmodel.{kind}[bs={batch},toks={tokens}{fwd}]"


def parse_phase_label(name: str) -> tuple[str, int, int] | None:
    m = _LABEL_RE.match(name)
    if not m:
        return None
    if len(m.group("batch")) > 12 or len(m.group("tokens")) > 12:
        # (int() of 4,300+ digits raises ValueError; no batch has 13 digits)
        raise SpecmodelError(f"span {name[:60]!r}: batch/tokens is not a plausible number")
    return m.group("kind"), int(m.group("batch")), int(m.group("tokens"))


def parse_phase_forwards(name: str) -> int:
    """Forwards in a ``specmodel.*`` span (1 when the label has no ``fwd=``, or is not ours)."""
    m = _LABEL_RE.match(name)
    return int(m.group("fwd")) if m and m.group("fwd") else 1
