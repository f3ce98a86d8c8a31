"""``specmodel plan``: the serve plan (best speculative configuration per batch and context) without the PDF."""

from __future__ import annotations

import json
from typing import Any

import click

from specmodel.commands import plan_schedule
from specmodel.commands.scenario import with_scenario
from specmodel.engines import ENGINE_SPECS, engine_spec, engines_help
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_BATCH
from specmodel.model.decision import GO_MIN_SPEEDUP
from specmodel.model.serveplan import MARGINAL, OFF, SPECULATE, ServePlan
from specmodel.scenario.parse import parse_token_list
from specmodel.scenario.resolve import Scenario, serve_plan_for
from specmodel.schema.formats import PLAN


def format_plan(plan: ServePlan, sc: Scenario) -> str:
    out = [f"note: {n}" for n in sc.notes]
    tp = "TP unknown" if not sc.profile.source.tp_known else f"TP{sc.profile.tp}"  # never a default TP1
    out.append(f"serve plan   profile {sc.profile.name} ({sc.profile.source_kind}), {tp}; "
               f"acceptance {sc.accept.dist.mean_tokens:.2f} tokens/step ({sc.accept.dist.source}) measured at steps "
               f"{sc.spec.steps}, topk {sc.spec.topk}")
    if plan.accept_bands:
        for L, label in plan.accept_bands:
            out.append(f"             acceptance at context {L}: {label}")
    elif len(plan.contexts) > 1:
        out.append("             acceptance assumed constant over context (the accept source gives no per-context "
                   "measurement)")
    out.append("             recommended = best (steps, topk, draft tokens) whose costs AND acceptance were measured; "
               "tok/s are totals over the batch unless marked per request")
    out.append(f"{'batch':>6} {'context':>8}  {'region':<10} {'action':<10} {'steps':>5} {'topk':>4} {'ndt':>4} "
               f"{'tok/s':>9} {'tok/s/req':>9} {'speedup':>7}  best extrapolated (listed, not recommended)")
    for c in plan.cells:
        r, run = c.recommended, c.to_run
        if run is not None:
            cfg = f"{run.steps:>5} {run.topk:>4} {run.num_draft_tokens:>4} {run.tokens_per_s:>9.1f} " \
                  f"{run.tokens_per_s / run.batch:>9.1f} {run.speedup:>6.2f}x"
        else:  # off / marginal / unmeasured: no configuration to deploy, so none fills the columns
            cfg = f"{'-':>5} {'-':>4} {'-':>4} {'-':>9} {'-':>9} {'-':>7}"
        a = c.best_any
        extra = ""
        if r is not None and run is None:
            extra = (f"best measured: steps {r.steps} topk {r.topk} ndt {r.num_draft_tokens}: "
                     f"{r.tokens_per_s:.1f} tok/s, {r.speedup:.2f}x ({c.action}); ")
        if c.beyond_range:
            extra += f"not priced: {c.beyond_range[0]}"
        elif r is None or a.key != r.key:
            why = ", ".join(x for x, on in (("cost assumed", a.cost_assumed), ("cost extrapolated", a.cost_extrapolated),
                                            ("acceptance extrapolated", a.accept_extrapolated)) if on)
            extra += (f"steps {a.steps} topk {a.topk} ndt {a.num_draft_tokens}: {a.tokens_per_s:.1f} tok/s, "
                      f"{a.speedup:.2f}x ({why})")
        out.append(f"{c.batch:>6} {c.context_tokens:>8}  {c.region:<10} {c.action:<10} {cfg}  {extra}".rstrip())
    groups: dict[tuple[int, int, int], dict[int, list[int]]] = {}
    for c in plan.cells:
        if c.action == SPECULATE and c.recommended is not None:
            groups.setdefault(c.recommended.key, {}).setdefault(c.context_tokens, []).append(c.batch)
    out.append("")
    if groups:
        out.append("ready to paste (measured region):")
    for key, by_ctx in groups.items():
        cand = next(c.recommended for c in plan.cells if c.recommended is not None and c.recommended.key == key)
        where = "; ".join(f"context {L}: batch {', '.join(map(str, bs))}" for L, bs in by_ctx.items())
        out.append(f"  for {where}:")
        for e in ENGINE_SPECS:
            v = e.paste(cand, plan.algorithm)
            out.append(f"    {e.label + ':':<7} {v}" if v is not None
                       else f"    {e.label + ':':<7} no equivalent ({e.label} drafts chains, topk 1)")
    marg = [f"batch {c.batch} @ context {c.context_tokens}" for c in plan.cells if c.action == MARGINAL]
    if marg:
        out.append(f"MARGINAL (best measured configuration below {GO_MIN_SPEEDUP:.2f}x: inside the noise, no "
                   f"recommendation): {'; '.join(marg)}")
    off = [f"batch {c.batch} @ context {c.context_tokens}" for c in plan.cells if c.action == OFF]
    # (listed cell by cell: an engine switch-off is set per deployment, so each one matters)
    if off:
        out.append(f"switch speculation OFF (no measured configuration beats the baseline): {'; '.join(off)}")
    unm = [f"batch {c.batch} @ context {c.context_tokens}" for c in plan.cells if not c.measured]
    if unm:
        out.append(f"no recommendation outside the measured region (costs or acceptance not measured): {'; '.join(unm)}")
    assumed = [a for c in plan.cells if not c.measured for a in c.assumed]
    if assumed:
        out.append("ASSUMED = a cost the profile never measured for its kind, read off a fallback curve "
                   "(e.g. verify = decode at the same tokens); no recommendation rests on it. To remove it:")
        for m in dict.fromkeys(a.to_measure for a in assumed):
            out.append(f"  {m}")
    return "\n".join(out)


