"""The speedup's own band, cost intervals that allow for a drifting box, and k below the profiled k.

Numbers are worked out by hand from rows built here; each test fails on the code before the change
it guards (named in its docstring).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from specmodel.model.accept import from_mean
from specmodel.model.costs import forward_cost
from specmodel.model.cycle import speedup_band
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile
from specmodel.stats import median_ci95, median_ci95_rel, series_median_ci95_rel
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data"

SPEC = SpecConfig(algorithm="DRAFT_MODEL", steps=3, topk=1, num_draft_tokens=4)


def _row(kind: str, t: int, compute_ms: float, other_ms: float, *, ci: float | None = None) -> CostRow:
    c, o = compute_ms / 1e3, other_ms / 1e3
    return CostRow(kind=kind, batch=1, tokens=t, total_s=c + o, allreduce_s=0.0, compute_s=c, other_s=o,
                   samples=100, ci95_rel=ci)


def _profile(*, decode_ci: float | None = None, verify_ci: float | None = None) -> Profile:
    rows = (_row("decode", 1, 1.0, 0.5, ci=decode_ci), _row("verify", 4, 2.0, 2.0, ci=verify_ci),
            _row("draft", 1, 0.6, 0.0), _row("draft_extend", 4, 0.9, 0.0))
    return Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=rows, spec=SPEC,
                   overhead_s=0.0)


def test_a_verify_below_the_profiled_k_keeps_the_speculative_steps_host_work() -> None:
    """k = 1 from a k = 3 profile: the forward between decode (1 token, 1.0 ms) and verify (4 tokens,
    2.0 ms) at 2 tokens = 1.0 + (2.0 - 1.0)/3 = 1.333 ms; the other time is the verify step's 2.0 ms,
    not half-way to the decode step's 0.5 ms (before: 0.5 + 1.5/3 = 1.0 ms, total 2.333 ms)."""
    fc = forward_cost(_profile(), "verify", 2)
    assert fc.compute_s == pytest.approx(1.0e-3 + 1.0e-3 / 3, rel=1e-9)
    assert fc.other_s == pytest.approx(2.0e-3, rel=1e-9)
    assert fc.total_s == pytest.approx(3.3333e-3, rel=1e-4)
    assert "read between the decode forward" in fc.note


def test_the_speedup_band_carries_the_baseline_costs_interval() -> None:
    """speedup 2.0 with a tok/s band of +-10 % and a baseline interval of +-7.5 %: the speedup's
    half-widths are sqrt(0.10^2 + 0.075^2) = 12.5 % each side (before: the tok/s band alone, 10 %)."""
    lo, hi = speedup_band(2.0, 100.0, 90.0, 110.0, 0.075)
    assert lo == pytest.approx(2.0 * (1 - 0.125), rel=1e-9)
    assert hi == pytest.approx(2.0 * (1 + 0.125), rel=1e-9)
    assert speedup_band(2.0, 100.0, 90.0, 110.0, 0.0) == pytest.approx((1.8, 2.2), rel=1e-9)


def test_predict_gives_a_speedup_band_that_holds_both_cost_intervals() -> None:
    """A baseline measured to +-20 % widens the speedup's band and leaves the tok/s band alone."""
    tight = predict(_profile(), from_mean(2.5, 4), OperatingPoint(spec=SPEC))
    loose = predict(_profile(decode_ci=0.20), from_mean(2.5, 4), OperatingPoint(spec=SPEC))
    assert tight.figures.speedup_low <= tight.figures.speedup <= tight.figures.speedup_high
    assert (loose.figures.tokens_per_s_low, loose.figures.tokens_per_s_high) == (tight.figures.tokens_per_s_low, tight.figures.tokens_per_s_high)
    sp, tps = loose.figures.speedup, loose.figures.tokens_per_s
    h_hi = (loose.figures.tokens_per_s_high - tps) / tps
    assert loose.figures.speedup_high == pytest.approx(sp * (1 + math.sqrt(h_hi**2 + 0.20**2)), rel=1e-9)
    assert tight.figures.speedup_high == pytest.approx(sp * (1 + h_hi), rel=1e-9)
    d = loose.to_dict()
    assert d["speedup_low"] == loose.figures.speedup_low and d["speedup_high"] == loose.figures.speedup_high


