"""``specmodel check-drafter``: pre-flight check of an EAGLE-3 drafter against a target."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from specmodel.errors import FindingsFailed

if TYPE_CHECKING:
    from specmodel.drafter.findings import DrafterReport

_COLOURS = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}


def format_report(report: DrafterReport) -> str:
    """The table: STATUS  NAME  MESSAGE, one finding a line, then the verdict."""
    lines = [f"drafter    {report.drafter_dir}", f"target     {report.target_dir}"]
    if report.reference_dir is not None:
        lines.append(f"reference  {report.reference_dir}")
    lines.append("")
    width = max((len(f.name) for f in report.findings), default=4)
    for f in report.findings:
        status = click.style(f"{f.status:<4}", fg=_COLOURS[f.status], bold=f.status == "FAIL")
        lines.append(f"{status}  {f.name:<{width}}  {f.message}")
    c = report.counts()
    lines.append("")
    if report.acceptance_ceiling is not None:
        lines.append(f"acceptance ceiling  {report.acceptance_ceiling:.3f} per token (draft-vocab coverage)")
    lines.append(f"result     {report.status}  ({c['FAIL']} FAIL, {c['WARN']} WARN, {c['PASS']} PASS)")
    return "\n".join(lines)


@click.command("check-drafter")
@click.option("--drafter", "drafter", required=True, type=click.Path(), metavar="DIR",
              help="Drafter checkpoint directory (config.json + *.safetensors).")
@click.option("--target", "target", required=True, type=click.Path(), metavar="DIR",
              help="Target model directory; only its config.json is read.")
@click.option("--reference-drafter", "reference", type=click.Path(), metavar="DIR", default=None,
              help="A drafter known to work with the target: compare d2t slots and draft vocabs.")
@click.option("--token-freq", "token_freq", type=click.Path(), metavar="FILE", default=None,
              help="Target-token counts (JSON {id: count} or CSV 'id,count'): draft-vocab coverage = acceptance ceiling.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
def check_drafter_cmd(drafter: str, target: str, reference: str | None, token_freq: str | None, as_json: bool) -> None:
    """Can this EAGLE-3 drafter work with this target at all? Checks configs, weight layout,
    the d2t/t2d vocab maps, a reference drafter and your traffic's token coverage, in seconds.

    Exit 0 with only PASS/WARN, 1 with any FAIL, 2 on bad input.

    Example: specmodel check-drafter --drafter ./k2-eagle3 --target ./Kimi-K2.5 --reference-drafter ./k25-eagle3
    """
    from specmodel.drafter.checks import check_drafter

    report = check_drafter(drafter_dir=drafter, target_dir=target, reference_dir=reference, token_freq=token_freq)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        click.echo(format_report(report))
    if report.status == "FAIL":
        failed = [f.name for f in report.findings if f.status == "FAIL"]
        raise FindingsFailed(f"check-drafter: {len(failed)} FAIL: {', '.join(failed)}")
