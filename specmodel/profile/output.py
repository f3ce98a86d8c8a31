"""From a finished run (rank 0's ``result.json``) to ``profiles/<name>/``: the validated
``profile.json``, ``costs.csv``, ``ranks.csv``, ``allreduce.csv``, per-rank Chrome traces and,
with ``--spec-loop``, ``specloop.json``. Pure Python (no torch).

The directory is written next to its final place and swapped in with renames (io.replace_dir), so a
reader sees the old profile or the new one, never a mix; a failed run leaves the old one
byte-identical, and a replaced one is kept as ``previous/`` inside the new one.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmodel import __version__
from specmodel.errors import field_name
from specmodel.io import atomic_write_text, replace_dir
from specmodel.schema.costrows import AllReducePoint, CostRow, SpecConfig
from specmodel.schema.phases import CYCLE_KINDS, TARGET_KINDS, collectives_per_forward
from specmodel.schema.profile import Profile, check_profile_destination, write_profile_json
from specmodel.schema.source import Source
from specmodel.units import alpha_beta
from specmodel.units import ms as fmt_ms

if TYPE_CHECKING:
    from specmodel.profile.plan import RunPlan
    from specmodel.profile.result import RowResult, RunResult, SpecLoopResult

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _destination_inputs() -> str:
    """The inputs that name a profile run's directory, as the front end spells them."""
    return f"{field_name('name')}/{field_name('out_dir')}"

def check_destination(dest: Path) -> None:
    """Refuse (exit 2, before any rank starts) to replace something that is not our own output:
    the rule every profile writer shares (schema/profile.py ``check_profile_destination``)."""
    check_profile_destination(dest, _destination_inputs())


def _row(r: RowResult, plan: RunPlan) -> CostRow:
    hidden = plan.target.hidden_size if r.kind in TARGET_KINDS else plan.drafter.hidden_size
    elem = DTYPE_BYTES.get(plan.dtype, 4)
    return CostRow(kind=r.kind, batch=r.batch, tokens=r.tokens, total_s=r.total_s,
                   allreduce_s=r.allreduce_s, compute_s=r.compute_s, other_s=0.0,
                   n_allreduce=r.n_allreduce, allreduce_msg_bytes=r.tokens * hidden * elem,
                   spread_s=r.spread_s, skew_s=r.skew_s, samples=r.samples,
                   context_tokens=r.context_tokens, ci95_rel=r.ci95_rel)


