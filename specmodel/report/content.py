"""Everything the report shows, assembled once into a frozen :class:`~specmodel.report.view.ReportContent`
(:func:`build_report`): the what-ifs, batch and context sweeps, the optimizer, the serve plan and the
drafter check around the one prediction.

No matplotlib here: the PDF (:mod:`specmodel.report.pdf`), the Markdown and the JSON all
render that one object, so they cannot disagree. Page-1 figures are the :class:`Prediction`
that ``specmodel predict --json`` prints for the same flags; nothing here recomputes them.
The records live in :mod:`specmodel.report.view`, the sentences in :mod:`specmodel.report.text`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

from specmodel import __version__
from specmodel.errors import field_name
from specmodel.limits import SEARCH_MAX_STEPS
from specmodel.model import cycle as eq
from specmodel.model.accept import AcceptByContext, AcceptDist, chain_mean
from specmodel.model.allreduce import allreduce_s, oneshot_allreduce_s
from specmodel.model.costs import FALLBACK, measured_contexts
from specmodel.model.cyclecost import calibrate
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import accept_model, batch_limit, evaluate_all, optimize
from specmodel.model.predict import predict
from specmodel.model.prediction import Prediction
from specmodel.model.serveplan import band_models, serve_plan
from specmodel.model.whatif import (
    FitChoice,
    batch_sweep,
    no_allreduce_split,
    powers_of_two,
    standard_whatifs,
    stop_paying_batch,
)
from specmodel.report.text import assumption_lines, provenance_rows
from specmodel.report.view import (
    AcceptCurve,
    AllReduceView,
    BatchRow,
    Breakdown,
    ContextRow,
    ContextView,
    DrafterView,
    FindingRow,
    MessageSize,
    OptimizerView,
    ReportContent,
    Segment,
    WhatIfRow,
)
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import forward_tokens
from specmodel.schema.profile import Profile

#: Contexts (KV tokens per request) the context page sweeps besides the measured ones and the user's.
CONTEXT_GRID = (0, 1024, 4096, 16384, 32768, 65536, 131072)


class FindingLike(Protocol):
    name: str
    status: str
    message: str


class DrafterReportLike(Protocol):
    """What :func:`specmodel.drafter.checks.check_drafter` returns (duck-typed; imported lazily)."""

    findings: Sequence[Any]
    status: str
    acceptance_ceiling: float | None

    def to_dict(self) -> dict[str, Any]: ...


# --- assembly -------------------------------------------------------------------------------------------------


def build_report(*, profile: Profile, dist: AcceptDist, spec: SpecConfig, prediction: Prediction,
                 notes: Sequence[str] = (), per_position: Sequence[float] | None = None,
                 observation: Any = None, max_batch: int = 64, inputs: Sequence[tuple[str, str]] = (),
                 drafter: DrafterReportLike | None = None,
                 drafter_inputs: Sequence[tuple[str, str]] = (),
                 by_context: AcceptByContext | None = None) -> ReportContent:
    """Assemble the report around ``prediction`` (the one ``predict`` prints for these inputs).

    ``profile`` is the scenario's profile before calibration; when an ``observation`` was
    given its unseen cost is folded in once here so every what-if carries it too.
    """
    p = prediction
    base = calibrate(profile, observation, spec, prediction.point.context_tokens)[0] if observation is not None else profile
    batches = powers_of_two(max_batch)

    whatifs, choice = standard_whatifs(base)
    rows = [WhatIfRow(key="as_is", label=f"as profiled (TP {profile.tp})", assumptions=(),
                      baseline_tokens_per_s=p.figures.baseline_tokens_per_s, tokens_per_s=p.figures.tokens_per_s, speedup=p.figures.speedup,
                      break_even_accept_tokens=p.figures.break_even_accept_tokens, cycle_s=p.costs.cycle_s, verdict=p.outcome.verdict)]
    for w in whatifs:
        wp = predict(w.profile, dist, OperatingPoint(batch=p.point.batch, spec=spec, generation_tokens=p.point.generation_tokens,
                                                     context_tokens=p.point.context_tokens, proposal_rate=p.accept.proposal_rate))
        label = w.label + (" (memory fit unknown)" if w.memory.startswith("unknown") else "")
        rows.append(_whatif_row(w.key, label, w.assumptions, wp, unavailable=w.unavailable, memory=w.memory))

    sweep = batch_sweep(base, dist, spec=spec, batches=batches, generation_tokens=p.point.generation_tokens,
                        context_tokens=p.point.context_tokens, proposal_rate=p.accept.proposal_rate)
    # a batch whose costs would be read further beyond the measured range than a prediction may go is
    # not priced: the sweeps (and their charts) stop before it, and the warnings say where
    unpriced = [s.point.batch for s in sweep if any(i.refuses and i.beyond_range for i in s.outcome.inconsistencies)]
    cut = unpriced[0] if unpriced and unpriced[0] > batches[0] else None
    if cut is not None:
        sweep = tuple(s for s in sweep if s.point.batch < cut)
        batches = tuple(b for b in batches if b < cut)
    brows = tuple(BatchRow(batch=s.point.batch, baseline_tokens_per_s=s.figures.baseline_tokens_per_s, tokens_per_s=s.figures.tokens_per_s,
                           speedup=s.figures.speedup, break_even_accept_tokens=s.figures.break_even_accept_tokens,
                           extrapolated=any("extrapolated" in w for w in s.outcome.warnings)) for s in sweep)

    model = accept_model(dist, rates=per_position, measured_topk=spec.topk, max_steps=max(SEARCH_MAX_STEPS, spec.steps))
    ctx = p.point.context_tokens
    r = p.accept.proposal_rate
    opt = optimize(base, model, batch=p.point.batch, default=spec, context_tokens=ctx, proposal_rate=r)
    optima = [opt if b == p.point.batch else optimize(base, model, batch=b, default=spec, context_tokens=ctx,
                                                proposal_rate=r)
              for b in batches]
    grid: dict[tuple[int, int], float] = {}
    for c in evaluate_all(base, model, batch=p.point.batch, context_tokens=ctx, proposal_rate=r):
        grid[(c.steps, c.topk)] = max(grid.get((c.steps, c.topk), 0.0), c.tokens_per_s)
    optv = OptimizerView(batch=p.point.batch, accept_source=model.source, accept_notes=model.notes,
                         conditional_rates=model.conditional, default=opt.default, best=opt.best,
                         best_measured_topk=opt.best_measured_topk, ranked=opt.ranked, evaluated=opt.evaluated,
                         gain=opt.gain, per_batch=tuple(o.best for o in optima), batch_limit=batch_limit(optima),
                         max_batch=max_batch, grid=tuple((s, k, t) for (s, k), t in sorted(grid.items())),
                         recommended=opt.recommended, best_any=opt.best_any,
                         recommendation=opt.recommendation_text(noise_rel=p.costs.cycle_ci95_rel),
                         recommends_off=opt.to_run is None,
                         smallest_batch_unmeasured=optima[0].recommended is None,
                         measured_max_batch=max((r.batch for r in base.rows("decode")), default=None))

    dview = _drafter(drafter, p, drafter_inputs) if drafter is not None else None
    warnings = list(p.outcome.warnings)
    if cut is not None:
        warnings.append(f"batch sweeps stop at batch {batches[-1]}: from batch {cut} on the costs would be "
                        "extrapolated further beyond the measured range than a prediction goes (profile there to "
                        "see them)")
    if dview is not None and dview.warning:
        warnings.append(dview.warning)
    blocked = blocking_reasons(dview, p.accept.mean_tokens) if dview is not None else ()
    if blocked:
        # the model's figures stay (the prediction is predict's, pages 2-7 show it); the verdict and the
        # recommendation do not: a drafter the engine refuses, or one that cannot reach the accept length, is no GO
        optv = dataclasses.replace(optv, recommendation=("none: the drafter check blocks deployment (see the "
                                                         "verdict and the drafter-check page)"), recommends_off=True)
    if not p.consistent:
        # figures built on contradicting inputs are drawn (to see which), never recommended from
        optv = dataclasses.replace(optv, recommendation=("none: the inputs contradict each other (page 1 names the "
                                                         "two figures and what to re-measure)"), recommends_off=True)
    title = f"Speculative decoding go/no-go: {p.source.profile_name}"
    return ReportContent(
        title=title, version=__version__, prediction=p, notes=tuple(notes),
        assumptions=assumption_lines(p, dist, profile, per_position),
        provenance=provenance_rows(profile, p, inputs),
        curve=_curve(p, dview.ceiling_tokens if dview else None), breakdown=_breakdown(p),
        allreduce=_allreduce(base, p, choice), whatifs=tuple(rows), batch_sweep=brows,
        stop_paying_batch=stop_paying_batch(sweep), optimizer=optv, drafter=dview, warnings=tuple(warnings),
        context=context_view(base, dist, spec, p, by_context),
        plan=serve_plan(base, model, batches=batches, default=spec, proposal_rate=r,
                        contexts=sorted(set(measured_contexts(base, "decode")) | {int(ctx)}),
                        accept_at=None if by_context is None else band_models(
                            by_context, per_position=per_position is not None, measured_topk=spec.topk,
                            max_steps=max(SEARCH_MAX_STEPS, spec.steps))),
        blocked_by=blocked)


def context_view(profile: Profile, dist: AcceptDist, spec: SpecConfig, p: Prediction,
                 by_context: AcceptByContext | None = None) -> ContextView:
    """The prediction at the user's batch over the measured contexts, :data:`CONTEXT_GRID` and the user's
    context; each row says which axes were extrapolated."""
    measured = measured_contexts(profile, "decode")
    grid = sorted(set(measured) | set(CONTEXT_GRID) | {int(p.point.context_tokens)})
    rows = []
    for L in grid:
        # acceptance measured per context band (the log's): each context uses its band's
        d, band = by_context.at(L) if by_context is not None else (dist, "")
        q = predict(profile, d, OperatingPoint(batch=p.point.batch, spec=spec, generation_tokens=p.point.generation_tokens,
                                               context_tokens=L, proposal_rate=p.accept.proposal_rate))
        rows.append(ContextRow(context_tokens=L, baseline_tokens_per_s=q.figures.baseline_tokens_per_s,
                               tokens_per_s=q.figures.tokens_per_s, speedup=q.figures.speedup,
                               break_even_accept_tokens=q.figures.break_even_accept_tokens, verdict=q.outcome.verdict,
                               extrapolated=tuple(dict.fromkeys(e.label for e in q.outcome.extrapolated)),
                               accept_mean_tokens=d.mean_tokens, accept_band=band))
    extra = {} if by_context is None else {"accept_note": f"acceptance per context band of the log "
                                                          f"({len(by_context.bands)} bands; each row says which)"}
    return ContextView(batch=p.point.batch, context_tokens=int(p.point.context_tokens), measured_contexts=measured,
                       accept_mean_tokens=p.accept.mean_tokens, rows=tuple(rows), **extra)


def _curve(p: Prediction, ceiling_tokens: float | None) -> AcceptCurve:
    be = p.figures.break_even_accept_tokens if math.isfinite(p.figures.break_even_accept_tokens) else 0.0
    hi = float(max(p.point.steps + 1, be * 1.1, (ceiling_tokens or 0.0) * 1.05))
    n = 60
    grid = tuple(1.0 + (hi - 1.0) * i / (n - 1) for i in range(n))
    return AcceptCurve(accept_grid=grid, tokens_per_s=tuple(eq.spec_tokens_per_s(p.point.batch, a, p.costs.cycle_s) for a in grid),
                       baseline_tokens_per_s=p.figures.baseline_tokens_per_s, break_even_tokens=p.figures.break_even_accept_tokens,
                       plus20_tokens=p.figures.accept_for_plus20_tokens, accept_mean_tokens=p.accept.mean_tokens,
                       accept_probs=p.accept.probs, predicted_tokens_per_s=p.figures.tokens_per_s, max_tokens=p.point.steps + 1,
                       ceiling_tokens=ceiling_tokens)


def _breakdown(p: Prediction) -> Breakdown:
    if p.no_allreduce:  # TP 1: nothing to split off; no "all-reduce 0" segment
        return Breakdown(
            baseline=(Segment(label="compute + other", seconds=p.costs.baseline_step_s),),
            cycle=(Segment(label="verify compute", seconds=p.costs.verify_compute_s),
                   Segment(label="verify other", seconds=p.costs.verify_other_s),
                   Segment(label="draft", seconds=p.costs.draft_s),
                   Segment(label="overhead", seconds=p.costs.overhead_s)),
            baseline_per_token_s=p.costs.baseline_step_s, cycle_per_token_s=p.costs.cycle_s / p.accept.mean_tokens,
            accept_mean_tokens=p.accept.mean_tokens)
    if not p.source.allreduce_known:  # no split measured: one segment per forward, never an "all-reduce 0" bar
        return Breakdown(
            baseline=(Segment(label="decode step (all-reduce split unknown)", seconds=p.costs.baseline_step_s),),
            cycle=(Segment(label="verify (all-reduce split unknown)", seconds=p.costs.verify_s),
                   Segment(label="draft", seconds=p.costs.draft_s),
                   Segment(label="overhead", seconds=p.costs.overhead_s)),
            baseline_per_token_s=p.costs.baseline_step_s, cycle_per_token_s=p.costs.cycle_s / p.accept.mean_tokens,
            accept_mean_tokens=p.accept.mean_tokens)
    return Breakdown(
        baseline=(Segment(label="all-reduce", seconds=p.costs.baseline_allreduce_s),
                  Segment(label="compute + other", seconds=p.costs.baseline_step_s - p.costs.baseline_allreduce_s)),
        cycle=(Segment(label="verify all-reduce", seconds=p.costs.verify_allreduce_s),
               Segment(label="verify compute", seconds=p.costs.verify_compute_s),
               Segment(label="verify other", seconds=p.costs.verify_other_s),
               Segment(label="draft", seconds=p.costs.draft_s),
               Segment(label="overhead", seconds=p.costs.overhead_s)),
        baseline_per_token_s=p.costs.baseline_step_s, cycle_per_token_s=p.costs.cycle_s / p.accept.mean_tokens,
        accept_mean_tokens=p.accept.mean_tokens)


def message_bytes(profile: Profile, kind: str, tokens: int) -> float | None:
    """Size of one all-reduce message of a ``kind`` forward over ``tokens`` tokens.

    Activations are tokens × hidden × bytes, so bytes per token is a constant per kind:
    taken from the rows (or the fallback kind's), else from the model's hidden size and
    activation width; None when the profile says neither.
    """
    for k in (kind, FALLBACK.get(kind, "")):
        per_tok = [r.allreduce_msg_bytes / r.tokens for r in profile.rows(k) if r.allreduce_msg_bytes > 0] if k else []
        if per_tok:
            return sorted(per_tok)[len(per_tok) // 2] * tokens
    hidden, width = profile.model.get("hidden_size"), profile.model.get("activation_bytes", 2)
    if isinstance(hidden, (int, float)) and isinstance(width, (int, float)) and hidden > 0 and width > 0:
        return float(hidden) * float(width) * tokens
    return None


def _allreduce(profile: Profile, p: Prediction, choice: FitChoice) -> AllReduceView:
    fit = choice.fit
    tp = max(profile.tp, 2)
    sizes = []
    for label, kind, toks in ((k, k, forward_tokens(k, p.point.batch, p.point)) for k in ("decode", "verify", "draft")):
        b = message_bytes(profile, kind, toks)
        if b is not None:
            sizes.append(MessageSize(label=label, tokens=toks, msg_bytes=b, per_call_s=allreduce_s(b, tp, fit)))
    xs = [float(pt.msg_bytes) for pt in profile.allreduce_points if pt.msg_bytes > 0]
    xs += [float(r.allreduce_msg_bytes) for r in profile.costs if r.allreduce_msg_bytes > 0]
    xs += [s.msg_bytes for s in sizes]
    lo = max(min(xs) / 4, 1.0) if xs else 1024.0
    hi = max(xs) * 4 if xs else 64 * 2**20
    grid = [lo * (hi / lo) ** (i / 59) for i in range(60)]
    calls = tuple((r.kind, float(r.allreduce_msg_bytes), r.allreduce_s / r.n_allreduce) for r in profile.costs
                  if r.n_allreduce > 0 and r.allreduce_msg_bytes > 0 and r.allreduce_s > 0)
    return AllReduceView(
        tp=profile.tp, points=tuple((pt.tp, pt.msg_bytes, pt.latency_s) for pt in profile.allreduce_points),
        row_calls=calls, fit_alpha_s=fit.alpha_s, fit_beta_bytes_per_s=fit.beta_bytes_per_s,
        fit_algorithm=fit.algorithm, fit_origin=choice.origin,
        fit_curve=tuple((x, allreduce_s(x, tp, fit)) for x in grid),
        oneshot_curve=tuple((x, oneshot_allreduce_s(x, tp, fit.alpha_s, fit.beta_bytes_per_s)) for x in grid),
        sizes=tuple(sizes), unavailable=_allreduce_unavailable(profile, choice))


def _allreduce_unavailable(profile: Profile, choice: FitChoice) -> str:
    if choice.origin.startswith("DEFAULT") and not any(r.allreduce_s > 0 for r in profile.costs):
        why = no_allreduce_split(profile).removeprefix("not available: ")
        tp = "" if profile.source.tp_known else "; its TP degree is unknown"
        return f"N/A: no all-reduce data in this profile: {why}{tp}"
    if not profile.source.tp_known:
        return (f"N/A: the profile's TP degree is unknown (pass {field_name('tp')}): curves at a default TP would be "
                "invented")
    return ""


def _whatif_row(key: str, label: str, assumptions: tuple[str, ...], w: Prediction, *, unavailable: str = "",
                memory: str = "") -> WhatIfRow:
    return WhatIfRow(key=key, label=label, assumptions=assumptions, baseline_tokens_per_s=w.figures.baseline_tokens_per_s,
                     tokens_per_s=w.figures.tokens_per_s, speedup=w.figures.speedup,
                     break_even_accept_tokens=w.figures.break_even_accept_tokens, cycle_s=w.costs.cycle_s,
                     verdict="N/A" if unavailable else w.outcome.verdict, unavailable=unavailable, memory=memory)


def blocking_reasons(d: DrafterView, accept_tokens: float) -> tuple[str, ...]:
    """Why the drafter blocks the verdict, one short phrase each (empty: it does not); the full
    messages are on the drafter-check page and in the JSON."""
    out = [f"FAIL {f.name}" for f in d.findings if f.status == "FAIL"]
    if d.warning and d.ceiling_tokens is not None:
        out.append(f"accept length {accept_tokens:.2f} above the drafter's vocabulary ceiling "
                   f"{d.ceiling_tokens:.2f} tokens/step")
    return tuple(out)


def _drafter(report: DrafterReportLike, p: Prediction, inputs: Sequence[tuple[str, str]]) -> DrafterView:
    findings = tuple(FindingRow(name=str(f.name), status=str(f.status), message=str(f.message))
                     for f in report.findings)
    ceiling = report.acceptance_ceiling
    ceiling_tokens = None
    warning = None
    if ceiling is not None and math.isfinite(ceiling) and 0.0 <= ceiling <= 1.0:
        ceiling_tokens = chain_mean(float(ceiling), p.point.steps)
        if p.accept.mean_tokens > ceiling_tokens + 1e-9:
            warning = (f"the accept length {p.accept.mean_tokens:.2f} exceeds the drafter's vocabulary ceiling "
                       f"{ceiling_tokens:.2f} tokens/step (coverage {ceiling:.1%} at {p.point.steps} steps): "
                       "the accept-length source does not describe this drafter")
    return DrafterView(status=str(report.status), findings=findings, acceptance_ceiling=ceiling,
                       ceiling_tokens=ceiling_tokens, warning=warning, inputs=tuple(inputs), raw=report.to_dict())
