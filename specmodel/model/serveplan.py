"""Serve plan: for a grid of (batch, context), the best speculative configuration and whether to
switch speculation off, from measured costs and measured acceptance only.

Each cell runs :func:`specmodel.model.optimize.optimize` at (B, L). Its recommendation is the
best configuration whose costs and acceptance were both measured (:attr:`Candidate.measured`);
the best extrapolated configuration is kept beside it for display, never recommended. A cell is
in the *measured region* when a recommendation exists there. Pure functions; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from specmodel.errors import SpecmodelError
from specmodel.model.optimize import TOPKS, AcceptModel, Candidate, optimize
from specmodel.schema.profile import Profile, SpecConfig

#: Actions a cell can carry.
SPECULATE, OFF, UNMEASURED = "speculate", "off", "unmeasured"

#: SGLang --speculative-algorithm -> vLLM speculative_config "method".
VLLM_METHODS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "MTP": "mtp"}


@dataclass(frozen=True, kw_only=True)
class PlanCell:
    """One (batch, context) of the plan."""

    batch: int
    context_tokens: int
    recommended: Candidate | None  # best measured configuration (None: nothing measured here)
    best_any: Candidate  # best over every configuration, extrapolated ones included (listed only)
    default: Candidate

    @property
    def measured(self) -> bool:
        return self.recommended is not None

    @property
    def action(self) -> str:
        """``speculate`` when the recommendation beats the baseline, ``off`` when it does not,
        ``unmeasured`` when no configuration has measured costs and acceptance here."""
        if self.recommended is None:
            return UNMEASURED
        return SPECULATE if self.recommended.speedup > 1.0 else OFF

    def to_dict(self) -> dict[str, object]:
        return {"batch": self.batch, "context_tokens": self.context_tokens, "measured": self.measured,
                "action": self.action,
                "recommended": self.recommended.to_dict() if self.recommended is not None else None,
                "best_extrapolated": (self.best_any.to_dict()
                                      if self.best_any.key != (self.recommended.key if self.recommended else None)
                                      else None),
                "default": self.default.to_dict()}


@dataclass(frozen=True, kw_only=True)
class ServePlan:
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    cells: tuple[PlanCell, ...]
    algorithm: str

    def cell(self, batch: int, context_tokens: int) -> PlanCell:
        for c in self.cells:
            if c.batch == batch and c.context_tokens == context_tokens:
                return c
        raise SpecmodelError(f"serve plan: no cell at batch {batch}, context {context_tokens}")


def serve_plan(profile: Profile, model: AcceptModel, *, batches: Sequence[int], contexts: Sequence[int],
               default: SpecConfig, max_steps: int = 8, topks: Sequence[int] = TOPKS) -> ServePlan:
    """The plan over ``batches`` × ``contexts`` (see the module docstring); ``topks`` narrows the
    search to what an engine can run (vLLM drafts chains: ``(1,)``)."""
    if not batches or not contexts:
        raise SpecmodelError("serve plan: needs at least one batch and one context")
    cells: list[PlanCell] = []
    for L in sorted(set(contexts)):
        for b in sorted(set(batches)):
            opt = optimize(profile, model, batch=b, default=default, context_tokens=L, top=1,
                           max_steps=max(max_steps, default.steps), topks=topks)
            assert opt.best_any is not None
            cells.append(PlanCell(batch=b, context_tokens=L, recommended=opt.recommended, best_any=opt.best_any,
                                  default=opt.default))
    return ServePlan(batches=tuple(sorted(set(batches))), contexts=tuple(sorted(set(contexts))), cells=tuple(cells),
                     algorithm=default.algorithm)


def sglang_flags(c: Candidate, algorithm: str) -> str:
    return f"--speculative-algorithm {algorithm} {c.sglang_flags()}"


def vllm_speculative_config(c: Candidate, algorithm: str, drafter: str = "<drafter>") -> str | None:
    """vLLM ``--speculative-config`` JSON for a chain (topk 1); None for a tree, which vLLM does not draft."""
    if c.topk != 1:
        return None
    method = VLLM_METHODS.get(algorithm.upper(), algorithm.lower())
    cfg: dict[str, object] = {"method": method, "num_speculative_tokens": c.steps}
    if method != "mtp":
        cfg["model"] = drafter
    return json.dumps(cfg, separators=(", ", ": "))
