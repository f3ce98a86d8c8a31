"""Compose the equations into one :class:`Prediction` (everything the CLI, JSON and PDF show): :func:`predict`
in named steps (price the cycle, the mean step, the band, the request, the verdict) and the checks around it.

The cycle's costs, their assumptions and the calibration are looked up in :mod:`specmodel.model.cyclecost`;
where each cost came from in :mod:`specmodel.model.provenance`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specmodel.errors import FieldError
from specmodel.limits import ROUND_SLACK
from specmodel.model import cycle as eq
from specmodel.model import hostdraft as hd
from specmodel.model.accept import AcceptDist, resize
from specmodel.model.calibrate import Calibration
from specmodel.model.consistency import check_cycle
from specmodel.model.costs import Extrapolation
from specmodel.model.cycle import Assumption, CycleCosts
from specmodel.model.cyclecost import calibrate, cycle_costs, row_ci95_rel

# the one decision rule lives in model/decision.py; re-exported for predict's callers
from specmodel.model.decision import GO_MIN_P as GO_MIN_P
from specmodel.model.decision import GO_MIN_SPEEDUP as GO_MIN_SPEEDUP
from specmodel.model.decision import verdict_for as verdict_for
from specmodel.model.inconsistency import Inconsistency
from specmodel.model.inputs import Acceptance, OperatingPoint
from specmodel.model.prediction import (
    AcceptFigures,
    CostFigures,
    Figures,
    Outcome,
    Prediction,
    PricedPoint,
    Provenance,
)
from specmodel.model.provenance import cost_provenance
from specmodel.model.request import RequestPrice, price_request
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import forward_tokens
from specmodel.schema.profile import Profile
from specmodel.units import ms


def check_verified_tokens(spec: SpecConfig, accept_tokens: float) -> None:
    """Refuse an acceptance the configuration cannot emit.

    A verify over ``num_draft_tokens`` tokens per request emits at most that many (every draft
    accepted, plus the bonus). At topk 1 SGLang resets ``speculative_num_draft_tokens`` to
    ``steps + 1`` (server_args.py, 0.5.5: "adjusted to speculative_num_steps + 1 when
    speculative_eagle_topk == 1"), so a chain verifying fewer is not a configuration any engine runs.
    """
    ndt, steps = spec.num_draft_tokens, spec.steps
    if spec.topk == 1 and ndt != steps + 1:
        raise FieldError("num_draft_tokens", f"{ndt} with {{topk}} 1 and {{steps}} {steps}: SGLang resets it to "
                                             f"steps + 1 = {steps + 1} (a chain verifies every draft); pass {{steps}} "
                                             f"{ndt - 1} to verify {ndt} tokens, or leave {{num_draft_tokens}} out")
    if accept_tokens > ndt + ROUND_SLACK:  # (logged accept lengths carry two decimals)
        raise FieldError("num_draft_tokens", f"accept length {accept_tokens:.2f} tokens/step exceeds the {ndt} "
                                             f"tokens verified per request (at most {ndt}, bonus included); raise "
                                             "{num_draft_tokens} or check the accept length")


def predict(profile: Profile, accept: Acceptance | AcceptDist, point: OperatingPoint | None = None) -> Prediction:
    """Predict tok/s, speedup and the break-even accept length for one operating point
    (:class:`~specmodel.model.inputs.OperatingPoint`; None: batch 1 at the profile's configuration
    and smallest measured context) at the acceptance ``accept`` (a distribution, or the
    :class:`~specmodel.model.inputs.Acceptance` record of a source that measured more beside it).

    The point's ``proposal_rate`` r (else the one the acceptance's source measured; host
    proposers only: ngram, suffix): the share of request-steps in which the lookup proposed. The
    engines' accept length counts only those steps (vLLM: 1 + accepted / drafts), so at r < 1 a
    request-step emits r·E[A] + 1 − r tokens and the mean engine step is
    :func:`specmodel.model.hostdraft.host_mean_step_s`; break-even and "for +20 %" stay in E[A] of
    the proposing steps. None: every step proposes (r = 1).

    The acceptance's ``window_drift_rel``: how far the tokens per request-step moved between the
    accept log's windows beyond sampling (relative standard deviation;
    :func:`specmodel.model.accept.window_drift_rel`): a run of new traffic lands anywhere in that
    spread, so the band (±1.96·d) and P carry it.

    The point's ``request_tokens`` N (with ``prompt_tokens``, default the profiled prompt): price a
    request of N output tokens end to end (:mod:`specmodel.model.request`): each server's prefill
    and time outside the engine's steps are added to its decode phase, and the verdict,
    P(speedup > 1) and the request's break-even rest on the request's speedup; the band and P are
    then over the request's N tokens (one request's acceptance is what varies), not
    ``generation_tokens``.

    The point's ``foreign_costs``: why the profile's costs are another box's than the one the user
    named (e.g. an accept log of a server at another TP); the shipped reference profile is always
    another box's. The verdict is then qualified in its label (CLI, JSON, PDF): the figures are
    the other box's.

    Physical bounds (the one place for every path that prices a cycle through here): a speculative
    step holds a verify forward over at least the baseline step's tokens, so its cost is floored at
    the baseline step's and the speedup never exceeds the tokens a step emits (E[A]); when the costs
    priced it lower, :mod:`specmodel.model.consistency` says so (refusing beyond noise) and the
    reason says the speedup was capped."""
    acceptance = Acceptance.of(accept)
    pt = point if point is not None else OperatingPoint()
    spec = pt.spec or profile.spec
    dist = acceptance.dist
    check_verified_tokens(spec, dist.mean_tokens)
    # a rate given for the point overrides the one the acceptance's source measured
    given_rate = pt.proposal_rate if pt.proposal_rate is not None else acceptance.proposal_rate
    r = hd.proposal_rate_of(given_rate, spec.algorithm, profile)
    dist = _on_spec(dist, spec)
    cyc = _priced_cycle(profile, pt, spec, acceptance.warnings)
    step = _mean_step(cyc, pt, spec, dist, r)
    band = _band(cyc, step, pt, spec, dist, acceptance.window_drift_rel, r)
    req = _request(cyc, step, band, pt, spec, acceptance.window_drift_rel, r)
    verdict, reason, withheld = _verdict(cyc, step, band, req, pt, spec, r)
    profile, cc, cal = cyc.profile, cyc.costs, cyc.calibration
    e = dist.mean_tokens
    return Prediction(
        source=Provenance(
            profile_name=profile.name, profile_label=profile.label, profile_source_kind=profile.source_kind,
            profile_path=profile.path, tp=profile.tp, tp_known=profile.source.tp_known, algorithm=spec.algorithm,
            cost_sources=step.provenance,
            # at TP 1 there is no all-reduce to split: zero is known, not unmeasured
            allreduce_known=profile.has_allreduce_split or (profile.tp == 1 and profile.source.tp_known),
            allreduce_capture=profile.allreduce_captured, foreign_costs=_foreign_costs(pt, profile)),
        point=PricedPoint(
            batch=pt.batch, steps=spec.steps, topk=spec.topk, num_draft_tokens=spec.num_draft_tokens,
            generation_tokens=band.generation_tokens, context_tokens=cc.context_tokens,
            context_source="requested" if pt.context_tokens is not None else "the profile's smallest measured context"),
        accept=AcceptFigures(
            source=dist.source, convention=dist.convention, mean_tokens=e, mean_drafts=e - 1.0,
            std_tokens=dist.std_tokens, samples=dist.samples, probs=dist.probs, samples_unknown=dist.samples_unknown,
            drift_rel=acceptance.window_drift_rel, proposal_rate=r,
            proposal_rate_source=(acceptance.proposal_rate_source if pt.proposal_rate is None
                                  and acceptance.proposal_rate is not None
                                  else hd.proposal_rate_note(given_rate, spec.algorithm, profile))),
        costs=CostFigures(
            baseline_step_s=step.base_s, baseline_allreduce_s=cc.base.allreduce_s,
            verify_tokens=forward_tokens("verify", pt.batch, spec), verify_s=cc.verify.total_s,
            verify_allreduce_s=cc.verify.allreduce_s, verify_compute_s=cc.verify.compute_s,
            verify_other_s=cc.verify.other_s, draft_step_s=cc.draft_step.total_s, draft_s=cc.draft_total_s,
            draft_allreduce_s=cc.draft_allreduce_s, overhead_s=cc.overhead_s, cycle_s=cc.cycle_s,
            cycle_allreduce_s=cc.cycle_allreduce_s, cycle_allreduce_frac=cc.cycle_allreduce_s / cc.cycle_s,
            draft_extend_s=cc.draft_extend.total_s if cc.draft_extend is not None else None,
            calibrated_overhead_s=cal.added_overhead_s if cal else None, mean_step_s=step.step_s,
            cycle_ci95_rel=band.cycle_ci95_rel, baseline_ci95_rel=band.baseline_ci95_rel),
        figures=Figures(
            baseline_tokens_per_s=eq.baseline_tokens_per_s(pt.batch, step.base_s), tokens_per_s=band.tokens_per_s,
            tokens_per_s_low=band.low, tokens_per_s_high=band.high, speedup=band.speedup,
            speedup_low=band.speedup_low, speedup_high=band.speedup_high,
            break_even_accept_tokens=band.break_even, accept_for_plus20_tokens=band.plus20,
            break_even_reachable=band.break_even <= spec.max_accept_tokens,
            plus20_reachable=band.plus20 <= spec.max_accept_tokens, margin_tokens=e - band.break_even,
            p_speedup_gt_1=req.p_speedup_gt_1, p_withheld=withheld, request_break_even_accept_tokens=req.break_even),
        outcome=Outcome(
            verdict=verdict, reason=reason, warnings=cyc.warnings,
            # a calibration modelled off measured costs carries that into every prediction made with it
            extrapolated=_unique(cyc.extrapolated + req.extrapolated),
            # (a calibration's own assumption is absorbed at its point: the observed cycle pins the total there)
            assumed=req.assumed, inconsistencies=step.issues),
        request=req.price,
    )


def _on_spec(dist: AcceptDist, spec: SpecConfig) -> AcceptDist:
    """``dist`` on 1..steps+1 tokens: refused when it reaches beyond what ``spec`` can emit."""
    if dist.max_tokens > spec.max_accept_tokens and any(p > 0 for p in dist.probs[spec.max_accept_tokens:]):
        raise FieldError(
            None, f"accept length distribution reaches {dist.max_tokens} tokens/step but steps = {spec.steps} allows at "
                  f"most {spec.max_accept_tokens}; raise {{steps}}"
        )
    if dist.max_tokens != spec.max_accept_tokens:
        dist = dataclasses.replace(resize(dist, spec.max_accept_tokens), convention=dist.convention,
                                   samples=dist.samples, samples_unknown=dist.samples_unknown)
    return dist


@dataclass(frozen=True, kw_only=True)
class _PricedCycle:
    """One cycle's costs at the point, after calibration (``profile`` carries the folded overhead)."""

    profile: Profile
    costs: CycleCosts
    calibration: Calibration | None
    warnings: tuple[str, ...]
    assumed: tuple[Assumption, ...]
    extrapolated: tuple[Extrapolation, ...]


