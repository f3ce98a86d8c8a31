"""The host-proposer mixture at batch B > 1 (model/hostdraft.host_mean_step_s, through predict)
against an independent oracle: a simulation of vLLM's per-step scheduling with Bernoulli proposals.

The oracle, per engine step: each of the B running requests proposes with probability r (vLLM's
n-gram lookup finds a match, or not: v1/spec_decode/ngram_proposer.py); the scheduler gives each
request 1 + len(spec_token_ids) tokens (v1/core/sched/scheduler.py), so the step's forward runs
B + k·(proposers) tokens and is a verify step when anyone proposed, a decode step otherwise (the
lookup ran either way). A proposing request emits a draw of the accept distribution, another one
token. Step costs: the profile's measured forward at the step's own token count (model/costs
forward_cost, the rows only, not the mixture), its host work and the measured lookup. Throughput
= all tokens / all time over many simulated steps, compared with predict's tokens/s.

The B = 1 mixture applied at B > 1 (every step either verifies B·(k+1) tokens or decodes) is held
to the same oracle, and must miss it: the test can tell the two apart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specmodel.model.accept import from_mean
from specmodel.model.costs import forward_cost
from specmodel.model.hostdraft import host_cycle_costs, mixed_tokens
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import load_profile

DATA = Path(__file__).resolve().parent / "data" / "vllm_oos_tp1_1023"
NGRAM = SpecConfig(algorithm="ngram", steps=3, topk=1, num_draft_tokens=4)
STEPS = 40_000


def simulate(profile, dist, *, batch: int, rate: float, seed: int) -> float:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    k = NGRAM.steps
    ctx = 0.0
    lookup = profile.overhead_s  # the ngram run's measured median proposal time
    decode_s = forward_cost(profile, "decode", batch, ctx).total_s + lookup
    verify_s = {}
    for n in range(1, batch + 1):
        v = forward_cost(profile, "verify", batch + k * n, ctx)  # the ngram run's own verify rows
        verify_s[n] = v.allreduce_s + v.compute_s + v.other_s + lookup
    probs = np.asarray(dist.probs, dtype=float)
    props = rng.random((STEPS, batch)) < rate
    n_prop = props.sum(axis=1)
    accepted = rng.choice(np.arange(1, len(probs) + 1), size=(STEPS, batch), p=probs / probs.sum())
    tokens = np.where(props, accepted, 1).sum()
    time = float(np.sum([verify_s[n] if n else decode_s for n in n_prop]))
    return float(tokens) / time


def _exact_tokens_per_s(profile, dist, *, batch: int, rate: float) -> float:  # type: ignore[no-untyped-def]
    from math import comb

    k, lookup = NGRAM.steps, profile.overhead_s
    step = forward_cost(profile, "decode", batch, 0.0).total_s + lookup
    mean_s = (1 - rate) ** batch * step
    for n in range(1, batch + 1):
        v = forward_cost(profile, "verify", batch + k * n, 0.0)
        mean_s += comb(batch, n) * rate**n * (1 - rate) ** (batch - n) * (v.allreduce_s + v.compute_s + v.other_s + lookup)
    return batch * mixed_tokens(dist.mean_tokens, rate) / mean_s


@pytest.mark.parametrize(("batch", "rate"), [(2, 0.3), (2, 0.7), (4, 0.3), (4, 0.5), (8, 0.2)])
def test_the_mixture_at_batch_b_matches_the_simulated_scheduler(batch: int, rate: float) -> None:
    prof = load_profile(DATA / "profile_base_ngram.json")
    dist = from_mean(3.11, 4)
    sim = simulate(prof, dist, batch=batch, rate=rate, seed=batch * 100 + int(rate * 10))
    model = predict(prof, dist, OperatingPoint(batch=batch, spec=NGRAM, proposal_rate=rate)).figures.tokens_per_s
    # sampling error of 40k steps is ~0.3 %; the rest is T(E[tokens]) vs E[T(tokens)] on
    # piecewise-linear rows (the model prices the mean verify size once)
    # the oracle's own sampling error: its exact expectation over the binomial number of proposers
    exact = _exact_tokens_per_s(prof, dist, batch=batch, rate=rate)
    assert sim == pytest.approx(exact, rel=0.01)
    # the model prices the mean verify size once, T(E[tokens | any]), where the scheduler pays
    # E[T(tokens)] over rows that are not linear in tokens (running max, measured on the vLLM CPU engine): up to
    # 3.7 % apart on these rows; 5 % is the bound held
    assert model == pytest.approx(sim, rel=0.05), (model, sim)
    # the B = 1 mixture (a step verifies all B·(k+1) tokens or decodes) misses the scheduler
    cc = host_cycle_costs(prof, batch=batch, spec=NGRAM)
    # T' = r·T_cycle + (1 − r)·(T_base + T_propose): each step either verifies everything or decodes
    naive_step_s = rate * cc.cycle_s + (1.0 - rate) * (cc.base.total_s + cc.overhead_s)
    naive = batch * mixed_tokens(dist.mean_tokens, rate) / naive_step_s
    assert abs(naive / sim - 1) > 0.08, (naive, sim)  # (9 % to 56 % off here)
