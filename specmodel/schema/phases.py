"""The phase vocabulary, defined once.

A *phase* is what a span of work on a rank is: a forward of some kind, an all-reduce, or idle.
The profiler (``profile/``), the SGLang hook, the trace readers (``trace/``), the model
(``model/``) and the profile format (``schema/profile.py``) all speak it; each imports it from here.
"""

from __future__ import annotations

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
#: Every phase a span can be: the forward kinds, plus time in all-reduce and idle time.
PHASES = (*FORWARD_KINDS, "allreduce", "idle")
