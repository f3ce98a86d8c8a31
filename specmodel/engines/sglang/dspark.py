"""SGLang 0.5.23's DSpark step-cost table, written from a profile's measured cycle
(``--speculative-dspark-sps-table-path FILE``, read by
``srt/speculative/dspark_components/dspark_sps.py`` ``load_sps_table_from_path``).

The additive form (``SpsAdditiveCostTable``, dspark_sps.py 62-102): ``{bias_seconds, bs_probes,
alpha_seconds, m_probes, theta_seconds}``, one speculative step (draft + verify + the scheduler's
work) priced as

    step(num_reqs, budget) = bias + α(num_reqs) + θ(num_reqs + budget)          (dspark_sps.py 88-95)

α and θ interpolated linearly between probes and clamped at the ends (``_interp_clamped``, 51-59);
``budget`` is the step's draft tokens verified beyond each request's root token, so
``num_reqs + budget`` is the verify forward's total tokens (the planner tries budgets 0.. and keeps the
one with the most expected tokens per second, ``dspark_planner.py`` 867-903). ``bias_seconds`` must be
> 0 (dspark_sps.py 85-86); probes strictly increasing.

From specmodel's cycle at batch B (``model/cyclecost.cycle_costs``: T_draft(B) + T_verify(B·ndt) +
host work), split the way the table adds: θ(m) = T_verify at m = B·ndt total tokens (specmodel's
verify cost is a function of the forward's tokens, ``model/costs.forward_cost``), and the parts that
grow with the requests, T_draft(B) + host work, are bias + α(B) with bias the smallest of them (the
cost of the smallest measured batch) and α the growth above it. So at every measured batch
step(B, B·(ndt − 1)) is specmodel's cycle at B. One table per context band: every cost at the band's
context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.model.cyclecost import cycle_costs
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import Profile

SOURCE = "sglang 0.5.23: srt/speculative/dspark_components/dspark_sps.py (SpsAdditiveCostTable)"


@dataclass(frozen=True, kw_only=True)
class StepTable:
    """One context band's table (``body``: the JSON SGLang reads) and what it rests on."""

    context_tokens: int
    body: dict[str, Any]
    batches: tuple[int, ...]
    cycles_s: tuple[float, ...]  # specmodel's cycle at each batch (what step() gives back there)
    notes: tuple[str, ...] = ()


def step_table(profile: Profile, spec: SpecConfig, context_tokens: int, batches: Sequence[int]) -> StepTable:
    """The additive table at ``context_tokens`` over the measured ``batches``; refuses (one line) a
    cycle resting on a cost nobody measured: SGLang would plan on it as if measured."""
    bs = sorted(set(batches))
    if not bs:
        raise SpecmodelError("DSpark table: no measured batch to price")
    ndt = spec.num_draft_tokens
    grow: list[float] = []
    theta: list[float] = []
    cycles: list[float] = []
    notes: list[str] = []
    for b in bs:
        cc = cycle_costs(profile, batch=b, spec=spec, context_tokens=context_tokens)
        if cc.assumed:
            raise SpecmodelError(f"DSpark table at context {context_tokens}: batch {b}: the cycle rests on "
                                 f"{cc.assumptions[0].label}; not written (SGLang would plan on it as measured)")
        if cc.extrapolated:
            notes.append(f"context {context_tokens}, batch {b}: {', '.join(e.label for e in cc.extrapolations)}")
        grow.append(cc.draft_total_s + cc.overhead_s)
        theta.append(cc.verify.total_s)
        cycles.append(cc.cycle_s)
    bias = min(grow)
    if bias <= 0:
        raise SpecmodelError(f"DSpark table at context {context_tokens}: no drafter or host cost measured "
                             "(SGLang needs bias_seconds > 0)")
    body = {"bias_seconds": bias, "bs_probes": bs, "alpha_seconds": [g - bias for g in grow],
            "m_probes": [b * ndt for b in bs], "theta_seconds": theta}
    return StepTable(context_tokens=context_tokens, body=body, batches=tuple(bs), cycles_s=tuple(cycles),
                     notes=tuple(notes))

