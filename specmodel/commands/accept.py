"""``specmodel accept``: the accept-length distribution and observed tok/s from server logs."""

from __future__ import annotations

import json
from typing import Any

import click

from specmodel.engines import log_help
from specmodel.engines.logs import AcceptSummary, accept_document, summarize, throughput_series, write_accept_json
from specmodel.engines.sglang.log import DEFAULT_DECODE_LOG_INTERVAL
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_STEPS, bounded_int


def format_summary(s: AcceptSummary) -> str:
    lines: list[str] = []
    for f in s.files:
        skipped = "".join(f", {n} skipped ({why})" for why, n in sorted(f.skipped.items()))
        lines.append(f"file         {f.path}: {f.description}, {f.lines_matched} of {f.lines_read} lines matched{skipped}")
    if s.config is not None:
        lines.append(f"server       {s.config.engine}: {s.config.describe()}")
    d = s.dist
    lines.append(f"accept len   {d.mean_tokens:.3f} tokens/step incl. bonus (= {d.mean_tokens - 1:.3f} accepted drafts), "
                 f"std {d.std_tokens:.2f}, steps {d.max_tokens - 1}, samples {d.samples}, windows {s.windows_used}")
    lines.append("distribution tokens/step  P")
    for j, prob in enumerate(d.probs, start=1):
        lines.append(f"             {j:>11}  {prob:.4f}")
    if s.rates is not None:
        lines.append("per-position " + ", ".join(f"{r:.3f}" for r in s.rates) + "  (P(draft i accepted))")
    series = throughput_series(s.windows)
    if series:
        lines.append("observed     batch  windows  accept len  tok/s total median (min-max)  "
                     "context/request median (min-max)")
        for p in series:
            a = f"{p.accept_len_mean:.2f}" if p.accept_len_mean is not None else "-"
            c = (f"{p.context_tokens_median:.0f} ({p.context_tokens_min:.0f}-{p.context_tokens_max:.0f})"
                 if p.context_tokens_median is not None and p.context_tokens_min is not None
                 and p.context_tokens_max is not None else "-")
            tput = f"{p.tokens_per_s_median:.1f} ({p.tokens_per_s_min:.1f}-{p.tokens_per_s_max:.1f})"
            lines.append(f"             {p.batch:>5}  {p.windows:>7}  {a:>10}  {tput:<28}  {c}")
    if s.by_context is not None:
        lines.append("by context   band (KV tokens/request)  windows  accept len  samples")
        for b in s.by_context.bands:
            lines.append(f"             {b.label:<24}  {b.windows:>7}  {b.dist.mean_tokens:>10.3f}  {b.dist.samples:>7}"
                         f"   (contexts {b.context_min:.0f}-{b.context_max:.0f})")
    for n in s.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


@click.command("accept", epilog=f"FILES: {log_help()}; the format is recognised from the content.")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--steps", type=bounded_int(1, MAX_STEPS), default=None,
              help="Draft depth the server ran with (--speculative-num-steps / num_speculative_tokens); "
                   "default: the log's own server_args / speculative_config, vLLM per-position rates or "
                   "bench_speculative rows. A value that contradicts the log is an error.")
@click.option("--num-spec-tokens", type=bounded_int(1, MAX_STEPS), default=None,
              help="vLLM num_speculative_tokens, needed for old vLLM logs that print only the acceptance rate.")
@click.option("--decode-log-interval", type=bounded_int(1, 1_000_000), default=None,
              help="SGLang --decode-log-interval (decode batches per logged window), for the sample count "
                   f"(default: the log's server_args, else {DEFAULT_DECODE_LOG_INTERVAL}).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the distribution as schema-versioned JSON (feed it back with predict --accept-log FILE).")
def accept_cmd(files: tuple[str, ...], steps: int | None, num_spec_tokens: int | None, decode_log_interval: int | None,
               as_json: bool, output: str | None, **_: Any) -> None:
    """Accept-length distribution and observed tok/s from engine logs (the formats: see FILES below).

    Example: specmodel accept server.log -o accept.json
    """
    if not files:
        raise SpecmodelError(f"give at least one log file ({log_help()})")
    if steps is not None and steps < 1:
        raise SpecmodelError(f"--steps: must be >= 1, got {steps}")
    s = summarize(list(files), steps + 1 if steps is not None else None, num_spec_tokens=num_spec_tokens,
                  decode_log_interval=decode_log_interval)
    if output:
        write_accept_json(s, output)
    if as_json:
        doc = accept_document(s)
        doc["windows"] = [w.to_dict() for w in s.windows]
        if output:
            doc["written"] = output
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    else:
        click.echo(format_summary(s))
        if output:
            click.echo(f"wrote        {output}  (use: specmodel predict --accept-log {output})")
