"""Calibration from one observed speculative point (e.g. a server log window).

What is assumed constant: the *unseen* per-cycle cost u = T_cycle(observed) − T_cycle(modelled),
found at the observed (batch B₀, context L₀), is carried unchanged (in seconds per cycle) to
every other (batch, context, steps, topk) the model predicts. Everything that does scale with
batch and context (decode, verify and draft forwards) stays on the profile's measured surfaces
T_fwd(tokens, L); u only covers what the profile cannot see (scheduler, tree building, sampling,
an unmeasured drafter), which is dominated by per-cycle fixed work. The observation's accept
length is the one the server logged at that point; it is not carried to other points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmodel.errors import FieldError
from specmodel.limits import MAX_BATCH, MAX_CONTEXT_TOKENS, MAX_STEPS, ROUND_SLACK
from specmodel.model.costs import Extrapolation
from specmodel.model.cycle import Assumption
from specmodel.units import ms

#: an observed cycle shorter than this share of the modelled forwards (verify + draft, no
#: overhead) is not noise between a profile and a server: the point or the profile is wrong
MIN_PLAUSIBLE_CYCLE_FRAC = 0.5
#: logged accept lengths carry 2 decimals: steps + 1 may be exceeded by rounding only


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One measured speculative operating point: B requests at L tokens of KV each, E[A]
    tokens/step, tok/s in total over the B requests (not per request).

    ``context_tokens`` None = the prediction's context (the old 3-field form).
    """

    batch: int
    accept_tokens: float
    tokens_per_s: float
    context_tokens: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or not 1 <= self.batch <= MAX_BATCH:
            raise FieldError("calibrate", f"batch must be an integer in 1..{MAX_BATCH}, got {self.batch}")
        if self.context_tokens is not None and self.context_tokens < 0:
            raise FieldError("calibrate", f"context must be >= 0 tokens, got {self.context_tokens}")
        if self.context_tokens is not None and self.context_tokens > MAX_CONTEXT_TOKENS:
            raise FieldError("calibrate", f"context must be <= {MAX_CONTEXT_TOKENS} tokens, got {self.context_tokens}")
        if not math.isfinite(self.accept_tokens) or not 1.0 <= self.accept_tokens <= MAX_STEPS + 1 + ROUND_SLACK:
            raise FieldError("calibrate", f"accept length must be a finite number of tokens/step in "
                                 f"1..{MAX_STEPS + 1}, got {self.accept_tokens}")
        if not math.isfinite(self.tokens_per_s) or not self.tokens_per_s > 0:
            raise FieldError("calibrate", f"tok/s must be a finite number > 0, got {self.tokens_per_s}")

    @property
    def cycle_s(self) -> float:
        """Observed T_cycle = B × E[A] / tok/s (total) — the throughput equation solved for the cycle."""
        return self.batch * self.accept_tokens / self.tokens_per_s

    @property
    def tokens_per_s_per_request(self) -> float:
        return self.tokens_per_s / self.batch


def unseen_cycle_s(obs: Observation, modelled_cycle_s: float) -> float:
    """The cost the model does not see: T_cycle(observed) − T_cycle(modelled).

    Carried into every other prediction as per-cycle overhead (it is dominated by the
    scheduler, tree building and draft work the profile missed, none of which scale much
    with accept length, batch or context; see the module docstring). Negative means the
    profile over-estimates the cycle: reported so the user can see the profile does not
    match the server; it is clamped at the caller.
    """
    return obs.cycle_s - modelled_cycle_s


#: an observed cycle this many times the modelled one is worth a second look (see :func:`looks_per_request`)
SUSPECT_CYCLE_RATIO = 2.0


