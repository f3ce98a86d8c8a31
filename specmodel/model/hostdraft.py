"""The cycle of a host-side proposer: vLLM ``ngram`` / ``suffix``, SGLang ``NGRAM``.

Such a proposer runs no drafter forward (so no draft all-reduces): vLLM's n-gram lookup is numba
code over the request's token ids (vllm/v1/spec_decode/ngram_proposer.py, 0.32.0), called from
``GPUModelRunner.propose_draft_token_ids`` after the verify's ``sample_tokens``. A cycle is one
engine step: the target's verify forward over B·(k+1) tokens, the step's host work (input
preparation, rejection sampling, bookkeeping, the scheduling gap) and the lookup itself.

Why not the profile's verify *step*: a vLLM verify row measured with ``draft_model`` carries that
proposer's host work (measured on the vLLM CPU engine: scheduling gap 6.3 ms and step host
work 4.4 ms against 1.0 and 2.1 ms in an ngram run; the engine recipe is in benchmarks/README.md),
so a verify step is not a property of the target alone. Only its forward is.

Notation as in :mod:`specmodel.model.cycle`; r = share of request-steps in which the proposer
proposed (vLLM's ``spec_decode_num_drafts`` / (generated − accepted tokens)).
"""

from __future__ import annotations

import dataclasses
import math

from specmodel.errors import FieldError, field_name
from specmodel.model.costs import ZERO_COST, ForwardCost, default_context, forward_cost
from specmodel.model.cycle import Assumption, CycleCosts
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import forward_tokens, is_host_proposer
from specmodel.schema.profile import Profile


def measured_proposal_rate(profile: Profile, algorithm: str) -> float | None:
    """The proposal rate the profile's own speculative server measured (``host_proposer``, written by
    ``specmodel vllm --summarize``) when it ran this ``algorithm``; None otherwise."""
    hp = profile.host_proposer
    if hp is None or not hp.request_steps or hp.method.lower() != algorithm.lower():
        return None
    return hp.proposal_rate


def proposal_rate_of(proposal_rate: float | None, algorithm: str, profile: Profile | None = None) -> float:
    """The share r of request-steps that propose, checked: None -> the rate the profile measured
    (:func:`measured_proposal_rate`), else 1 (every step); r < 1 only for a host proposer (a
    drafter forward proposes on every step). r = 0 is an observation too: a lookup that never
    matches (sampled output) still runs on every step. One rule for predict and plan."""
    if proposal_rate is None and profile is not None:
        proposal_rate = measured_proposal_rate(profile, algorithm)
    r = 1.0 if proposal_rate is None else float(proposal_rate)
    if not 0.0 <= r <= 1.0:
        raise FieldError("proposal_rate", f"must be in [0, 1], got {proposal_rate!r}")
    if r < 1.0 and not is_host_proposer(algorithm):
        raise FieldError("proposal_rate", f"{r:g} applies to host proposers (ngram, suffix) only: "
                                          f"{algorithm or 'a drafter forward'} proposes on every step")
    return r


def proposal_rate_note(proposal_rate: float | None, algorithm: str, profile: Profile) -> str:
    """What a printer says about where r came from ("" when every step is taken to propose)."""
    if proposal_rate is not None:
        return field_name("proposal_rate")
    if measured_proposal_rate(profile, algorithm) is not None:
        return f"measured by the hook in profile {profile.name}; {field_name('proposal_rate')} overrides"
    return ""


def mixed_tokens(accept_tokens: float, proposal_rate: float) -> float:
    """Tokens per request-step when a share r proposes: E' = r·E[A] + (1 − r)."""
    return proposal_rate * accept_tokens + (1.0 - proposal_rate)


def mixed_std(accept_tokens: float, std_tokens: float, proposal_rate: float) -> float:
    """Standard deviation of the tokens of one request-step under that mixture (a proposing step
    draws from the accept distribution, a non-proposing one emits 1):
    Var = r·σ² + r(1 − r)(E[A] − 1)²."""
    r = proposal_rate
    return float((r * std_tokens**2 + r * (1.0 - r) * (accept_tokens - 1.0) ** 2) ** 0.5)


