"""``specmodel report``: the PDF go/no-go report (+ JSON and Markdown beside it)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from specmodel.commands.scenario import with_scenario
from specmodel.errors import SpecmodelError
from specmodel.io import check_output_dir, check_path_components, commit_set, os_error, staging_dir
from specmodel.limits import MAX_BATCH
from specmodel.scenario.resolve import Scenario, run_prediction

REPORTS_DIR = Path("reports")


def output_paths(output: str | None, profile_name: str) -> tuple[Path, Path, Path]:
    """(pdf, json, md) for ``-o``; validated before any work is done."""
    pdf = check_path_components(Path(output) if output else REPORTS_DIR / f"{profile_name}.pdf", "-o/--output")
    if pdf.suffix.lower() != ".pdf":
        raise SpecmodelError(f"-o/--output: {pdf}: must end in .pdf (the .json and .md are written beside it)")
    if pdf.is_dir():
        raise SpecmodelError(f"-o/--output: {pdf}: is a directory, expected a .pdf file path")
    for parent in (pdf.parent, *pdf.parent.parents):
        if parent.exists() and not parent.is_dir():
            raise SpecmodelError(f"-o/--output: {parent}: is a file, cannot create the report directory there")
    check_output_dir(pdf.parent, "-o/--output")
    return pdf, pdf.with_suffix(".json"), pdf.with_suffix(".md")


def _drafter_report(drafter: str | None, target: str | None, reference: str | None,
                    token_freq: str | None) -> tuple[Any, list[tuple[str, str]]]:
    if drafter is None:
        if target or reference or token_freq:
            raise SpecmodelError("--target/--reference-drafter/--token-freq need --drafter DIR")
        return None, []
    if not target:
        raise SpecmodelError("--drafter: needs --target DIR (the target model's directory) to check against")
    for flag, v in (("--drafter", drafter), ("--target", target), ("--reference-drafter", reference)):
        if v is not None and not Path(v).is_dir():
            raise SpecmodelError(f"{flag}: {v}: not a directory")
    if token_freq is not None and not Path(token_freq).is_file():
        raise SpecmodelError(f"--token-freq: {token_freq}: file not found")
    from specmodel.drafter.checks import check_drafter  # numpy + safetensors: declared dependencies
    rep = check_drafter(drafter_dir=Path(drafter), target_dir=Path(target),
                        reference_dir=Path(reference) if reference else None,
                        token_freq=Path(token_freq) if token_freq else None)
    inputs = [("drafter", str(Path(drafter).resolve())), ("target", str(Path(target).resolve()))]
    if reference:
        inputs.append(("reference drafter", str(Path(reference).resolve())))
    if token_freq:
        inputs.append(("token frequencies", str(Path(token_freq).resolve())))
    return rep, inputs


@click.command("report")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Where the PDF goes (default reports/<profile-name>.pdf); .json and .md are written beside it.")
@click.option("--max-batch", type=click.IntRange(max=MAX_BATCH), default=64, show_default=True,
              help="Largest batch for the batch sweep and the optimizer's batch limit (powers of two up to it).")
@click.option("--png-dir", type=click.Path(), default=None,
              help="Also write every page as a PNG into this directory (<name>-p<N>-<page>.png).")
@click.option("--drafter", type=click.Path(), default=None, help="EAGLE-3 drafter directory: add the drafter-check page.")
@click.option("--target", type=click.Path(), default=None, help="Target model directory (with --drafter).")
@click.option("--reference-drafter", type=click.Path(), default=None,
              help="A known-good drafter for the same target to compare against (with --drafter).")
@click.option("--token-freq", type=click.Path(), default=None,
              help="Target token frequencies, for the drafter's vocabulary-coverage ceiling (with --drafter).")
@with_scenario
def report_cmd(scenario: Scenario, output: str | None, max_batch: int, png_dir: str | None, drafter: str | None,
               target: str | None, reference_drafter: str | None, token_freq: str | None, **_: Any) -> None:
    """Write the go/no-go report: a PDF a lead reads in two minutes, plus JSON and Markdown.

    Pages: verdict; tok/s vs accept length; where the cycle goes; all-reduce vs message
    size; what-ifs (faster/custom all-reduce, TP 4 vs 8, drafter without TP, batch sweep);
    recommended configuration; drafter check (with --drafter).

    Example: specmodel report --accept-len 3.2 -o reports/kimi.pdf
    """
    if max_batch < 1:
        raise SpecmodelError(f"--max-batch: must be >= 1, got {max_batch}")
    pdf_path, json_path, md_path = output_paths(output, scenario.profile.name)
    if png_dir is not None:
        check_output_dir(png_dir, "--png-dir")
    pred = run_prediction(scenario)  # the same Prediction `predict --json` prints
    drafter_rep, drafter_inputs = _drafter_report(drafter, target, reference_drafter, token_freq)

    from specmodel.report.content import build_report

    accept = scenario.accept
    content = build_report(profile=scenario.profile, dist=accept.dist, spec=scenario.spec, prediction=pred,
                           notes=scenario.notes, per_position=accept.per_position,
                           observation=scenario.point.observation, max_batch=max_batch,
                           inputs=[("command", "specmodel " + shlex.join(sys.argv[1:]))],
                           drafter=drafter_rep, drafter_inputs=drafter_inputs, by_context=accept.by_context)
    from specmodel.report.markdown import render_markdown
    from specmodel.report.pdf import render_pdf_to_temp, write_pngs

    md = render_markdown(content)
    data = content.to_dict()
    try:
        pdf_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecmodelError(f"-o/--output: cannot create {pdf_path.parent}: {exc.strerror}") from None
    # the three files are one result: staged together, then renamed as a set (io.commit_set)
    staging = staging_dir(pdf_path.parent, pdf_path.stem)
    try:
        tmp, figures = render_pdf_to_temp(content, staging / pdf_path.name)
        os.replace(tmp, staging / pdf_path.name)
        (staging / json_path.name).write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
        (staging / md_path.name).write_text(md)
        commit_set(staging, [pdf_path.name, json_path.name, md_path.name])
    except OSError as exc:
        raise os_error(pdf_path, exc, "cannot write") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    pngs = write_pngs(figures, Path(png_dir), pdf_path.stem) if png_dir else []

    for n in scenario.notes:
        click.echo(f"note: {n}")
    for w in content.warnings:
        click.echo(f"warning: {w}")
    # the report's verdict: predict's, or BLOCKED when the drafter check says so (PDF page 1 the same)
    click.echo(f"verdict      {content.verdict_label}: {content.verdict_reason}")
    for m in pred.to_measure:
        click.echo(f"to measure   {m}")
    # the same sentence as the PDF's page 1 (one recommendation everywhere)
    click.echo(f"recommended  {content.optimizer.recommendation}")
    click.echo(f"json         {json_path.resolve()}")
    click.echo(f"markdown     {md_path.resolve()}")
    if pngs:
        click.echo(f"png          {len(pngs)} pages in {Path(png_dir or '.').resolve()}")
    click.echo(f"report       {pdf_path.resolve()} ({len(content.pages)} pages)")
