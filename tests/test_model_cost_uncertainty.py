"""Cost uncertainty (each profile row's 95 % interval) carried into predict's tok/s band and
P(speedup > 1)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.model import cycle as eq
from specmodel.model.accept import from_mean
from specmodel.model.cyclecost import row_ci95_rel
from specmodel.model.predict import predict
from specmodel.schema import load_profile

from .conftest import REFERENCE


def test_sum_of_independent_costs_adds_in_quadrature():
    # 20 ms ± 2 % and 10 ms ± 4 %: √(0.4² + 0.4²) ms / 30 ms
    assert eq.cost_ci95_rel([(0.020, 0.02), (0.010, 0.04)]) == pytest.approx(math.sqrt(0.32) / 30)
    assert eq.cost_ci95_rel([(0.02, 0.0)]) == 0.0 and eq.cost_ci95_rel([]) == 0.0


@given(st.floats(0.5, 0.99), st.floats(0.0, 0.5), st.floats(0.0, 0.3))
def test_band_only_widens(lo_frac, hi_frac, u):
    tps = 100.0
    lo, hi = eq.band_with_cost_uncertainty(tps, tps * lo_frac, tps * (1 + hi_frac), u)
    assert lo <= tps * lo_frac + 1e-9 and hi >= tps * (1 + hi_frac) - 1e-9
    assert hi - tps >= tps * u - 1e-9


@given(st.floats(1.2, 4.0), st.floats(1.0, 4.0), st.floats(0.01, 1.0), st.floats(0.001, 0.3))
def test_cost_uncertainty_pulls_p_towards_one_half(e, be, std, u):
    p0 = eq.p_speedup_gt_1(e, be, std, 100)
    p1 = eq.p_speedup_gt_1_with_costs(e, be, std, 100, u)
    assert abs(p1 - 0.5) <= abs(p0 - 0.5) + 1e-12
    assert eq.p_speedup_gt_1_with_costs(e, be, std, 100, 0.0) == p0


def test_predict_uses_the_rows_intervals():
    prof = load_profile(REFERENCE)
    dist = from_mean(2.6, prof.spec.max_accept_tokens)
    plain = predict(prof, dist)
    assert plain.costs.cycle_ci95_rel == 0.0  # the published case carries no intervals
    noisy = dataclasses.replace(prof, costs=tuple(dataclasses.replace(r, ci95_rel=0.10) for r in prof.costs))
    assert row_ci95_rel(noisy, "verify", 4) == pytest.approx(0.10)
    p = predict(noisy, dist)
    assert p.figures.tokens_per_s == pytest.approx(plain.figures.tokens_per_s)  # the point estimate does not move
    assert p.figures.tokens_per_s_low < plain.figures.tokens_per_s_low and p.figures.tokens_per_s_high > plain.figures.tokens_per_s_high
    assert 0.0 < p.costs.cycle_ci95_rel <= 0.10 + 1e-12 and p.costs.baseline_ci95_rel == pytest.approx(0.10)
    assert abs(p.figures.p_speedup_gt_1 - 0.5) < abs(plain.figures.p_speedup_gt_1 - 0.5)


def test_cost_row_interval_is_optional_validated_and_round_trips():
    from specmodel.errors import SpecmodelError
    from specmodel.schema.costrows import CostRow

    base = {"kind": "decode", "batch": 1, "tokens": 1, "context_tokens": 0, "total_s": 0.01, "allreduce_s": 0.004,
            "compute_s": 0.006}
    assert CostRow.from_dict(base, "r").ci95_rel is None and "ci95_rel" not in CostRow.from_dict(base, "r").to_dict()
    row = CostRow.from_dict({**base, "ci95_rel": 0.03}, "r")
    assert row.ci95_rel == 0.03 and CostRow.from_dict(row.to_dict(), "r") == row
    for bad in (-0.1, "2%", float("nan"), True):
        with pytest.raises(SpecmodelError, match="ci95_rel"):
            CostRow.from_dict({**base, "ci95_rel": bad}, "profile.json: costs[0]")


def test_median_interval_from_order_statistics():
    from specmodel.stats import median_ci95, median_ci95_rel

    assert median_ci95([1, 2, 3, 4, 5]) is None  # fewer than 6: no 95 % interval exists
    assert median_ci95([6, 1, 5, 2, 4, 3]) == (1, 6)  # n = 6: coverage 1 - 2/64 = 96.9 %
    xs = list(range(1, 21))  # n = 20: P(Bin <= 5) = 2.1 % <= 2.5 % < P(Bin <= 6) = 5.8 %
    assert median_ci95(xs) == (6, 15)
    assert median_ci95_rel([10.0] * 8) == 0.0
    assert median_ci95_rel([9, 10, 10, 10, 10, 11]) == pytest.approx(0.1)


def test_the_band_says_it_includes_the_cost_interval():
    # the band is widened by the costs' interval, so its label must not read
    # as one generation's variability alone
    from specmodel.report.text import assumption_lines

    prof = load_profile(REFERENCE)
    dist = from_mean(2.6, prof.spec.max_accept_tokens)
    plain = predict(prof, dist)
    assert plain.band_label == "over 256 tokens"
    noisy = predict(dataclasses.replace(prof, costs=tuple(dataclasses.replace(r, ci95_rel=0.10) for r in prof.costs)),
                    dist)
    assert noisy.band_label == f"over 256 tokens, cost interval ±{noisy.costs.cycle_ci95_rel:.1%}"
    line = next(a for a in assumption_lines(noisy, dist, prof, None) if a.startswith("band and P"))
    assert f"plus the measured costs' 95 % interval (cycle ±{noisy.costs.cycle_ci95_rel:.1%})" in line
    line = next(a for a in assumption_lines(plain, dist, prof, None) if a.startswith("band and P"))
    assert line.endswith("costs taken as exact (no interval measured)")