def _priced_cycle(profile: Profile, pt: OperatingPoint, spec: SpecConfig, input_warnings: tuple[str, ...]) -> _PricedCycle:
    """Calibrate on the observed point (if any), then price one cycle; the warnings start with the inputs' own."""
    warnings = list(input_warnings)
    cal: Calibration | None = None
    if pt.observation is not None:
        profile, cal, w = calibrate(profile, pt.observation, spec, pt.context_tokens)
        warnings += w
    cc = cycle_costs(profile, batch=pt.batch, spec=spec, context_tokens=pt.context_tokens)
    if cal is not None:
        # the unseen cost covers the draft the profile lacked: no "draft assumed free" caveat
        warnings += [w for w in cc.warnings if not w.startswith("no draft cost")]
    else:
        warnings += list(cc.warnings)
    # a calibration point's observed cycle holds the drafter the profile lacked: not an assumption then
    assumed = tuple(a for a in cc.assumptions if not (cal is not None and a.kind == "draft"))
    return _PricedCycle(profile=profile, costs=cc, calibration=cal, warnings=tuple(warnings), assumed=assumed,
                        extrapolated=cc.extrapolations + (cal.extrapolated if cal else ()))


@dataclass(frozen=True, kw_only=True)
class _MeanStep:
    """Per request-step: E' tokens in a mean step (both = E[A], T_cycle when every step proposes)."""

    base_s: float
    tokens: float
    std_tokens: float
    priced_s: float  # as the costs priced it
    step_s: float  # floored at the baseline step (the physical bound)
    capped: bool
    issues: tuple[Inconsistency, ...]
    provenance: tuple[tuple[str, str], ...]