def accept_for_mixed(tokens_per_step: float, proposal_rate: float) -> float:
    """The E[A] of the proposing steps that gives ``tokens_per_step`` overall: E = (E' − 1 + r)/r;
    infinite at r = 0 (nothing proposes: no accept length changes the step)."""
    if proposal_rate <= 0.0:
        return math.inf
    return (tokens_per_step - 1.0 + proposal_rate) / proposal_rate


def any_proposes(proposal_rate: float, batch: int) -> float:
    """P(at least one of B requests proposes in a step) = 1 − (1 − r)^B (requests independent)."""
    return 1.0 - (1.0 - proposal_rate) ** batch


def verify_tokens_when_any(proposal_rate: float, batch: int, steps: int) -> float:
    """Expected tokens of a verify forward given that some request proposed: every request brings its
    next token, each proposing one k drafts more, B + k·B·r / P(any). vLLM schedules 1 +
    len(spec_token_ids) tokens per request (v1 scheduler, 0.32.0), and the n-gram proposer returns
    no drafts where its lookup found no match, so a batched step verifies fewer than B·(k+1)."""
    p_any = any_proposes(proposal_rate, batch)
    return batch + steps * batch * proposal_rate / p_any if p_any > 0 else float(batch)


def no_proposal_step(profile: Profile, *, batch: int, spec: SpecConfig,
                     context_tokens: float | None = None) -> tuple[float, bool]:
    """(T_miss, measured): an engine step of the speculative server in which no request proposed,
    without the lookup: the target's decode forward over B tokens + that server's host work.

    The forward is the baseline's decode row (the same model over one token per request; measured
    on every step of the baseline run), the host work (scheduling gap, input preparation, sampling
    with speculation on) the ``other_s`` of the profile's ``host_proposer.decode`` rows -- that
    server's own decode-shaped steps -- when its server ran this method. Those steps are rare in a
    run that proposes (a greedy ngram run on the vLLM CPU engine: 24 at batch 4, a few after each
    prefill, beside 1,515 baseline decode steps), so their forward medians rest on a handful of
    request waves and carry whatever else the box ran then; the host work is the part speculation
    changes. Without such rows: the baseline decode step T_base (stated by the caller)."""
    ctx = float(default_context(profile) if context_tokens is None else context_tokens)
    tokens = forward_tokens("decode", batch, spec)
    base = forward_cost(profile, "decode", tokens, ctx)
    hp = profile.host_proposer
    if hp is not None and hp.decode and hp.method.lower() == spec.algorithm.lower():
        own = forward_cost(dataclasses.replace(profile, costs=hp.decode), "decode", tokens, ctx)
        return base.allreduce_s + base.compute_s + own.other_s, True
    return base.total_s, False


def host_mean_step_s(profile: Profile, *, batch: int, spec: SpecConfig, proposal_rate: float,
                     context_tokens: float | None = None, proposal_s: float | None = None) -> float:
    """The mean engine step of a host proposer at share r of proposing request-steps:

        T' = P(any)·T_cycle(B + k·B·r/P(any) tokens) + (1 − P(any))·(T_miss + T_propose)

    A step is a verify step when any of its B requests proposed (its forward over the tokens of
    :func:`verify_tokens_when_any`), else a decode-shaped step that still ran the lookup: T_miss
    from :func:`no_proposal_step` (the speculative server's own such steps when measured). At
    B = 1: r·T_cycle + (1 − r)·(T_miss + T_propose); r = 1 gives T_cycle(B·(k+1)); r = 0 gives
    T_miss + T_propose, a slowdown against T_base when speculation's host work costs time."""
    p_any = any_proposes(proposal_rate, batch)
    cc = host_cycle_costs(profile, batch=batch, spec=spec, context_tokens=context_tokens, proposal_s=proposal_s,
                          verify_tokens=verify_tokens_when_any(proposal_rate, batch, spec.steps))
    miss, _ = no_proposal_step(profile, batch=batch, spec=spec, context_tokens=cc.context_tokens)
    return p_any * cc.cycle_s + (1.0 - p_any) * (miss + cc.overhead_s)


