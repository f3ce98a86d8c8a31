"""Everything the report shows, assembled once into a frozen :class:`ReportContent`.

No matplotlib here: the PDF (:mod:`specmodel.report.pdf`), the Markdown and the JSON all
render this one object, so they cannot disagree. Page-1 figures are the :class:`Prediction`
that ``specmodel predict --json`` prints for the same flags; nothing here recomputes them.
"""

from __future__ import annotations

import dataclasses
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol

from specmodel import __version__
from specmodel.limits import SEARCH_MAX_STEPS
from specmodel.model import cycle as eq
from specmodel.model.accept import AcceptByContext, AcceptDist, chain_mean
from specmodel.model.allreduce import allreduce_s, oneshot_allreduce_s
from specmodel.model.costs import FALLBACK, measured_contexts
from specmodel.model.decision import BLOCKED as _BLOCKED
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import Candidate, accept_model, batch_limit, evaluate_all, optimize
from specmodel.model.predict import GO_MIN_P, GO_MIN_SPEEDUP, calibrate, predict
from specmodel.model.prediction import Prediction
from specmodel.model.serveplan import ServePlan, band_models, serve_plan
from specmodel.model.whatif import (
    FitChoice,
    batch_sweep,
    no_allreduce_split,
    powers_of_two,
    standard_whatifs,
    stop_paying_batch,
)
from specmodel.schema.formats import REPORT
from specmodel.schema.phases import forward_tokens
from specmodel.schema.profile import Profile, SpecConfig
from specmodel.units import ms

REPORT_SCHEMA = REPORT.name
REPORT_SCHEMA_VERSION = REPORT.version
PAGES = ("verdict", "throughput-vs-accept", "cycle-breakdown", "allreduce", "what-if", "recommendation", "context")

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


@dataclass(frozen=True, kw_only=True)
class AcceptCurve:
    """Page 2: tok/s = B·a/T_cycle over accept length a, with the drafter's distribution."""

    accept_grid: tuple[float, ...]
    tokens_per_s: tuple[float, ...]
    baseline_tokens_per_s: float
    break_even_tokens: float
    plus20_tokens: float
    accept_mean_tokens: float
    accept_probs: tuple[float, ...]
    predicted_tokens_per_s: float
    max_tokens: int
    ceiling_tokens: float | None


