from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.model.allreduce import (
    allreduce_s,
    fit_alpha_beta,
    oneshot_allreduce_s,
    ring_allreduce_s,
    tp_scale_factor,
)


def test_ring_formula_tp8():
    # 2(p-1) alpha + 2(p-1)/p n / beta with p = 8, alpha = 5 us, beta = 20 GB/s, n = 1 MiB
    t = ring_allreduce_s(2**20, 8, 5e-6, 20e9)
    assert t == pytest.approx(14 * 5e-6 + 1.75 * 2**20 / 20e9)
    assert ring_allreduce_s(2**20, 1, 5e-6, 20e9) == 0.0


@settings(deadline=None, max_examples=50)
@given(alpha=st.floats(1e-7, 1e-4), beta=st.floats(1e9, 5e11), tp=st.integers(2, 16),
       algo=st.sampled_from(["ring", "oneshot", "twoshot"]))
def test_fit_recovers_alpha_beta(alpha, beta, tp, algo):
    from specmodel.schema.costrows import AllReduceFit

    truth = AllReduceFit(alpha_s=alpha, beta_bytes_per_s=beta, tp=tp, algorithm=algo)
    sizes = [2**k for k in range(8, 28, 2)]
    lat = [allreduce_s(n, tp, truth) for n in sizes]
    fit = fit_alpha_beta(sizes, lat, tp, algorithm=algo)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-3)
    assert fit.beta_bytes_per_s == pytest.approx(beta, rel=1e-3)


def test_oneshot_beats_ring_for_small_messages_only():
    small, big = 16 * 1024, 256 * 2**20
    a, b = 5e-6, 20e9
    assert oneshot_allreduce_s(small, 8, a, b) < ring_allreduce_s(small, 8, a, b)
    assert oneshot_allreduce_s(big, 8, a, b) > ring_allreduce_s(big, 8, a, b)


def test_tp4_cheaper_than_tp8_latency_bound():
    from specmodel.schema.costrows import AllReduceFit

    fit = AllReduceFit(alpha_s=6e-6, beta_bytes_per_s=25e9, tp=8)
    f = tp_scale_factor(14336, 8, 4, fit)
    assert 0.4 < f < 0.5  # 6 vs 14 latency terms dominate


def test_fit_rejects_bad_points():
    with pytest.raises(SpecmodelError):
        fit_alpha_beta([1], [1e-5], 8)
    with pytest.raises(SpecmodelError):
        fit_alpha_beta([1, 2], [1e-5, -1], 8)
    with pytest.raises(SpecmodelError):
        fit_alpha_beta([4, 4], [1e-5, 2e-5], 8)


def test_fit_is_robust_to_one_odd_point():
    from specmodel.schema.costrows import AllReduceFit

    truth = AllReduceFit(alpha_s=10e-6, beta_bytes_per_s=20e9, tp=8)
    sizes = [2**k for k in range(2, 24, 2)]
    lat = [allreduce_s(n, 8, truth) for n in sizes]
    lat[0] /= 10  # one collective that took a fast path
    fit = fit_alpha_beta(sizes, lat, 8)
    assert fit.alpha_s == pytest.approx(10e-6, rel=0.02)
    assert fit.beta_bytes_per_s == pytest.approx(20e9, rel=0.02)
