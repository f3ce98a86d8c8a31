"""Predicted vs observed tok/s, window by window of a server log (``specmodel validate``): each
window is predicted at its own batch, context and accept length with the profile's costs."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

from specmodel.engines.logs import DecodeWindow, EngineConfig, window_skip_reason
from specmodel.errors import FieldError, SpecmodelError
from specmodel.limits import MAX_BATCH, MIN_BUSY_FRACTION, ROUND_SLACK
from specmodel.model.accept import from_mean
from specmodel.model.calibrate import Observation
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.model.prediction import Prediction
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import Profile


@dataclass(frozen=True, kw_only=True)
class WindowResult:
    window: DecodeWindow
    spec: SpecConfig | None  # None: a baseline (non-speculative) window
    predicted_tokens_per_s: float
    calibration: bool = False
    extrapolated: tuple[str, ...] = ()  # labels of cost axes outside the measured range at this window
    assumed: tuple[str, ...] = ()  # labels of costs read off a fallback curve (CycleCosts.assumptions)
    #: contradictions among the costs this window was predicted from (model/consistency.py, "refuse")
    inconsistent: tuple[str, ...] = ()

    @property
    def error(self) -> float:
        """(predicted − observed) / observed."""
        return (self.predicted_tokens_per_s - self.window.tokens_per_s) / self.window.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        d = self.window.to_dict()
        d.update(predicted_tokens_per_s=self.predicted_tokens_per_s, observed_tokens_per_s=self.window.tokens_per_s,
                 error=self.error, calibration=self.calibration, extrapolated=list(self.extrapolated),
                 assumed=list(self.assumed), inconsistent=list(self.inconsistent),
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
        return predict(profile, from_mean(1.0, profile.spec.max_accept_tokens), OperatingPoint(batch=w.batch,
                                                                                               spec=profile.spec,
                                                                                               context_tokens=ctx))
    k = spec.max_accept_tokens
    a = float(w.accept_len or 1.0)
    if a > k + ROUND_SLACK:
        raise FieldError(None, f"{w.where}: accept len {a:.2f} exceeds steps + 1 = {k} for {{steps}} {spec.steps}; "
                               "pass the {steps} the server ran with (--speculative-num-steps)")
    dist = from_mean(min(max(a, 1.0), float(k)), k, source=w.where)
    return predict(profile, dist, OperatingPoint(batch=w.batch, spec=spec, observation=obs, context_tokens=ctx))


MOSTLY_IDLE = f"mostly idle: tok/s < {MIN_BUSY_FRACTION:.0%} of the busiest window at its #running-req"


def busy_fractions(windows: list[DecodeWindow]) -> list[float]:
    """Each window's busy fraction as the engine's own numbers show it: its tok/s over the busiest
    window's at the same #running-req, in the same file and configuration.

    Why: an engine logs a window's mean tok/s over the whole interval (vLLM: tokens / 10 s,
    loggers.py; SGLang: since its last decode line), but #running-req at one instant. A window in
    which the requests arrived late or finished early spent part of its interval idle; at a fixed
    batch a busy step emits the same tokens per second, so the shortfall is the idle share."""
    best: dict[tuple[str, int, Any], float] = {}
    for w in windows:
        key = (w.file, w.batch, (w.steps, w.topk, w.num_draft_tokens))
        best[key] = max(best.get(key, 0.0), w.tokens_per_s)
    return [w.tokens_per_s / best[(w.file, w.batch, (w.steps, w.topk, w.num_draft_tokens))]
            if best[(w.file, w.batch, (w.steps, w.topk, w.num_draft_tokens))] > 0 else 0.0 for w in windows]


def validate_windows(profile: Profile, spec: SpecConfig, windows: list[DecodeWindow], *,
                     calibrate_first: bool = False) -> tuple[list[WindowResult], dict[str, int], list[str]]:
    """Predict every usable window; return results, skip counts by reason, and unique warnings."""
    skipped: dict[str, int] = {}
    warnings: list[str] = []
    results: list[WindowResult] = []
    obs: Observation | None = None
    obs_spec: SpecConfig | None = None
    usable = [w for w in windows if w.batch <= MAX_BATCH and not window_skip_reason(w)]
    busy = dict(zip((id(w) for w in usable), busy_fractions(usable), strict=True))
    for w in windows:
        if w.batch > MAX_BATCH:
            raise SpecmodelError(f"{w.where}: batch {w.batch} is more than {MAX_BATCH} (the bound specmodel accepts)")
        reason = window_skip_reason(w)  # the rule `accept` applies too (idle windows measure nothing)
        if not reason and busy[id(w)] < MIN_BUSY_FRACTION:
            reason = MOSTLY_IDLE
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
            results.append(WindowResult(window=w, spec=sp, predicted_tokens_per_s=p.figures.tokens_per_s, calibration=True))
            continue
        p = _predict(profile, w, sp, obs if sp == obs_spec else None)
        for msg in p.outcome.warnings:
            # per-window extrapolation is counted once below, not repeated per context
            if msg not in warnings and _EXTRAPOLATED not in msg and not msg.startswith("calibration point:"):
                warnings.append(msg)
        pred = p.figures.tokens_per_s if sp is not None else p.figures.baseline_tokens_per_s
        # a baseline window's prediction uses the decode step only: no verify to assume
        assumed = tuple(dict.fromkeys(a.label for a in p.outcome.assumed)) if sp is not None else ()
        bad = tuple(dict.fromkeys(i.message for i in p.outcome.inconsistencies if i.refuses)) if sp is not None else ()
        results.append(WindowResult(window=w, spec=sp, predicted_tokens_per_s=pred,
                                    extrapolated=tuple(dict.fromkeys(e.label for e in p.outcome.extrapolated)),
                                    assumed=assumed, inconsistent=bad))
    n_ext = sum(1 for r in results if r.extrapolated)
    if n_ext:
        axes = sorted({lab.split(" ")[0] for r in results for lab in r.extrapolated})
        warnings.append(f"{n_ext} of {len(results)} windows were predicted outside the profile's measured range "
                        f"({', '.join(axes)}); their errors include extrapolation")
    n_asm = sum(1 for r in results if r.assumed)
    if n_asm:
        warnings.append(f"{n_asm} of {len(results)} windows were predicted from a verify cost the profile never "
                        "measured (assumed = the decode curve at the same tokens); their errors test that "
                        "assumption, not the measured model")
    bad_windows = [r for r in results if r.inconsistent]
    if bad_windows:
        warnings.append(f"{len(bad_windows)} of {len(results)} windows were predicted from costs that contradict each "
                        f"other ({bad_windows[0].inconsistent[0]}); their errors are left out of the measured-range "
                        "error")
    return results, skipped, warnings


_EXTRAPOLATED = "extrapolated beyond the measured range"


def summary(results: list[WindowResult]) -> dict[str, Any]:
    compared = [r for r in results if not r.calibration]
    errs = [r.error for r in compared]
    inside = [abs(r.error) for r in compared if not r.extrapolated and not r.assumed and not r.inconsistent]
    return {
        "windows_compared": len(compared),
        "windows_extrapolated": sum(1 for r in compared if r.extrapolated),
        "windows_assumed": sum(1 for r in compared if r.assumed),
        "windows_inconsistent": sum(1 for r in compared if r.inconsistent),
        "median_abs_error_measured_range": statistics.median(inside) if inside else None,
        "median_abs_error": statistics.median(abs(e) for e in errs) if errs else None,
        "mean_error": statistics.fmean(errs) if errs else None,
        "max_abs_error": max(abs(e) for e in errs) if errs else None,
    }


def _model_key(name: str) -> str:
    """``moonshotai/Kimi-K2.5`` → ``kimik25``: the model's own name, org and punctuation dropped."""
    return re.sub(r"[^a-z0-9]", "", name.rsplit("/", 1)[-1].lower())


