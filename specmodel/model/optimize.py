"""What-if optimizer: the (steps, topk, num_draft_tokens[, batch limit]) with the best predicted tok/s.

In the spirit of Sequoia's hardware-aware tree optimizer (Chen et al. 2024, "Sequoia:
Scalable, Robust, and Hardware-aware Speculative Decoding", §3–4): combine a positional
acceptance model with the measured cost of verifying n tokens and pick the tree that
maximises tokens per second, not tokens per step.

Objective, per configuration s = (steps, topk, ndt) at batch B:

    tok/s(s) = B · E[A | s] / T_cycle(s),
    T_cycle(s) = steps × T_draft(B·topk) + T_verify(B·ndt) + overhead

(costs from the profile via :func:`specmodel.model.cyclecost.cycle_costs`; a measured
draft-extend replaces the first draft step there). Pure functions; no I/O, no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from specmodel.errors import SpecmodelError
from specmodel.limits import SEARCH_MAX_DRAFT_TOKENS, SEARCH_MAX_STEPS
from specmodel.model import cycle as eq
from specmodel.model import hostdraft as hd
from specmodel.model.accept import AcceptDist, resize
from specmodel.model.cyclecost import cycle_costs
from specmodel.model.decision import GO_MIN_SPEEDUP, HOLD, OFF, SPECULATE, action_for
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import draft_steps, is_host_proposer, max_draft_tokens
from specmodel.schema.profile import Profile

TOPKS = (1, 2, 4, 8)

#: What to do with a configuration: the actions of the one decision rule
#: (:func:`specmodel.model.decision.decide`: GO -> speculate, MARGINAL -> marginal, NO-GO -> off);
#: unmeasured: nothing to decide on.
MARGINAL = HOLD
UNMEASURED = "unmeasured"
__all__ = ["MARGINAL", "OFF", "SPECULATE", "UNMEASURED", "action_for"]


@dataclass(frozen=True, kw_only=True)
class AcceptModel:
    """Conditional acceptance of the drafter's top-1 token at each depth of a chain.

    ``conditional[d-1]`` = c_d = P(draft d accepted | drafts 1..d−1 accepted) for
    d = 1..len(conditional). ``measured_depth`` is how deep the input data went; deeper
    values are extrapolated (:func:`specmodel.model.accept.resize`: the last conditional rate).
    """

    conditional: tuple[float, ...]
    measured_depth: int
    source: str
    measured_topk: int = 1
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.conditional:
            raise SpecmodelError("accept model: needs at least one depth")
        for c in self.conditional:
            if not (0.0 <= c <= 1.0) or math.isnan(c):
                raise SpecmodelError(f"accept model: conditional rates must be in [0, 1], got {c}")
        if self.measured_depth < 0:
            raise SpecmodelError("accept model: measured_depth must be >= 0")

    @property
    def max_depth(self) -> int:
        return len(self.conditional)

    @property
    def chain_rates(self) -> tuple[float, ...]:
        """Unconditional r_d = Π_{i≤d} c_i (vLLM's per-position rates for a chain)."""
        out, cur = [], 1.0
        for c in self.conditional:
            cur *= c
            out.append(cur)
        return tuple(out)


def accept_model(dist: AcceptDist, *, rates: Sequence[float] | None = None, measured_topk: int = 1,
                 max_steps: int = SEARCH_MAX_STEPS) -> AcceptModel:
    """Per-depth chain acceptance from the user's accept-length source.

    * per-position rates r_i when given (vLLM, or a log that has them), else the rates
      implied by the distribution, r_i = P(A ≥ i+1) (for a bare mean that is the
      constant-α geometric chain of :func:`~specmodel.model.accept.from_mean`);
    * extended to ``max_steps`` with the last conditional rate (:func:`resize`);
    * c_d = r_d / r_{d−1}.
    * If the data came from a tree (``measured_topk`` k > 1) its per-depth rate t_d is read
      as a best-of-k rate and inverted under the sibling model used below
      (:func:`top1_rate_from_best_of_k`). (Approximation: it ignores the draft-token budget.)
    """
    if max_steps < 1:
        raise SpecmodelError(f"optimizer: max steps must be >= 1, got {max_steps}")
    if measured_topk < 1:
        raise SpecmodelError(f"optimizer: measured topk must be >= 1, got {measured_topk}")
    pos = [float(r) for r in (rates if rates is not None else dist.per_position_rates())]
    measured = len(pos)
    ext = resize(dist, max(max_steps, measured) + 1, rates=pos).per_position_rates()[:max_steps]
    cond: list[float] = []
    prev = 1.0
    for r in ext:
        cond.append(min(max(r / prev, 0.0), 1.0) if prev > 0 else 0.0)
        prev = r
    notes = []
    src = "per-position rates" if rates is not None else f"rates implied by the distribution ({dist.source})"
    if measured < max_steps:
        notes.append(f"depths {measured + 1}..{max_steps} extrapolated with the last conditional rate "
                     f"({cond[measured - 1] if measured else 0.0:.2f})")
    if measured_topk > 1:
        cond = [top1_rate_from_best_of_k(c, measured_topk) for c in cond]
        notes.append(f"measured with topk {measured_topk}: per-depth rates read as best-of-{measured_topk}, "
                     "inverted to top-1 chain rates")
    return AcceptModel(conditional=tuple(cond), measured_depth=measured, source=src, measured_topk=measured_topk,
                       notes=tuple(notes))


#: ρ in the sibling model below. Siblings are not independent: when the drafter's top-1 token
#: is rejected, its 2nd choice is accepted far less often than the top-1 was (Sequoia's measured
#: positional acceptance vectors fall off by ~5x per rank, Chen et al. 2024, Fig. 3). ρ = 1 is
#: the independence model (optimistic); ρ = 0.5 gives e.g. c = 0.6 -> 0.60, 0.12, 0.024.
SIBLING_CORRELATION = 0.5


def sibling_rates(c: float, topk: int, rho: float = SIBLING_CORRELATION) -> tuple[float, ...]:
    """Sequoia's positional acceptance vector at one depth.

    The j-th ranked candidate is accepted iff the 1st..(j−1)-th were rejected and it is
    accepted: q_j = c·((1 − c)·ρ)^(j−1). With ρ = 1 (independence) Σ_{j≤k} q_j = 1 − (1 − c)^k,
    the best-of-k rate; ρ < 1 discounts correlated siblings (:data:`SIBLING_CORRELATION`).
    Trees (topk > 1) stay an extrapolation unless the rates were measured with that topk.
    """
    if not 0.0 < rho <= 1.0:
        raise SpecmodelError(f"optimizer: sibling correlation must be in (0, 1], got {rho}")
    x = (1.0 - c) * rho
    return tuple(c * x**j for j in range(topk))


def best_of_k(c: float, topk: int, rho: float = SIBLING_CORRELATION) -> float:
    """P(some of the top-k candidates at a depth is accepted) = Σ_j q_j (see :func:`sibling_rates`)."""
    return math.fsum(sibling_rates(c, topk, rho))


def top1_rate_from_best_of_k(t: float, topk: int, rho: float = SIBLING_CORRELATION) -> float:
    """Invert :func:`best_of_k` (monotone in c) by bisection: the top-1 rate behind a measured best-of-k rate."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if best_of_k(mid, topk, rho) < t:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _tree_values(conditional: Sequence[float], steps: int, topk: int) -> list[float]:
    """Values of every node the drafter generates, best first (see :func:`expected_tokens`)."""
    if steps < 1 or topk < 1:
        raise SpecmodelError("optimizer: needs steps >= 1 and topk >= 1")
    if steps > len(conditional):
        raise SpecmodelError(f"optimizer: steps {steps} exceeds the accept model's depth {len(conditional)}")
    kept: list[float] = []
    beam = [1.0]
    for d in range(steps):
        q = sibling_rates(float(conditional[d]), topk)
        children = sorted((b * qj for b in beam for qj in q), reverse=True)
        kept.extend(children)
        beam = children[:topk]
    kept.sort(reverse=True)
    return kept


def expected_tokens(conditional: Sequence[float], *, steps: int, topk: int, num_draft_tokens: int) -> float:
    """E[A | steps, topk, ndt]: tokens per verify step (bonus included) for an EAGLE draft tree.

    The drafter expands, at each of ``steps`` depths, the ``topk`` best nodes by path
    probability into ``topk`` children each (SGLang ``select_top_k_tokens``); the verify
    keeps the ``ndt − 1`` best of all generated nodes plus the root (``organize_draft_results``).
    A node's value is the probability it is on the accepted path: the product of its
    ancestors' :func:`sibling_rates`. The accepted path's expected length is the sum of the
    kept nodes' values, so E[A] = 1 + Σ_{kept} value. For topk = 1 this is the chain,
    1 + Σ_{d<ndt} r_d (Leviathan et al. 2023 with per-position rates).
    """
    if num_draft_tokens < 2:
        raise SpecmodelError("optimizer: needs num_draft_tokens >= 2")
    acc = _running_totals(_tree_values(conditional, steps, topk))
    return acc[min(num_draft_tokens - 1, len(acc) - 1)]


def _running_totals(values: Sequence[float]) -> list[float]:
    """[1, 1+v1, 1+v1+v2, …] summed left to right (one summation order for every caller)."""
    acc = [1.0]
    for v in values:
        acc.append(acc[-1] + v)
    return acc


def search_space(max_steps: int = SEARCH_MAX_STEPS, topks: Sequence[int] = TOPKS) -> Iterator[tuple[int, int, int]]:
    """(steps, topk, ndt) with steps ∈ 1..max, topk ∈ ``topks``, ndt ∈ [2, min(topk + (steps − 1)·topk² + 1,
    SEARCH_MAX_DRAFT_TOKENS)]: every budget SGLang verifies (:func:`specmodel.schema.phases.max_draft_tokens`,
    ``organize_draft_results`` keeps the best ndt − 1 drafted nodes), up to the search's verify width."""
    for s in range(1, max_steps + 1):
        for k in topks:
            for n in range(2, _budget(s, k) + 1):
                yield s, k, n


def _budget(steps: int, topk: int) -> int:
    """The largest draft-token budget searched at ``steps`` × ``topk``: SGLang's bound, cut at the
    search's verify width (never below steps·topk + 1, one token per drafted node of each depth)."""
    return min(max_draft_tokens(steps, topk), max(SEARCH_MAX_DRAFT_TOKENS, steps * topk + 1))


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One evaluated configuration (seconds and tokens/s, SI)."""

    steps: int
    topk: int
    num_draft_tokens: int
    batch: int
    accept_tokens: float
    draft_s: float
    verify_s: float
    overhead_s: float
    cycle_s: float
    baseline_tokens_per_s: float
    tokens_per_s: float
    speedup: float
    cost_extrapolated: bool
    accept_extrapolated: bool
    context_tokens: float = 0.0
    #: a cost of the cycle came from a fallback kind's curve (e.g. verify = decode): never recommended
    cost_assumed: bool = False

    @property
    def key(self) -> tuple[int, int, int]:
        return self.steps, self.topk, self.num_draft_tokens

    @property
    def measured(self) -> bool:
        """Both its costs (:attr:`CycleCosts.measured`) and its acceptance rest on measurements:
        the only kind that may be recommended."""
        return not (self.cost_extrapolated or self.cost_assumed or self.accept_extrapolated)

    def sglang_flags(self) -> str:
        return (f"--speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
                f"--speculative-num-draft-tokens {self.num_draft_tokens}")

    def to_dict(self) -> dict[str, object]:
        return {"steps": self.steps, "topk": self.topk, "num_draft_tokens": self.num_draft_tokens,
                "batch": self.batch, "accept_tokens": self.accept_tokens, "draft_s": self.draft_s,
                "verify_s": self.verify_s, "overhead_s": self.overhead_s, "cycle_s": self.cycle_s,
                "baseline_tokens_per_s": self.baseline_tokens_per_s, "tokens_per_s": self.tokens_per_s,
                "speedup": self.speedup, "cost_extrapolated": self.cost_extrapolated,
                "accept_extrapolated": self.accept_extrapolated, "cost_assumed": self.cost_assumed,
                "context_tokens": self.context_tokens,
                "measured": self.measured, "sglang_flags": self.sglang_flags()}


def _rates(profile: Profile, spec: SpecConfig, batch: int, context_tokens: float | None, e: float, base_s: float,
           cycle_s: float, proposal_rate: float) -> tuple[float, float]:
    """(tok/s, speedup) of a cycle at ``batch``; with a host proposer's ``proposal_rate`` r < 1
    over its mean step (:func:`specmodel.model.hostdraft.host_mean_step_s`, the rule
    :func:`specmodel.model.predict.predict` uses)."""
    if proposal_rate < 1.0 and is_host_proposer(spec.algorithm):
        e = hd.mixed_tokens(e, proposal_rate)
        cycle_s = hd.host_mean_step_s(profile, batch=batch, spec=spec, proposal_rate=proposal_rate,
                                      context_tokens=context_tokens)
    return eq.spec_tokens_per_s(batch, e, cycle_s), eq.speedup(e, base_s, cycle_s)


def evaluate(profile: Profile, model: AcceptModel, *, batch: int, steps: int, topk: int,
             num_draft_tokens: int, context_tokens: float | None = None, proposal_rate: float = 1.0) -> Candidate:
    """tok/s = B·E[A|s]/T_cycle(s) for one configuration (costs looked up in ``profile`` at
    ``context_tokens`` of KV per request; default: the profile's smallest measured context;
    ``proposal_rate``: see :func:`_rates`)."""
    spec = SpecConfig(algorithm=profile.spec.algorithm, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens)
    cc = cycle_costs(profile, batch=batch, spec=spec, context_tokens=context_tokens)
    e = expected_tokens(model.conditional, steps=steps, topk=topk, num_draft_tokens=num_draft_tokens)
    t = cc.cycle_s
    tps, sp = _rates(profile, spec, batch, context_tokens, e, cc.base.total_s, t, proposal_rate)
    return Candidate(steps=steps, topk=topk, num_draft_tokens=num_draft_tokens, batch=batch, accept_tokens=e,
                     draft_s=cc.draft_total_s, verify_s=cc.verify.total_s, overhead_s=cc.overhead_s, cycle_s=t,
                     baseline_tokens_per_s=eq.baseline_tokens_per_s(batch, cc.base.total_s),
                     tokens_per_s=tps, speedup=sp,
                     cost_extrapolated=cc.extrapolated, cost_assumed=cc.assumed, context_tokens=cc.context_tokens,
                     accept_extrapolated=steps > model.measured_depth or topk != model.measured_topk)


def evaluate_all(profile: Profile, model: AcceptModel, *, batch: int, max_steps: int = SEARCH_MAX_STEPS,
                 topks: Sequence[int] = TOPKS, context_tokens: float | None = None,
                 proposal_rate: float = 1.0) -> tuple[Candidate, ...]:
    """Every configuration of :func:`search_space` at ``batch``; same figures as :func:`evaluate`.

    Shares work across configurations: the profile lookups depend on (topk, ndt) only and
    the draft total on steps through T_draft = steps × T_step (or extend + (steps−1)·T_step,
    :func:`specmodel.model.cycle.draft_s`); the tree values on (steps, topk) only.
    """
    if max_steps > model.max_depth:
        raise SpecmodelError(f"optimizer: max steps {max_steps} exceeds the accept model's depth {model.max_depth}")
    out: list[Candidate] = []
    for k in topks:
        prefix: dict[int, list[float]] = {}
        for s in range(1, max_steps + 1):
            prefix[s] = _running_totals(_tree_values(model.conditional, s, k))
        for n in range(2, _budget(max_steps, k) + 1):
            s0 = draft_steps(n, k)  # the shallowest tree that drafts n - 1 nodes
            cc = cycle_costs(profile, batch=batch, spec=SpecConfig(algorithm=profile.spec.algorithm, steps=s0,
                                                                   topk=k, num_draft_tokens=n),
                             context_tokens=context_tokens)
            ext = cc.draft_extend.total_s if cc.draft_extend is not None else None
            for s in range(s0, max_steps + 1):
                draft = eq.draft_s(cc.draft_step.total_s, s, ext) if profile.has("draft") else 0.0
                t = eq.cycle_s(draft, cc.verify.total_s, cc.overhead_s)
                e = prefix[s][min(n - 1, len(prefix[s]) - 1)]
                cand = SpecConfig(algorithm=profile.spec.algorithm, steps=s, topk=k, num_draft_tokens=n)
                tps, sp = _rates(profile, cand, batch, context_tokens, e, cc.base.total_s, t, proposal_rate)
                out.append(Candidate(steps=s, topk=k, num_draft_tokens=n, batch=batch, accept_tokens=e,
                                     draft_s=draft, verify_s=cc.verify.total_s, overhead_s=cc.overhead_s, cycle_s=t,
                                     baseline_tokens_per_s=eq.baseline_tokens_per_s(batch, cc.base.total_s),
                                     tokens_per_s=tps, speedup=sp, cost_extrapolated=cc.extrapolated,
                                     cost_assumed=cc.assumed,
                                     context_tokens=cc.context_tokens,
                                     accept_extrapolated=s > model.measured_depth or k != model.measured_topk))
    return tuple(out)


def _rank_key(c: Candidate) -> tuple[float, int, int, int]:
    # best tok/s first; on a tie the cheaper config (fewer verified tokens, shallower, narrower)
    return (-c.tokens_per_s, c.num_draft_tokens, c.steps, c.topk)


@dataclass(frozen=True, kw_only=True)
class Optimum:
    """The optimizer's answer at one batch size (and context).

    ``recommended`` is the best configuration whose costs AND acceptance were measured (None when
    none is); ``best`` is that recommendation, or the default configuration when there is none, so
    an extrapolated configuration is never what the report calls best. ``best_any`` is the best
    over every configuration, extrapolated ones included: listed, never recommended.
    """

    batch: int
    best: Candidate
    best_measured_topk: Candidate  # best with the topk the acceptance was measured at (least extrapolated)
    default: Candidate
    ranked: tuple[Candidate, ...]  # the top configurations, best first (extrapolated ones included, flagged)
    evaluated: int
    recommended: Candidate | None = None
    best_any: Candidate | None = None
    context_tokens: float = 0.0

    @property
    def gain(self) -> float:
        """best tok/s / default tok/s (≥ 1 by construction)."""
        return self.best.tokens_per_s / self.default.tokens_per_s

    @property
    def pays(self) -> bool:
        """A configuration with measured costs and acceptance is GO here (the one decision rule:
        a MARGINAL gain does not pay, as the plan and the schedules run nothing there)."""
        return self.action == SPECULATE

    @property
    def action(self) -> str:
        """:func:`action_for` the recommendation (``unmeasured`` when there is none)."""
        return UNMEASURED if self.recommended is None else action_for(self.recommended.speedup)

    @property
    def to_run(self) -> Candidate | None:
        """What to run: the recommended (measured) configuration where the decision rule says
        speculate, else None (turn speculation off): a configuration below the baseline, or within
        the margin of break-even, is never recommended."""
        return self.recommended if self.action == SPECULATE else None

    def within_noise(self, noise_rel: float) -> bool:
        """The recommendation beats the default configuration by less than the costs' own relative
        95 % half-width ``noise_rel``: the ranking between them is not resolved by the measurements."""
        b, d = self.to_run, self.default
        if b is None or b.key == d.key or noise_rel <= 0 or not d.measured or action_for(d.speedup) != SPECULATE:
            return False
        return b.tokens_per_s / d.tokens_per_s - 1.0 < noise_rel

    def recommendation_text(self, noise_rel: float = 0.0) -> str:
        """The one recommendation sentence (CLI and PDF print this). ``noise_rel``: the measured
        costs' relative 95 % half-width; a gain over the default inside it recommends no change."""
        if self.recommended is None:
            return "none: no configuration has measured costs and acceptance at this batch and context"
        if self.within_noise(noise_rel):
            r, d = self.recommended, self.default
            return (f"keep steps {d.steps}, topk {d.topk}, draft tokens {d.num_draft_tokens} ({d.tokens_per_s:.1f} tok/s, "
                    f"{d.speedup:.2f}x): the best, steps {r.steps}, topk {r.topk}, draft tokens {r.num_draft_tokens} "
                    f"({r.tokens_per_s:.1f} tok/s), is {r.tokens_per_s / d.tokens_per_s - 1:.1%} better, inside the "
                    f"+/-{noise_rel:.0%} noise of the measured costs")
        b = self.to_run
        if b is None:
            best = self.recommended
            if self.action == MARGINAL:
                return (f"keep speculation off: the best measured configuration at batch {self.batch} (steps "
                        f"{best.steps}, topk {best.topk}, draft tokens {best.num_draft_tokens}) gives {best.speedup:.2f}x, "
                        f"MARGINAL (below {GO_MIN_SPEEDUP:.2f}x)")
            return (f"turn speculation off: no measured configuration beats the baseline at batch {self.batch} "
                    f"(best found {best.speedup:.2f}x)")
        return (f"steps {b.steps}, topk {b.topk}, draft tokens {b.num_draft_tokens} -> {b.tokens_per_s:.1f} tok/s, "
                f"{b.speedup:.2f}x")


def optimize(profile: Profile, model: AcceptModel, *, batch: int, default: SpecConfig, top: int = 10,
             max_steps: int = SEARCH_MAX_STEPS, topks: Sequence[int] = TOPKS, context_tokens: float | None = None,
             proposal_rate: float = 1.0) -> Optimum:
    """Rank every configuration by predicted tok/s; the default configuration is always evaluated.

    The recommendation is the best *measured* configuration (:attr:`Candidate.measured`).
    """
    if top < 1:
        raise SpecmodelError(f"optimizer: top must be >= 1, got {top}")
    depth = max(max_steps, default.steps)
    if depth > model.max_depth:
        raise SpecmodelError(f"optimizer: steps {depth} exceeds the accept model's depth {model.max_depth}")
    cands = list(evaluate_all(profile, model, batch=batch, max_steps=max_steps, topks=topks,
                              context_tokens=context_tokens, proposal_rate=proposal_rate))
    dflt = evaluate(profile, model, batch=batch, steps=default.steps, topk=default.topk,
                    num_draft_tokens=default.num_draft_tokens, context_tokens=context_tokens,
                    proposal_rate=proposal_rate)
    if all(c.key != dflt.key for c in cands):
        cands.append(dflt)
    ranked = sorted(cands, key=_rank_key)
    measured = [c for c in ranked if c.measured]
    rec = measured[0] if measured else None
    same = [c for c in measured if c.topk == model.measured_topk] or [rec or dflt]
    return Optimum(batch=batch, best=rec or dflt, best_measured_topk=same[0], default=dflt, ranked=tuple(ranked[:top]),
                   evaluated=len(cands), recommended=rec, best_any=ranked[0], context_tokens=dflt.context_tokens)


def batch_limit(optima: Sequence[Optimum]) -> int | None:
    """Largest batch up to which (from the smallest on) the best measured configuration still pays
    (:attr:`Optimum.pays`: GO by the one decision rule); beyond it none does, or none was measured.

    None when speculation does not pay even at the smallest batch. The engines' knob for
    this is vLLM's ``speculative_disable_by_batch_size``-style switch-off above a batch size.
    """
    last = None
    for o in sorted(optima, key=lambda o: o.batch):
        if not o.pays:
            break
        last = o.batch
    return last