def _mean_step(cyc: _PricedCycle, pt: OperatingPoint, spec: SpecConfig, dist: AcceptDist, r: float) -> _MeanStep:
    """The mean step and its tokens; the costs as priced are checked, the figures use the physical floor."""
    profile, cc = cyc.profile, cyc.costs
    t_base = cc.base.total_s
    priced = (hd.host_mean_step_s(profile, batch=pt.batch, spec=spec, proposal_rate=r,
                                  context_tokens=pt.context_tokens) if r < 1.0 else cc.cycle_s)
    provenance = cost_provenance(profile, cc, cyc.calibration)
    issues = check_cycle(profile, cc, base_s=t_base, mean_step_s=priced,
                         break_even_tokens=eq.break_even_accept(t_base, priced), provenance=dict(provenance))
    return _MeanStep(base_s=t_base, tokens=hd.mixed_tokens(dist.mean_tokens, r),
                     std_tokens=hd.mixed_std(dist.mean_tokens, dist.std_tokens, r), priced_s=priced,
                     step_s=max(priced, t_base), capped=priced < t_base and not any(i.refuses for i in issues),
                     issues=tuple(issues), provenance=provenance)


@dataclass(frozen=True, kw_only=True)
class _Band:
    """tok/s and speedup with their 95 % band, the break-even and P(speedup > 1) of the decode phase."""

    generation_tokens: int  # the tokens the band and P are over
    tokens_per_s: float
    low: float
    high: float
    speedup: float
    speedup_low: float
    speedup_high: float
    break_even_step: float  # in tokens per request-step
    break_even: float  # in E[A] of the proposing steps
    plus20: float
    n_eff: float
    cycle_ci95_rel: float
    baseline_ci95_rel: float
    p_speedup_gt_1: float | None


