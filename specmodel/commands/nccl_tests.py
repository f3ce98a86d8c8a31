"""``specmodel nccl-tests``: fit the α-β all-reduce model from all_reduce_perf output."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import click

from specmodel.errors import SpecmodelError
from specmodel.io import PREVIOUS, atomic_write_json, refuse_shipped
from specmodel.limits import MAX_TP
from specmodel.model.allreduce import allreduce_s, fit_alpha_beta, recost_rows
from specmodel.schema.costrows import AllReducePoint
from specmodel.schema.profile import check_profile_destination, load_profile, resolve_profile_path, save_profile
from specmodel.schema.source import Source, read_source_kind
from specmodel.trace.nccl_tests import (
    NcclRun,
    allreduce_points,
    check_corruption,
    fit_document,
    fit_warnings,
    parse_nccl_tests,
)
from specmodel.units import alpha_beta, us


def _merge(runs: list[NcclRun], tp: int) -> tuple[AllReducePoint, ...]:
    """Points of several files: median latency per size over all of them."""
    by: dict[int, list[AllReducePoint]] = {}
    for r in runs:
        for p in allreduce_points(r, tp):
            by.setdefault(p.msg_bytes, []).append(p)
    out = []
    for size in sorted(by):
        ps = by[size]
        lat = [p.latency_s for p in ps]
        spread = max(max(lat) - min(lat), max(p.spread_s for p in ps))
        out.append(AllReducePoint(msg_bytes=size, tp=tp, latency_s=statistics.median(lat), spread_s=spread))
    return tuple(out)


@click.command("nccl-tests")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--tp", type=click.IntRange(max=MAX_TP), default=None,
              help="Ranks in the all-reduce (default: the GPUs listed in the output's '#  Rank' lines).")
@click.option("--profile", "profile_path", type=click.Path(), default=None,
              help="Profile to copy the all-reduce points and fit into (written to -o, the input is left as is).")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Output: the profile copy with --profile, else a standalone specmodel.allreduce_fit JSON.")
@click.option("--algorithm", type=click.Choice(["ring", "oneshot", "twoshot"]), default="ring", show_default=True,
              help="All-reduce algorithm whose α-β form is fitted (NCCL on PCIe runs ring).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def nccl_tests_cmd(files: tuple[str, ...], tp: int | None, profile_path: str | None, output: str | None,
                   algorithm: str, as_json: bool, **_: Any) -> None:
    """Fit T = 2(p-1)a + 2(p-1)/p n/b to all_reduce_perf output (out-of-place times).

    Example: specmodel nccl-tests all_reduce_perf.txt --profile profiles/mybox -o profiles/mybox-nccl
    """
    if not files:
        raise SpecmodelError("give at least one all_reduce_perf output file")
    if tp is not None and tp < 2:
        raise SpecmodelError(f"--tp: an all-reduce needs >= 2 ranks, got {tp}")
    if profile_path is not None:
        if output is None:
            raise SpecmodelError("-o: required with --profile (the input profile is never modified in place)")
        check_profile_destination(output, "-o")  # before any work: shipped, reference, foreign -> refused
    elif output is not None:
        refuse_shipped(output, "-o")
        if Path(output).is_file() and read_source_kind(output) is not None:
            raise SpecmodelError(f"-o: {output}: holds a specmodel profile; a fit alone never replaces one "
                                 "(pass --profile to write a profile with the fit)")
    runs = [parse_nccl_tests(f) for f in files]
    for r in runs:
        if not r.is_allreduce:
            what = r.program or f"redop {r.rows[0].redop!r}, root {r.rows[0].root}"
            raise SpecmodelError(f"{r.path}: not all_reduce_perf output ({what}); the all-reduce model needs all_reduce_perf")
        check_corruption(r)
    ranks = {r.n_ranks for r in runs if r.n_ranks is not None}
    if len(ranks) > 1:
        raise SpecmodelError(f"files ran on different GPU counts ({', '.join(map(str, sorted(ranks)))}); fit one TP degree at a time")
    found = ranks.pop() if ranks else None
    if tp is None:
        if found is None:
            raise SpecmodelError(f"{runs[0].path}: the output lists no ranks; pass --tp N")
        tp = found
    elif found is not None and found != tp:
        raise SpecmodelError(f"--tp {tp}: {runs[0].path} ran on {found} GPUs")
    if tp < 2:
        raise SpecmodelError(f"{runs[0].path}: ran on {tp} GPU; an all-reduce fit needs >= 2 ranks")
    if tp > MAX_TP:
        raise SpecmodelError(f"{runs[0].path}: lists {tp} ranks, more than {MAX_TP} (the bound specmodel accepts)")
    points = _merge(runs, tp)
    if len(points) < 2:
        raise SpecmodelError(f"{runs[0].path}: needs at least two message sizes > 0 to fit α and β, found {len(points)}")
    fit = fit_alpha_beta([p.msg_bytes for p in points], [p.latency_s for p in points], tp, algorithm=algorithm)
    errs = [(allreduce_s(p.msg_bytes, tp, fit) - p.latency_s) / p.latency_s for p in points]
    warnings = fit_warnings(runs, fit, points)  # (a cut run, a beta the rows cannot give: flagged, not hidden)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)

    written: Path | None = None
    profile_note = ""
    if profile_path is not None:
        assert output is not None
        prof = load_profile(profile_path)
        keep = tuple(p for p in prof.allreduce_points if p.tp != tp)
        files_txt = ", ".join(r.path for r in runs)
        src = prof.source.with_allreduce_from(f"nccl-tests {files_txt}")
        rows = prof.costs
        if prof.tp == tp:
            # the measured fit re-costs every all-reduce of the profile, so predictions change with it
            rows, changed = recost_rows(prof.costs, tp, fit)
            profile_note = f"re-costed the all-reduce of {changed} of {len(rows)} cost rows with the fit (skew kept)"
            src = Source.derived(base=src, derived_from=(f"profile {prof.name} ({prof.source_kind})",
                                                         f"nccl-tests {files_txt}"),
                                 description=(f"derived from profile {prof.name} ({prof.label}) and nccl-tests "
                                              f"{files_txt} (all-reduce re-costed with the measured fit)"),
                                 allreduce_from=src.allreduce_from)
        else:
            profile_note = f"profile {prof.name} is TP {prof.tp}; the fit is at TP {tp} (used for TP what-ifs only)"
        out_name = Path(output).parent.name if Path(output).suffix == ".json" else Path(output).name
        new = dataclasses.replace(prof, allreduce_points=keep + points, allreduce_fit=fit, source=src, costs=rows,
                                  name=out_name or f"{prof.name}+nccl-tests")
        in_place = check_profile_destination(output, "-o").resolve() == resolve_profile_path(profile_path).resolve()
        written = save_profile(new, output, flag="-o")
        if in_place:
            kept = written.with_suffix(f".{PREVIOUS}.json") if written.name != "profile.json" else written.parent / PREVIOUS
            profile_note = ((profile_note + "; " if profile_note else "")
                            + f"updated the profile in place (as asked by -o); the old one is kept in {kept}")
    elif output is not None:
        written = atomic_write_json(output, fit_document(fit, points, runs))

    if as_json:
        doc = fit_document(fit, points, runs)
        doc["relative_errors"] = errs
        doc["warnings"] = list(warnings)
        if written is not None:
            doc["written"] = str(written)
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
        return
    lines = []
    for r in runs:
        ver = f", nccl-tests {r.version}" if r.version else ""
        lines.append(f"file         {r.path}: {r.program or 'all_reduce_perf (pre-2.13 format)'}{ver}, {r.n_ranks or tp} ranks, "
                     f"{len(r.rows)} rows, check column {r.check_column or 'none'}"
                     + (", per-iteration timing" if r.per_iteration else ""))
    lines.append(f"fit          {algorithm}: {alpha_beta(fit.alpha_s, fit.beta_bytes_per_s, 3)} (per step, per link) "
                 f"at TP {tp}; median |error| {statistics.median(abs(e) for e in errs):.1%}")
    lines.append("             size (B)   measured (us)   fitted (us)   error")
    for p, e in zip(points, errs, strict=True):
        lines.append(f"       {p.msg_bytes:>14}  {us(p.latency_s, unit=False):>14}  {us(allreduce_s(p.msg_bytes, tp, fit), unit=False):>12}  {e:>+6.1%}")
    if profile_note:
        lines.append(f"note: {profile_note}")
    if written is not None:
        lines.append(f"wrote        {written}")
    click.echo("\n".join(lines))
