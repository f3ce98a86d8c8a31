"""``specmodel predict``: the first thing a user runs."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from specmodel.commands.scenario import with_scenario
from specmodel.model.predict import require_consistent
from specmodel.model.prediction import Prediction
from specmodel.scenario.resolve import Scenario, run_prediction
from specmodel.schema.formats import PREDICTION
from specmodel.units import ms


def format_prediction(p: Prediction, notes: tuple[str, ...] = ()) -> str:
    """Human-readable block; SI values converted only here."""
    src, pt, acc, cost, fig = p.source, p.point, p.accept, p.costs, p.figures
    lines: list[str] = []
    for n in notes:
        lines.append(f"note: {n}")
    lines.append(f"profile      {src.profile_name} ({src.profile_source_kind}) {src.profile_path}")
    lines.append(f"config       {p.tp_label}, batch {pt.batch}, steps {pt.steps}, topk {pt.topk}, "
                 f"draft tokens {pt.num_draft_tokens}")
    lines.append(f"context      {pt.context_tokens:.0f} tokens of KV per request ({pt.context_source})")
    lines.append(f"accept len   {acc.mean_tokens:.2f} tokens/step incl. bonus "
                 f"(= {acc.mean_drafts:.2f} accepted drafts), std {acc.std_tokens:.2f}; "
                 f"source: {acc.source}")
    # an all-reduce share nobody measured is printed as unknown, never as 0.00 ms
    ar_unknown = not src.allreduce_known

    def ar(seconds: float) -> str:
        return p.allreduce_word if ar_unknown or p.no_allreduce else ms(seconds)

    lines.append(f"baseline     {fig.baseline_tokens_per_s:.1f} tok/s total, {p.baseline_tokens_per_s_per_request:.1f} "
                 f"tok/s per request  (decode step {ms(cost.baseline_step_s)}, "
                 f"all-reduce {ar(cost.baseline_allreduce_s)})")
    lines.append(f"cycle        {ms(cost.cycle_s)}")
    lines.append(f"  verify     {ms(cost.verify_s):>10}  ({cost.verify_tokens} tokens)  "
                 f"all-reduce {ar(cost.verify_allreduce_s)}, "
                 + (f"compute + other {ms(cost.verify_compute_s + cost.verify_other_s)}" if ar_unknown else
                    f"compute {ms(cost.verify_compute_s)}, other {ms(cost.verify_other_s)}"))
    lines.append(f"  draft      {ms(cost.draft_s):>10}  ({p.draft_parts})  "
                 f"all-reduce {ar(cost.draft_allreduce_s)}")
    cal = f"  (calibration added {ms(cost.calibrated_overhead_s)})" if cost.calibrated_overhead_s is not None else ""
    lines.append(f"  overhead   {ms(cost.overhead_s):>10}{cal}")
    if p.no_allreduce:
        lines.append(f"  all-reduce {'none':>10}  (TP 1: no collective in any forward)")
    elif ar_unknown:
        lines.append(f"  all-reduce {'unknown':>10}  (the profile has no all-reduce split)")
    else:
        how = (f"; {', '.join(src.allreduce_capture)}: capture share × forward time (the hook's wrapper did not "
               "see it)") if src.allreduce_capture else ""
        lines.append(f"  all-reduce {ms(cost.cycle_allreduce_s):>10}  = {cost.cycle_allreduce_frac:.1%} of the cycle  "
                     f"[{p.allreduce_source}{how}]")
    if acc.proposal_rate < 1.0 or acc.proposal_rate_source:
        lines.append(f"proposals    {acc.proposal_rate:.0%} of request-steps proposed ({acc.proposal_rate_source}); "
                     "the rest decode: "
                     f"{acc.proposal_rate * acc.mean_tokens + 1 - acc.proposal_rate:.2f} tokens per mean step of "
                     f"{ms(cost.mean_step_s)}")
    lines.append(f"predicted    {fig.tokens_per_s:.1f} tok/s total, {p.tokens_per_s_per_request:.1f} tok/s per request  "
                 f"(95% band {p.band_label}: {fig.tokens_per_s_low:.1f}-{fig.tokens_per_s_high:.1f} "
                 f"total)  speedup {fig.speedup:.2f}x [{fig.speedup_low:.2f}-{fig.speedup_high:.2f}]")
    rq = p.request
    if rq is not None:
        lines.append(f"request      {rq.prompt_tokens} prompt ({rq.prompt_source}) + {rq.request_tokens} output tokens, "
                     f"batch {pt.batch}: prefill, then time outside the engine's steps, then decode")
        lines.append(f"  baseline   {ms(rq.base_s):>10}  = {ms(rq.base_prefill_s)} + {ms(rq.base_outside_s)} + "
                     f"{ms(rq.base_decode_s)}  -> {rq.baseline_tokens_per_s:.1f} tok/s total")
        spec_total = ms(rq.spec_s) if math.isfinite(rq.spec_s) else "never done"
        spec_dec = ms(rq.spec_decode_s) if math.isfinite(rq.spec_decode_s) else "inf"
        lines.append(f"  spec       {spec_total:>10}  = {ms(rq.spec_prefill_s)} + {ms(rq.spec_outside_s)} + {spec_dec}  "
                     f"-> {rq.tokens_per_s:.1f} tok/s total")
        need = (f"the decode phase must run {rq.decode_speedup_needed:.2f}x faster"
                if math.isfinite(rq.decode_speedup_needed) else "no decode speedup makes up its fixed cost")
        lines.append(f"  speedup    {rq.speedup:.2f}x [{rq.speedup_low:.2f}-{rq.speedup_high:.2f}] per request "
                     f"(decode phase {fig.speedup:.2f}x); to break even {need}")
    be_note = "" if fig.break_even_reachable else f"  (unreachable: max {pt.steps + 1})"
    p20_note = "" if fig.plus20_reachable else f"  (unreachable: max {pt.steps + 1})"
    if math.isfinite(fig.break_even_accept_tokens):
        lines.append(f"break-even   {fig.break_even_accept_tokens:.2f} tokens/step "
                     f"({fig.break_even_accept_tokens - 1:.2f} drafts){be_note}")
        lines.append(f"for +20%     {fig.accept_for_plus20_tokens:.2f} tokens/step{p20_note}")
        if rq is not None:
            be_r = fig.request_break_even_accept_tokens
            lines.append("  per request " + (f"{be_r:.2f} tokens/step (prefill and outside time included)"
                                           if math.isfinite(be_r) else "none: the speculative side's fixed cost "
                                           "alone exceeds the baseline's request"))
        lines.append(f"margin       {fig.margin_tokens:+.2f} tokens/step   P(speedup > 1, {p.band_label}) = {p.p_text}")
    else:  # proposal rate 0: the accept length of steps that never happen changes nothing
        lines.append("break-even   none: nothing is proposed, no accept length breaks even")
        lines.append(f"margin       none   P(speedup > 1, {p.band_label}) = {p.p_text}")
    if len({o for _, o in src.cost_sources}) == 1:
        lines.append(f"costs from   all: {src.cost_sources[0][1]}")
    else:
        for i, (what, origin) in enumerate(src.cost_sources):
            lines.append(f"{'costs from' if i == 0 else '':<12} {what + ':':<11} {origin}")
    for w in p.outcome.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"verdict      {p.verdict_label}: {p.outcome.reason}")
    for m in p.to_measure:
        lines.append(f"to measure   {m}")
    return "\n".join(lines)


@click.command("predict")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@with_scenario
def predict_cmd(scenario: Scenario, as_json: bool, **_: Any) -> None:
    """Predict tok/s, speedup, break-even accept length and a GO/NO-GO verdict.

    Example: specmodel predict --accept-len 3.2
    """
    pred = require_consistent(run_prediction(scenario))
    if as_json:
        d = PREDICTION.stamp(pred.to_dict())
        d["notes"] = list(scenario.notes)
        click.echo(json.dumps(d, indent=2, allow_nan=False))
    else:
        click.echo(format_prediction(pred, scenario.notes))
