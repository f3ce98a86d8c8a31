"""Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative Decoding".

Eq. (1): E[#generated tokens] = (1 - alpha^(gamma+1)) / (1 - alpha).
Theorem 3.8: expected walltime improvement = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)),
with c = T_draft / T_target and a verify costing one target step.
Corollary 3.9: for gamma = 1 the improvement is (1 + alpha) / (1 + c).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.model import cycle as eq
from specmodel.model.accept import alpha_for_mean, chain_mean, from_chain
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile


def test_eq1_worked_values():
    # alpha = 0.8, gamma = 5: (1 - 0.8^6) / 0.2 = 3.68928
    assert chain_mean(0.8, 5) == pytest.approx(3.68928, abs=1e-9)
    # alpha = 0.6, gamma = 3: (1 - 0.6^4) / 0.4 = 2.176
    assert chain_mean(0.6, 3) == pytest.approx(2.176, abs=1e-12)
    assert chain_mean(0.0, 7) == 1.0
    assert chain_mean(1.0, 7) == 8.0


@given(st.floats(0.0, 0.999), st.integers(0, 12))
def test_eq1_equals_mean_of_truncated_geometric(alpha, k):
    d = from_chain(alpha, k)
    assert d.mean_tokens == pytest.approx(chain_mean(alpha, k), rel=1e-9, abs=1e-9)
    if k >= 1:  # with no drafts the mean is 1 whatever alpha is
        assert alpha_for_mean(d.mean_tokens, k) == pytest.approx(alpha, abs=1e-6)


def _paper_profile(c: float) -> Profile:
    t = 0.010  # target step; verify assumed to cost one target step (the paper's assumption)
    rows = [
        CostRow(kind="decode", batch=1, tokens=1, total_s=t, allreduce_s=0.0, compute_s=t),
        CostRow(kind="verify", batch=1, tokens=1, total_s=t, allreduce_s=0.0, compute_s=t),
        CostRow(kind="verify", batch=1, tokens=64, total_s=t, allreduce_s=0.0, compute_s=t),
        CostRow(kind="draft", batch=1, tokens=1, total_s=c * t, allreduce_s=0.0, compute_s=c * t),
    ]
    return Profile(name="paper", source={"kind": "numbers"}, tp=1, costs=tuple(rows))


@pytest.mark.parametrize("alpha,gamma,c", [(0.8, 5, 0.05), (0.6, 3, 0.1), (0.75, 7, 0.02), (0.9, 2, 0.3)])
def test_theorem_3_8_improvement_factor(alpha, gamma, c):
    expected = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
    spec = SpecConfig(steps=gamma, topk=1, num_draft_tokens=gamma + 1)
    p = predict(_paper_profile(c), from_chain(alpha, gamma), OperatingPoint(spec=spec))
    assert p.figures.speedup == pytest.approx(expected, rel=1e-9)


@given(st.floats(0.01, 0.99), st.floats(0.0, 0.99))
def test_corollary_3_9_gamma_1(alpha, c):
    t = 1.0
    cyc = eq.cycle_s(eq.draft_s(c * t, 1), t, 0.0)
    assert eq.speedup(chain_mean(alpha, 1), t, cyc) == pytest.approx((1 + alpha) / (1 + c), rel=1e-9)