def build_profile(result: RunResult, *, overhead_s: float | None = None) -> Profile:
    from specmodel.model.allreduce import fit_alpha_beta

    plan = result.plan
    tgt, dr = plan.target.to_dict(), plan.drafter.to_dict()
    hw = result.hardware or {}
    sc = plan.scaling or {}
    device = hw.get("gpu_name") if plan.device == "cuda" else hw.get("cpu_name")
    size = (f"{tgt['num_layers']} of {sc['original']['num_hidden_layers']} layers, hidden {tgt['hidden_size']} "
            f"of {sc['original']['hidden_size']}") if sc.get("scaled") else "full size"
    source = Source.measured(
        tool=f"specmodel profile {__version__}",
        description=(f"measured by specmodel profile: TP{plan.tp} {plan.backend} on {hw.get('hostname', '?')} "
                     f"({device or 'unknown device'}); {tgt['name']} ({size})"),
        created_utc=result.finished_utc or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        method=("each forward annotated (record_function + NVTX); times from interleaved passes over all points "
                f"without the profiler (CUDA-graph replays on a GPU unless {field_name('eager')}) until each point's "
                "95% interval is within the target or the time budget is spent; all-reduce share from a "
                "torch.profiler pass (collective time isolated from the trace, compute = the rest); median over "
                "repetitions of the rank mean, spread = IQR, ci95_rel = order-statistic 95% interval of that median"),
    )
    model = {
        "name": tgt["name"], "family": tgt["family"], "architecture": tgt["architecture"],
        "model_type": tgt["model_type"], "config_source": plan.model_source,
        "num_hidden_layers": tgt["num_layers"], "hidden_size": tgt["hidden_size"],
        "dtype": plan.dtype, "activation_bytes": DTYPE_BYTES.get(plan.dtype, 4),
        "allreduce_per_forward": collectives_per_forward("decode", tgt["num_layers"]), "allgather_per_forward": 1,
        "drafter_allreduce_per_forward": collectives_per_forward("draft", tgt["num_layers"]), "context_len": plan.context_len,
        "target": tgt, "drafter": dr, "scaling": sc,
    }
    rows = tuple(_row(r, plan) for r in result.rows)
    tp = plan.tp
    pts = tuple(AllReducePoint(msg_bytes=a.msg_bytes, tp=tp, latency_s=a.latency_s, spread_s=a.spread_s)
                for a in result.allreduce_points if a.latency_s > 0)
    fit = None
    notes = list(plan.notes)
    if tp >= 2 and len({p.msg_bytes for p in pts}) >= 2:
        fit = fit_alpha_beta([p.msg_bytes for p in pts], [p.latency_s for p in pts], tp)
    if any(not r.calls_matched for r in result.rows):
        notes.append("some forwards issued different collective sequences on different ranks: their skew is 0")
    expect = {k: collectives_per_forward(k, tgt["num_layers"]) for k in CYCLE_KINDS}
    for r in result.rows:
        if tp > 1 and r.n_allreduce != expect[r.kind]:
            notes.append(f"{r.label}: {r.n_allreduce} all-reduces found in the trace, "
                         f"{expect[r.kind]} expected")
    if sc.get("scaled"):
        notes.append(f"scaled model ({sc.get('reason')}): {size}; times are for the scaled model, not extrapolated")
    loop = result.spec_loop
    co = result.cycle_overhead
    if overhead_s is None and co is not None:
        overhead_s = co.overhead_s
        notes.append(f"overhead_s = {fmt_ms(co.overhead_s, 3)} per cycle (spread {fmt_ms(co.spread_s, 3)} over "
                     f"{co.chunks} chunks): the host work between the forwards of {co.cycles} real cycles at batch "
                     f"{co.batch} (cycle {fmt_ms(co.cycle_s, 2)}), taken for every batch")
    elif overhead_s is None:
        overhead_s = 0.0
    elif loop:
        notes.append(f"overhead_s = {fmt_ms(overhead_s, 3)} per cycle, measured outside the forwards in "
                     f"`specmodel profile {field_name('spec_loop')}` on the same stack")
    return Profile(
        name=plan.name, source=source, hardware=hw, model=model, tp=tp, backend=plan.backend,
        spec=SpecConfig(algorithm="EAGLE3", steps=plan.steps, topk=plan.topk,
                        num_draft_tokens=plan.num_draft_tokens),
        overhead_s=overhead_s, costs=rows, allreduce_points=pts, allreduce_fit=fit, notes=tuple(notes),
    )


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def costs_csv(result: RunResult) -> str:
    hdr = ["kind", "batch", "tokens", "context_tokens", "total_s", "allreduce_s", "compute_s", "other_s",
           "allreduce_frac", "skew_s", "transfer_s", "spread_s", "ci95_rel", "busy_s", "n_allreduce", "n_allgather",
           "samples"]

    def opt(v: Any, fmt: str) -> str:
        return "" if v is None else format(v, fmt)

    rows = [[r.kind, r.batch, r.tokens, r.context_tokens, f"{r.total_s:.9g}",
             f"{r.allreduce_s:.9g}", f"{r.compute_s:.9g}", "0", f"{r.allreduce_s / r.total_s:.6f}",
             f"{r.skew_s:.9g}", f"{r.allreduce_s - r.skew_s:.9g}", f"{r.spread_s:.9g}",
             opt(r.ci95_rel, ".6f"), opt(r.busy_s, ".9g"), r.n_allreduce, r.n_allgather,
             r.samples] for r in result.rows]
    return _csv(hdr, rows)


def ranks_csv(result: RunResult) -> str:
    hdr = ["kind", "batch", "tokens", "context_tokens", "rank", "total_s", "allreduce_s", "skew_s", "transfer_s"]
    rows = [[r.kind, r.batch, r.tokens, r.context_tokens, pr.rank, f"{pr.total_s:.9g}", f"{pr.allreduce_s:.9g}",
             f"{pr.skew_s:.9g}", f"{pr.transfer_s:.9g}"] for r in result.rows for pr in r.per_rank]
    return _csv(hdr, rows)


def allreduce_csv(result: RunResult) -> str:
    return _csv(["msg_bytes", "latency_s", "spread_s"],
                [[a.msg_bytes, f"{a.latency_s:.9g}", f"{a.spread_s:.9g}"] for a in result.allreduce_points])


