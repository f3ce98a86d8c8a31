"""The :class:`Prediction`: every figure a user sees, in named parts (where the costs came from, the
point priced, the acceptance, the cycle's costs, the throughput figures and their band, the outcome,
the request). The report draws from it and never recomputes; :meth:`Prediction.to_dict` is the
``specmodel.prediction`` document (flat, in its own key order)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specmodel.model.costs import Extrapolation
from specmodel.model.cycle import Assumption
from specmodel.model.decision import Decision
from specmodel.model.inconsistency import Inconsistency
from specmodel.model.request import RequestPrice
from specmodel.schema.phases import is_host_proposer
from specmodel.units import ms

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where the costs came from: the profile, the drafter kind priced, each cost's origin."""

    profile_name: str
    profile_label: str
    profile_source_kind: str
    profile_path: str
    tp: int
    tp_known: bool = True  # False: plain numbers without --tp (printed as "TP unknown")
    #: the drafter kind priced (``spec.algorithm``: EAGLE3, NGRAM, DRAFT_MODEL, ...)
    algorithm: str = ""
    cost_sources: tuple[tuple[str, str], ...] = ()  # (cost, where it came from)
    #: False when the profile has no all-reduce split: every *allreduce* figure is then unknown (not 0)
    allreduce_known: bool = True
    #: cycle kinds whose rows' all-reduce came from a torch.profiler capture (the hook's wrapper did not
    #: see it: a CUDA-graph replay), not from the wrapper's own timing
    allreduce_capture: tuple[str, ...] = ()
    #: why the costs are another box's than the one the user named ("" = the user's own profile):
    #: the verdict label is qualified with it
    foreign_costs: str = ""


@dataclass(frozen=True, kw_only=True)
class PricedPoint:
    """The operating point as priced: ``batch`` requests over ``context_tokens`` of KV each."""

    batch: int
    steps: int
    topk: int
    num_draft_tokens: int
    generation_tokens: int  # the tokens the band and P are over (a priced request's own)
    context_tokens: float = 0.0
    context_source: str = ""


@dataclass(frozen=True, kw_only=True)
class AcceptFigures:
    """The acceptance priced (tokens per verify step incl. the bonus token) and the proposal rate."""

    source: str
    convention: str
    #: E[A] and its spread, in tokens per verify step (drafts: one less)
    mean_tokens: float
    mean_drafts: float
    std_tokens: float
    #: the verify steps behind it (0 with ``samples_unknown``: a mean given without a count)
    samples: int
    samples_unknown: bool
    #: P(A = 1..steps+1)
    probs: tuple[float, ...]
    #: the accept log's drift of tokens per request-step between windows (relative standard
    #: deviation), in the band and P; 0: none measured
    drift_rel: float = 0.0
    #: share of request-steps that proposed (host proposers; 1.0 = every step)
    proposal_rate: float = 1.0
    #: where it came from: "--proposal-rate", the accept log, the profile's hook measurement, or "" (every step)
    proposal_rate_source: str = ""


