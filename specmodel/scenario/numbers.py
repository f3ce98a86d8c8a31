"""A profile from plain numbers (``--baseline-tps``, ``--verify-ms``, ``--draft-ms``, ``--overhead-ms``,
alone or over a profile) and a profile's all-reduce re-costed by a measured nccl-tests fit. Every
replaced cost is recorded in ``source.cost_origin`` so the prediction says where it came from."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from specmodel.errors import FieldError, SpecmodelError, field_name
from specmodel.model.costs import forward_cost
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.phases import forward_tokens
from specmodel.schema.profile import Profile
from specmodel.schema.source import Source
from specmodel.units import alpha_beta, from_ms, ms

if TYPE_CHECKING:
    from specmodel.scenario.args import ScenarioArgs


def _number_row(kind: str, batch: int, tokens: int, total_s: float, ar_frac: float | None,
                like: Profile | None, context_tokens: int = 0) -> CostRow:
    """One cost row from a plain number; split by --allreduce-frac, else the profile's split there."""
    if ar_frac is None and like is not None and (like.has(kind) or kind == "verify"):
        fc = forward_cost(like, kind, tokens)
        ar_frac = fc.allreduce_s / fc.total_s if fc.total_s > 0 else 0.0
        comp_frac = fc.compute_s / fc.total_s if fc.total_s > 0 else 0.0
    else:
        comp_frac = 0.0
    ar = total_s * (ar_frac or 0.0)
    comp = total_s * comp_frac
    return CostRow(kind=kind, batch=batch, tokens=tokens, total_s=total_s, allreduce_s=ar, compute_s=comp,
                   other_s=max(total_s - ar - comp, 0.0), context_tokens=context_tokens)


def with_origins(profile: Profile, origins: dict[str, str], *, tp_known: bool | None = None) -> Profile:
    """``profile`` with ``source.cost_origin`` extended by ``origins`` (read by the prediction's provenance)."""
    return replace(profile, source=profile.source.with_origins(origins, tp_known=tp_known))


def apply_numbers(profile: Profile | None, *, batch: int, spec: SpecConfig, tp: int | None,
                  baseline_tps: float | None, verify_ms: float | None, draft_ms: float | None,
                  overhead_ms: float | None, allreduce_frac: float | None, context_tokens: int = 0) -> Profile:
    """Plain numbers from the command line. Each replaces that kind's curve with one point.

    ``--baseline-tps`` is the total throughput over the ``--batch`` requests (decode step = batch / tps);
    every number is taken to be measured at ``context_tokens`` (``--context``, default 0);
    ``--verify-ms`` one verify forward; ``--draft-ms`` one drafter forward (run ``--steps``
    times per cycle); ``--overhead-ms`` the per-cycle overhead. Every replaced cost is
    recorded in ``source.cost_origin`` so the output says it came from the user's flag.
    """
    if profile is None:
        if baseline_tps is None:
            raise FieldError("baseline_tps", "required when no {profile} is given with plain numbers")
        if verify_ms is None:
            raise FieldError("verify_ms", "required when no {profile} is given with plain numbers")
    rows = list(profile.costs) if profile is not None else []
    like = profile
    origins: dict[str, str] = {}

    def put(kind: str, tokens: int, total_s: float, frac: float | None) -> None:
        nonlocal rows
        try:
            new = _number_row(kind, batch, tokens, total_s, frac, like, context_tokens)
        except SpecmodelError as exc:  # (a forward-pass time out of range: name the field that set it)
            raise FieldError({"decode": "baseline_tps", "verify": "verify_ms", "draft": "draft_ms"}[kind], str(exc)) from None
        rows = [r for r in rows if r.kind != kind] + [new]

    # draft rows keep their own split (the drafter's all-reduce share differs from the target's)
    if baseline_tps is not None:
        put("decode", batch, batch / baseline_tps, allreduce_frac)
        origins["decode"] = f"your flag {field_name('baseline_tps')} {baseline_tps:g} (at batch {batch})"
    if verify_ms is not None:
        put("verify", forward_tokens("verify", batch, spec), from_ms(verify_ms), allreduce_frac)
        origins["verify"] = f"your flag {field_name('verify_ms')} {verify_ms:g}"
    if draft_ms is not None:
        put("draft", forward_tokens("draft", batch, spec), from_ms(draft_ms), None)
        rows = [r for r in rows if r.kind != "draft_extend"]
        origins["draft"] = f"your flag {field_name('draft_ms')} {draft_ms:g} (x {spec.steps} steps)"
    if overhead_ms is not None:
        origins["overhead"] = f"your flag {field_name('overhead_ms')} {overhead_ms:g}"
    if allreduce_frac is not None:
        origins["allreduce"] = f"your flag {field_name('allreduce_frac')} {allreduce_frac:g} (of baseline and verify)"
    elif profile is None:
        origins["allreduce"] = f"unknown: not split (pass {field_name('allreduce_frac')})"
    elif baseline_tps is not None or verify_ms is not None:
        origins["allreduce"] = (f"your costs split like {profile.name}'s rows "
                                f"(pass {field_name('allreduce_frac')} to set it)")
    if profile is None:
        base = Profile(name="command-line", source=Source.numbers(tp_known=tp is not None),
                       tp=tp or 1, costs=tuple(rows), spec=spec,
                       overhead_s=from_ms(overhead_ms or 0.0), path="(command line)")
        return with_origins(base, origins, tp_known=tp is not None)
    new = profile.with_costs(rows)
    if overhead_ms is not None:
        new = replace(new, overhead_s=from_ms(overhead_ms))
    if any(v is not None for v in (baseline_tps, verify_ms, draft_ms, overhead_ms)):
        new = replace(new, source=new.source.with_description(f"{profile.label}; with command-line overrides"))
    return with_origins(new, origins)


