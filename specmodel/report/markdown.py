"""The report as Markdown (for PR comments, CI logs and diffs): the same content as the PDF."""

from __future__ import annotations

import math

from specmodel.report.text import cycle_allreduce_text, short_tokens, speedup_text, tokens_per_step_text
from specmodel.report.view import ReportContent
from specmodel.units import alpha_beta, ms, us


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return out


def render_markdown(c: ReportContent) -> str:
    p = c.prediction
    o = c.optimizer
    lines = [f"# {c.title}", "", f"## Verdict: **{c.verdict_label}**", "", c.verdict_reason, ""]
    lines += _table(["figure", "value"], [
        ["configuration", f"{p.tp_label}, batch {p.point.batch}, steps {p.point.steps}, topk {p.point.topk}, draft tokens {p.point.num_draft_tokens}"],
        ["predicted", f"{p.figures.tokens_per_s:.1f} tok/s (95% band {p.band_label}: {p.figures.tokens_per_s_low:.1f}-"
                      f"{p.figures.tokens_per_s_high:.1f})"],
        ["baseline", f"{p.figures.baseline_tokens_per_s:.1f} tok/s"],
        ["speedup", speedup_text(p)],
        ["break-even accept length", tokens_per_step_text(p.figures.break_even_accept_tokens)],
        ["drafter accept length", f"{p.accept.mean_tokens:.2f} tokens/step ({p.accept.mean_drafts:.2f} drafts)"],
        ["margin", (f"{p.figures.margin_tokens:+.2f} tokens/step" if math.isfinite(p.figures.margin_tokens) else "none")],
        [f"P(speedup > 1, {p.band_label})", p.p_text],
        ["+20% needs", tokens_per_step_text(p.figures.accept_for_plus20_tokens)],
        ["cycle", cycle_allreduce_text(p)],
    ])
    lines += ["", "### Assumptions", ""] + [f"- {a}" for a in c.assumptions]
    if c.warnings:
        lines += ["", "### Warnings", ""] + [f"- {w}" for w in c.warnings]
    lines += ["", "### Provenance", ""] + [f"- {k}: {v}" for k, v in c.provenance]

    bd = c.breakdown
    lines += ["", "## Where the cycle goes", ""]
    lines += _table(["part", "baseline step", "speculative cycle"],
                    [[s.label, "", ms(s.seconds)] for s in bd.cycle]
                    + [[s.label, ms(s.seconds), ""] for s in bd.baseline]
                    + [["per emitted token", ms(bd.baseline_per_token_s), ms(bd.cycle_per_token_s)]])

    ar = c.allreduce
    lines += ["", "## All-reduce", "",
              f"{alpha_beta(ar.fit_alpha_s, ar.fit_beta_bytes_per_s)} "
              f"({ar.fit_algorithm}, {ar.fit_origin}); {len(ar.points)} measured points.", ""]
    lines += _table(["message", "tokens", "bytes", "model us/call"],
                    [[s.label, str(s.tokens), f"{s.msg_bytes:.0f}",
                      us(s.per_call_s, 1, unit=False) if s.per_call_s is not None else "-"] for s in ar.sizes])

    lines += ["", "## What if", ""]
    lines += _table(["what-if", "baseline tok/s", "spec tok/s", "speedup", "break-even", "cycle", "verdict"],
                    [[w.label, f"{w.baseline_tokens_per_s:.1f}", f"{w.tokens_per_s:.1f}", f"{w.speedup:.2f}x",
                      short_tokens(w.break_even_accept_tokens), ms(w.cycle_s), w.verdict] if not w.unavailable else
                     [w.label, "-", "-", "-", "-", "-", "N/A"] for w in c.whatifs])
    lines += [""] + [f"- {w.label}: " + "; ".join(((w.unavailable,) if w.unavailable else ()) + w.assumptions)
                     for w in c.whatifs if w.assumptions or w.unavailable]
    stop = c.stop_paying_batch
    lines += ["", "Batch sweep (same accept length): "
              + (f"stops paying at batch {stop}." if stop is not None else "pays at every batch swept."), ""]
    lines += _table(["batch", "baseline tok/s", "spec tok/s", "speedup", "break-even"],
                    [[str(r.batch), f"{r.baseline_tokens_per_s:.1f}", f"{r.tokens_per_s:.1f}", f"{r.speedup:.2f}x",
                      short_tokens(r.break_even_accept_tokens) + (" (extrapolated)" if r.extrapolated else "")]
                     for r in c.batch_sweep])

    b, d = o.best, o.default
    lines += ["", "## Recommended configuration", "", f"Recommendation: {o.recommendation}.", "",
              ("" if o.recommended is not None else "No configuration has measured costs and acceptance here: "
               "no recommendation. ")
              + f"{'Best' if o.recommended is not None else 'Default'} at batch {o.batch}: steps {b.steps}, "
              f"topk {b.topk}, draft tokens {b.num_draft_tokens}: "
              f"{b.tokens_per_s:.1f} tok/s, speedup {b.speedup:.2f}x ({o.gain:.2f}x the default's "
              f"{d.tokens_per_s:.1f} tok/s).", "", f"`{b.sglang_flags()}`", "",
              f"Best with topk {o.best_measured_topk.topk}: steps {o.best_measured_topk.steps}, draft tokens "
              f"{o.best_measured_topk.num_draft_tokens}: {o.best_measured_topk.tokens_per_s:.1f} tok/s.", "",
              f"Batch limit: {o.limit_text()}.", "",
              f"Acceptance model: {o.accept_source}. " + " ".join(o.accept_notes), ""]
    lines += _table(["#", "steps", "topk", "ndt", "E[A]", "cycle", "tok/s", "speedup"],
                    [[str(i), str(x.steps), str(x.topk), str(x.num_draft_tokens), f"{x.accept_tokens:.2f}",
                      ms(x.cycle_s), f"{x.tokens_per_s:.1f}", f"{x.speedup:.2f}x"]
                     for i, x in enumerate(o.ranked, start=1)])
    if c.context is not None:
        v = c.context
        lines += ["", "## tok/s, speedup and break-even vs context", "",
                  f"Batch {v.batch}; measured contexts {', '.join(map(str, v.measured_contexts))} (KV tokens per "
                  f"request); tok/s are totals over the batch; {v.accept_note}.", ""]
        lines += _table(["context", "accept", "baseline tok/s", "spec tok/s", "speedup", "break-even", "verdict"],
                        [[str(r.context_tokens),
                          (f"{r.accept_mean_tokens:.2f}" if r.accept_mean_tokens is not None else "-")
                          + (f" ({r.accept_band.split(' (')[0]})" if r.accept_band else ""),
                          f"{r.baseline_tokens_per_s:.1f}", f"{r.tokens_per_s:.1f}",
                          f"{r.speedup:.2f}x", short_tokens(r.break_even_accept_tokens),
                          r.verdict + (f" (extrapolated: {'; '.join(r.extrapolated)})" if r.extrapolated else "")]
                         for r in v.rows])
    if c.plan is not None:
        lines += ["", "## Serve plan", "",
                  "Best configuration per (batch, context) with measured costs and acceptance; `off` = none beats "
                  "the baseline; `unmeasured` = outside the measured region (`specmodel plan` prints the flags).", ""]
        lines += _table(["batch", "context", "action", "steps", "topk", "ndt", "tok/s", "speedup"],
                        [[str(x.batch), str(x.context_tokens), x.action]
                         + ([str(x.recommended.steps), str(x.recommended.topk), str(x.recommended.num_draft_tokens),
                             f"{x.recommended.tokens_per_s:.1f}", f"{x.recommended.speedup:.2f}x"]
                            if x.recommended is not None else ["-"] * 5) for x in c.plan.cells])
    if c.drafter is not None:
        dv = c.drafter
        lines += ["", f"## Drafter check: {dv.status}", ""]
        if dv.acceptance_ceiling is not None:
            lines += [f"Acceptance ceiling {dv.acceptance_ceiling:.1%}"
                      + (f" (at most {dv.ceiling_tokens:.2f} tokens/step)" if dv.ceiling_tokens is not None else ""), ""]
        if dv.warning:
            lines += [f"**Warning:** {dv.warning}", ""]
        lines += _table(["status", "check", "message"], [[f.status, f.name, f.message] for f in dv.findings])
    lines += ["", f"_specmodel {c.version}_", ""]
    return "\n".join(lines)
