"""``specmodel validate``: predicted vs observed tok/s for every window of a server log."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from typing import Any

import click

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_BATCH, MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK, bounded_int
from specmodel.model.accept import from_mean
from specmodel.model.calibrate import Observation
from specmodel.model.predict import Prediction, predict
from specmodel.scenario import resolve_scenario
from specmodel.schema.formats import VALIDATION
from specmodel.schema.profile import Profile, SpecConfig
from specmodel.trace.logs import DecodeWindow, EngineConfig, check_flag_against_log, logged_config, parse_log

_SLACK = 0.0051  # logged means carry 2 decimals


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
    if a > k + _SLACK:
        raise SpecmodelError(f"{w.where}: accept len {a:.2f} exceeds steps + 1 = {k} for --steps {spec.steps}; "
                             "pass the --steps the server ran with (--speculative-num-steps)")
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


@click.command("validate")
@click.argument("logs", nargs=-1, type=click.Path())
@click.option("--profile", "profile_path", type=click.Path(), default=None,
              help="profile.json or its directory (default: the one measured profile under ./profiles, else the shipped reference).")
@click.option("--steps", type=bounded_int(1, MAX_STEPS), default=None, help="Draft depth the server ran with (default: the profile's).")
@click.option("--topk", type=bounded_int(1, MAX_TOPK), default=None, help="Draft branching the server ran with (default: the profile's).")
@click.option("--num-draft-tokens", type=bounded_int(2, MAX_DRAFT_TOKENS), default=None, help="Tokens verified per request (default: as predict).")
@click.option("--calibrate-first", is_flag=True,
              help="Use the first window as the calibration point (its unseen cost carries to the rest).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def validate_cmd(logs: tuple[str, ...], profile_path: str | None, steps: int | None, topk: int | None,
                 num_draft_tokens: int | None, calibrate_first: bool, as_json: bool, **_: Any) -> None:
    """Predicted vs observed tok/s for each logged window (SGLang decode lines, vLLM stats, bench_speculative rows).

    Example: specmodel validate --profile profiles/mybox --steps 3 server.log
    """
    if not logs:
        raise SpecmodelError("give at least one server log (SGLang/vLLM) or bench_speculative JSONL")
    files = [parse_log(p) for p in logs]
    cfg = logged_config(files)
    if cfg is not None:
        steps = check_flag_against_log("--steps", steps, cfg.steps, cfg)
        topk = check_flag_against_log("--topk", topk, cfg.topk, cfg)
        num_draft_tokens = check_flag_against_log("--num-draft-tokens", num_draft_tokens, cfg.num_draft_tokens, cfg)
    sc = resolve_scenario(require_accept=False, profile_path=profile_path, steps=steps, topk=topk,
                          num_draft_tokens=num_draft_tokens)
    if cfg is not None:
        check_log_matches_profile(cfg, sc.profile)
    for f in files:
        if f.engine == "specmodel.accept":
            raise SpecmodelError(f"{f.path}: a saved accept distribution has no throughput windows; give the server log")
    windows = [w for f in files for w in f.windows]
    if not windows:
        raise SpecmodelError(f"{files[0].path}: no throughput windows (vLLM 'Avg generation throughput' lines are "
                             "needed next to 'SpecDecoding metrics')")
    results, skipped, warnings = validate_windows(sc.profile, sc.spec, windows, calibrate_first=calibrate_first)
    if not results:
        why = ", ".join(f"{n} {r}" for r, n in skipped.items())
        raise SpecmodelError(f"{files[0].path}: no usable window ({why})")
    summ = summary(results)
    if as_json:
        click.echo(json.dumps({**VALIDATION.header(), "profile": sc.profile.name, "profile_path": sc.profile.path,
                               "spec": sc.spec.to_dict(), "notes": list(sc.notes),
                               "files": [{"path": f.path, "engine": f.engine, "format": f.fmt} for f in files],
                               "windows": [r.to_dict() for r in results], "skipped": skipped,
                               "summary": summ, "warnings": warnings}, indent=2, allow_nan=False))
        return
    out = [f"note: {n}" for n in sc.notes]
    out.append(f"profile      {sc.profile.name} ({sc.profile.source_kind}) {sc.profile.path}; TP{sc.profile.tp}, "
               f"steps {sc.spec.steps}, topk {sc.spec.topk}, draft tokens {sc.spec.num_draft_tokens}")
    for f in files:
        out.append(f"file         {f.path}: {f.description}, {len(f.windows)} windows")
    out.append(f"{'window':<40} {'batch':>5} {'context':>8} {'accept':>6} {'observed':>10} {'predicted':>10} "
               f"{'error':>7}  (tok/s totals)")
    for r in results:
        w = r.window
        label = f"{w.file.rsplit('/', 1)[-1]}:{w.line}" + (f" {w.timestamp}" if w.timestamp else "")
        if r.spec is None:
            label += " (baseline)"
        elif w.steps is not None:
            label += f" (steps {r.spec.steps})"
        acc = f"{w.accept_len:.2f}" if w.accept_len is not None else "-"
        err = "calib." if r.calibration else f"{r.error:+.1%}"
        ctx = f"{w.context_tokens:.0f}" if w.context_tokens is not None else "-"
        mark = "  extrapolated" if r.extrapolated else ""
        out.append(f"{label:<40} {w.batch:>5} {ctx:>8} {acc:>6} {w.tokens_per_s:>10.1f} "
                   f"{r.predicted_tokens_per_s:>10.1f} {err:>7}{mark}")
    skip = ", ".join(f"{n} ({r})" for r, n in sorted(skipped.items())) or "none"
    if summ["windows_compared"]:
        out.append(f"summary      {summ['windows_compared']} windows compared: median |error| {summ['median_abs_error']:.1%}, "
                   f"mean error {summ['mean_error']:+.1%} (sign = bias), max |error| {summ['max_abs_error']:.1%}; "
                   f"skipped: {skip}")
    else:
        out.append(f"summary      only the calibration window was usable; skipped: {skip}")
    for msg in warnings:
        out.append(f"warning: {msg}")
    click.echo("\n".join(out))