def _band(cyc: _PricedCycle, step: _MeanStep, pt: OperatingPoint, spec: SpecConfig, dist: AcceptDist,
          drift_rel: float, r: float) -> _Band:
    """Band and P share one standard error (generation variability + estimation, when counted),
    widened by the measured costs' interval and the accept log's drift between windows."""
    profile, cc = cyc.profile, cyc.costs
    batch, t_base, t_step, e_step, std_step = pt.batch, step.base_s, step.step_s, step.tokens, step.std_tokens
    # a request priced end to end: the band and P over the request's own tokens
    gen = pt.request_tokens if pt.request_tokens is not None else pt.generation_tokens
    tps = eq.spec_tokens_per_s(batch, e_step, t_step)
    lo, hi = eq.tokens_per_s_band(batch, e_step, std_step, t_step, gen, samples=dist.samples)
    be_step = eq.break_even_accept(t_base, t_step)
    se = eq.accept_mean_se(e_step, std_step, gen, dist.samples)
    n_eff = (std_step / se) ** 2 if se > 0 else 1.0
    L = cc.context_tokens
    u_base = row_ci95_rel(profile, "decode", batch, L)
    u_cyc = eq.cost_ci95_rel([(cc.verify.total_s, row_ci95_rel(profile, "verify", cc.verify.tokens, L)),
                              (cc.draft_total_s, max(row_ci95_rel(profile, "draft", cc.draft_step.tokens, L),
                                                     row_ci95_rel(profile, "draft_extend",
                                                                  forward_tokens("draft_extend", batch, spec), L)))])
    lo, hi = eq.band_with_cost_uncertainty(tps, lo, hi, (u_cyc**2 + (1.96 * drift_rel) ** 2) ** 0.5)
    p_gt_1: float | None = None if dist.samples_unknown else eq.p_speedup_gt_1_with_costs(
        e_step, be_step, std_step, n_eff, (u_cyc**2 + u_base**2) ** 0.5, drift_rel=drift_rel)
    sp = eq.speedup(e_step, t_base, t_step)
    sp_lo, sp_hi = eq.speedup_band(sp, tps, lo, hi, u_base)
    return _Band(generation_tokens=gen, tokens_per_s=tps, low=lo, high=hi, speedup=sp, speedup_low=sp_lo,
                 speedup_high=sp_hi, break_even_step=be_step, break_even=hd.accept_for_mixed(be_step, r),
                 plus20=hd.accept_for_mixed(eq.accept_for_speedup(1.2, t_base, t_step), r), n_eff=n_eff,
                 cycle_ci95_rel=u_cyc, baseline_ci95_rel=u_base, p_speedup_gt_1=p_gt_1)


