"""One cycle's costs at an operating point, looked up in a profile: T_base(B, L), T_verify(B·ndt, L)
and the drafter's forwards summed into a :class:`~specmodel.model.cycle.CycleCosts`
(:func:`cycle_costs`; the cycle equation is :func:`specmodel.model.cycle.cycle_s`), the warnings and
assumptions a cost nobody measured carries, the calibration that folds one observed point's unseen
cost into the per-cycle overhead (:func:`calibrate`), and the measured 95 % interval of a cost read
between rows (:func:`row_ci95_rel`). :func:`specmodel.model.predict.predict` composes these into a
prediction."""

from __future__ import annotations

import dataclasses

from specmodel.errors import FieldError, field_name
from specmodel.model import cycle as eq
from specmodel.model.calibrate import (
    Calibration,
    Observation,
    check_observation,
    looks_per_request,
    unseen_cycle_s,
)
from specmodel.model.costs import ZERO_COST, ForwardCost, default_context, forward_cost
from specmodel.model.cycle import Assumption, CycleCosts
from specmodel.model.hostdraft import host_cycle_costs
from specmodel.model.provenance import cost_origins, pass_or_calibrate
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.phases import canonical_method, forward_tokens, is_host_proposer
from specmodel.schema.profile import Profile
from specmodel.schema.seams import COST_FIGURES
from specmodel.units import ms


def cycle_costs(profile: Profile, *, batch: int, spec: SpecConfig, overhead_s: float | None = None,
                context_tokens: float | None = None) -> CycleCosts:
    """Look up T_base(B, L), T_verify(B·ndt, L), T_draft(B·topk, L) in the profile and sum a cycle.

    L = ``context_tokens`` of KV per request (default: the profile's smallest measured decode context).
    A profile with a ``draft`` origin and no draft row (vLLM's engine step log,
    :mod:`specmodel.engines.vllm.enginelog`) holds the drafter inside its verify rows: T_draft = 0
    there, with no "assumed free" warning, so T_cycle = T_verify row + overhead counts it once.
    """
    if batch < 1:
        raise FieldError("batch", f"must be >= 1, got {batch}")
    cc = _cycle_costs(profile, batch=batch, spec=spec, overhead_s=overhead_s, context_tokens=context_tokens)
    # SGLang's host work, already named as not measured (its Scheduler seams), is not named twice; a
    # drafter named as not measured keeps the seam's line too: it says why there are no rows
    host_named = any(a.kind == "host" for a in cc.assumptions)
    seams = tuple(a for a in _seam_assumptions(profile, cc.batch, cc.context_tokens, overhead_s)
                  if not (host_named and a.kind == "host"))
    return dataclasses.replace(cc, stated_assumptions=cc.stated_assumptions + seams) if seams else cc


def _seam_assumptions(profile: Profile, batch: int, ctx: float, overhead_s: float | None) -> tuple[Assumption, ...]:
    """A cost timed while the engine hook could not wrap the seam it rests on (the profile's
    ``missing_seams``: a drafter class the hook has no target for, a runner that overrides a
    wrapped method, a member a newer engine renamed) is lower than the truth by an unknown amount:
    each one names the verdict (``draft time not recorded: SuffixSpeculator.propose not found in
    vLLM 0.35.0``). A cost given on the command line for that kind replaces it."""
    given = cost_origins(profile)
    out: list[Assumption] = []
    seen: set[str] = set()
    for m in profile.missing_seams:
        kind = COST_FIGURES.get(m.figure)
        if kind is None or (kind == "host" and (overhead_s is not None or "overhead" in given)):
            continue
        if kind != "host" and kind in given:
            continue
        said = f"{m.line()} (the {kind} cost is lower than the truth by an unknown amount)"
        if said in seen:
            continue
        seen.add(said)
        out.append(Assumption(kind=kind, fallback="", batch=batch, tokens=0.0, context_tokens=ctx, said=said,
                              measure_hint=f"record again on an engine whose {m.seam} the hook wraps (`specmodel "
                                           f"{m.engine} {field_name('check')}` lists the seams), or give the {kind} "
                                           f"cost on the command line"))
    return tuple(out)


