"""A request end to end: its prefill, the time the server spends outside the engine's steps, and
its decode phase (the cycle model's tok/s).

For B concurrent requests of P prompt tokens that each generate N tokens, one round takes

    T = F + (N − 1)·B / X,        F = prefill(B·P) + outside

where X is the decode phase's total tok/s (B / T_decode for the baseline,
:func:`specmodel.model.cycle.spec_tokens_per_s` with speculation) and the prefill step samples the
first token. With the decode phase s = X_spec / X_base times faster, the request's speedup is

    g(s) = (F_base + D) / (F_spec + D / s),        D = (N − 1)·B / X_base

increasing in s, so speculation pays for the request (g > 1) iff s > s* = D / (F_base + D − F_spec):
with equal fixed costs s* = 1 (the decode phase's break-even); a drafter's own prefill raises it.
The fixed cost pulls a short request's speedup toward 1 -- a fast drafter's gain shrinks, a slow
one's loss too -- which is what a client that times whole requests measures (vLLM's
``benchmark_serving`` output-token throughput counts each request's whole time).

Prefill is priced from measured prefill steps (``extend`` rows: the baseline's in the profile's
costs, the speculative server's in ``requests.spec_prefill``) by a line in the step's tokens fitted
through them (weighted by their steps; slope and intercept >= 0): the rows of one box scatter by
tens of percent (a step after an idle engine wakes its threads), so a fit, not an interpolation
between two neighbours, and a straight line beyond the measured sizes. A host proposer (ngram,
suffix) runs the same target prefill plus one lookup: its prefill is the baseline's line plus its
measured lookup, so the two servers' noise does not become a difference between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specmodel.errors import FieldError, field_name
from specmodel.model.costs import Extrapolation
from specmodel.model.cycle import Assumption
from specmodel.schema.costrows import CostRow, prompt_tokens_of
from specmodel.schema.phases import canonical_method, is_host_proposer
from specmodel.schema.profile import Profile


def _measure_requests() -> str:
    """What a user runs to measure what the request price assumed."""
    return ("run both servers under `specmodel vllm` (it keeps each server's /metrics beside the hook logs) with "
            f"requests of the prompt length you serve, then `specmodel vllm {field_name('summarize')}` again")


def prefill_s(rows: Sequence[CostRow], tokens: int) -> tuple[float, Extrapolation | None]:
    """One prefill step of ``tokens`` tokens (all requests of the step together) from measured
    prefill rows: the line c = a + b·T through them, weighted by their steps, a, b >= 0 (see the
    module docstring); the extrapolation when ``tokens`` lies outside the measured sizes."""
    if not rows:
        raise ValueError("prefill_s: no prefill rows")
    w = [float(r.samples) for r in rows]
    t = [float(r.tokens) for r in rows]
    c = [r.total_s for r in rows]
    sw = sum(w)
    t_mean = sum(wi * ti for wi, ti in zip(w, t, strict=True)) / sw
    c_mean = sum(wi * ci for wi, ci in zip(w, c, strict=True)) / sw
    var = sum(wi * (ti - t_mean) ** 2 for wi, ti in zip(w, t, strict=True))
    cov = sum(wi * (ti - t_mean) * (ci - c_mean) for wi, ti, ci in zip(w, t, c, strict=True))
    if var > 0:
        # a prefill of more tokens never costs less (a negative slope is the rows' noise), nor a
        # step less than nothing
        b = max(cov / var, 0.0)
        a = c_mean - b * t_mean
        if a < 0:
            a, b = 0.0, sum(wi * ti * ci for wi, ti, ci in zip(w, t, c, strict=True)) / sum(
                wi * ti * ti for wi, ti in zip(w, t, strict=True))
    else:  # one size: proportional to the tokens
        a, b = 0.0, c_mean / t_mean
    lo_t, hi_t = min(r.tokens for r in rows), max(r.tokens for r in rows)
    extrap = None
    if not lo_t <= tokens <= hi_t:
        extrap = Extrapolation(kind="extend", axis="tokens", requested=tokens, measured_min=lo_t, measured_max=hi_t)
    return a + b * tokens, extrap


def request_speedup(decode_speedup: float, *, fixed_base_s: float, fixed_spec_s: float, decode_base_s: float) -> float:
    """g(s) of the module docstring: the request's speedup for a decode phase ``decode_speedup`` faster."""
    if decode_speedup <= 0:
        return 0.0
    return (fixed_base_s + decode_base_s) / (fixed_spec_s + decode_base_s / decode_speedup)


def decode_speedup_needed(*, fixed_base_s: float, fixed_spec_s: float, decode_base_s: float) -> float:
    """s* of the module docstring: the decode-phase speedup at which the request breaks even
    (infinite when the speculative server's fixed cost alone exceeds the baseline's whole request)."""
    den = fixed_base_s + decode_base_s - fixed_spec_s
    return decode_base_s / den if den > 0 else math.inf


@dataclass(frozen=True, kw_only=True)
class RequestPrice:
    """One round of ``batch`` concurrent requests of ``prompt_tokens`` in, ``request_tokens`` out,
    on both servers (seconds per round; tok/s are totals over the batch)."""

    request_tokens: int
    prompt_tokens: int
    prompt_source: str
    base_prefill_s: float
    spec_prefill_s: float
    base_outside_s: float
    spec_outside_s: float
    base_decode_s: float
    spec_decode_s: float
    baseline_tokens_per_s: float
    tokens_per_s: float
    speedup: float
    speedup_low: float
    speedup_high: float
    #: the decode-phase speedup the request needs to break even (s*)
    decode_speedup_needed: float
    assumed: tuple[Assumption, ...] = ()
    extrapolated: tuple[Extrapolation, ...] = ()

    @property
    def base_s(self) -> float:
        return self.base_prefill_s + self.base_outside_s + self.base_decode_s

    @property
    def spec_s(self) -> float:
        return self.spec_prefill_s + self.spec_outside_s + self.spec_decode_s


