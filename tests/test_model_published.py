"""The shipped reference profile must reproduce the published Kimi-K2.5 TP8 PCIe figures.

Source: the write-up in shared/seeds (Kimi-K2.5 INT4, 8x RTX PRO 6000 Blackwell over PCIe, SGLang EAGLE-3):
baseline 82 tok/s; verify cycle ~30 ms, 97 % all-reduce; break-even 2.46 tokens/step;
accept ~2.0 -> 60 tok/s observed (model: 66.7, the same cycle without the unseen overhead);
K2 drafter 0.58 drafts/step -> 52 tok/s.
"""

from __future__ import annotations

import pytest

from specmodel.model.accept import from_mean
from specmodel.model.calibrate import Observation
from specmodel.model.predict import predict
from specmodel.schema import load_profile

from .conftest import REFERENCE


@pytest.fixture(scope="module")
def ref():
    return load_profile(REFERENCE)


def _pred(ref, mean, convention="tokens", **kw):
    return predict(ref, from_mean(mean, ref.spec.max_accept_tokens, convention=convention), **kw)


def test_reference_is_labelled_as_derived_not_measured(ref):
    assert ref.source_kind == "reference"
    assert "published write-up" in ref.label and "not measured" in ref.label


def test_baseline_82_tok_s(ref):
    p = _pred(ref, 3.2)
    assert p.baseline_tokens_per_s == pytest.approx(82.0, abs=0.05)


def test_cycle_30_ms_97_percent_allreduce(ref):
    p = _pred(ref, 3.2)
    assert p.cycle_s == pytest.approx(0.030, abs=0.0002)
    assert p.cycle_allreduce_frac == pytest.approx(0.97, abs=0.005)


def test_break_even_2_46(ref):
    p = _pred(ref, 3.2)
    assert p.break_even_accept_tokens == pytest.approx(2.46, abs=0.01)
    # break-even = cycle time x baseline tok/s (batch 1)
    assert p.break_even_accept_tokens == pytest.approx(p.cycle_s * p.baseline_tokens_per_s, rel=1e-9)


def test_accept_2_is_no_go_between_60_and_67(ref):
    p = _pred(ref, 2.0)
    assert p.verdict == "NO-GO"
    assert 60.0 <= p.tokens_per_s <= 67.0


def test_k2_drafter_058_drafts_gives_about_52(ref):
    p = _pred(ref, 0.58, convention="drafts")
    assert p.accept_mean_tokens == pytest.approx(1.58, abs=1e-9)
    assert p.tokens_per_s == pytest.approx(52.0, abs=1.5)
    assert p.verdict == "NO-GO"


def test_accept_3_2_about_107_go(ref):
    p = _pred(ref, 3.2)
    assert p.tokens_per_s == pytest.approx(107.0, abs=1.0)
    assert p.verdict == "GO"
    assert p.accept_for_plus20_tokens == pytest.approx(1.2 * 2.46, abs=0.015)


def test_calibrating_on_the_observed_60_tok_s_reproduces_it(ref):
    # the published run: accept ~2.0 -> 60 tok/s. Calibration folds the unseen 3.3 ms into overhead.
    obs = Observation(batch=1, accept_tokens=2.0, tokens_per_s=60.0)
    p = _pred(ref, 2.0, observation=obs)
    assert p.tokens_per_s == pytest.approx(60.0, rel=1e-9)
    assert p.calibrated_overhead_s == pytest.approx(2.0 / 60.0 - 0.030, abs=2e-4)
    # carried into another accept length: the 0.58-drafts drafter is then predicted at 1.58/33.3 ms
    p2 = _pred(ref, 0.58, convention="drafts", observation=obs)
    assert p2.tokens_per_s == pytest.approx(1.58 / (2.0 / 60.0), rel=1e-6)