def write_output(result: RunResult, dest: Path, trace_dir: Path | None, *,
                 overhead_s: float | None = None, extra: dict[str, Any] | None = None) -> Profile:
    """Write ``dest`` (``profiles/<name>``) as a whole: staged beside it, then renamed into place."""
    profile = build_profile(result, overhead_s=overhead_s)
    check_destination(dest)

    def fill(stage: Path) -> None:
        write_profile_json(profile, stage / "profile.json")  # validated round trip
        atomic_write_text(stage / "costs.csv", costs_csv(result))
        atomic_write_text(stage / "ranks.csv", ranks_csv(result))
        if result.allreduce_points:
            atomic_write_text(stage / "allreduce.csv", allreduce_csv(result))
        if extra:
            for fname, obj in extra.items():
                atomic_write_text(stage / fname, json.dumps(obj, indent=2, allow_nan=False) + "\n")
        if trace_dir is not None and trace_dir.is_dir():
            shutil.copytree(trace_dir, stage / "traces")

    replace_dir(dest, fill, flag=_destination_inputs())  # the old run kept as dest/previous/
    return replace(profile, path=str(dest / "profile.json"))


# ---------------------------------------------------------------- the speculative loop vs the model


def compare_loop(profile: Profile, loop: SpecLoopResult) -> dict[str, Any]:
    """Predicted (the cycle model on ``profile``) vs measured (the loop) tok/s, same acceptance.

    The prediction uses the acceptance the loop actually drew (its histogram), so the comparison
    tests the cost side of the model. ``predicted`` uses the profile as is; ``predicted_forwards_only``
    drops the per-cycle overhead; ``predicted_with_loop_overhead`` adds the overhead the loop measured.
    """
    from specmodel.model.accept import from_histogram
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict

    spec = SpecConfig(algorithm="EAGLE3", steps=loop.steps, topk=loop.topk,
                      num_draft_tokens=loop.num_draft_tokens)
    hist = {int(k): float(v) for k, v in loop.spec.accept_hist.items()}
    dist = from_histogram(hist, max_tokens=spec.steps + 1, source="drawn in the loop")
    b = loop.batch
    measured = loop.spec.tokens_per_s
    base_meas = loop.baseline.tokens_per_s

    def one(p: Profile) -> dict[str, Any]:
        pr = predict(p, dist, OperatingPoint(batch=b, spec=spec))
        return {"tokens_per_s": pr.figures.tokens_per_s, "cycle_s": pr.costs.cycle_s, "overhead_s": pr.costs.overhead_s,
                "speedup": pr.figures.speedup, "baseline_tokens_per_s": pr.figures.baseline_tokens_per_s,
                "rel_error": pr.figures.tokens_per_s / measured - 1.0}

    main = one(profile)
    return {
        "batch": b, "cycles": loop.cycles, "steps": spec.steps, "topk": spec.topk,
        "num_draft_tokens": spec.num_draft_tokens, "accept_len_requested": loop.accept_len_requested,
        "accept_len_drawn": loop.spec.accept_mean,
        "measured": {"tokens_per_s": measured, "cycle_s": loop.spec.cycle_s,
                     "draft_extend_s": loop.spec.draft_extend_s, "draft_step_s": loop.spec.draft_step_s,
                     "verify_s": loop.spec.verify_s, "overhead_s": loop.spec.overhead_s,
                     "baseline_tokens_per_s": base_meas, "speedup": measured / base_meas,
                     # per interleaved round, at the loop's mean acceptance: the speedup's spread
                     "speedup_by_round": [loop.spec.accept_mean / x for x in loop.round_cycle_over_step
                                          if x > 0],
                     # the 95 % interval of the median over rounds the speedup is read from, and why
                     # the rounds stopped (profile/specloop.measure_rounds)
                     "speedup_ci95_rel": loop.ci95_rel, "rounds": loop.rounds, "stopped": loop.stopped},
        "predicted": main,
        "predicted_forwards_only": one(replace(profile, overhead_s=0.0)),
        "predicted_with_loop_overhead": one(replace(profile, overhead_s=loop.spec.overhead_s)),
        "baseline_rel_error": main["baseline_tokens_per_s"] / base_meas - 1.0,
        # the go/no-go quantity: tok/s can be right while the speedup is not (a baseline error that
        # cancels a cycle error); predicted speedup over the measured one
        "speedup_rel_error": main["speedup"] / (measured / base_meas) - 1.0,
        "profile": profile.path or profile.name,
    }


