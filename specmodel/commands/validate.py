"""``specmodel validate``: predicted vs observed tok/s for every window of a server log."""

from __future__ import annotations

import json
from typing import Any

import click

from specmodel.engines import log_help
from specmodel.engines.logs import check_flag_against_log, logged_config, parse_log
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK, bounded_int
from specmodel.live.validation import check_log_matches_profile, summary, validate_windows
from specmodel.scenario.args import ScenarioArgs
from specmodel.scenario.resolve import resolve_scenario
from specmodel.schema.formats import VALIDATION


@click.command("validate", epilog=f"LOGS: {log_help(saved=False)}; the format is recognised from the content.")
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
    """Predicted vs observed tok/s for each logged window of a server log (formats: see LOGS below).

    Example: specmodel validate --profile profiles/mybox --steps 3 server.log
    """
    if not logs:
        raise SpecmodelError(f"give at least one server log ({log_help(saved=False)})")
    files = [parse_log(p) for p in logs]
    cfg = logged_config(files)
    if cfg is not None:
        steps = check_flag_against_log("--steps", steps, cfg.steps, cfg)
        topk = check_flag_against_log("--topk", topk, cfg.topk, cfg)
        num_draft_tokens = check_flag_against_log("--num-draft-tokens", num_draft_tokens, cfg.num_draft_tokens, cfg)
    sc = resolve_scenario(ScenarioArgs(profile=profile_path, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens),
                          require_accept=False)
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
                               "windows_used": len(results), "windows_total": len(windows),
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
        mark = (("  assumed" if r.assumed else "") + ("  extrapolated" if r.extrapolated else "")
                + ("  inconsistent" if r.inconsistent else ""))
        out.append(f"{label:<40} {w.batch:>5} {ctx:>8} {acc:>6} {w.tokens_per_s:>10.1f} "
                   f"{r.predicted_tokens_per_s:>10.1f} {err:>7}{mark}")
    skip = ", ".join(f"{n} ({r})" for r, n in sorted(skipped.items())) or "none"
    out.append(f"windows      used {len(results)} of {len(windows)} (left out: {skip})")
    if summ["windows_compared"]:
        out.append(f"summary      {summ['windows_compared']} windows compared: median |error| {summ['median_abs_error']:.1%}, "
                   f"mean error {summ['mean_error']:+.1%} (sign = bias), max |error| {summ['max_abs_error']:.1%}; "
                   f"skipped: {skip}")
    else:
        out.append(f"summary      only the calibration window was usable; skipped: {skip}")
    for msg in warnings:
        out.append(f"warning: {msg}")
    click.echo("\n".join(out))