def profile_device(profile: Profile) -> str | None:
    """Where the profile's costs were measured: "cuda", "cpu", or None when it does not say.

    The collective backend says it for measured profiles (gloo = CPU ranks, nccl = GPUs); else the
    hardware block (a GPU name = a GPU box)."""
    if profile.backend == "gloo":
        return "cpu"
    if profile.backend == "nccl" or profile.hardware.get("gpu_name"):
        return "cuda"
    if profile.hardware.get("cpu_name") and not profile.hardware.get("gpu_count"):
        return "cpu"
    return None


def check_log_model_matches_profile(cfg: EngineConfig, profile: Profile, *, use: str) -> None:
    """A log of another model than the profile's is refused (its acceptance and its tok/s belong to
    another target): the model names must match once org prefix, case and punctuation are dropped
    (one may extend the other: ``Kimi-K2.5`` vs ``Kimi-K2.5 INT4``)."""
    pname = str(profile.model.get("name") or "")
    if cfg.model and pname:
        a, b = _model_key(cfg.model), _model_key(pname)
        if a and b and a not in b and b not in a:
            raise SpecmodelError(f"{cfg.where}: the server ran model {cfg.model!r} but profile {profile.name} is "
                                 f"{pname!r}; {use}")


def check_log_matches_profile(cfg: EngineConfig, profile: Profile) -> None:
    """Comparing a log with a profile of another model, TP degree or device validates nothing: refuse.

    TP must be equal; the model must match (:func:`check_log_model_matches_profile`); a log of a
    GPU server against a profile measured on CPU ranks (or the reverse) compares two machines.
    """
    if cfg.tp is not None and cfg.tp != profile.tp:
        raise SpecmodelError(f"{cfg.where}: the server ran TP {cfg.tp} but profile {profile.name} is TP {profile.tp}; "
                             "validate against a profile of the same box and TP degree")
    check_log_model_matches_profile(cfg, profile, use="validate against a profile of the same model")
    pdev = profile_device(profile)
    if cfg.device is not None and pdev is not None and cfg.device != pdev:
        names = {"cuda": "GPU", "cpu": "CPU"}
        raise SpecmodelError(f"{cfg.where}: the server ran on {names.get(cfg.device, cfg.device)} but profile "
                             f"{profile.name} was measured on {names.get(pdev, pdev)} ({profile.label}); "
                             "validate against a profile measured on the server's own box")