def apply_allreduce_fit(profile: Profile, fit_path: str) -> tuple[Profile, str]:
    """The profile with every all-reduce re-costed by a measured nccl-tests fit (``--allreduce-fit``),
    and the note that says what changed."""
    from specmodel.model.allreduce import recost_rows
    from specmodel.trace.nccl_tests import load_fit_document

    fit, points = load_fit_document(fit_path)
    try:
        rows, changed = recost_rows(profile.costs, profile.tp, fit)
    except SpecmodelError as exc:
        raise FieldError("allreduce_fit", f"{fit_path}: {exc}") from None
    if changed == 0:
        raise FieldError("allreduce_fit", f"{fit_path}: profile {profile.name} has no cost rows with all-reduce call "
                                          "counts and message sizes to re-cost")
    keep = tuple(p for p in profile.allreduce_points if p.tp != fit.tp)
    new = replace(profile.with_costs(rows), allreduce_fit=fit, allreduce_points=keep + points)
    before = min(profile.rows("decode"), key=lambda r: r.tokens)
    after = min(new.rows("decode"), key=lambda r: r.tokens)
    note = (f"all-reduce re-costed with {fit_path}: {changed} of {len(rows)} rows, "
            f"{alpha_beta(fit.alpha_s, fit.beta_bytes_per_s)} ({fit.algorithm}, TP {fit.tp}); "
            f"decode at {before.tokens} tokens: all-reduce {ms(before.allreduce_s)} in the profile -> "
            f"{ms(after.allreduce_s)} (waiting/skew kept: {ms(after.skew_s)})")
    return with_origins(new, {"allreduce": f"nccl-tests fit {fit_path} at each row's message size "
                                           f"(+ waiting/skew as measured in {profile.name})"}), note


def missing_plain_pieces(args: ScenarioArgs, sweep: bool) -> None:
    """Plain-number input never silently borrows another box's costs: name the input to give."""
    missing = []
    if not sweep and args.baseline_tps is None:
        missing.append("{baseline_tps} (baseline tok/s at {batch})")
    if not sweep and args.verify_ms is None:
        missing.append("{verify_ms} (one verify forward)")
    if args.draft_ms is None and args.calibrate is None:
        missing.append("{draft_ms} (one draft step; or {calibrate} with an observed point)")
    if missing:
        given = "{baseline_sweep}" if sweep else "plain numbers"
        raise FieldError(None, f"{given} without a profile: missing {', '.join(missing)}; pass them, or "
                               "{profile} P to take the missing costs from that profile explicitly")