def looks_per_request(obs: Observation, modelled_cycle_s: float) -> str | None:
    """A warning when the point's tok/s reads like ONE request's rate, not the total over B.

    Total tok/s = B × E[A] / T_cycle, so a per-request figure passed as the total makes the
    observed cycle B times too long. Suspect when B > 1, the observed cycle is at least
    :data:`SUSPECT_CYCLE_RATIO` × the modelled one, and reading the figure as per request
    (cycle / B) lands nearer the model than reading it as the total: r = T_obs / T_model,
    |ln(r / B)| < |ln r|. Not refused: a server can be that slow; the user is told which figure
    would be total (B × tok/s).
    """
    if obs.batch <= 1 or modelled_cycle_s <= 0:
        return None
    r = obs.cycle_s / modelled_cycle_s
    if r < SUSPECT_CYCLE_RATIO or abs(math.log(r / obs.batch)) >= abs(math.log(r)):
        return None
    total = obs.tokens_per_s * obs.batch
    return (f"calibration: {obs.tokens_per_s:g} tok/s at batch {obs.batch} means a {ms(obs.cycle_s)} cycle, "
            f"{r:.1f}x the modelled {ms(modelled_cycle_s)}; tok/s is the TOTAL over the batch: if "
            f"{obs.tokens_per_s:g} is one request's rate, the total is {total:g} tok/s "
            f"({obs.batch} x {obs.tokens_per_s:g}), which gives a {ms(obs.cycle_s / obs.batch)} cycle")


_FORMS = "BATCH,ACCEPT_LEN,TOKENS_PER_S or BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S"


def check_observation(obs: Observation, *, max_accept_tokens: int, modelled_forward_s: float) -> None:
    """Refuse an observed point the model cannot be calibrated on (SpecmodelError naming it).

    * accept length above steps + 1 (``max_accept_tokens``): no verify emits more than every
      draft plus the bonus token;
    * an observed cycle (B × E[A] / tok/s) shorter than :data:`MIN_PLAUSIBLE_CYCLE_FRAC` of the
      modelled forwards alone: the per-cycle overhead would have to be negative by more than
      any profile/server mismatch (``1,2.0,1e9`` is a 2 ns cycle).
    """
    if obs.accept_tokens > max_accept_tokens + ROUND_SLACK:
        raise FieldError("calibrate", f"accept length {obs.accept_tokens:g} exceeds steps + 1 = {max_accept_tokens} "
                             "(a verify emits at most every draft plus the bonus token); pass the {steps} it ran with")
    if modelled_forward_s > 0 and obs.cycle_s < MIN_PLAUSIBLE_CYCLE_FRAC * modelled_forward_s:
        raise FieldError("calibrate", f"{obs.tokens_per_s:g} tok/s at batch {obs.batch}, accept {obs.accept_tokens:g} means a "
            f"{ms(obs.cycle_s, 3)} cycle, less than {MIN_PLAUSIBLE_CYCLE_FRAC:.0%} of the profile's "
            f"{ms(modelled_forward_s, 3)} of forwards: the calibrated overhead would be negative (wrong point "
            "or wrong profile?)")


def parse_observation(text: str) -> Observation:
    """Parse ``BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S`` or the older ``BATCH,ACCEPT_LEN,TOKENS_PER_S``.

    Accept length in tokens/step incl. the bonus token; tok/s is the total over all BATCH
    requests; CONTEXT is KV tokens per request (the 3-field form means the prediction's context).
    """
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4):
        raise FieldError("calibrate", f"expected {_FORMS}, got {text!r}")
    try:
        if len(parts[0]) > 12 or (len(parts) == 4 and len(parts[1]) > 12):
            raise ValueError(parts[0])
        b = int(parts[0])
        ctx = int(parts[1]) if len(parts) == 4 else None
        a = float(parts[-2])
        t = float(parts[-1])
    except ValueError:
        raise FieldError("calibrate", f"expected {_FORMS} (BATCH and CONTEXT integers), got {text!r}") from None
    return Observation(batch=b, accept_tokens=a, tokens_per_s=t, context_tokens=ctx)


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """One observed point folded into a profile (:func:`specmodel.model.cyclecost.calibrate`): the
    cycle modelled there and the one observed; their difference went into the per-cycle overhead."""

    observation: Observation
    modelled_cycle_s: float
    observed_cycle_s: float
    added_overhead_s: float
    context_tokens: float = 0.0
    extrapolated: tuple[Extrapolation, ...] = ()
    assumed: tuple[Assumption, ...] = ()