@dataclass(frozen=True, kw_only=True)
class Segment:
    label: str
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Page 3: baseline decode step vs one speculative cycle, and both per emitted token."""

    baseline: tuple[Segment, ...]
    cycle: tuple[Segment, ...]
    baseline_per_token_s: float
    cycle_per_token_s: float
    accept_mean_tokens: float


@dataclass(frozen=True, kw_only=True)
class MessageSize:
    label: str
    tokens: int
    msg_bytes: float
    per_call_s: float | None  # under the fit (None without one)


@dataclass(frozen=True, kw_only=True)
class AllReduceView:
    """Page 4: measured all-reduce points, the α-β fit, and what the cycle actually sends."""

    tp: int
    points: tuple[tuple[int, int, float], ...]  # (tp, msg_bytes, latency_s)
    row_calls: tuple[tuple[str, float, float], ...]  # (kind, msg_bytes, seconds per call incl. waiting)
    fit_alpha_s: float
    fit_beta_bytes_per_s: float
    fit_algorithm: str
    fit_origin: str
    fit_curve: tuple[tuple[float, float], ...]  # (bytes, seconds) ring model at tp
    oneshot_curve: tuple[tuple[float, float], ...]  # (bytes, seconds) one-shot model at tp
    sizes: tuple[MessageSize, ...]
    #: why the page has nothing to show for this profile ("" = it has): default curves at a TP the
    #: profile does not have would look like data
    unavailable: str = ""


@dataclass(frozen=True, kw_only=True)
class WhatIfRow:
    key: str
    label: str
    assumptions: tuple[str, ...]
    baseline_tokens_per_s: float
    tokens_per_s: float
    speedup: float
    break_even_accept_tokens: float
    cycle_s: float
    verdict: str
    unavailable: str = ""  # the engines would not do this on the profiled box: shown with the reason, no bar
    memory: str = ""  # TP changes: fits / does not fit / unknown (prominent, not small print)


@dataclass(frozen=True, kw_only=True)
class BatchRow:
    batch: int
    baseline_tokens_per_s: float
    tokens_per_s: float
    speedup: float
    break_even_accept_tokens: float
    extrapolated: bool


@dataclass(frozen=True, kw_only=True)
class OptimizerView:
    """Page 6: the recommended configuration and how it was found."""

    batch: int
    accept_source: str
    accept_notes: tuple[str, ...]
    conditional_rates: tuple[float, ...]
    default: Candidate
    best: Candidate
    best_measured_topk: Candidate
    ranked: tuple[Candidate, ...]
    evaluated: int
    gain: float
    per_batch: tuple[Candidate, ...]  # the best configuration at each swept batch
    batch_limit: int | None
    max_batch: int
    grid: tuple[tuple[int, int, float], ...]  # (steps, topk, best tok/s over ndt)
    recommended: Candidate | None = None  # best measured configuration (None: none measured); = best when set
    best_any: Candidate | None = None  # best incl. extrapolated configurations: listed, never recommended
    recommendation: str = ""  # what page 1 recommends: a config that beats the baseline, or "turn speculation off"
    recommends_off: bool = False
    smallest_batch_unmeasured: bool = False  # no measured configuration at the smallest batch: no limit to state
    measured_max_batch: int | None = None  # the profile's largest measured decode batch (claims stop there)

    def limit_text(self) -> str:
        """The batch-limit claim, kept inside the measured range (beyond it the model extrapolates)."""
        if self.batch_limit is None and self.smallest_batch_unmeasured:
            return ("no batch limit: no configuration has measured costs and acceptance at the smallest batch "
                    "(nothing measured to say where speculation pays)")
        if self.batch_limit is None:
            return "speculation does not pay at any batch with any configuration"
        mm = self.measured_max_batch
        if mm is not None and self.batch_limit > mm:
            return (f"speculation pays at every measured batch (up to {mm}); beyond that the costs are "
                    f"extrapolated (model: up to batch {self.batch_limit})")
        return f"speculation pays up to batch {self.batch_limit} (best configuration per batch)"


@dataclass(frozen=True, kw_only=True)
class ContextRow:
    """One context of the context page (at the user's batch and configuration)."""

    context_tokens: int
    baseline_tokens_per_s: float
    tokens_per_s: float
    speedup: float
    break_even_accept_tokens: float
    verdict: str
    extrapolated: tuple[str, ...]  # labels of the axes outside the measured range ("" = measured)
    accept_mean_tokens: float | None = None  # the acceptance used at this context
    accept_band: str = ""  # which context band of the log it came from ("" = one acceptance for all)


@dataclass(frozen=True, kw_only=True)
class ContextView:
    """Page 7: tok/s, speedup and break-even vs context at the user's batch."""

    batch: int
    context_tokens: int  # the prediction's context
    measured_contexts: tuple[int, ...]
    accept_mean_tokens: float
    rows: tuple[ContextRow, ...]
    #: how acceptance varies over context: per band of the log, or assumed constant
    accept_note: str = "acceptance assumed constant over context (the accept source gives no per-context measurement)"


@dataclass(frozen=True, kw_only=True)
class FindingRow:
    name: str
    status: str
    message: str


@dataclass(frozen=True, kw_only=True)
class DrafterView:
    status: str
    findings: tuple[FindingRow, ...]
    acceptance_ceiling: float | None
    ceiling_tokens: float | None
    warning: str | None
    inputs: tuple[tuple[str, str], ...]
    raw: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ReportContent:
    title: str
    version: str
    prediction: Prediction
    notes: tuple[str, ...]
    assumptions: tuple[str, ...]
    provenance: tuple[tuple[str, str], ...]
    curve: AcceptCurve
    breakdown: Breakdown
    allreduce: AllReduceView
    whatifs: tuple[WhatIfRow, ...]
    batch_sweep: tuple[BatchRow, ...]
    stop_paying_batch: int | None
    optimizer: OptimizerView
    drafter: DrafterView | None
    warnings: tuple[str, ...]
    context: ContextView | None = None
    plan: ServePlan | None = None  # the serve plan over the swept batches x measured contexts (`specmodel plan`)
    #: why the drafter check blocks deployment (empty: it does not); the report's verdict is then BLOCKED
    blocked_by: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        """The report's verdict: the model's (``prediction.verdict``), or BLOCKED by the drafter check."""
        return BLOCKED if self.blocked_by else self.prediction.outcome.verdict

    @property
    def verdict_label(self) -> str:
        return BLOCKED if self.blocked_by else self.prediction.verdict_label

    @property
    def verdict_reason(self) -> str:
        p = self.prediction
        if self.blocked_by:
            return (f"check-drafter: {'; '.join(self.blocked_by)} (drafter-check page). Fix the drafter first; "
                    f"the model alone says {p.outcome.verdict} at {p.figures.speedup:.2f}x")
        return p.outcome.reason

    @property
    def pages(self) -> tuple[str, ...]:
        return PAGES + (("drafter-check",) if self.drafter is not None else ())

    def to_dict(self) -> dict[str, Any]:
        """The JSON written beside the PDF; ``prediction`` equals ``predict --json`` (minus notes)."""
        def cand(c: Candidate) -> dict[str, Any]:
            return c.to_dict()

        opt = self.optimizer
        return _finite_or_none({
            **REPORT.header(),
            "title": self.title,
            "specmodel_version": self.version,
            "pages": list(self.pages),
            "verdict": self.verdict,
            "verdict_label": self.verdict_label,
            "verdict_reason": self.verdict_reason,
            "blocked_by": list(self.blocked_by),
            "prediction": self.prediction.to_dict(),
            "notes": list(self.notes),
            "assumptions": list(self.assumptions),
            "provenance": dict(self.provenance),
            "throughput_vs_accept": dataclasses.asdict(self.curve),
            "cycle_breakdown": dataclasses.asdict(self.breakdown),
            "allreduce": dataclasses.asdict(self.allreduce),
            "whatifs": [dataclasses.asdict(w) for w in self.whatifs],
            "batch_sweep": [dataclasses.asdict(b) for b in self.batch_sweep],
            "stop_paying_batch": self.stop_paying_batch,
            "optimizer": {
                "batch": opt.batch, "accept_source": opt.accept_source, "accept_notes": list(opt.accept_notes),
                "conditional_rates": list(opt.conditional_rates), "default": cand(opt.default),
                "best": cand(opt.best), "best_measured_topk": cand(opt.best_measured_topk),
                "ranked": [cand(c) for c in opt.ranked], "evaluated": opt.evaluated, "gain": opt.gain,
                "per_batch": [cand(c) for c in opt.per_batch], "batch_limit": opt.batch_limit,
                "max_batch": opt.max_batch, "recommendation": opt.recommendation,
                "recommends_off": opt.recommends_off, "measured_max_batch": opt.measured_max_batch,
                "grid": [{"steps": s, "topk": k, "tokens_per_s": t} for s, k, t in opt.grid],
                "recommended": cand(opt.recommended) if opt.recommended is not None else None,
                "best_any": cand(opt.best_any) if opt.best_any is not None else None,
            },
            "context": dataclasses.asdict(self.context) if self.context is not None else None,
            "serve_plan": None if self.plan is None else {
                "batches": list(self.plan.batches), "contexts": list(self.plan.contexts),
                "algorithm": self.plan.algorithm, "cells": [cell.to_dict() for cell in self.plan.cells],
                "accept_by_context": [{"context_tokens": L, "band": b} for L, b in self.plan.accept_bands] or None},
            "drafter": None if self.drafter is None else {
                "status": self.drafter.status,
                "findings": [dataclasses.asdict(f) for f in self.drafter.findings],
                "acceptance_ceiling": self.drafter.acceptance_ceiling,
                "ceiling_tokens": self.drafter.ceiling_tokens, "warning": self.drafter.warning,
                "inputs": dict(self.drafter.inputs), "report": self.drafter.raw,
            },
            "warnings": list(self.warnings),
        })


# --- assembly -------------------------------------------------------------------------------------------------


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def _finite_or_none(obj: Any) -> Any:
    """A JSON body with every non-finite number as null: a break-even no accept length reaches (a
    proposer that proposes nothing) is "none", and strict JSON has no infinity."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


def tokens_per_step_text(tokens: float) -> str:
    """An accept length as the report prints it; a break-even no accept length reaches is "none"."""
    return f"{tokens:.2f} tokens/step" if math.isfinite(tokens) else "none (no accept length breaks even)"


def short_tokens(tokens: float) -> str:
    """An accept length in a table cell: two decimals, or "none" where no accept length reaches it."""
    return f"{tokens:.2f}" if math.isfinite(tokens) else "none"


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


def speedup_text(p: Prediction) -> str:
    """The speedup as the report prints it: the decode phase's, and a request's end to end when one
    was priced (the verdict then rests on that one)."""
    rq = p.request
    if rq is None:
        return f"{p.figures.speedup:.2f}x"
    return f"{rq.speedup:.2f}x per request, {p.figures.speedup:.2f}x decode"


def cycle_allreduce_text(p: Prediction) -> str:
    """The cycle with its all-reduce share as the report prints it (one wording for PDF and Markdown)."""
    if p.no_allreduce:
        return f"{ms(p.costs.cycle_s)}, all-reduce none (TP 1)"
    if not p.source.allreduce_known:
        return f"{ms(p.costs.cycle_s)}, all-reduce unknown (no split)"
    return f"{ms(p.costs.cycle_s)}, all-reduce {p.costs.cycle_allreduce_frac:.1%} ({p.allreduce_source})"


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
        return "N/A: the profile's TP degree is unknown (pass --tp): curves at a default TP would be invented"
    return ""


def _whatif_row(key: str, label: str, assumptions: tuple[str, ...], w: Prediction, *, unavailable: str = "",
                memory: str = "") -> WhatIfRow:
    return WhatIfRow(key=key, label=label, assumptions=assumptions, baseline_tokens_per_s=w.figures.baseline_tokens_per_s,
                     tokens_per_s=w.figures.tokens_per_s, speedup=w.figures.speedup,
                     break_even_accept_tokens=w.figures.break_even_accept_tokens, cycle_s=w.costs.cycle_s,
                     verdict="N/A" if unavailable else w.outcome.verdict, unavailable=unavailable, memory=memory)


def measurement_text(profile: Profile) -> str:
    """Page 1: what the costs are and how noisy their measurement was."""
    cis = sorted(float(r.ci95_rel) for r in profile.costs if r.ci95_rel is not None)
    what = profile.label if profile.source_kind == "measured" else f"costs: {profile.label}"
    if not cis:
        return f"{what}; no 95 % intervals recorded for its {len(profile.costs)} cost rows"
    within = sum(1 for c in cis if c <= NOISE_OK_REL)
    return (f"{what}; 95 % intervals of its {len(cis)} cost rows: median +/-{cis[len(cis) // 2]:.1%}, worst "
            f"+/-{cis[-1]:.1%} ({within}/{len(cis)} within +/-{NOISE_OK_REL:.0%})")


#: A cost row whose 95 % interval is within this is called tight on page 1 (the profiler's default target).
NOISE_OK_REL = 0.02


def _assumptions(p: Prediction, dist: AcceptDist, profile: Profile,
                 per_position: Sequence[float] | None) -> tuple[str, ...]:
    acc = f"accept length: {p.accept.source}"
    if per_position:
        acc += " rates " + ", ".join(f"{r:.2f}" for r in per_position)
    elif p.accept.samples == 0 and p.accept.source.startswith("mean"):
        acc += " (constant per-draft acceptance assumed around the mean)"
    out = [measurement_text(profile), acc]
    out.append(f"costs from the {p.source.profile_source_kind} profile '{p.source.profile_name}', interpolated at "
               f"batch {p.point.batch} ({p.costs.verify_tokens} verify tokens)")
    method = p.source.algorithm.lower()
    if p.host_proposer:  # no drafter forward by design: nothing was left unmeasured
        out.append(f"no drafter forward: {method} proposes on the host (its lookup is the per-cycle overhead)")
    else:
        out.append(f"draft = {p.draft_parts}" if p.costs.draft_s > 0
                   else "draft cost not measured: assumed free (upper bound)")
    over = f"per-cycle overhead {ms(p.costs.overhead_s)}"
    if p.host_proposer:
        over += f" ({method} lookup per step)"
    if p.accept.proposal_rate < 1.0:
        over += f"; {p.accept.proposal_rate:.0%} of request-steps proposed, the rest decoded"
    if p.costs.calibrated_overhead_s is not None:
        over += f" (calibration added {ms(p.costs.calibrated_overhead_s)})"
    out.append(over)
    if p.accept.proposal_rate < 1.0 or p.accept.proposal_rate_source:
        out.append(f"{p.accept.proposal_rate:.0%} of request-steps proposed ({p.accept.proposal_rate_source or '--proposal-rate'}); the others decode one token "
                   f"at the baseline step plus the lookup: mean step {ms(p.costs.mean_step_s)}")
    if p.figures.p_speedup_gt_1 is None:
        out.append("P(speedup > 1) needs counts: the histogram was given as fractions (sample size unknown); "
                   f"the band ({p.band_label}) covers one generation's variability"
                   + _cost_part(p.costs.cycle_ci95_rel, only=True))
    else:
        out.append(f"band and P(speedup > 1) {p.band_label}: one generation's variability"
                   + (" plus the sampling error of the measured mean" if dist.samples > 0 else
                      " (accept length taken as exact)") + _cost_part(p.costs.cycle_ci95_rel))
    out.append(f"GO needs speedup >= {GO_MIN_SPEEDUP:.2f}x and P(speedup > 1) >= {GO_MIN_P:.2f}; "
               "NO-GO below 1.00x")
    if profile.source_kind == "reference":
        out.append("the reference profile is derived from a published write-up, not measured on your box")
    return tuple(out)


def _provenance(profile: Profile, p: Prediction, inputs: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    hw = profile.hardware
    hw_txt = ", ".join(f"{k} {hw[k]}" for k in ("gpu_name", "gpu_count", "interconnect", "device", "cpu") if k in hw)
    rows = [("profile", f"{profile.name} ({profile.source_kind}) {profile.path}"),
            ("profile source", profile.label),
            ("hardware", hw_txt or "not recorded"),
            ("model", str(profile.model.get("name", "not recorded"))),
            ("backend / TP", f"{profile.backend or 'not recorded'} / {f'TP {p.source.tp}' if p.source.tp_known else 'TP unknown'}")]
    versions = profile.source.versions()
    if versions:
        rows.append(("profile versions", ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))))
    rows.append(("specmodel", f"{__version__}; python {platform.python_version()}; numpy {_version('numpy')}; "
                              f"matplotlib {_version('matplotlib')}"))
    rows.append(("accept source", p.accept.source))
    if len({o for _, o in p.source.cost_sources}) == 1:
        rows.append(("costs from", p.source.cost_sources[0][1]))
    else:
        rows.extend((f"{what} from", origin) for what, origin in p.source.cost_sources)
    rows.extend(inputs)
    return tuple(rows)


#: The verdict when the drafter check blocks: a FAIL finding (SGLang refuses to start it, d2t mismatch,
#: wrong shapes) or an accept length above the drafter's vocabulary ceiling.
BLOCKED = _BLOCKED  # the one decision rule's name (model/decision.py)


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
        assumptions=_assumptions(p, dist, profile, per_position),
        provenance=_provenance(profile, p, inputs),
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


def _cost_part(u: float, only: bool = False) -> str:
    """What the band says about the costs: it is widened by their measured 95 % interval."""
    if u > 0:
        return f", plus the measured costs' 95 % interval (cycle ±{u:.1%})"
    return " only (costs taken as exact: no interval measured)" if only else "; costs taken as exact (no interval measured)"