@dataclass(frozen=True, kw_only=True)
class CostFigures:
    """One cycle's costs (seconds) and the baseline step's, with their measured 95 % half-widths."""

    baseline_step_s: float
    baseline_allreduce_s: float
    verify_tokens: int
    verify_s: float
    verify_allreduce_s: float
    verify_compute_s: float
    verify_other_s: float
    draft_step_s: float
    draft_s: float
    draft_allreduce_s: float
    overhead_s: float
    cycle_s: float
    cycle_allreduce_s: float
    cycle_allreduce_frac: float
    draft_extend_s: float | None = None  # the first drafter forward when measured separately
    calibrated_overhead_s: float | None = None
    #: the mean request-step the proposal rate implies (= cycle_s when every step proposes)
    mean_step_s: float = 0.0
    #: relative 95 % half-widths of the measured costs (0: the profile gives none), already in
    #: the tok/s band and P(speedup > 1)
    cycle_ci95_rel: float = 0.0
    baseline_ci95_rel: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Figures:
    """Throughput, speedup and break-even, with the band and P(speedup > 1) around them (tok/s
    totals over the batch; speedup and tok/s over the mean request-step)."""

    baseline_tokens_per_s: float
    tokens_per_s: float
    tokens_per_s_low: float
    tokens_per_s_high: float
    speedup: float
    #: the speedup's 95 % band (:func:`specmodel.model.cycle.speedup_band`): the tok/s band over the
    #: baseline, widened by the baseline cost's own interval
    speedup_low: float
    speedup_high: float
    break_even_accept_tokens: float
    accept_for_plus20_tokens: float
    break_even_reachable: bool
    plus20_reachable: bool
    margin_tokens: float
    p_speedup_gt_1: float | None  # None: the accept distribution's sample size is unknown
    #: why P(speedup > 1) is not given although it could be computed ("" = it is given): a
    #: probability computed from an assumed or contradicted cost would state a confidence nobody has
    p_withheld: str = ""
    #: the accept length (tokens/step incl. bonus) at which a priced request breaks even (= the
    #: decode phase's break-even when no request is priced)
    request_break_even_accept_tokens: float = math.nan


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """The verdict, its reason, and what qualifies it."""

    verdict: str
    reason: str
    warnings: tuple[str, ...] = ()
    extrapolated: tuple[Extrapolation, ...] = ()
    #: costs never measured for their kind (a fallback curve used): the verdict is qualified
    assumed: tuple[Assumption, ...] = ()
    #: costs that contradict each other (model/consistency.py): a "refuse" one makes the verdict
    #: INCONSISTENT, a "qualify" one qualifies it
    inconsistencies: tuple[Inconsistency, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Every figure a user sees, in named parts. The report draws from this and never recomputes.

    ``request``: a request priced end to end (``--request-tokens``): its prefill and the time outside
    the engine's steps beside the decode phase; the verdict then rests on its speedup. None: the
    figures are the decode phase's only."""

    source: Provenance
    point: PricedPoint
    accept: AcceptFigures
    costs: CostFigures
    figures: Figures
    outcome: Outcome
    request: RequestPrice | None = None

    @property
    def baseline_tokens_per_s_per_request(self) -> float:
        return self.figures.baseline_tokens_per_s / self.point.batch

    @property
    def tokens_per_s_per_request(self) -> float:
        return self.figures.tokens_per_s / self.point.batch

    @property
    def verdict_label(self) -> str:
        """The verdict, qualified when any cost it rests on was not measured:
        ``NO-GO (extrapolated: batch 32 > measured 16)``,
        ``GO (verify not measured at 128K: assumed = decode at 4 tokens)``."""
        o = self.outcome
        if not self.consistent:
            return o.verdict  # no verdict to qualify: the reason names the contradiction
        label = qualified_verdict(o.verdict, o.extrapolated, o.assumed)
        quals = [("costs replaced: " if i.check == "running_max" else "") + i.message
                 for i in o.inconsistencies if not i.refuses]
        if self.source.foreign_costs:
            quals.insert(0, f"on another box's costs: {self.source.foreign_costs}")
        if quals:
            sep = "; " if label.endswith(")") else " ("
            label = (label[:-1] if label.endswith(")") else label) + sep + "; ".join(quals) + ")"
        return label

    @property
    def measured(self) -> bool:
        """Every cost the verdict rests on was measured (no extrapolation, no assumption)."""
        return not (self.outcome.extrapolated or self.outcome.assumed)

    @property
    def to_measure(self) -> tuple[str, ...]:
        """What to measure to remove each assumption."""
        return tuple(dict.fromkeys([i.to_measure for i in self.outcome.inconsistencies]
                                   + [a.to_measure for a in self.outcome.assumed]))

    @property
    def no_allreduce(self) -> bool:
        """TP 1 (known): no forward carries a collective, so every all-reduce figure is zero by
        construction -- printed "none (TP 1)", neither "unknown" nor a measured 0."""
        return self.source.tp_known and self.source.tp == 1

    @property
    def allreduce_word(self) -> str:
        """How an all-reduce figure reads when it is not a measured time."""
        return "none (TP 1)" if self.no_allreduce else "unknown"

    @property
    def allreduce_source(self) -> str:
        """Where the all-reduce figures come from: "none (TP 1)", "unknown" (no split), "measured
        (capture)" (some cycle rows' split is a profiler capture's share × their forward time),
        "measured" (on this box: timed around each all-reduce, a trace's collectives, a fit), or
        the profile's own kind where nobody measured it here ("reference")."""
        if self.no_allreduce or not self.source.allreduce_known:
            return self.allreduce_word
        if self.source.allreduce_capture:
            return "measured (capture)"
        from specmodel.schema.source import OWN_BOX_KINDS

        kind = self.source.profile_source_kind
        return "measured" if kind in OWN_BOX_KINDS else kind

    @property
    def tp_label(self) -> str:
        return f"TP{self.source.tp}" if self.source.tp_known else "TP unknown"

    @property
    def band_label(self) -> str:
        """The qualifier shared by the band and P(speedup > 1) wherever they are shown: what they
        include (one generation; the mean's sampling error; the measured costs' 95 % interval)."""
        a, gen = self.accept, self.point.generation_tokens
        if a.samples_unknown:
            label = f"over {gen} tokens, sample size unknown"
        elif a.samples > 0:
            label = f"over {gen} tokens, {a.samples} observed steps"
        else:
            label = f"over {gen} tokens"
        if self.costs.cycle_ci95_rel > 0:
            label += f", cost interval ±{self.costs.cycle_ci95_rel:.1%}"
        if a.drift_rel > 0:
            label += f", acceptance drift between windows ±{1.96 * a.drift_rel:.1%}"
        return label

    @property
    def p_text(self) -> str:
        """P(speedup > 1) as shown: two decimals, or why it cannot be given."""
        f = self.figures
        if f.p_withheld:
            return f"not given ({f.p_withheld})"
        return "needs counts" if f.p_speedup_gt_1 is None else f"{f.p_speedup_gt_1:.2f}"

    @property
    def draft_parts(self) -> str:
        """The draft sum with its parts: extend + (steps-1) x step, or steps x step."""
        c, steps = self.costs, self.point.steps
        if c.draft_extend_s is not None:
            return f"extend {ms(c.draft_extend_s)} + {steps - 1} x {ms(c.draft_step_s)}"
        return f"{steps} steps x {ms(c.draft_step_s)}"

    @property
    def decision(self) -> Decision:
        """The verdict and its reason as one :class:`Decision` (watch and the schedules act on it)."""
        return Decision(verdict=self.outcome.verdict, reason=self.outcome.reason)

    @property
    def host_proposer(self) -> bool:
        """The priced method proposes on the host (ngram, suffix): no drafter forward by design."""
        return is_host_proposer(self.source.algorithm)

    @property
    def consistent(self) -> bool:
        """No two inputs contradict each other beyond their spreads."""
        return not any(i.refuses for i in self.outcome.inconsistencies)

    def to_dict(self) -> dict[str, Any]:
        """The flat ``specmodel.prediction`` document (SI units; tok/s fields without a suffix are
        totals over all ``batch`` requests; an unknown figure is None, never 0 or infinity)."""
        s, pt, a, c, f, o = self.source, self.point, self.accept, self.costs, self.figures, self.outcome

        def finite(v: float) -> float | None:
            return v if math.isfinite(v) else None  # proposal rate 0: no accept length breaks even

        def split(v: float) -> float | None:
            return v if s.allreduce_known else None  # unknown is not zero

        return {
            "profile_name": s.profile_name, "profile_label": s.profile_label,
            "profile_source_kind": s.profile_source_kind, "profile_path": s.profile_path,
            "tp": s.tp if s.tp_known else None, "batch": pt.batch, "steps": pt.steps, "topk": pt.topk,
            "num_draft_tokens": pt.num_draft_tokens, "generation_tokens": pt.generation_tokens,
            "accept_source": a.source, "accept_convention": a.convention, "accept_mean_tokens": a.mean_tokens,
            "accept_mean_drafts": a.mean_drafts, "accept_std_tokens": a.std_tokens, "accept_samples": a.samples,
            "accept_probs": list(a.probs),
            "baseline_step_s": c.baseline_step_s, "baseline_allreduce_s": split(c.baseline_allreduce_s),
            "baseline_tokens_per_s": f.baseline_tokens_per_s, "verify_tokens": c.verify_tokens,
            "verify_s": c.verify_s, "verify_allreduce_s": split(c.verify_allreduce_s),
            "verify_compute_s": split(c.verify_compute_s), "verify_other_s": split(c.verify_other_s),
            "draft_step_s": c.draft_step_s, "draft_s": c.draft_s, "draft_allreduce_s": split(c.draft_allreduce_s),
            "overhead_s": c.overhead_s, "cycle_s": c.cycle_s, "cycle_allreduce_s": split(c.cycle_allreduce_s),
            "cycle_allreduce_frac": split(c.cycle_allreduce_frac),
            "tokens_per_s": f.tokens_per_s, "tokens_per_s_low": f.tokens_per_s_low,
            "tokens_per_s_high": f.tokens_per_s_high, "speedup": f.speedup,
            "break_even_accept_tokens": finite(f.break_even_accept_tokens),
            "accept_for_plus20_tokens": finite(f.accept_for_plus20_tokens),
            "break_even_reachable": f.break_even_reachable, "plus20_reachable": f.plus20_reachable,
            "margin_tokens": finite(f.margin_tokens),
            "p_speedup_gt_1": None if f.p_withheld else f.p_speedup_gt_1,
            "verdict": o.verdict, "verdict_reason": o.reason, "calibrated_overhead_s": c.calibrated_overhead_s,
            "warnings": list(o.warnings), "context_tokens": pt.context_tokens, "context_source": pt.context_source,
            "extrapolated": [e.to_dict() for e in o.extrapolated], "assumed": [x.to_dict() for x in o.assumed],
            "tp_known": s.tp_known, "draft_extend_s": c.draft_extend_s, "accept_samples_unknown": a.samples_unknown,
            "cost_sources": dict(s.cost_sources), "allreduce_known": s.allreduce_known,
            "allreduce_capture": list(s.allreduce_capture), "cycle_cost_ci95_rel": c.cycle_ci95_rel,
            "baseline_cost_ci95_rel": c.baseline_ci95_rel, "proposal_rate": a.proposal_rate,
            "mean_step_s": c.mean_step_s, "inconsistencies": [i.to_dict() for i in o.inconsistencies],
            "p_withheld": f.p_withheld, "algorithm": s.algorithm, "proposal_rate_source": a.proposal_rate_source,
            "speedup_low": f.speedup_low, "speedup_high": f.speedup_high, "accept_drift_rel": a.drift_rel,
            "request": _request_dict(self), "foreign_costs": s.foreign_costs,
            "baseline_tokens_per_s_per_request": self.baseline_tokens_per_s_per_request,
            "tokens_per_s_per_request": self.tokens_per_s_per_request, "measured": self.measured,
            "allreduce_source": self.allreduce_source, "to_measure": list(self.to_measure),
            "verdict_label": self.verdict_label, "band_label": self.band_label, "consistent": self.consistent,
        }

    def to_frame(self) -> pd.DataFrame:
        """One row: every scalar of :meth:`to_dict` as a column (SI units, as named); list
        fields (``accept_probs``, ``warnings``, ``extrapolated``) are kept as one cell each.
        ``pd.concat([p.to_frame() for p in preds])`` tabulates a sweep."""
        import pandas as pd  # only here: pandas stays off predict's cold path

        return pd.DataFrame([self.to_dict()])


def _request_dict(p: Prediction) -> dict[str, Any] | None:
    """The request priced end to end (SI, totals over the batch), JSON-safe (None for infinities)."""
    rq = p.request
    if rq is None:
        return None

    def fin(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return {"request_tokens": rq.request_tokens, "prompt_tokens": rq.prompt_tokens, "prompt_source": rq.prompt_source,
            "baseline_s": rq.base_s, "spec_s": fin(rq.spec_s),
            "baseline_prefill_s": rq.base_prefill_s, "spec_prefill_s": rq.spec_prefill_s,
            "baseline_outside_s": rq.base_outside_s, "spec_outside_s": rq.spec_outside_s,
            "baseline_decode_s": rq.base_decode_s, "spec_decode_s": fin(rq.spec_decode_s),
            "baseline_tokens_per_s": rq.baseline_tokens_per_s, "tokens_per_s": rq.tokens_per_s,
            "speedup": rq.speedup, "speedup_low": rq.speedup_low, "speedup_high": rq.speedup_high,
            "decode_speedup_needed": fin(rq.decode_speedup_needed),
            "break_even_accept_tokens": fin(p.figures.request_break_even_accept_tokens),
            "assumed": [a.to_dict() for a in rq.assumed], "extrapolated": [e.to_dict() for e in rq.extrapolated]}


def qualified_verdict(verdict: str, extrapolated: Sequence[Extrapolation],
                      assumed: Sequence[Assumption] = ()) -> str:
    """``verdict`` alone when every cost was measured, else qualified:
    ``GO (verify not measured at 128K: assumed = decode at 4 tokens; extrapolated: a; b)``."""
    parts = list(dict.fromkeys(a.label for a in assumed))
    labels = list(dict.fromkeys(e.label for e in extrapolated))
    if labels:
        parts.append(f"extrapolated: {'; '.join(labels)}")
    return f"{verdict} ({'; '.join(parts)})" if parts else verdict