def test_a_drifting_series_gets_a_wider_interval_than_independent_samples() -> None:
    """3000 steps, the box 30 % slower for the second half: the median's order-statistic interval
    (independent samples) is a few percent; the batch-means interval sees the two halves."""
    rng = random.Random(7)
    steady = [rng.gauss(10.0, 1.0) for _ in range(3000)]
    drift = [x + (3.0 if i >= 1500 else 0.0) for i, x in enumerate(steady)]
    iid, series = median_ci95_rel(drift), series_median_ci95_rel(drift)
    assert iid is not None and series is not None
    assert iid < 0.03 and series > 0.06
    # a steady series: both agree to within a factor of two (no drift, nothing to add)
    a, b = median_ci95_rel(steady), series_median_ci95_rel(steady)
    assert a is not None and b is not None and a <= b < 2 * a
    assert series_median_ci95_rel([1.0, 2.0]) is None


def test_the_median_interval_holds_for_thousands_of_samples() -> None:
    """2.0**n overflowed a float beyond n = 1023: a cell of 2000 steps raised OverflowError. For
    n = 2000 the exact order statistics are k = 957 (normal approximation n/2 - 1.96 sqrt(n)/2 = 956.2)."""
    xs = [float(i) for i in range(2000)]
    lo, hi = median_ci95(xs) or (math.nan, math.nan)
    assert 950 <= lo <= 960 and 1039 <= hi <= 1049


def test_window_drift_is_the_between_window_spread_beyond_sampling() -> None:
    """Three windows of 100 request-steps at 1.2 / 1.4 / 1.6 tokens per step, one step's sigma 0.5:
    mean 1.4, weighted variance (0.04 + 0 + 0.04) / 3 = 0.02667, sampling 3 x 0.25 / 300 = 0.0025,
    between 0.024167 -> sqrt / 1.4 = 0.1110. Windows that agree up to sampling drift by 0."""
    from specmodel.model.accept import window_drift_rel

    d = window_drift_rel([(1.2, 100), (1.4, 100), (1.6, 100)], 0.5)
    assert d == pytest.approx(math.sqrt((0.08 / 3) - 3 * 0.25 / 300) / 1.4, rel=1e-9)
    assert d == pytest.approx(0.1110, abs=1e-4)
    assert window_drift_rel([(1.40, 100), (1.41, 100), (1.39, 100)], 0.5) == 0.0
    assert window_drift_rel([(1.2, 100), (1.6, 100)], 0.5) == 0.0  # two windows: nothing to tell


def test_an_accept_log_whose_acceptance_moved_widens_the_band_and_says_so(tmp_path: Path) -> None:
    """tests/data/vllm_cpu_032_watch/tp1_ngram: 8 windows whose tokens per request-step moved ~11 %
    between them (batches and prompts changed mid-log). predict --json carries the drift into the
    band and P, and names it; the same acceptance as one number (no windows) has none."""
    log = DATA / "vllm_cpu_032_watch" / "tp1_ngram" / "server.log"
    prof = str(DATA / "vllm_cpu_032_watch" / "tp1_ngram" / "profile")
    r = run_cli("predict", "--json", "--profile", prof, "--accept-log", str(log), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert 0.05 < d["accept_drift_rel"] < 0.2
    assert "acceptance drift between windows" in d["band_label"]
    same = run_cli("predict", "--json", "--profile", prof, "--accept-len", f"{d['accept_mean_tokens']:.6f}",
                   "--proposal-rate", f"{d['proposal_rate']:.6f}", cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    e = json.loads(same.stdout)
    assert e["accept_drift_rel"] == 0.0
    width = (d["speedup_high"] - d["speedup_low"]) / d["speedup"]
    assert width > (e["speedup_high"] - e["speedup_low"]) / e["speedup"] + 2 * 1.96 * 0.05 * 0.8


def test_an_interpolated_costs_interval_blends_its_two_knots() -> None:
    """Verify at 6.9 tokens between a knot at 6 tokens (+-40 %) and one at 7 (+-12 %): w = 0.9, so
    0.1 x 0.40 + 0.9 x 0.12 = 0.148 (before: the larger, 0.40, for a cost that is 90 % the second)."""
    from specmodel.model.cyclecost import row_ci95_rel

    rows = (_row("decode", 1, 1.0, 0.5, ci=0.05), _row("verify", 6, 2.0, 2.0, ci=0.40),
            _row("verify", 7, 2.1, 2.0, ci=0.12))
    p = Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=rows, spec=SPEC)
    assert row_ci95_rel(p, "verify", 6.9) == pytest.approx(0.1 * 0.40 + 0.9 * 0.12, rel=1e-9)
    assert row_ci95_rel(p, "verify", 6) == pytest.approx(0.40)
    assert row_ci95_rel(p, "verify", 9) == pytest.approx(0.12)  # beyond the last knot: that knot's