def price_request(profile: Profile, *, algorithm: str, batch: int, request_tokens: int, prompt_tokens: int | None,
                  baseline_tokens_per_s: float, decode_speedup: float, decode_speedup_low: float,
                  decode_speedup_high: float) -> RequestPrice:
    """Price a request end to end from the profile's prefill rows and outside times (module docstring).
    What the profile did not measure is taken as stated and returned as an :class:`Assumption`:
    no prefill rows (prefill 0), no speculative prefill (= the baseline's), no outside time (0)."""
    if request_tokens < 1:
        raise FieldError("request_tokens", f"must be >= 1, got {request_tokens}")
    rq = profile.requests
    base_rows = profile.rows("extend")
    assumed: list[Assumption] = []
    extrap: list[Extrapolation] = []
    if prompt_tokens is not None:
        p_tokens, p_source = prompt_tokens, "requested"
    elif rq is not None:
        p_tokens, p_source = rq.prompt_tokens, "the profiled requests' median prompt"
    elif base_rows:
        p_tokens = prompt_tokens_of([(r.batch, r.tokens, r.samples) for r in base_rows])
        p_source = "the profiled prefill steps' median prompt"
    else:
        raise FieldError("prompt_tokens", "the profile recorded no prefill step: give the prompt length "
                                          "to price requests end to end")
    step_tokens = batch * p_tokens

    def ctx_zero(rows: Sequence[CostRow]) -> list[CostRow]:
        # a fresh request's prefill attends over nothing cached: the lowest context band measured
        lo = min(r.context_tokens for r in rows)
        return [r for r in rows if r.context_tokens == lo]

    if base_rows:
        base_pf, e = prefill_s(ctx_zero(base_rows), step_tokens)
        if e is not None:
            extrap.append(e)
    else:
        base_pf = 0.0
        assumed.append(Assumption(kind="prefill", fallback="", batch=batch, tokens=step_tokens, context_tokens=0,
                                  assumed_as="0 s (no prefill step recorded)", measure_hint=_measure_requests()))
    # the speculative server's prefill rows are its drafter's: another kind priced from them would borrow them
    same_kind = canonical_method(algorithm) == canonical_method(profile.spec.algorithm)
    spec_rows = rq.spec_prefill if rq is not None and same_kind else ()
    if base_rows and is_host_proposer(algorithm):
        spec_pf = base_pf + (profile.overhead_s if profile.host_proposer is not None and same_kind else 0.0)
    elif spec_rows:
        spec_pf, e = prefill_s(ctx_zero(spec_rows), step_tokens)
        if e is not None and e not in extrap:
            extrap.append(e)
    else:
        spec_pf = base_pf
        if base_rows and not is_host_proposer(algorithm):
            assumed.append(Assumption(kind="speculative prefill", fallback="", batch=batch, tokens=step_tokens,
                                      context_tokens=0,
                                      assumed_as="= the baseline's (the drafter's own prefill not counted)",
                                      measure_hint=_measure_requests()))
    outside = [rq.baseline_outside_s, rq.spec_outside_s] if rq is not None else [None, None]
    if outside[0] is None and outside[1] is None:
        assumed.append(Assumption(kind="time outside the engine's steps", fallback="", batch=batch, tokens=0,
                                  context_tokens=0, assumed_as="0 s per request (no /metrics kept)",
                                  measure_hint=_measure_requests()))
        base_out = spec_out = 0.0
    else:
        # one front end serves both servers' requests the same way: a side that lacks it takes the other's
        base_out = outside[0] if outside[0] is not None else float(outside[1] or 0.0)
        spec_out = outside[1] if outside[1] is not None else base_out
    d_base = (request_tokens - 1) * batch / baseline_tokens_per_s
    # every request of the round waits for its own front end; concurrent requests overlap theirs
    f_base, f_spec = base_pf + base_out, spec_pf + spec_out

    def g(s: float) -> float:
        return request_speedup(s, fixed_base_s=f_base, fixed_spec_s=f_spec, decode_base_s=d_base)

    sp = g(decode_speedup)
    spec_decode = d_base / decode_speedup if decode_speedup > 0 else math.inf
    return RequestPrice(
        request_tokens=request_tokens, prompt_tokens=p_tokens, prompt_source=p_source, base_prefill_s=base_pf,
        spec_prefill_s=spec_pf, base_outside_s=base_out, spec_outside_s=spec_out, base_decode_s=d_base,
        spec_decode_s=spec_decode, baseline_tokens_per_s=batch * request_tokens / (f_base + d_base),
        tokens_per_s=batch * request_tokens / (f_spec + spec_decode) if math.isfinite(spec_decode) else 0.0,
        speedup=sp, speedup_low=g(decode_speedup_low), speedup_high=g(decode_speedup_high),
        decode_speedup_needed=decode_speedup_needed(fixed_base_s=f_base, fixed_spec_s=f_spec, decode_base_s=d_base),
        assumed=tuple(assumed), extrapolated=tuple(extrap))