def host_cycle_costs(profile: Profile, *, batch: int, spec: SpecConfig, context_tokens: float | None = None,
                     proposal_s: float | None = None, verify_tokens: float | None = None) -> CycleCosts:
    """:class:`CycleCosts` of a host proposer (``spec.algorithm`` in HOST_PROPOSERS).

    * verify = the profile's verify row at B·ndt tokens, its forward only (``allreduce_s`` +
      ``compute_s``), plus the host work of a step without a forward drafter: the verify row's own
      ``other_s`` when the profile's speculative run was this kind of proposer (its verify steps had
      no drafter), else the decode row's ``other_s`` at batch B (the baseline's measured step host
      work), never another drafter's. ``verify_tokens``: the forward's tokens when fewer than
      B·ndt (some requests proposed nothing: :func:`verify_tokens_when_any`).
    * draft = none (no drafter forward, no draft all-reduces).
    * overhead = T_propose: ``proposal_s`` when given; the profile's ``overhead_s`` when its
      speculative run used the same method (``specmodel vllm --summarize`` puts the median measured
      proposal time there); otherwise 0, listed in :attr:`CycleCosts.assumptions`.
    """
    ctx = float(default_context(profile) if context_tokens is None else context_tokens)
    method = spec.algorithm.lower()
    base = forward_cost(profile, "decode", forward_tokens("decode", batch, spec), ctx)
    v = forward_cost(profile, "verify", forward_tokens("verify", batch, spec) if verify_tokens is None
                     else verify_tokens, ctx)
    same_run = is_host_proposer(profile.spec.algorithm) and not v.from_kind
    host = v.other_s if same_run else base.other_s
    verify = ForwardCost(kind="verify", tokens=v.tokens, total_s=v.allreduce_s + v.compute_s + host,
                         allreduce_s=v.allreduce_s, compute_s=v.compute_s, other_s=host,
                         context_tokens=v.context_tokens, extrapolations=v.extrapolations, from_kind=v.from_kind,
                         overrides=v.overrides, note=v.note)
    warnings: list[str] = []
    if v.from_kind:
        warnings.append("no verify rows in the profile: verify cost taken from the decode curve T_fwd(B x draft tokens)")
    elif not same_run:
        warnings.append(f"{method}: verify forward from the profile's {profile.spec.algorithm or 'verify'} run; "
                        f"host work per step from the decode step at batch {batch} (that run's verify steps "
                        "carry its own proposer's host work)")
    for fc in (base, verify):
        for e in fc.extrapolations:
            warnings.append(f"{fc.kind} cost is extrapolated beyond the measured range ({e.label})")
    stated: tuple[Assumption, ...] = ()
    if proposal_s is not None:
        prop = proposal_s
    elif profile.spec.algorithm.lower() == method and (profile.overhead_s > 0 or "overhead" in profile.source.origins):
        prop = profile.overhead_s
    else:
        prop = 0.0
        stated = (Assumption(kind="proposal", fallback="", batch=batch, tokens=0.0, context_tokens=ctx,
                             assumed_as=f"0 s per step (the {method} lookup's host time; no {method} run profiled)",
                             measure_hint=f"run the server with --speculative-config method {method} under "
                                          f"`specmodel vllm` and `{field_name('summarize')}` it with the baseline run: the median "
                                          "proposal time becomes the profile's overhead"),)
    return CycleCosts(batch=batch, spec=spec, base=base, verify=verify, draft_step=ZERO_COST, draft_extend=None,
                      draft_total_s=0.0, draft_allreduce_s=0.0, overhead_s=prop, context_tokens=ctx,
                      warnings=tuple(warnings), stated_assumptions=stated)
