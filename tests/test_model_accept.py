from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.model.accept import (
    AcceptDist,
    from_histogram,
    from_mean,
    from_per_position,
    resize,
)


def test_from_mean_geometric_has_requested_mean_and_support():
    d = from_mean(3.2, 4)
    assert d.mean_tokens == pytest.approx(3.2, abs=1e-9)
    assert d.max_tokens == 4 and sum(d.probs) == pytest.approx(1.0)
    # geometric: P(A=j) decreasing for j<K then the all-accepted mass
    assert d.probs[0] > 0 and d.probs[-1] > d.probs[0]


def test_from_mean_point_is_two_point_with_least_variance():
    p = from_mean(2.5, 4, shape="point")
    g = from_mean(2.5, 4)
    assert p.probs == pytest.approx((0.0, 0.5, 0.5, 0.0))
    assert p.var_tokens < g.var_tokens


@pytest.mark.parametrize("mean,conv", [(0.9, "tokens"), (4.01, "tokens"), (-0.1, "drafts"), (3.5, "drafts"),
                                       (float("nan"), "tokens"), (float("inf"), "tokens")])
def test_from_mean_rejects_out_of_range(mean, conv):
    with pytest.raises(SpecmodelError, match="^accept_len: "):
        from_mean(mean, 4, convention=conv)


def test_histogram_in_both_conventions():
    t = from_histogram({1: 10, 2: 30, 3: 40, 4: 20}, max_tokens=4)
    d = from_histogram({0: 10, 1: 30, 2: 40, 3: 20}, convention="drafts", max_tokens=4)
    assert t.probs == pytest.approx(d.probs)
    assert t.mean_tokens == pytest.approx(1 * 0.1 + 2 * 0.3 + 3 * 0.4 + 4 * 0.2)
    assert t.samples == 100


def test_histogram_rejects_values_beyond_steps_and_negative_counts():
    with pytest.raises(SpecmodelError, match="exceeds"):
        from_histogram({5: 1}, max_tokens=4)
    with pytest.raises(SpecmodelError, match="count"):
        from_histogram({1: -1})
    with pytest.raises(SpecmodelError, match="below the minimum"):
        from_histogram({0: 3})


def test_per_position_mean_is_one_plus_sum():
    # vLLM: mean acceptance length = 1 + sum of per-position rates
    d = from_per_position([0.8, 0.6, 0.3])
    assert d.mean_tokens == pytest.approx(1 + 0.8 + 0.6 + 0.3)
    assert d.per_position_rates() == pytest.approx((0.8, 0.6, 0.3))


def test_per_position_must_not_increase():
    with pytest.raises(SpecmodelError, match="must not increase"):
        from_per_position([0.5, 0.7])


def test_resize_truncates_and_extrapolates():
    d = from_per_position([0.8, 0.6, 0.3])  # K = 4
    short = resize(d, 3)
    assert short.per_position_rates() == pytest.approx((0.8, 0.6))
    long = resize(d, 6)
    rates = long.per_position_rates()
    assert rates[:3] == pytest.approx((0.8, 0.6, 0.3))
    assert rates[3] == pytest.approx(0.3 * 0.5) and rates[4] == pytest.approx(0.3 * 0.25)


def test_dist_validation():
    with pytest.raises(SpecmodelError, match="sum"):
        AcceptDist(probs=(0.5, 0.4), source="x")
    with pytest.raises(SpecmodelError, match="convention"):
        AcceptDist(probs=(1.0,), source="x", convention="bonus")


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_per_position_round_trip(raw):
    rates = sorted(raw, reverse=True)
    d = from_per_position(rates)
    assert d.per_position_rates() == pytest.approx(tuple(rates), abs=1e-9)
    assert d.mean_tokens == pytest.approx(1 + sum(rates), abs=1e-9)
