"""``specmodel predict``: the first thing a user runs."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from specmodel.commands.scenario import with_scenario
from specmodel.model.predict import Prediction, require_consistent
from specmodel.scenario.resolve import Scenario, run_prediction
from specmodel.schema.formats import PREDICTION
from specmodel.units import ms


def format_prediction(p: Prediction, notes: tuple[str, ...] = ()) -> str:
    """Human-readable block; SI values converted only here."""
    lines: list[str] = []
    for n in notes:
        lines.append(f"note: {n}")
    lines.append(f"profile      {p.profile_name} ({p.profile_source_kind}) {p.profile_path}")
    lines.append(f"config       {p.tp_label}, batch {p.batch}, steps {p.steps}, topk {p.topk}, "
                 f"draft tokens {p.num_draft_tokens}")
    lines.append(f"context      {p.context_tokens:.0f} tokens of KV per request ({p.context_source})")
    lines.append(f"accept len   {p.accept_mean_tokens:.2f} tokens/step incl. bonus "
                 f"(= {p.accept_mean_drafts:.2f} accepted drafts), std {p.accept_std_tokens:.2f}; "
                 f"source: {p.accept_source}")
    # an all-reduce share nobody measured is printed as unknown, never as 0.00 ms
    ar_unknown = not p.allreduce_known

    def ar(seconds: float) -> str:
        return p.allreduce_word if ar_unknown or p.no_allreduce else ms(seconds)

    lines.append(f"baseline     {p.baseline_tokens_per_s:.1f} tok/s total, {p.baseline_tokens_per_s_per_request:.1f} "
                 f"tok/s per request  (decode step {ms(p.baseline_step_s)}, all-reduce {ar(p.baseline_allreduce_s)})")
    lines.append(f"cycle        {ms(p.cycle_s)}")
    lines.append(f"  verify     {ms(p.verify_s):>10}  ({p.verify_tokens} tokens)  all-reduce {ar(p.verify_allreduce_s)}, "
                 + (f"compute + other {ms(p.verify_compute_s + p.verify_other_s)}" if ar_unknown else
                    f"compute {ms(p.verify_compute_s)}, other {ms(p.verify_other_s)}"))
    lines.append(f"  draft      {ms(p.draft_s):>10}  ({p.draft_parts})  "
                 f"all-reduce {ar(p.draft_allreduce_s)}")
    cal = f"  (calibration added {ms(p.calibrated_overhead_s)})" if p.calibrated_overhead_s is not None else ""
    lines.append(f"  overhead   {ms(p.overhead_s):>10}{cal}")
    if p.no_allreduce:
        lines.append(f"  all-reduce {'none':>10}  (TP 1: no collective in any forward)")
    elif ar_unknown:
        lines.append(f"  all-reduce {'unknown':>10}  (the profile has no all-reduce split)")
    else:
        how = (f"; {', '.join(p.allreduce_capture)}: capture share × forward time (the hook's wrapper did not "
               "see it)") if p.allreduce_capture else ""
        lines.append(f"  all-reduce {ms(p.cycle_allreduce_s):>10}  = {p.cycle_allreduce_frac:.1%} of the cycle  "
                     f"[{p.allreduce_source}{how}]")
    if p.proposal_rate < 1.0 or p.proposal_rate_source:
        lines.append(f"proposals    {p.proposal_rate:.0%} of request-steps proposed ({p.proposal_rate_source}); "
                     "the rest decode: "
                     f"{p.proposal_rate * p.accept_mean_tokens + 1 - p.proposal_rate:.2f} tokens per mean step of "
                     f"{ms(p.mean_step_s)}")
    lines.append(f"predicted    {p.tokens_per_s:.1f} tok/s total, {p.tokens_per_s_per_request:.1f} tok/s per request  "
                 f"(95% band {p.band_label}: {p.tokens_per_s_low:.1f}-{p.tokens_per_s_high:.1f} "
                 f"total)  speedup {p.speedup:.2f}x [{p.speedup_low:.2f}-{p.speedup_high:.2f}]")
    rq = p.request
    if rq is not None:
        lines.append(f"request      {rq.prompt_tokens} prompt ({rq.prompt_source}) + {rq.request_tokens} output tokens, "
                     f"batch {p.batch}: prefill, then time outside the engine's steps, then decode")
        lines.append(f"  baseline   {ms(rq.base_s):>10}  = {ms(rq.base_prefill_s)} + {ms(rq.base_outside_s)} + "
                     f"{ms(rq.base_decode_s)}  -> {rq.baseline_tokens_per_s:.1f} tok/s total")
        spec_total = ms(rq.spec_s) if math.isfinite(rq.spec_s) else "never done"
        spec_dec = ms(rq.spec_decode_s) if math.isfinite(rq.spec_decode_s) else "inf"
        lines.append(f"  spec       {spec_total:>10}  = {ms(rq.spec_prefill_s)} + {ms(rq.spec_outside_s)} + {spec_dec}  "
                     f"-> {rq.tokens_per_s:.1f} tok/s total")
        need = (f"the decode phase must run {rq.decode_speedup_needed:.2f}x faster"
                if math.isfinite(rq.decode_speedup_needed) else "no decode speedup makes up its fixed cost")
        lines.append(f"  speedup    {rq.speedup:.2f}x [{rq.speedup_low:.2f}-{rq.speedup_high:.2f}] per request "
                     f"(decode phase {p.speedup:.2f}x); to break even {need}")
    be_note = "" if p.break_even_reachable else f"  (unreachable: max {p.steps + 1})"
    p20_note = "" if p.plus20_reachable else f"  (unreachable: max {p.steps + 1})"
    if math.isfinite(p.break_even_accept_tokens):
        lines.append(f"break-even   {p.break_even_accept_tokens:.2f} tokens/step "
                     f"({p.break_even_accept_tokens - 1:.2f} drafts){be_note}")
        lines.append(f"for +20%     {p.accept_for_plus20_tokens:.2f} tokens/step{p20_note}")
        if rq is not None:
            be_r = p.request_break_even_accept_tokens
            lines.append("  per request " + (f"{be_r:.2f} tokens/step (prefill and outside time included)"
                                           if math.isfinite(be_r) else "none: the speculative side's fixed cost "
                                           "alone exceeds the baseline's request"))
        lines.append(f"margin       {p.margin_tokens:+.2f} tokens/step   P(speedup > 1, {p.band_label}) = {p.p_text}")
    else:  # proposal rate 0: the accept length of steps that never happen changes nothing
        lines.append("break-even   none: nothing is proposed, no accept length breaks even")
        lines.append(f"margin       none   P(speedup > 1, {p.band_label}) = {p.p_text}")
    if len({o for _, o in p.cost_sources}) == 1:
        lines.append(f"costs from   all: {p.cost_sources[0][1]}")
    else:
        for i, (what, origin) in enumerate(p.cost_sources):
            lines.append(f"{'costs from' if i == 0 else '':<12} {what + ':':<11} {origin}")
    for w in p.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"verdict      {p.verdict_label}: {p.verdict_reason}")
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
