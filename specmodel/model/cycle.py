"""The speculative cycle: one equation per function.

Notation: B = batch (concurrent requests), E[A] = expected tokens per request per verify
step (bonus included), T_base(B) = non-speculative decode step at batch B.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specmodel.errors import FieldError, SpecmodelError, field_name
from specmodel.model.costs import Extrapolation, ForwardCost, Override
from specmodel.schema.costrows import SpecConfig
from specmodel.units import tokens_text


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


def speedup_band(speedup: float, tokens_per_s: float, lo: float, hi: float,
                 baseline_ci95_rel: float) -> tuple[float, float]:
    """Band on the speedup S = tok/s / baseline tok/s from the tok/s band [lo, hi] and the
    baseline decode cost's own relative 95 % half-width u_b: the ratio of two independently
    measured figures, so relative half-widths add in quadrature on each side,
    S·(1 − √(h_lo² + u_b²)) .. S·(1 + √(h_hi² + u_b²)), h the tok/s band's relative half-widths.
    The tok/s band alone leaves the baseline out: it holds P(speedup > 1)'s two cost terms only
    half (P already uses √(u_cycle² + u_base²))."""
    if tokens_per_s <= 0:
        return speedup, speedup
    h_lo = (tokens_per_s - lo) / tokens_per_s
    h_hi = (hi - tokens_per_s) / tokens_per_s
    u = baseline_ci95_rel
    return (max(speedup * (1.0 - math.sqrt(h_lo * h_lo + u * u)), 0.0),
            speedup * (1.0 + math.sqrt(h_hi * h_hi + u * u)))


def p_speedup_gt_1_with_costs(accept_tokens: float, break_even_tokens: float, accept_std_tokens: float, n: float,
                              break_even_ci95_rel: float, z: float = 1.96, drift_rel: float = 0.0) -> float:
    """P(speedup > 1) when the break-even E[A]* = T_cycle/T_base is itself measured:
    Φ((E[A] − E[A]*) / √((σ_A/√n)² + (E[A]*·u/z)² + (E[A]·d)²)), u the relative 95 % half-width of
    T_cycle/T_base (√(u_cycle² + u_base²)), z = 1.96, d the acceptance's drift between a log's
    windows (relative standard deviation, :func:`specmodel.model.accept.window_drift_rel`).
    Reduces to :func:`p_speedup_gt_1` at u = d = 0."""
    if break_even_ci95_rel <= 0 and drift_rel <= 0:
        return p_speedup_gt_1(accept_tokens, break_even_tokens, accept_std_tokens, n)
    if n <= 0:
        raise SpecmodelError("p_speedup_gt_1: n must be > 0")
    se = math.sqrt((accept_std_tokens / math.sqrt(n)) ** 2 + (break_even_tokens * break_even_ci95_rel / z) ** 2
                   + (accept_tokens * drift_rel) ** 2)
    return normal_cdf((accept_tokens - break_even_tokens) / se)



@dataclass(frozen=True, kw_only=True)
class Assumption:
    """A cost the profile never measured for its kind, taken from the kind's fallback curve
    (the forward-kind table): e.g. verify at B·ndt tokens read off the decode surface.

    That proxy misses what only a verify shows (attention over several new tokens at long
    context): on a published Qwen3.5-class 397B MoE, TP4 PCIe, vLLM MTP k = 2 (AWQ), speculation
    measured 1.41x at context 0, 0.86x at 32K and 0.42x at 128K while decode barely moved. A figure
    built on an assumption is never given as a plain verdict.
    """

    kind: str
    fallback: str
    batch: int
    tokens: float
    context_tokens: float
    #: a cost with no fallback curve, taken as a stated value (e.g. ``"0 s"`` for an unmeasured
    #: host proposal), and the measurement that removes it
    assumed_as: str = ""
    measure_hint: str = ""
    #: the whole label, where the assumption is better said than built (the SGLang host work)
    said: str = ""

    @property
    def label(self) -> str:
        """``verify not measured at 128K: assumed = decode at 4 tokens``."""
        if self.said:
            return self.said
        if self.assumed_as:
            return f"{self.kind} not measured: assumed {self.assumed_as}"
        where = tokens_text(self.context_tokens) if self.context_tokens > 0 else "context 0"
        return (f"{self.kind} not measured at {where}: assumed = {self.fallback} "
                f"at {self.tokens:g} tokens")

    @property
    def to_measure(self) -> str:
        """The measurement that removes the assumption (profiler, SGLang hook, vLLM profiler)."""
        if self.measure_hint:
            return self.measure_hint
        b, per, ctx = self.batch, max(int(round(self.tokens / max(self.batch, 1))), 1), int(self.context_tokens)
        f = field_name
        return (f"measure {self.kind} at batch {b} x {per} tokens, context {ctx}: "
                f"`specmodel profile {f('phases')} decode,{self.kind} {f('batches')} {b} {f('verify_tokens')} {per} "
                f"{f('contexts')} {ctx}`, or on the server with speculation on at batch {b} and {ctx}-token prompts: "
                f"SGLang under `specmodel sglang` (or vLLM with --profiler-config) -> POST /start_profile, "
                f"POST /stop_profile, then `specmodel ingest` the traces")

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "fallback": self.fallback, "batch": self.batch, "tokens": self.tokens,
                "context_tokens": self.context_tokens, "label": self.label, "to_measure": self.to_measure}


@dataclass(frozen=True, kw_only=True)
class CycleCosts:
    """Per-cycle costs at one (batch, spec) operating point, before acceptance enters.

    THE place where a cycle's costs are judged: :attr:`extrapolations` (a cost looked up outside
    its measured range, any kind, draft_extend included), :attr:`assumptions` (a kind never
    measured, its fallback's curve used) and :attr:`measured` (neither). predict, the optimizer,
    the serve plan, the report and validate all read these; none re-derives them.
    """

    batch: int
    spec: SpecConfig
    base: ForwardCost
    verify: ForwardCost
    draft_step: ForwardCost
    draft_extend: ForwardCost | None
    draft_total_s: float
    draft_allreduce_s: float
    overhead_s: float
    context_tokens: float = 0.0
    warnings: tuple[str, ...] = ()
    #: costs assumed outside the forward-kind table (a host proposer's unmeasured proposal time)
    stated_assumptions: tuple[Assumption, ...] = ()

    @property
    def forwards(self) -> tuple[ForwardCost, ...]:
        return tuple(fc for fc in (self.base, self.verify, self.draft_step, self.draft_extend)
                     if fc is not None and fc.kind != "none")

    @property
    def extrapolations(self) -> tuple[Extrapolation, ...]:
        """Every axis of every cost lookup outside the measured range (one entry per kind and axis)."""
        return tuple(e for fc in self.forwards for e in fc.extrapolations)

    @property
    def assumptions(self) -> tuple[Assumption, ...]:
        """Every cost taken from a fallback kind's curve (a kind with no rows in the profile)."""
        return tuple(Assumption(kind=fc.kind, fallback=fc.from_kind, batch=self.batch, tokens=fc.tokens,
                                context_tokens=fc.context_tokens)
                     for fc in self.forwards if fc.from_kind) + self.stated_assumptions

    @property
    def overrides(self) -> tuple[Override, ...]:
        """Measured rows the running-max surface replaced in any lookup of this cycle."""
        return tuple(o for fc in self.forwards for o in fc.overrides)

    @property
    def extrapolated(self) -> bool:
        return bool(self.extrapolations)

    @property
    def assumed(self) -> bool:
        return bool(self.assumptions)

    @property
    def measured(self) -> bool:
        """Every cost of the cycle was measured for its own kind, inside its measured range."""
        return not (self.extrapolated or self.assumed)

    @property
    def cycle_s(self) -> float:
        return cycle_s(self.draft_total_s, self.verify.total_s, self.overhead_s)

    @property
    def cycle_allreduce_s(self) -> float:
        return self.verify.allreduce_s + self.draft_allreduce_s

    @property
    def break_even_tokens(self) -> float:
        return break_even_accept(self.base.total_s, self.cycle_s)
