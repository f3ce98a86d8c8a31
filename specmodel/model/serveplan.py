"""Serve plan: for a grid of (batch, context), the best speculative configuration and whether to
switch speculation off, from measured costs and measured acceptance only.

Each cell runs :func:`specmodel.model.optimize.optimize` at (B, L). Its recommendation is the
best configuration whose costs and acceptance were both measured (:attr:`Candidate.measured`);
the best extrapolated configuration is kept beside it for display, never recommended. A cell is
in the *measured region* when a recommendation exists there. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specmodel.errors import SpecmodelError
from specmodel.model.accept import AcceptByContext
from specmodel.model.consistency import check_cycle
from specmodel.model.cycle import Assumption
from specmodel.model.cyclecost import cycle_costs
from specmodel.model.decision import REMEASURE
from specmodel.model.optimize import MARGINAL as MARGINAL
from specmodel.model.optimize import OFF as OFF
from specmodel.model.optimize import (
    SPECULATE,
    TOPKS,
    UNMEASURED,
    AcceptModel,
    Candidate,
    accept_model,
    action_for,
    optimize,
)
from specmodel.model.provenance import cost_provenance
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import Profile

#: Regions: every cost and the acceptance measured / a cost only assumed (a fallback curve) /
#: a cost or the acceptance extrapolated.
MEASURED_REGION, ASSUMED_REGION, EXTRAPOLATED_REGION = "measured", "ASSUMED", "EXTRAPOL."
INCONSISTENT_REGION = "INCONSIST."  # costs that contradict each other: no decision until re-measured

@dataclass(frozen=True, kw_only=True)
class PlanCell:
    """One (batch, context) of the plan."""

    batch: int
    context_tokens: int
    recommended: Candidate | None  # best measured configuration (None: nothing measured here)
    best_any: Candidate  # best over every configuration, extrapolated ones included (listed only)
    default: Candidate
    #: costs of the default configuration here that came from a fallback curve (verify = decode)
    assumed: tuple[Assumption, ...] = ()
    #: contradictions among this cell's costs (model/consistency.py, "refuse"): never recommended
    inconsistent: tuple[str, ...] = ()
    #: why no figure is given here: costs read beyond the measured range further than a prediction may go,
    #: or extrapolated curves that cross (model/consistency.py ``check_range``); nothing is listed
    beyond_range: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        return self.recommended is not None

    @property
    def region(self) -> str:
        if self.inconsistent:
            return INCONSISTENT_REGION
        if self.measured:
            return MEASURED_REGION
        return ASSUMED_REGION if self.assumed or self.best_any.cost_assumed else EXTRAPOLATED_REGION

    @property
    def action(self) -> str:
        """``speculate`` / ``marginal`` / ``off`` for the recommendation by predict's rule
        (:func:`action_for`), ``unmeasured`` when no configuration has measured costs and acceptance here."""
        if self.inconsistent:
            return REMEASURE
        if self.recommended is None:
            return UNMEASURED
        return action_for(self.recommended.speedup)

    @property
    def to_run(self) -> Candidate | None:
        """The configuration to deploy here: only where the action is ``speculate`` (an ``off`` or
        ``marginal`` cell fills no configuration)."""
        return self.recommended if self.action == SPECULATE else None

    def to_dict(self) -> dict[str, object]:
        return {"batch": self.batch, "context_tokens": self.context_tokens, "measured": self.measured,
                "region": self.region, "action": self.action,
                "assumed": [a.to_dict() for a in self.assumed], "inconsistent": list(self.inconsistent),
                "beyond_range": list(self.beyond_range),
                "recommended": self.recommended.to_dict() if self.recommended is not None else None,
                "best_extrapolated": (self.best_any.to_dict()
                                      if self.best_any.key != (self.recommended.key if self.recommended else None)
                                      and not self.beyond_range else None),
                "default": self.default.to_dict()}


@dataclass(frozen=True, kw_only=True)
class ServePlan:
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    cells: tuple[PlanCell, ...]
    algorithm: str
    #: (context, where its acceptance came from) when the log measured acceptance per context band;
    #: empty: one acceptance for every context (assumed constant over context)
    accept_bands: tuple[tuple[int, str], ...] = ()

    def cell(self, batch: int, context_tokens: int) -> PlanCell:
        for c in self.cells:
            if c.batch == batch and c.context_tokens == context_tokens:
                return c
        raise SpecmodelError(f"serve plan: no cell at batch {batch}, context {context_tokens}")


#: acceptance at a context: the model to plan with there and where it came from (a band label)
AcceptAt = Callable[[int], tuple[AcceptModel, str]]


def band_models(by_context: AcceptByContext, *, per_position: bool, measured_topk: int, max_steps: int) -> AcceptAt:
    """The accept model of the context band that covers each context (acceptance measured per band
    by ``accept``; :meth:`AcceptByContext.at` says which band, or that it was assumed constant)."""
    def at(L: int) -> tuple[AcceptModel, str]:
        dist, label = by_context.at(L)
        return accept_model(dist, rates=dist.per_position_rates() if per_position else None,
                            measured_topk=measured_topk, max_steps=max_steps), label
    return at


def serve_plan(profile: Profile, model: AcceptModel, *, batches: Sequence[int], contexts: Sequence[int],
               default: SpecConfig, max_steps: int = 8, accept_at: AcceptAt | None = None,
               topks: Sequence[int] = TOPKS, proposal_rate: float = 1.0) -> ServePlan:
    """The plan over ``batches`` × ``contexts`` (see the module docstring). With ``accept_at``
    each context is planned with its own acceptance (``model`` is then unused) and the plan
    records which (:attr:`ServePlan.accept_bands`); ``topks`` narrows the search to what an
    engine can run (an engine record's ``chains_only``: ``(1,)``). The engine's own flags for a cell
are its record's ``paste`` (:class:`specmodel.engines.base.EngineSpec`); nothing here names an engine."""
    if not batches or not contexts:
        raise SpecmodelError("serve plan: needs at least one batch and one context")
    cells: list[PlanCell] = []
    bands: list[tuple[int, str]] = []
    for L in sorted(set(contexts)):
        m = model
        if accept_at is not None:
            m, label = accept_at(L)
            bands.append((L, label))
        for b in sorted(set(batches)):
            opt = optimize(profile, m, batch=b, default=default, context_tokens=L, top=1,
                           max_steps=max(max_steps, default.steps), topks=topks, proposal_rate=proposal_rate)
            assert opt.best_any is not None
            cc = cycle_costs(profile, batch=b, spec=default, context_tokens=L)
            refused = [i for i in check_cycle(profile, cc, base_s=cc.base.total_s, mean_step_s=cc.cycle_s,
                                              break_even_tokens=cc.break_even_tokens,
                                              provenance=dict(cost_provenance(profile, cc, None))) if i.refuses]
            # an extrapolation that fails is no contradiction between recordings: the cell is unmeasured, unpriced
            beyond = tuple(i.message for i in refused if i.beyond_range)
            bad = tuple(i.message for i in refused if not i.beyond_range)
            cells.append(PlanCell(batch=b, context_tokens=L, recommended=opt.recommended, best_any=opt.best_any,
                                  default=opt.default, assumed=cc.assumptions, inconsistent=bad, beyond_range=beyond))
    return ServePlan(batches=tuple(sorted(set(batches))), contexts=tuple(sorted(set(contexts))), cells=tuple(cells),
                     algorithm=default.algorithm, accept_bands=tuple(bands))
