"""The frozen records a report is made of: one per page (:class:`AcceptCurve`, :class:`Breakdown`,
:class:`AllReduceView`, :class:`WhatIfRow`, :class:`OptimizerView`, :class:`ContextView`,
:class:`DrafterView`, ...) and :class:`ReportContent`, the whole report, with the JSON written beside
the PDF (:meth:`ReportContent.to_dict`).

Built once by :func:`specmodel.report.content.build_report`; the PDF (:mod:`specmodel.report.pdf`),
the Markdown and the JSON all render this one object, so they cannot disagree.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from specmodel.model.decision import BLOCKED as _BLOCKED
from specmodel.model.optimize import Candidate
from specmodel.model.prediction import Prediction
from specmodel.model.serveplan import ServePlan
from specmodel.schema.formats import REPORT

REPORT_SCHEMA = REPORT.name
REPORT_SCHEMA_VERSION = REPORT.version
PAGES = ("verdict", "throughput-vs-accept", "cycle-breakdown", "allreduce", "what-if", "recommendation", "context")

#: The verdict when the drafter check blocks: a FAIL finding (SGLang refuses to start it, d2t mismatch,
#: wrong shapes) or an accept length above the drafter's vocabulary ceiling.
BLOCKED = _BLOCKED  # the one decision rule's name (model/decision.py)


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
