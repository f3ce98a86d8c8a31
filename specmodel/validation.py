"""Predicted vs observed tok/s, window by window of a server log (``specmodel validate``): each
window is predicted at its own batch, context and accept length with the profile's costs."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

from specmodel.errors import FieldError, SpecmodelError
from specmodel.limits import MAX_BATCH, ROUND_SLACK
from specmodel.model.accept import from_mean
from specmodel.model.calibrate import Observation
from specmodel.model.predict import Prediction, predict
from specmodel.schema.profile import Profile, SpecConfig
from specmodel.trace.logs import DecodeWindow, EngineConfig


@dataclass(frozen=True, kw_only=True)
class WindowResult:
    window: DecodeWindow
    spec: SpecConfig | None  # None: a baseline (non-speculative) window
    predicted_tokens_per_s: float
    calibration: bool = False
    extrapolated: tuple[str, ...] = ()  # labels of cost axes outside the measured range at this window

    @property
    def error(self) -> float:
        """(predicted − observed) / observed."""
        return (self.predicted_tokens_per_s - self.window.tokens_per_s) / self.window.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        d = self.window.to_dict()
        d.update(predicted_tokens_per_s=self.predicted_tokens_per_s, observed_tokens_per_s=self.window.tokens_per_s,
                 error=self.error, calibration=self.calibration, extrapolated=list(self.extrapolated),
                 spec=self.spec.to_dict() if self.spec is not None else None)
        return d


def _spec_for(w: DecodeWindow, default: SpecConfig) -> SpecConfig | None:
    if w.steps is None:
        return default
    if w.steps == 0:
        return None
    try:
        return SpecConfig(algorithm=default.algorithm, steps=w.steps, topk=w.topk or 1,
                          num_draft_tokens=w.num_draft_tokens or w.steps + 1)
    except SpecmodelError as exc:
        raise SpecmodelError(f"{w.where}: {exc}") from None


def _predict(profile: Profile, w: DecodeWindow, spec: SpecConfig | None, obs: Observation | None) -> Prediction:
    """The window predicted at its own batch and, when the log says, its own context (KV tokens per request)."""
    ctx = w.context_tokens
    if spec is None:
        return predict(profile, from_mean(1.0, profile.spec.max_accept_tokens), batch=w.batch, spec=profile.spec,
                       context_tokens=ctx)
    k = spec.max_accept_tokens
    a = float(w.accept_len or 1.0)
    if a > k + ROUND_SLACK:
        raise FieldError(None, f"{w.where}: accept len {a:.2f} exceeds steps + 1 = {k} for {{steps}} {spec.steps}; "
                               "pass the {steps} the server ran with (--speculative-num-steps)")
    dist = from_mean(min(max(a, 1.0), float(k)), k, source=w.where)
    return predict(profile, dist, batch=w.batch, spec=spec, observation=obs, context_tokens=ctx)


def validate_windows(profile: Profile, spec: SpecConfig, windows: list[DecodeWindow], *,
                     calibrate_first: bool = False) -> tuple[list[WindowResult], dict[str, int], list[str]]:
    """Predict every usable window; return results, skip counts by reason, and unique warnings."""
    skipped: dict[str, int] = {}
    warnings: list[str] = []
    results: list[WindowResult] = []
    obs: Observation | None = None
    obs_spec: SpecConfig | None = None
    for w in windows:
        reason = None
        if w.batch > MAX_BATCH:
            raise SpecmodelError(f"{w.where}: batch {w.batch} is more than {MAX_BATCH} (the bound specmodel accepts)")
        if w.batch < 1:
            reason = "#running-req 0"
        elif w.tokens_per_s <= 0:
            reason = "throughput 0"
        elif w.accept_len is None and w.steps != 0:
            reason = "no accept length"
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        sp = _spec_for(w, spec)
        if calibrate_first and obs is None and sp is not None:
            obs = Observation(batch=w.batch, accept_tokens=max(float(w.accept_len or 1.0), 1.0),
                              tokens_per_s=w.tokens_per_s,
                              context_tokens=round(w.context_tokens) if w.context_tokens is not None else None)
            obs_spec = sp
            p = _predict(profile, w, sp, obs)
            results.append(WindowResult(window=w, spec=sp, predicted_tokens_per_s=p.tokens_per_s, calibration=True))
            continue
        p = _predict(profile, w, sp, obs if sp == obs_spec else None)
        for msg in p.warnings:
            # per-window extrapolation is counted once below, not repeated per context
            if msg not in warnings and _EXTRAPOLATED not in msg and not msg.startswith("calibration point:"):
                warnings.append(msg)
        pred = p.tokens_per_s if sp is not None else p.baseline_tokens_per_s
        results.append(WindowResult(window=w, spec=sp, predicted_tokens_per_s=pred,
                                    extrapolated=tuple(dict.fromkeys(e.label for e in p.extrapolated))))
    n_ext = sum(1 for r in results if r.extrapolated)
    if n_ext:
        axes = sorted({lab.split(" ")[0] for r in results for lab in r.extrapolated})
        warnings.append(f"{n_ext} of {len(results)} windows were predicted outside the profile's measured range "
                        f"({', '.join(axes)}); their errors include extrapolation")
    return results, skipped, warnings


_EXTRAPOLATED = "extrapolated beyond the measured range"


def summary(results: list[WindowResult]) -> dict[str, Any]:
    compared = [r for r in results if not r.calibration]
    errs = [r.error for r in compared]
    inside = [abs(r.error) for r in compared if not r.extrapolated]
    return {
        "windows_compared": len(compared),
        "windows_extrapolated": len(compared) - len(inside),
        "median_abs_error_measured_range": statistics.median(inside) if inside else None,
        "median_abs_error": statistics.median(abs(e) for e in errs) if errs else None,
        "mean_error": statistics.fmean(errs) if errs else None,
        "max_abs_error": max(abs(e) for e in errs) if errs else None,
    }


def _model_key(name: str) -> str:
    """``moonshotai/Kimi-K2.5`` → ``kimik25``: the model's own name, org and punctuation dropped."""
    return re.sub(r"[^a-z0-9]", "", name.rsplit("/", 1)[-1].lower())


def check_log_matches_profile(cfg: EngineConfig, profile: Profile) -> None:
    """Comparing a log with a profile of another model or TP degree validates nothing: refuse.

    TP must be equal; the model names must match once org prefix, case and punctuation are
    dropped (one may extend the other: ``Kimi-K2.5`` vs ``Kimi-K2.5 INT4``).
    """
    if cfg.tp is not None and cfg.tp != profile.tp:
        raise SpecmodelError(f"{cfg.where}: the server ran TP {cfg.tp} but profile {profile.name} is TP {profile.tp}; "
                             "validate against a profile of the same box and TP degree")
    pname = str(profile.model.get("name") or "")
    if cfg.model and pname:
        a, b = _model_key(cfg.model), _model_key(pname)
        if a and b and a not in b and b not in a:
            raise SpecmodelError(f"{cfg.where}: the server ran model {cfg.model!r} but profile {profile.name} is "
                                 f"{pname!r}; validate against a profile of the same model")
