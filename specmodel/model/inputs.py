"""The two records :func:`specmodel.model.predict.predict` takes besides the profile: the operating
point (what is asked: batch, context, speculative configuration, ...) and the acceptance (what the
drafter achieves, with what its source measured beside it). Each is built once -- from flags or API
arguments by :mod:`specmodel.scenario`, or directly by a caller of the model -- and passed whole."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmodel.errors import FieldError
from specmodel.model.accept import AcceptByContext, AcceptDist
from specmodel.model.calibrate import Observation
from specmodel.schema.costrows import SpecConfig

DEFAULT_GENERATION_TOKENS = 256


@dataclass(frozen=True, kw_only=True)
class OperatingPoint:
    """One operating point to price: ``batch`` requests, each over ``context_tokens`` of KV (None:
    the profile's smallest measured context), drafting with ``spec`` (None: the profile's).

    ``generation_tokens``: the tokens the band and P(speedup > 1) are over. ``observation``: one
    observed point to calibrate the per-cycle overhead on. ``proposal_rate``: host proposers only, the
    share of request-steps that proposed, as given (None: the acceptance source's measurement, else
    every step). ``request_tokens`` / ``prompt_tokens``: price a request end to end.
    ``foreign_costs``: why the profile's costs are another box's than the server the inputs name
    ("" = nothing says so)."""

    batch: int = 1
    spec: SpecConfig | None = None
    context_tokens: float | None = None
    generation_tokens: int = DEFAULT_GENERATION_TOKENS
    observation: Observation | None = None
    proposal_rate: float | None = None
    request_tokens: int | None = None
    prompt_tokens: int | None = None
    foreign_costs: str = ""

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise FieldError("batch", f"must be >= 1, got {self.batch}")


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """One accept-length source, resolved: the distribution (its ``source`` and ``convention`` say
    where it came from) and what the same source measured beside it.

    ``per_position``: the conditional rates it was given or measured as (the optimizer extrapolates
    from them). ``by_context``: acceptance per context band, when a log measured it. ``proposal_rate``
    / ``proposal_rate_source``: drafts per request-step as the source measured it (None: not measured).
    ``window_drift_rel``: the drift of tokens per request-step between a log's windows (relative; 0:
    not measured), carried into the band and P. ``notes`` / ``warnings``: what resolving it assumed,
    and what is wrong with the input itself (printed before the prediction's own warnings)."""

    dist: AcceptDist
    per_position: tuple[float, ...] | None = None
    by_context: AcceptByContext | None = None
    proposal_rate: float | None = None
    proposal_rate_source: str = ""
    window_drift_rel: float = 0.0
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not math.isfinite(self.window_drift_rel) or self.window_drift_rel < 0:
            raise FieldError("window_drift_rel", f"must be a finite number >= 0, got {self.window_drift_rel!r}")

    @classmethod
    def of(cls, accept: Acceptance | AcceptDist) -> Acceptance:
        """``accept`` as a record (a bare distribution: nothing measured beside it)."""
        return accept if isinstance(accept, Acceptance) else cls(dist=accept)
