"""``specmodel ingest``: Kineto / torch.profiler traces -> a profile + a per-phase table."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import click

from specmodel.errors import SpecmodelError
from specmodel.io import atomic_write_text, check_path_components, confined_name, safe_name
from specmodel.limits import MAX_BATCH, MAX_DRAFT_TOKENS, MAX_JOBS, MAX_STEPS, MAX_TOPK, bounded_int
from specmodel.schema.costrows import KINDS
from specmodel.schema.formats import INGEST
from specmodel.schema.profile import load_profile, save_profile
from specmodel.trace.ingest import IngestResult, build_profile, ingest
from specmodel.trace.kineto import IngestOptions
from specmodel.units import ms

_COLUMNS = ("phase", "batch", "tokens", "samples", "ranks", "span_ms", "busy_ms", "comm_ms", "exposed_ms",
            "compute_ms", "other_ms", "skew_ms", "n_coll", "n_ar", "ar_msg_B")


def phase_rows(result: IngestResult) -> list[list[str]]:
    # the *_ms columns: 3 decimals, the unit is in the header
    return [[p.kind, str(p.batch), str(p.tokens), str(p.samples), str(p.ranks),
             *(ms(v, 3, unit=False) for v in (p.span_s, p.busy_s, p.allreduce_s, p.exposed_s, p.compute_s, p.other_s,
                                              p.skew_s)),
             str(p.n_collectives), str(p.n_allreduce), str(p.allreduce_msg_bytes)] for p in result.phases]


def format_table(result: IngestResult) -> str:
    rows = [list(_COLUMNS)] + phase_rows(result)
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.append("")
    lines.append("rank  passes  busy_ms  comm_ms  skew_ms  file")
    for r in result.ranks:
        busy, comm, skew = (ms(v, 3, unit=False) for v in (r.busy_s, r.comm_s, r.skew_s))
        lines.append(f"{r.rank:>4}  {r.passes:>6}  {busy:>7}  {comm:>7}  {skew:>7}  {Path(r.path).name}")
    return "\n".join(lines)


def format_csv(result: IngestResult) -> str:
    import csv  # (only for --csv)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(_COLUMNS)
    w.writerows(phase_rows(result))
    return buf.getvalue()


@click.command("ingest")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Profile directory to write (default: profiles/<name>).")
@click.option("--name", default=None, help="Profile name (default: the input directory's name).")
@click.option("--num-draft-tokens", type=bounded_int(1, MAX_DRAFT_TOKENS), default=4, show_default=True,
              help="Tokens per request in a verify forward (SGLang --speculative-num-draft-tokens); "
                   "used when a span has no toks=.")
@click.option("--topk", type=bounded_int(1, MAX_TOPK), default=1, show_default=True,
              help="Tokens per request in one draft step (--speculative-eagle-topk).")
@click.option("--steps", type=bounded_int(1, MAX_STEPS), default=None,
              help="Draft depth recorded in the profile's spec (default: from draft tokens and topk).")
@click.option("--step-kind", type=click.Choice(KINDS), default="decode", show_default=True,
              help="What a ProfilerStep#N span is (only used when a trace has no other labels).")
@click.option("--batch", "step_batch", type=bounded_int(1, MAX_BATCH), default=1, show_default=True,
              help="Batch of a ProfilerStep#N span.")
@click.option("-j", "--jobs", type=click.IntRange(max=MAX_JOBS), default=None, help="Worker processes (default: every core).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), default=None,
              help="Also write the per-phase table as CSV.")
@click.option("--no-save", is_flag=True, help="Print the table only; write no profile.")
@click.option("--baseline", "baseline_path", type=click.Path(path_type=Path), default=None,
              help="Profile of a non-speculative run whose decode rows supply the baseline step when the "
                   "traces (a speculative server) have none.")
@click.option("--draft-forwards", type=bounded_int(0, MAX_STEPS), default=None,
              help="Drafter forwards in one vLLM 'gpu_model_runner: draft' span (default: --steps, else "
                   "num-draft-tokens - 1); 0 for a host-side proposer such as ngram (no draft rows).")
@click.option("--full-decode", is_flag=True,
              help="Decode every event instead of only those the analysis reads (the reference path the "
                   "pre-filter is tested against; same results, slower).")
def ingest_cmd(inputs: tuple[Path, ...], output: Path | None, name: str | None, num_draft_tokens: int, topk: int,
               steps: int | None, step_kind: str, step_batch: int, jobs: int | None, as_json: bool,
               csv_path: Path | None, no_save: bool, baseline_path: Path | None, draft_forwards: int | None,
               full_decode: bool) -> None:
    """Build a profile from Kineto / torch.profiler traces (one file per rank).

    INPUTS are trace files (.json, .json.gz) or directories holding them, e.g. the
    output_dir of SGLang's /start_profile ({id}-TP-{rank}.trace.json.gz) or vLLM's
    torch_profiler_dir (rank{r}.<id>.pt.trace.json.gz; the server needs
    VLLM_CUSTOM_SCOPES_FOR_PROFILING=1).

    Example: specmodel ingest /tmp/sglang_traces -o profiles/my-box --num-draft-tokens 4
    """
    if jobs is not None and jobs < 1:
        raise SpecmodelError(f"--jobs: must be >= 1, got {jobs}")
    opts = IngestOptions(num_draft_tokens=num_draft_tokens, topk=topk, step_kind=step_kind, step_batch=step_batch,
                         steps=steps, draft_forwards=draft_forwards)
    if name is not None:
        confined_name(name, "--name")  # `--name ../../x` must not write outside profiles/
    else:
        name = safe_name(output.name if output is not None else (
            inputs[0].resolve().name if len(inputs) == 1 and inputs[0].is_dir() else "ingested"))
    if output is None:
        output = Path("profiles") / name
    check_path_components(output, "-o/--output")
    if csv_path is not None:
        check_path_components(csv_path, "--csv")
    baseline = load_profile(baseline_path) if baseline_path is not None else None
    result = ingest(inputs, opts, jobs=jobs or os.cpu_count(), full_decode=full_decode)
    profile = None if no_save else build_profile(result, name=name, opts=opts, steps=steps, baseline=baseline)
    written = save_profile(profile, output) if profile is not None else None
    if csv_path is not None:
        atomic_write_text(csv_path, format_csv(result))
    if as_json:
        d = INGEST.stamp(result.to_dict())
        d["profile"] = str(written) if written else None
        click.echo(json.dumps(d, indent=2, allow_nan=False))
        return
    click.echo(f"{result.mode.upper()} trace, TP{result.world_size}, {len(result.traces)} rank file(s)")
    click.echo(format_table(result))
    for n in result.notes:
        click.echo(f"note: {n}")
    if written:
        click.echo(f"wrote {written}")
