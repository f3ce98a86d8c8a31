"""One operating point to predict, and the prediction itself: the domain layer under both the
``predict``/``report``/``plan`` commands (flags → :class:`Scenario`) and the Python API
(:mod:`specmodel.api`, arguments → :class:`Scenario`). Both end in :func:`run_prediction`, so a
notebook and the command line cannot disagree.

No click and no pandas here: this is on ``predict``'s cold path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_CONTEXT_TOKENS
from specmodel.model import accept as acc
from specmodel.model.calibrate import Observation, parse_observation
from specmodel.model.predict import Prediction, predict
from specmodel.schema.profile import Profile, SpecConfig

REFERENCE_PROFILE = "kimi-k2.5-int4-tp8-pcie"


def reference_profile_path() -> Path:
    """The shipped reference profile (package data; ``profiles/`` links to it in the repo): Kimi-K2.5
    INT4 on 8x RTX PRO 6000 over PCIe, derived from a published write-up, not measured by this tool."""
    return Path(__file__).resolve().parent / "reference" / REFERENCE_PROFILE / "profile.json"


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything the model needs for one prediction, resolved from flags or API arguments."""

    profile: Profile
    dist: acc.AcceptDist
    spec: SpecConfig
    batch: int
    generation_tokens: int
    observation: Observation | None
    notes: tuple[str, ...]
    per_position: tuple[float, ...] | None = None  # kept for the optimizer's extrapolation
    context_tokens: int | None = None  # --context; None = the profile's smallest measured context


def run_prediction(sc: Scenario) -> Prediction:
    """The one prediction behind ``specmodel predict``, ``report`` and :func:`specmodel.predict`."""
    return predict(sc.profile, sc.dist, batch=sc.batch, spec=sc.spec, generation_tokens=sc.generation_tokens,
                   observation=sc.observation, context_tokens=sc.context_tokens)


def resolve_spec(base: SpecConfig, steps: int | None, topk: int | None, ndt: int | None) -> SpecConfig:
    """``base`` with the overrides given; ``num_draft_tokens`` follows steps/topk unless given
    (steps + 1 for a chain, else the base's, capped at the tree's size)."""
    for name, v in (("--steps", steps), ("--topk", topk), ("--num-draft-tokens", ndt)):
        if v is not None and v < 1:
            raise SpecmodelError(f"{name}: must be >= 1, got {v}")
    s = steps if steps is not None else base.steps
    k = topk if topk is not None else base.topk
    if ndt is None:
        ndt = s + 1 if k == 1 else min(base.num_draft_tokens, s * k + 1)
        if steps is None and topk is None:
            ndt = base.num_draft_tokens
    return SpecConfig(algorithm=base.algorithm, steps=s, topk=k, num_draft_tokens=ndt)


def accept_dist(accept: float | Mapping[int, float] | acc.AcceptDist, *, max_tokens: int,
                convention: str = "tokens", shape: str = "geometric") -> acc.AcceptDist:
    """An accept length given as a mean (``--accept-len``), a histogram ``{value: count}``
    (``--accept-hist``) or a distribution already built, on 1..``max_tokens`` tokens/step.

    ``convention``: ``tokens`` = tokens per verify step including the bonus token (SGLang
    ``accept len``, vLLM ``Mean acceptance length``); ``drafts`` = accepted drafts only (one less).
    ``shape`` is assumed around a bare mean (see :func:`specmodel.model.accept.from_mean`).
    """
    if isinstance(accept, acc.AcceptDist):
        return accept
    if isinstance(accept, Mapping):
        return acc.from_histogram(accept, convention=convention, max_tokens=max_tokens)
    if isinstance(accept, bool) or not isinstance(accept, (int, float)):
        raise SpecmodelError(f"accept: expected a mean accept length, a histogram {{value: count}} or an AcceptDist, "
                             f"got {type(accept).__name__}")
    return acc.from_mean(accept, max_tokens, convention=convention, shape=shape,
                         source=f"mean {accept:g} ({convention})")


def observation(point: Observation | str | tuple[float, ...] | None) -> Observation | None:
    """A calibration point as ``--calibrate`` takes it: ``"1,2.0,60"`` / ``(1, 2.0, 60)`` =
    (batch, accept tokens/step, total tok/s), or with a context: (batch, context, accept, tok/s)."""
    if point is None or isinstance(point, Observation):
        return point
    text = point if isinstance(point, str) else ",".join(str(v) for v in point)
    return parse_observation(text)


_TOKEN_SUFFIX = {"k": 1024, "m": 1024 * 1024}


def parse_tokens(text: str | int, flag: str, maximum: int = MAX_CONTEXT_TOKENS) -> int:
    """A token count: ``32768``, ``32K`` or ``1M`` (K = 1024, as context lengths are quoted), at most ``maximum``."""
    t = str(text).strip().lower().replace("_", "")
    mult = 1
    if t and t[-1] in _TOKEN_SUFFIX:
        mult, t = _TOKEN_SUFFIX[t[-1]], t[:-1]
    try:
        v = int(t) * mult
    except ValueError:
        raise SpecmodelError(f"{flag}: expected a token count like 32768 or 32K, got {text!r}") from None
    if v < 0:
        raise SpecmodelError(f"{flag}: must be >= 0 tokens, got {text!r}")
    if v > maximum:
        raise SpecmodelError(f"{flag}: must be <= {maximum}, got {str(text)[:40]!r}")
    return v


def parse_token_list(text: str, flag: str, maximum: int = MAX_CONTEXT_TOKENS) -> list[int]:
    """``1,4,16`` / ``0,4K,32K`` → sorted unique token counts."""
    vals = sorted({parse_tokens(x, flag, maximum) for x in text.split(",") if x.strip()})
    if not vals:
        raise SpecmodelError(f"{flag}: expected a comma-separated list, got {text!r}")
    return vals


def scenario(profile: Profile, accept: Any, *, batch: int = 1, context: int | str | None = None,
             steps: int | None = None, topk: int | None = None, num_draft_tokens: int | None = None,
             convention: str = "tokens", shape: str = "geometric",
             calibrate: Observation | str | tuple[float, ...] | None = None,
             generation_tokens: int = 256, notes: tuple[str, ...] = ()) -> Scenario:
    """A :class:`Scenario` from plain arguments (what :func:`specmodel.predict` takes)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise SpecmodelError(f"batch: must be an integer >= 1, got {batch!r}")
    if isinstance(generation_tokens, bool) or not isinstance(generation_tokens, int) or generation_tokens < 1:
        raise SpecmodelError(f"generation_tokens: must be an integer >= 1, got {generation_tokens!r}")
    spec = resolve_spec(profile.spec, steps, topk, num_draft_tokens)
    if profile.spec != spec:
        profile = replace(profile, spec=spec)
    dist = accept_dist(accept, max_tokens=spec.max_accept_tokens, convention=convention, shape=shape)
    ctx = parse_tokens(context, "context") if context is not None else None
    return Scenario(profile=profile, dist=dist, spec=spec, batch=batch, generation_tokens=generation_tokens,
                    observation=observation(calibrate), notes=notes, context_tokens=ctx)
