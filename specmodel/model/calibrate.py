"""Calibration from one observed speculative point (e.g. a server log window)."""

from __future__ import annotations

from dataclasses import dataclass

from specmodel.errors import SpecmodelError


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One measured speculative operating point: B requests, E[A] tokens/step, tok/s total."""

    batch: int
    accept_tokens: float
    tokens_per_s: float

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise SpecmodelError(f"--calibrate: batch must be >= 1, got {self.batch}")
        if not self.accept_tokens >= 1.0:
            raise SpecmodelError(f"--calibrate: accept length must be >= 1 token/step, got {self.accept_tokens}")
        if not self.tokens_per_s > 0:
            raise SpecmodelError(f"--calibrate: tok/s must be > 0, got {self.tokens_per_s}")

    @property
    def cycle_s(self) -> float:
        """Observed T_cycle = B × E[A] / tok/s (the throughput equation solved for the cycle)."""
        return self.batch * self.accept_tokens / self.tokens_per_s


def unseen_cycle_s(obs: Observation, modelled_cycle_s: float) -> float:
    """The cost the model does not see: T_cycle(observed) − T_cycle(modelled).

    Carried into every other prediction as per-cycle overhead (it is dominated by the
    scheduler, tree building and draft work the profile missed, none of which scale much
    with accept length). Negative means the profile over-estimates the cycle: reported so
    the user can see the profile does not match the server; it is clamped at the caller.
    """
    return obs.cycle_s - modelled_cycle_s


def parse_observation(text: str) -> Observation:
    """Parse ``BATCH,ACCEPT_LEN,TOKENS_PER_S`` (accept length in tokens/step incl. bonus)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise SpecmodelError(f"--calibrate: expected BATCH,ACCEPT_LEN,TOKENS_PER_S, got {text!r}")
    try:
        b = int(parts[0])
        a = float(parts[1])
        t = float(parts[2])
    except ValueError:
        raise SpecmodelError(f"--calibrate: expected BATCH,ACCEPT_LEN,TOKENS_PER_S numbers, got {text!r}") from None
    return Observation(batch=b, accept_tokens=a, tokens_per_s=t)
