"""The error vLLM's adaptive verification inherits from its start-up cost table (vLLM 0.34.0,
``vllm/v1/worker/gpu/spec_decode/adaptive_verification.py``).

How vLLM builds the table: ``AdaptiveVerificationManager.batches_to_profile`` (line 305) yields
dummy runs of ``num_tokens`` = each CUDA-graph capture size (and sizes past the capture limit),
five replays each, all at ONE context, ``context_len = VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN``
(``vllm/envs.py:1165``, default 8192). ``GPUModelRunner._dummy_run`` (``v1/worker/gpu/model_runner.py:911``)
spreads those tokens over ``num_reqs = min(num_tokens, max_num_reqs)`` requests: one token per
request up to ``max_num_reqs``. ``set_initial_cost_curves`` (line 329) keeps the median GPU
forward time per token count (``StepTimingSample.forward_ms``, ``v1/worker/gpu/async_utils.py:30``:
the forward's CUDA events, no host work), and ``get_num_tokens`` prices a verify of N tokens as
``verify_cost_ms[N]`` whatever its shape and context.

What a real verify is: B requests of k + 1 tokens each (N = B·(k+1)), each attending over the
served context L. So the table stands in

    T_table(N)   = T_fwd(decode, N one-token requests, context L_p)        (L_p = 8192 by default)

for

    T_verify(B, L) = T_fwd(verify, B·(k+1) tokens, context L)

and the policy's cost is off by

    e(L) = T_table(B·(k+1)) / T_verify(B, L) − 1

(both on forward time only: ``allreduce_s + compute_s`` of :func:`specmodel.model.costs.forward_cost`,
the profile's host work left out as vLLM's table leaves it out). Two errors stack in e: the
context (L_p for every L: attention over KV grows with L) and the shape (N requests each reading
its own L_p of KV, against B requests reading L each). vLLM refreshes the table from live steps
later; e is what the policy starts from and what it holds where live steps never reach.
Above ``max_num_reqs`` tokens the dummy run puts more than one token in a request; this
model keeps the one-token form (the decode curve), which overstates e there.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmodel.errors import SpecmodelError
from specmodel.model.costs import forward_cost
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import forward_tokens
from specmodel.schema.profile import Profile

#: vLLM 0.34.0's default ``VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN`` (``vllm/envs.py:1165``)
VLLM_PROFILE_CONTEXT_TOKENS = 8192


@dataclass(frozen=True, kw_only=True)
class StartupTableError:
    """e(L) at one served context (module docstring). ``table_s``: what the start-up table would
    hold (the decode curve at ``tokens`` one-token requests, ``profile_context_tokens``);
    ``verify_s``: the profile's verify forward at (``batch``, ``tokens``, ``context_tokens``);
    ``extrapolated``: either read left the profile's measured range (the figure rests on it)."""

    context_tokens: float
    profile_context_tokens: float
    batch: int
    tokens: float
    table_s: float
    verify_s: float
    extrapolated: bool
    verify_from_decode: bool

    def __post_init__(self) -> None:
        if self.batch < 1 or self.tokens < self.batch:
            raise SpecmodelError(f"startup table error: batch {self.batch}, tokens {self.tokens}: not a verify")
        if not (self.table_s > 0 and self.verify_s > 0):
            raise SpecmodelError("startup table error: forward times must be > 0")

    @property
    def error_rel(self) -> float:
        """e = T_table / T_verify − 1 (positive: the table overprices the verify)."""
        return self.table_s / self.verify_s - 1.0


def startup_table_error(profile: Profile, *, batch: int, spec: SpecConfig, contexts: tuple[float, ...],
                        profile_context_tokens: float = VLLM_PROFILE_CONTEXT_TOKENS) -> tuple[StartupTableError, ...]:
    """e(L) for each served context L in ``contexts`` at batch B (module docstring for the formula)."""
    if batch < 1:
        raise SpecmodelError(f"startup table error: batch must be >= 1, got {batch}")
    if not profile.has("decode"):
        raise SpecmodelError(f"profile {profile.name}: no decode rows (the start-up table's one-token shape)")
    n = forward_tokens("verify", batch, spec)
    table = forward_cost(profile, "decode", n, profile_context_tokens)
    out = []
    for ctx in contexts:
        v = forward_cost(profile, "verify", n, ctx)
        out.append(StartupTableError(context_tokens=float(ctx), profile_context_tokens=float(profile_context_tokens),
                                     batch=batch, tokens=n, table_s=table.allreduce_s + table.compute_s,
                                     verify_s=v.allreduce_s + v.compute_s,
                                     extrapolated=table.extrapolated or v.extrapolated,
                                     verify_from_decode=bool(v.from_kind)))
    return tuple(out)