@dataclass(frozen=True, kw_only=True)
class _RequestPart:
    """The request priced end to end (None: the decode phase only) and what the verdict then rests on."""

    price: RequestPrice | None
    break_even: float
    p_speedup_gt_1: float | None
    assumed: tuple[Assumption, ...]
    extrapolated: tuple[Extrapolation, ...]


def _request(cyc: _PricedCycle, step: _MeanStep, band: _Band, pt: OperatingPoint, spec: SpecConfig,
             drift_rel: float, r: float) -> _RequestPart:
    """A request of ``request_tokens`` priced end to end (:mod:`specmodel.model.request`); else the decode phase's."""
    if pt.request_tokens is None:
        return _RequestPart(price=None, break_even=band.break_even, p_speedup_gt_1=band.p_speedup_gt_1,
                            assumed=cyc.assumed, extrapolated=())
    rq = price_request(cyc.profile, algorithm=spec.algorithm, batch=pt.batch, request_tokens=pt.request_tokens,
                       prompt_tokens=pt.prompt_tokens,
                       baseline_tokens_per_s=eq.baseline_tokens_per_s(pt.batch, step.base_s),
                       decode_speedup=band.speedup, decode_speedup_low=band.speedup_low,
                       decode_speedup_high=band.speedup_high)
    # the request pays iff the decode phase runs s* times faster: E' > s*·E'* (module request)
    be_req_step = rq.decode_speedup_needed * band.break_even_step
    be_req = hd.accept_for_mixed(be_req_step, r) if math.isfinite(be_req_step) else math.inf
    p_gt_1 = band.p_speedup_gt_1
    if p_gt_1 is not None:
        u = (band.cycle_ci95_rel**2 + band.baseline_ci95_rel**2) ** 0.5
        p_gt_1 = (eq.p_speedup_gt_1_with_costs(step.tokens, be_req_step, step.std_tokens, band.n_eff, u,
                                               drift_rel=drift_rel) if math.isfinite(be_req_step) else 0.0)
    return _RequestPart(price=rq, break_even=be_req, p_speedup_gt_1=p_gt_1, assumed=cyc.assumed + rq.assumed,
                        extrapolated=rq.extrapolated)


def _foreign_costs(pt: OperatingPoint, profile: Profile) -> str:
    """Why the costs are another box's ("" = the user's own); the shipped reference always is."""
    if not pt.foreign_costs and profile.source_kind == "reference":
        return f"the shipped reference profile {profile.name}, not measured on your box"
    return pt.foreign_costs