def plan_to_dict(plan: ServePlan, sc: Scenario) -> dict[str, Any]:
    cells = []
    for c in plan.cells:
        d = c.to_dict()
        if c.to_run is not None:  # flags only where the rule says speculate
            d["engine_flags"] = {e.name: e.paste(c.to_run, plan.algorithm) for e in ENGINE_SPECS}
        cells.append(d)
    return {**PLAN.header(), "profile": sc.profile.name,
            "profile_path": sc.profile.path, "tp": sc.profile.tp, "algorithm": plan.algorithm,
            "accept_source": sc.accept.dist.source, "accept_mean_tokens": sc.accept.dist.mean_tokens,
            "batches": list(plan.batches), "contexts": list(plan.contexts), "cells": cells, "notes": list(sc.notes),
            "accept_by_context": [{"context_tokens": L, "band": label} for L, label in plan.accept_bands] or None}


@click.command("plan")
@click.option("--batches", default=None,
              help=f"Batches of the grid, e.g. 1,4,16, each at most {MAX_BATCH} (default: the profile's measured ones).")
@click.option("--contexts", default=None,
              help="Contexts (KV tokens per request) of the grid, e.g. 0,4K,32K (default: the measured ones).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--prometheus-rules", "rules_path", type=click.Path(dir_okay=False), default=None,
              help="Also write Prometheus recording and alerting rules of the profile's break-even (vLLM metric "
                   "names; docs/watch.md) to this file.")
@click.option("--rules-window", default="5m", show_default=True,
              help="With --prometheus-rules/--grafana-dashboard: the rules' rate window (a Prometheus duration).")
@click.option("--rules-for", "rules_hold", default="10m", show_default=True,
              help="With --prometheus-rules: how long below break-even before the alert fires.")
@click.option("--grafana-dashboard", "dashboard_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a provisionable Grafana dashboard over the exporter's gauges and the rules' series "
                   "(docs/watch.md) to this file.")
@plan_schedule.schedule_options
@with_scenario(require_costs=False)  # the plan marks what was measured itself
def plan_cmd(scenario: Scenario, batches: str | None, contexts: str | None, as_json: bool, engine: str | None,
             export_path: str | None, rules_path: str | None = None, rules_window: str = "5m",
             rules_hold: str = "10m", dashboard_path: str | None = None, **kw: Any) -> None:
    """Serve plan: best (steps, topk, draft tokens) per (batch, context), or switch speculation off.

    Example: specmodel plan --accept-len 3.2 --batches 1,8,32 --contexts 0,32K

    With --engine NAME: the engine's native per-batch schedule per measured context
    (--json prints that document; --export FILE writes it).
    """
    if scenario.point.request_tokens is not None or scenario.point.prompt_tokens is not None:
        # the plan's cells are decode-phase figures (its optimizer ranks by them)
        raise SpecmodelError("--request-tokens/--prompt-tokens: plan prices the decode phase; price a request "
                             "end to end with `specmodel predict` or `specmodel report`")
    from specmodel.io import atomic_write_json
    from specmodel.live.rules import check_duration

    window = check_duration(rules_window, "--rules-window")
    hold = check_duration(rules_hold, "--rules-for")
    if rules_path is not None:
        from specmodel.live.rules import rules

        atomic_write_json(rules_path, rules(scenario.profile, scenario.spec, window=window, hold=hold))  # (refuses a shipped file)
    if dashboard_path is not None:
        from specmodel.live.dashboard import dashboard

        atomic_write_json(dashboard_path, dashboard(window))
    if engine is not None:
        doc = plan_schedule.engine_schedule(scenario, engine=engine, contexts=contexts,
                                            **{k: kw[k] for k in plan_schedule.SCHEDULE_KWARGS})
        dspark = (plan_schedule.dspark_tables(scenario, doc, kw["dspark_dir"])
                   if kw.get("dspark_dir") is not None else [])
        if export_path is not None:
            plan_schedule.export(doc, export_path)
        if as_json:
            click.echo(json.dumps(doc, indent=2, allow_nan=False))
            return
    elif kw.get("dspark_dir") is not None:
        raise SpecmodelError("--dspark-tables: needs --engine sglang (a table SGLang's DSpark planner reads)")
    elif export_path is not None:
        raise SpecmodelError(f"--export: needs --engine ({engines_help()}: the engine the schedule is for)")
    plan = serve_plan_for(scenario, parse_token_list(batches, "batches", MAX_BATCH) if batches else None,
                      parse_token_list(contexts, "contexts") if contexts else None)
    if as_json:
        click.echo(json.dumps(plan_to_dict(plan, scenario), indent=2, allow_nan=False))
    else:
        click.echo(format_plan(plan, scenario))
        if engine is not None:
            click.echo(plan_schedule.format_schedule(doc))
            for line in dspark:
                click.echo(line)
            if engine_spec(engine).startup_verify_table:
                from specmodel.commands.plan_adaptive import format_startup_error

                click.echo(format_startup_error(scenario, doc))
