"""Invariants of the cycle model (hypothesis)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.model import cycle as eq
from specmodel.model.accept import from_mean, from_tokens, to_tokens
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema import load_profile
from specmodel.schema.costrows import CostRow

from .conftest import REFERENCE

REF = load_profile(REFERENCE)
K = REF.spec.max_accept_tokens

accepts = st.floats(1.0, float(K), allow_nan=False)
batches = st.sampled_from([1, 2, 3, 4, 8, 16, 24, 32, 64])


@settings(max_examples=60, deadline=None)
@given(a=accepts, b=accepts, batch=batches)
def test_tok_s_never_falls_as_acceptance_rises(a, b, batch):
    lo, hi = sorted((a, b))
    p_lo = predict(REF, from_mean(lo, K), OperatingPoint(batch=batch))
    p_hi = predict(REF, from_mean(hi, K), OperatingPoint(batch=batch))
    assert p_hi.figures.tokens_per_s >= p_lo.figures.tokens_per_s - 1e-9


@settings(max_examples=60, deadline=None)
@given(a=accepts, factor=st.floats(0.05, 1.0), batch=batches)
def test_tok_s_never_falls_as_verify_cost_falls(a, factor, batch):
    cheaper = REF.with_costs([
        dataclasses.replace(r, total_s=r.total_s * factor, allreduce_s=r.allreduce_s * factor,
                            compute_s=r.compute_s * factor, other_s=r.other_s * factor) if r.kind == "verify" else r
        for r in REF.costs
    ])
    d = from_mean(a, K)
    at = OperatingPoint(batch=batch)
    assert predict(cheaper, d, at).figures.tokens_per_s >= predict(REF, d, at).figures.tokens_per_s - 1e-9


@settings(max_examples=60, deadline=None)
@given(a=accepts, batch=batches)
def test_break_even_is_cycle_times_baseline_and_speedup_there_is_one(a, batch):
    p = predict(REF, from_mean(a, K), OperatingPoint(batch=batch))
    assert p.figures.break_even_accept_tokens == pytest.approx(p.costs.cycle_s * p.figures.baseline_tokens_per_s / batch, rel=1e-12)
    assert eq.speedup(p.figures.break_even_accept_tokens, p.costs.baseline_step_s, p.costs.cycle_s) == pytest.approx(1.0, rel=1e-12)
    if p.figures.break_even_reachable:
        at_be = predict(REF, from_mean(p.figures.break_even_accept_tokens, K), OperatingPoint(batch=batch))
        assert at_be.figures.speedup == pytest.approx(1.0, rel=1e-9)
        assert at_be.figures.tokens_per_s == pytest.approx(at_be.figures.baseline_tokens_per_s, rel=1e-9)


@given(st.floats(-5, 50, allow_nan=False), st.sampled_from(["tokens", "drafts"]))
def test_conventions_round_trip(v, conv):
    assert from_tokens(to_tokens(v, conv), conv) == pytest.approx(v, abs=1e-12)
    assert to_tokens(v, "drafts") == pytest.approx(v + 1)


@given(st.floats(0.0, float(K - 1)))
def test_drafts_convention_is_tokens_minus_one(d):
    a = from_mean(d, K, convention="drafts")
    b = from_mean(d + 1, K, convention="tokens")
    assert a.mean_tokens == pytest.approx(b.mean_tokens, abs=1e-9)
    assert a.mean_in("drafts") == pytest.approx(d, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(t1=st.floats(1e-4, 1.0), t2=st.floats(1e-4, 1.0), n=st.integers(1, 200))
def test_forward_cost_is_monotone_in_tokens(t1, t2, n):
    from specmodel.model.costs import forward_cost

    rows = [CostRow(kind="decode", batch=1, tokens=1, total_s=t1, allreduce_s=t1 / 2, compute_s=t1 / 2),
            CostRow(kind="decode", batch=64, tokens=64, total_s=t2, allreduce_s=t2 / 2, compute_s=t2 / 2)]
    prof = REF.with_costs(rows)
    assert forward_cost(prof, "decode", n + 1).total_s >= forward_cost(prof, "decode", n).total_s - 1e-15


@pytest.mark.parametrize("speedup,p,verdict", [
    (0.99, 0.0, "NO-GO"), (1.0, 0.5, "MARGINAL"), (1.09, 0.99, "MARGINAL"),
    (1.10, 0.89, "MARGINAL"), (1.10, 0.90, "GO"), (2.0, 1.0, "GO"),
])
def test_verdict_thresholds(speedup, p, verdict):
    from specmodel.model.predict import verdict_for

    assert verdict_for(speedup, p)[0] == verdict


def test_marginal_near_break_even_on_the_reference():
    p = predict(REF, from_mean(2.6, K))  # break-even 2.46: +5.7 %
    assert p.outcome.verdict == "MARGINAL" and 1.0 < p.figures.speedup < 1.1