def _verdict(cyc: _PricedCycle, step: _MeanStep, band: _Band, req: _RequestPart, pt: OperatingPoint,
             spec: SpecConfig, r: float) -> tuple[str, str, str]:
    """(verdict, reason, why P is withheld): the one rule (model/decision.py) on the request's
    speedup when one is priced, else the decode phase's; the reason says what bounds the figures."""
    withheld = p_withheld_reason(step.issues, req.assumed, cyc.extrapolated + req.extrapolated)
    rq = req.price
    # a withheld P decides nothing: the rule reads the speedup and its shown band (model/decision.py)
    verdict, reason = verdict_for(rq.speedup if rq is not None else band.speedup, req.p_speedup_gt_1,
                                  [i.message for i in step.issues if i.refuses], withheld=withheld,
                                  speedup_low=rq.speedup_low if rq is not None else band.speedup_low)
    if rq is not None:
        reason = (f"per request ({rq.prompt_tokens} prompt + {rq.request_tokens} output tokens, prefill and time "
                  f"outside the engine included): {reason}")
    if step.capped:
        reason += (f"; speedup capped at {step.tokens:.2f}x, the tokens a step emits: the costs priced a speculative "
                   f"step ({ms(step.priced_s)}) below the baseline step ({ms(step.base_s)}), which no step holding a "
                   "verify forward can be")
    if r == 0.0:
        reason += "; nothing proposed (proposal rate 0): every step pays the lookup and speculation's host work"
    elif band.break_even > spec.max_accept_tokens:
        reason += (f"; break-even {band.break_even:.2f} exceeds the maximum {spec.max_accept_tokens} tokens/step for "
                   f"steps = {spec.steps}")
    return verdict, reason, withheld


def require_consistent(p: Prediction) -> Prediction:
    """``p`` when its inputs agree; else the refusal (exit 2) naming the first contradiction and what
    to re-measure: predict and the API give no figures built on inputs that contradict each other
    (the report still draws them, with the contradiction on its first page)."""
    bad = [i for i in p.outcome.inconsistencies if i.refuses]
    if bad:
        from specmodel.errors import SpecmodelError

        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        what = "beyond the measured range" if bad[0].beyond_range else "inconsistent inputs"
        raise SpecmodelError(f"{what}: {bad[0].message}{more}; {bad[0].to_measure}")
    return p


def p_withheld_reason(issues: Sequence[Inconsistency], assumed: Sequence[Assumption],
                      extrapolated: Sequence[Extrapolation] = ()) -> str:
    """Why P(speedup > 1) is not printed ("" = it is): it would carry the confidence of measured
    costs into a figure that rests on an assumed, contradicted or extrapolated one (beyond the
    measured range no interval was measured: a ngram profile of batches 1-4 gave P = 1.00 for a
    GO at batch 8 from a verify cost it had extrapolated to 219 ms where the engine took ~90)."""
    if any(i.refuses for i in issues):
        return "the costs contradict each other"
    if any(i.check == "running_max" for i in issues):
        return "a measured cost was lifted by the monotone cost surface"
    if any(i.check == "break_even_below_one" for i in issues):
        return "a speculative step priced below a baseline step"
    box = [i for i in issues if i.check == "box_condition"]
    if box:  # the guard that fired, with its figures (the full line and what settles it: the verdict's qualification)
        return box[0].guard or "the two servers were recorded on the box in different conditions"
    if issues:
        return "the two servers' same forward disagrees"
    if assumed:
        return f"rests on an assumed {assumed[0].kind} cost"
    if extrapolated:
        return f"rests on a cost extrapolated beyond the measured range: {extrapolated[0].label}"
    return ""


def _unique(extrap: Sequence[Extrapolation]) -> tuple[Extrapolation, ...]:
    out: list[Extrapolation] = []
    for e in extrap:
        if e not in out:
            out.append(e)
    return tuple(out)
