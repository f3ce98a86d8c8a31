"""Every input of one operating point as a user gives it (flags or API arguments), each checked
against its bound: :class:`ScenarioArgs`, and the tables the command line is generated from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from specmodel.errors import FieldError, require_finite
from specmodel.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_GEN_TOKENS,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
)
from specmodel.model import accept as acc
from specmodel.model.calibrate import Observation
from specmodel.model.inputs import DEFAULT_GENERATION_TOKENS
from specmodel.scenario.parse import observation, parse_float_list, parse_tokens
from specmodel.schema.phases import SPEC_METHODS, canonical_method
from specmodel.schema.profile import Profile

#: every bounded operating-point input: field -> (minimum, maximum), inclusive. The click options
#: are generated from it (commands/scenario.py), so the CLI and the API refuse the same values.
BOUNDS: dict[str, tuple[float, float]] = {
    "batch": (1, MAX_BATCH),
    "context": (0, MAX_CONTEXT_TOKENS),
    "steps": (1, MAX_STEPS),
    "topk": (1, MAX_TOPK),
    "num_draft_tokens": (2, MAX_DRAFT_TOKENS),
    "tp": (1, MAX_TP),
    "generation_tokens": (1, MAX_GEN_TOKENS),
    # (the upper bound of a mean accept length is steps + 1: checked where steps is known)
    "accept_len": (0.0, MAX_STEPS + 1),
    "alpha": (0.0, 1.0),
    # bounded both ways: 1e308 ms or 1e-300 ms is a typo, and plots of it are NaN axes
    "baseline_tps": (1e-3, 1e9),
    "verify_ms": (1e-3, 1e6),
    "draft_ms": (1e-3, 1e6),
    "overhead_ms": (0.0, 1e6),
    "allreduce_frac": (0.0, 1.0),
    # (0: the lookup ran on every step and never matched, a measured slowdown)
    "proposal_rate": (0.0, 1.0),
    "request_tokens": (1, MAX_GEN_TOKENS),
    "prompt_tokens": (1, MAX_CONTEXT_TOKENS),
}
INT_FIELDS = ("batch", "context", "steps", "topk", "num_draft_tokens", "tp", "generation_tokens", "request_tokens",
              "prompt_tokens")
#: the accept-length sources: exactly one per prediction
ACCEPT_SOURCES = ("accept_len", "accept_hist", "accept_dist", "per_position", "alpha", "accept_logs")
CONVENTIONS = ("tokens", "drafts")
SHAPES = ("geometric", "point")


@dataclass(frozen=True, kw_only=True)
class ScenarioArgs:
    """Every input of one operating point, as a user gives it (flags or API arguments), each
    checked against its bound (:data:`BOUNDS`) here. :func:`~specmodel.scenario.resolve.resolve_scenario`
    turns it into a :class:`~specmodel.scenario.resolve.Scenario`; ``specmodel predict`` fills it from
    click, :func:`specmodel.predict` from its arguments. Unset = None (the profile's value, or the
    documented default).

    ``context`` may be given as ``"32K"`` and ``per_position`` as ``"0.8,0.6"``: both are stored
    parsed. ``accept_hist`` is a ``{value: count}`` mapping or the ``--accept-hist`` text/file.
    """

    profile: Profile | str | Path | None = None  # None: the one measured profile in ./profiles, else the reference
    accept_len: float | None = None
    accept_hist: Mapping[int, float] | str | None = None
    accept_dist: acc.AcceptDist | None = None
    per_position: tuple[float, ...] | str | None = None
    alpha: float | None = None
    accept_logs: tuple[str, ...] = ()
    convention: str = "tokens"
    shape: str = "geometric"
    batch: int = 1
    context: int | str | None = None
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    baseline_tps: float | None = None
    verify_ms: float | None = None
    draft_ms: float | None = None
    overhead_ms: float | None = None
    allreduce_frac: float | None = None
    tp: int | None = None
    baseline_sweep: str | None = None
    calibrate: Observation | str | tuple[float, ...] | None = None
    generation_tokens: int = DEFAULT_GENERATION_TOKENS
    allreduce_fit: str | None = None
    #: host proposers (ngram, suffix): share of request-steps in which the lookup proposed
    proposal_rate: float | None = None
    #: the drafter kind to price (``--method``), when it is not the one the profile measured
    method: str | None = None
    #: output tokens per request: price each request end to end (prefill + time outside the engine)
    request_tokens: int | None = None
    #: prompt tokens per request for that price (default: the profiled prompt length)
    prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens is not None and self.request_tokens is None:
            raise FieldError("prompt_tokens", "prices a request end to end: give its output length "
                                              "({request_tokens}) too")
        if self.method is not None:
            m = canonical_method(self.method)
            if m is None:
                raise FieldError("method", f"unknown {str(self.method)[:40]!r} (expected one of "
                                           f"{', '.join(SPEC_METHODS)})")
            object.__setattr__(self, "method", m)
        if isinstance(self.context, str):
            object.__setattr__(self, "context", parse_tokens(self.context, "context"))
        if isinstance(self.per_position, str):
            object.__setattr__(self, "per_position", tuple(parse_float_list(self.per_position, "per_position")))
        if self.calibrate is not None and not isinstance(self.calibrate, Observation):
            object.__setattr__(self, "calibrate", observation(self.calibrate))
        object.__setattr__(self, "accept_logs", tuple(str(p) for p in self.accept_logs))
        for name, (lo, hi) in BOUNDS.items():
            v = getattr(self, name)
            if v is None:
                continue
            if name in INT_FIELDS:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise FieldError(name, f"must be an integer, got {v!r}")
                if not lo <= v <= hi:
                    raise FieldError(name, f"must be in {int(lo)}..{int(hi)}, got {v}")
            else:
                require_finite(name, v, minimum=lo, maximum=hi)
        if self.convention not in CONVENTIONS:
            raise FieldError("convention", f"unknown {self.convention!r} (expected tokens or drafts)")
        if self.shape not in SHAPES:
            raise FieldError("shape", f"unknown {self.shape!r} (expected geometric or point)")
        given = self.accept_sources()
        if len(given) > 1:
            raise FieldError(None, "give one accept-length source, got " + ", ".join("{" + g + "}" for g in given))
        if self.profile is not None and self.baseline_sweep:
            # either one is the cost table; silently preferring one would misread the other
            raise FieldError("baseline_sweep", "give either {profile} or {baseline_sweep}, not both")

    def accept_sources(self) -> tuple[str, ...]:
        """The accept-length sources given (at most one after validation)."""
        return tuple(n for n in ACCEPT_SOURCES if getattr(self, n) not in (None, (), []))

    @property
    def plain_numbers(self) -> bool:
        """Costs given as numbers (``--baseline-tps``, ``--verify-ms``, ``--draft-ms``, ``--overhead-ms``)."""
        return any(getattr(self, k) is not None for k in ("baseline_tps", "verify_ms", "draft_ms", "overhead_ms"))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