def _cycle_costs(profile: Profile, *, batch: int, spec: SpecConfig, overhead_s: float | None,
                 context_tokens: float | None) -> CycleCosts:
    if is_host_proposer(spec.algorithm):
        # ngram / suffix: no drafter forward; a verify step's host work is not borrowed from another drafter
        return host_cycle_costs(profile, batch=batch, spec=spec, context_tokens=context_tokens, proposal_s=overhead_s)
    ctx = float(default_context(profile) if context_tokens is None else context_tokens)
    warnings: list[str] = []
    base = forward_cost(profile, "decode", forward_tokens("decode", batch, spec), ctx)
    verify = forward_cost(profile, "verify", forward_tokens("verify", batch, spec), ctx)
    if verify.from_kind:
        warnings.append("no verify rows in the profile: verify cost taken from the decode curve T_fwd(B x draft tokens)")
    draft_extend: ForwardCost | None = None
    oh = profile.overhead_s if overhead_s is None else overhead_s
    stated = _draft_assumptions(profile, spec, batch, ctx) + _host_work_assumptions(profile, batch, ctx, oh)
    if profile.has("draft"):
        draft_step = forward_cost(profile, "draft", forward_tokens("draft", batch, spec), ctx)
        if profile.has("draft_extend"):
            draft_extend = forward_cost(profile, "draft_extend", forward_tokens("draft_extend", batch, spec), ctx)
        total = eq.draft_s(draft_step.total_s, spec.steps, draft_extend.total_s if draft_extend else None)
        ar = eq.draft_s(draft_step.allreduce_s, spec.steps, draft_extend.allreduce_s if draft_extend else None)
    else:
        draft_step = ZERO_COST
        total = ar = 0.0
        if "draft" not in cost_origins(profile):
            # with a "draft" origin and no draft row the verify row is the whole cycle (vLLM's engine
            # log times a speculative step whole: engines/vllm/enginelog.py): adding a drafter would count it twice
            warnings.append("no draft cost measured or given: draft assumed free, so tok/s is an upper bound "
                            f"({pass_or_calibrate('draft_ms')})")
    for fc in (f for f in (base, verify, draft_step, draft_extend) if f is not None):
        for e in fc.extrapolations:
            warnings.append(f"{fc.kind} cost is extrapolated beyond the measured range ({e.label})")
    if oh == 0.0 and "overhead" not in cost_origins(profile) and not profile.source.host_work_in_rows:
        # same caveat as a missing draft: an unmeasured cost is not a free one
        warnings.append("no per-cycle overhead measured or given (0.00 ms): tok/s is an upper bound "
                        f"({pass_or_calibrate('overhead_ms')})")
    for fc in (f for f in (base, verify, draft_extend) if f is not None):
        if fc.note:
            warnings.append(fc.note)
    return CycleCosts(batch=batch, spec=spec, base=base, verify=verify, draft_step=draft_step,
                      draft_extend=draft_extend, draft_total_s=total, draft_allreduce_s=ar,
                      overhead_s=oh, context_tokens=ctx, warnings=tuple(warnings), stated_assumptions=stated)


def _draft_assumptions(profile: Profile, spec: SpecConfig, batch: int, ctx: float) -> tuple[Assumption, ...]:
    """The drafter cost of a forward drafter the profile did not measure: none at all (free, an
    upper bound) or another drafter kind's forward. Either is an assumption the verdict names;
    a cost given on the command line (``--draft-ms``) is not."""
    if "draft" in cost_origins(profile):
        return ()
    method = canonical_method(spec.algorithm) or spec.algorithm.lower()
    profiled = canonical_method(profile.spec.algorithm)
    hint = (f"run the server with method {method} under `specmodel vllm` (or `specmodel sglang`) and "
            f"`{field_name('summarize')}` it with the baseline run, or pass {field_name('draft_ms')}")
    if not profile.has("draft"):
        return (Assumption(kind="draft", fallback="", batch=batch, tokens=0.0, context_tokens=ctx,
                           assumed_as=f"0 s per drafter forward (no {method} drafter measured)", measure_hint=hint),)
    if profiled is not None and profiled != method and not is_host_proposer(profiled):
        return (Assumption(kind="draft", fallback="", batch=batch, tokens=0.0, context_tokens=ctx,
                           assumed_as=f"= the {profiled} drafter's measured forward (no {method} drafter profiled)",
                           measure_hint=hint),)
    return ()


#: The verdict's qualifier for an SGLang hook profile whose rows hold forwards only.
SGLANG_HOST_WORK_UNMEASURED = ("SGLang host work not measured: the cycle counts GPU forwards only "
                               "(an optimistic cost)")