def format_comparison(c: dict[str, Any]) -> str:
    m, p = c["measured"], c["predicted"]
    lines = [
        f"spec loop    batch {c['batch']}, steps {c['steps']}, topk {c['topk']}, draft tokens "
        f"{c['num_draft_tokens']}, {c['cycles']} cycles; accept {c['accept_len_drawn']:.2f} tokens/step drawn "
        f"(asked {c['accept_len_requested']:.2f})",
        f"measured     {m['tokens_per_s']:.2f} tok/s  cycle {fmt_ms(m['cycle_s'])} = draft-extend "
        f"{fmt_ms(m['draft_extend_s'], unit=False)} + {c['steps'] - 1} x draft {fmt_ms(m['draft_step_s'], unit=False)} + verify "
        f"{fmt_ms(m['verify_s'], unit=False)} + overhead {fmt_ms(m['overhead_s'])}",
        f"             baseline {m['baseline_tokens_per_s']:.2f} tok/s, speedup {m['speedup']:.2f}x"
        + (f" (rounds {min(m['speedup_by_round']):.2f}-{max(m['speedup_by_round']):.2f}x, baseline and "
           f"speculative interleaved)" if m.get("speedup_by_round") else "")
        + (f"; median of {m['rounds']} rounds ±{m['speedup_ci95_rel']:.1%} (95%, stopped: {m['stopped']})"
           if m.get("speedup_ci95_rel") is not None else ""),
        f"predicted    speedup {p['speedup']:.2f}x  speedup error {c['speedup_rel_error']:+.1%} (the go/no-go "
        f"quantity)",
        f"             {p['tokens_per_s']:.2f} tok/s  cycle {fmt_ms(p['cycle_s'])} (overhead "
        f"{fmt_ms(p['overhead_s'])})  tok/s error {p['rel_error']:+.1%}",
        f"             baseline {p['baseline_tokens_per_s']:.2f} tok/s  error {c['baseline_rel_error']:+.1%}",
        f"  forwards only          {c['predicted_forwards_only']['tokens_per_s']:.2f} tok/s  "
        f"error {c['predicted_forwards_only']['rel_error']:+.1%}",
        f"  + the loop's overhead  {c['predicted_with_loop_overhead']['tokens_per_s']:.2f} tok/s  "
        f"error {c['predicted_with_loop_overhead']['rel_error']:+.1%}",
    ]
    return "\n".join(lines)


def format_summary(profile: Profile, result: RunResult, dest: Path, wall_s: float) -> str:
    lines = [f"profile      {profile.name}: TP{profile.tp} {profile.backend}, {profile.label}",
             f"{'kind':<13}{'batch':>6}{'tokens':>7}{'context':>8}{'total ms':>10}{'±95%':>7}{'all-red ms':>11}"
             f"{'share':>7}{'skew ms':>9}{'spread ms':>10}{'n_ar':>6}"]
    for r in result.rows:
        ci = r.ci95_rel
        lines.append(f"{r.kind:<13}{r.batch:>6}{r.tokens:>7}{r.context_tokens:>8}"
                     f"{fmt_ms(r.total_s, 3, unit=False):>10}{(f'{ci:.1%}' if ci is not None else '-'):>7}"
                     f"{fmt_ms(r.allreduce_s, 3, unit=False):>11}{r.allreduce_s / r.total_s:>7.1%}{fmt_ms(r.skew_s, 3, unit=False):>9}"
                     f"{fmt_ms(r.spread_s, 3, unit=False):>10}{r.n_allreduce:>6}")
    cis = [r.ci95_rel for r in result.rows if r.ci95_rel is not None]
    if cis:
        target = result.plan.ci_target_rel
        met = sum(1 for c in cis if c <= target)
        lines.append(f"interval     95% of each point's median: {met}/{len(result.rows)} within the {target:.0%} "
                     f"target after {result.rows[0].passes} interleaved passes (worst {max(cis):.1%})")
    if profile.allreduce_fit is not None:
        f = profile.allreduce_fit
        lines.append(f"all-reduce   {len(profile.allreduce_points)} sizes; ring fit {alpha_beta(f.alpha_s, f.beta_bytes_per_s)}")
    lines.append(f"wrote        {dest}/ (profile.json, costs.csv, ranks.csv, traces/) in {wall_s:.1f} s")
    lines.append(f"next         specmodel predict {field_name('profile')} {dest} {field_name('accept_len')} 3.2")
    return "\n".join(lines)
