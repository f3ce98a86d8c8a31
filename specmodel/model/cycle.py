"""The speculative cycle: one equation per function.

Notation: B = batch (concurrent requests), E[A] = expected tokens per request per verify
step (bonus included), T_base(B) = non-speculative decode step at batch B.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specmodel.errors import FieldError, SpecmodelError


def draft_s(step_s: float, steps: int, extend_s: float | None = None) -> float:
    """T_draft = steps × T_draft_step(B·topk), or with a measured draft-extend:
    T_draft = T_draft_extend + (steps − 1) × T_draft_step.

    SGLang's EAGLE worker runs ``num_steps`` drafter forwards per cycle; the first consumes
    the verified tokens (draft extend), the rest are ``num_steps − 1`` DECODE forwards on
    the draft runner over B × topk tokens (sglang/srt/speculative/eagle_worker.py).
    """
    if steps < 1:
        raise FieldError("steps", f"must be >= 1, got {steps}")
    if extend_s is None:
        return steps * step_s
    return extend_s + (steps - 1) * step_s


def cycle_s(draft_total_s: float, verify_s: float, overhead_s: float) -> float:
    """T_cycle = T_draft(steps, topk) + T_verify(B × num_draft_tokens) + overhead."""
    return draft_total_s + verify_s + overhead_s


def baseline_tokens_per_s(batch: int, base_step_s: float) -> float:
    """Non-speculative throughput: B tokens per decode step, tok/s = B / T_base(B)."""
    return batch / base_step_s


def spec_tokens_per_s(batch: int, accept_tokens: float, cycle_time_s: float) -> float:
    """Speculative throughput: tok/s = B × E[A] / T_cycle."""
    return batch * accept_tokens / cycle_time_s


def speedup(accept_tokens: float, base_step_s: float, cycle_time_s: float) -> float:
    """Speedup = (B·E[A]/T_cycle) / (B/T_base) = E[A] × T_base / T_cycle."""
    return accept_tokens * base_step_s / cycle_time_s


def break_even_accept(base_step_s: float, cycle_time_s: float) -> float:
    """E[A]* = T_cycle / T_base: the accept length at which speculation merely pays for itself.

    For B = 1 this is T_cycle × baseline tok/s: 30 ms × 82 tok/s = 2.46 in the published
    Kimi-K2.5 TP8 PCIe case.
    """
    return cycle_time_s / base_step_s


def accept_for_speedup(target_speedup: float, base_step_s: float, cycle_time_s: float) -> float:
    """E[A] needed for a given speedup: target × T_cycle / T_base (e.g. 1.2 for +20 %)."""
    return target_speedup * cycle_time_s / base_step_s


def accept_mean_se(accept_tokens: float, accept_std_tokens: float, generation_tokens: int,
                   samples: int = 0) -> float:
    """Standard error of the mean tokens per cycle that one N-token generation will see.

    A generation of N tokens takes C ≈ N / E[A] cycles, so its own mean has variance σ_A²/C
    (central limit theorem). When the distribution was estimated from ``samples`` observed
    verify steps, the estimate adds σ_A²/samples (independent): se = σ_A·√(1/C + 1/samples).
    ``samples`` = 0: the distribution is taken as exact (a formula or a stated mean).
    The band, P(speedup > 1) and the verdict all use this one figure.
    """
    if generation_tokens < 1:
        raise FieldError("generation_tokens", f"must be >= 1, got {generation_tokens}")
    cycles = max(generation_tokens / accept_tokens, 1.0)
    var = 1.0 / cycles + (1.0 / samples if samples > 0 else 0.0)
    return accept_std_tokens * math.sqrt(var)


def tokens_per_s_band(batch: int, accept_tokens: float, accept_std_tokens: float, cycle_time_s: float,
                      generation_tokens: int, z: float = 1.96, samples: int = 0) -> tuple[float, float]:
    """Band on tok/s over one generation of N tokens per request.

    tok/s ∈ B·(E[A] ± z·se)/T_cycle with se from :func:`accept_mean_se` (z = 1.96 → 95 %).
    Clamped to the [1, …] floor.
    """
    half = z * accept_mean_se(accept_tokens, accept_std_tokens, generation_tokens, samples)
    lo = max(accept_tokens - half, 1.0)
    hi = accept_tokens + half
    return spec_tokens_per_s(batch, lo, cycle_time_s), spec_tokens_per_s(batch, hi, cycle_time_s)


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def p_speedup_gt_1(accept_tokens: float, break_even_tokens: float, accept_std_tokens: float, n: float) -> float:
    """P(speedup > 1) = P(mean accept > E[A]*) ≈ Φ((E[A] − E[A]*) / (σ_A/√n)).

    ``n`` is the effective number of cycles the mean is taken over: (1/C + 1/samples)⁻¹ from
    :func:`accept_mean_se`, so the probability matches the band printed beside it.
    A zero-variance distribution gives 0 or 1.
    """
    if n <= 0:
        raise SpecmodelError("p_speedup_gt_1: n must be > 0")
    se = accept_std_tokens / math.sqrt(n)
    if se <= 0:
        return 1.0 if accept_tokens > break_even_tokens else 0.0
    return normal_cdf((accept_tokens - break_even_tokens) / se)


def cost_ci95_rel(parts: Sequence[tuple[float, float]]) -> float:
    """Relative 95 % half-width of a sum of independently measured costs.

    ``parts``: (seconds T_i, relative half-width u_i) per term. Independent errors add in
    quadrature: u = √(Σ (u_i·T_i)²) / Σ T_i (pyperf-style intervals per cost row, combined as for
    any sum of independent measurements). 0 when nothing was measured with an interval.
    """
    total = sum(t for t, _ in parts)
    if total <= 0:
        return 0.0
    return math.sqrt(sum((u * t) ** 2 for t, u in parts)) / total


def band_with_cost_uncertainty(tokens_per_s: float, lo: float, hi: float, cycle_ci95_rel: float) -> tuple[float, float]:
    """Widen the acceptance band [lo, hi] of tok/s = B·E[A]/T_cycle by the cycle cost's own 95 %
    half-width u_c: each side's half-width h becomes √(h² + (tok/s·u_c)²) (independent errors)."""
    c = tokens_per_s * cycle_ci95_rel
    return (max(tokens_per_s - math.sqrt((tokens_per_s - lo) ** 2 + c * c), 0.0),
            tokens_per_s + math.sqrt((hi - tokens_per_s) ** 2 + c * c))


def p_speedup_gt_1_with_costs(accept_tokens: float, break_even_tokens: float, accept_std_tokens: float, n: float,
                              break_even_ci95_rel: float, z: float = 1.96) -> float:
    """P(speedup > 1) when the break-even E[A]* = T_cycle/T_base is itself measured:
    Φ((E[A] − E[A]*) / √((σ_A/√n)² + (E[A]*·u/z)²)), u the relative 95 % half-width of
    T_cycle/T_base (√(u_cycle² + u_base²)), z = 1.96. Reduces to :func:`p_speedup_gt_1` at u = 0."""
    if break_even_ci95_rel <= 0:
        return p_speedup_gt_1(accept_tokens, break_even_tokens, accept_std_tokens, n)
    if n <= 0:
        raise SpecmodelError("p_speedup_gt_1: n must be > 0")
    se = math.sqrt((accept_std_tokens / math.sqrt(n)) ** 2 + (break_even_tokens * break_even_ci95_rel / z) ** 2)
    return normal_cdf((accept_tokens - break_even_tokens) / se)