def _host_work_assumptions(profile: Profile, batch: int, ctx: float, overhead_s: float) -> tuple[Assumption, ...]:
    """An SGLang hook profile recorded before the hook timed the scheduler's step (or where its
    seams were not found) prices a cycle as its forwards alone: the host work between them (draft
    preparation, tree building, verify bookkeeping, batch building) is assumed 0 -- an optimistic
    cost the verdict names. An overhead given (``--overhead-ms``) or calibrated removes it."""
    src = profile.source
    if not (src.from_hook and src.engine == "sglang") or src.host_work_in_rows:
        return ()
    if overhead_s > 0 or "overhead" in cost_origins(profile):
        return ()
    # kind "host": "P not given (rests on an assumed host cost)" fits page 1's key figures
    return (Assumption(kind="host", fallback="", batch=batch, tokens=0.0, context_tokens=ctx,
                       said=SGLANG_HOST_WORK_UNMEASURED,
                       measure_hint="record both servers again under `specmodel sglang` (it times the scheduler's "
                                    f"step) and {field_name('summarize')} them, or pass {field_name('overhead_ms')} / "
                                    f"{field_name('calibrate')}"),)



def calibrate(profile: Profile, obs: Observation, spec: SpecConfig,
              context_tokens: float | None = None) -> tuple[Profile, Calibration, list[str]]:
    """Fold the unseen cost of one observed point into the profile's per-cycle overhead.

    The point is modelled at its own batch and context (``obs.context_tokens``, else
    ``context_tokens``, else the profile's default); see :mod:`specmodel.model.calibrate` for
    what is then assumed constant.
    """
    ctx = obs.context_tokens if obs.context_tokens is not None else context_tokens
    cc = cycle_costs(profile, batch=obs.batch, spec=spec, context_tokens=ctx)
    check_observation(obs, max_accept_tokens=spec.max_accept_tokens, modelled_forward_s=cc.cycle_s - cc.overhead_s)
    extra = unseen_cycle_s(obs, cc.cycle_s)
    warnings = [f"calibration point: {e.label}" for e in cc.extrapolations]
    if (suspect := looks_per_request(obs, cc.cycle_s)) is not None:
        warnings.append(suspect)
    if extra < 0:
        warnings.append(f"calibration: observed cycle {ms(obs.cycle_s)} is shorter than the modelled "
                        f"{ms(cc.cycle_s)}; the profile over-estimates this server (overhead left at "
                        f"{ms(profile.overhead_s)})")
    new_overhead = max(profile.overhead_s + extra, 0.0)
    cal = Calibration(observation=obs, modelled_cycle_s=cc.cycle_s, observed_cycle_s=obs.cycle_s,
                      added_overhead_s=new_overhead - profile.overhead_s, context_tokens=cc.context_tokens,
                      extrapolated=cc.extrapolations, assumed=cc.assumptions)
    return dataclasses.replace(profile, overhead_s=new_overhead), cal, warnings


def row_ci95_rel(profile: Profile, kind: str, tokens: float, context_tokens: float | None = None) -> float:
    """The measured 95 % half-width (relative) of a ``kind`` cost read at (``tokens``,
    ``context_tokens``): along tokens the half-widths of the two knots that bracket it blended with
    the interpolation's own weights, (1 − w)·u₀ + w·u₁ -- an upper bound on the half-width of
    (1 − w)·T₀ + w·T₁ whatever the two errors' correlation (√(a² + b²) ≤ a + b); the larger over
    the bracketing contexts. Not the larger knot's: a verify read at 6.9 tokens, between an
    8-step cell at 6 (±40 %, all the order statistics 8 steps give) and a 16-step one at 7 (±12 %),
    is mostly the second. 0 when the rows carry none (reference profiles, v1 files)."""
    rows = [r for r in profile.costs if r.kind == kind and r.ci95_rel is not None]
    if not rows:
        return 0.0
    ctxs = sorted({r.context_tokens for r in rows})
    if context_tokens is not None:
        lo = [c for c in ctxs if c <= context_tokens]
        hi = [c for c in ctxs if c >= context_tokens]
        ctxs = sorted({*(lo[-1:]), *(hi[:1])})
    return max(_blended_ci(tuple(r for r in rows if r.context_tokens == c), tokens) for c in ctxs)


def _blended_ci(rows: tuple[CostRow, ...], tokens: float) -> float:
    """:func:`row_ci95_rel` along tokens within one context (several rows at one token count: the largest)."""
    def at(t: int) -> float:
        return max(float(r.ci95_rel or 0.0) for r in rows if r.tokens == t)

    below = [r.tokens for r in rows if r.tokens <= tokens]
    above = [r.tokens for r in rows if r.tokens >= tokens]
    if not below or not above:
        return at(min(above) if above else max(below))
    t0, t1 = max(below), min(above)
    if t0 == t1:
        return at(t0)
    w = (tokens - t0) / (t1 - t0)
    return (1.0 - w) * at(t0) + w * at(t1)
