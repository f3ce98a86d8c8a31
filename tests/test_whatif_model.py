"""What-if transforms (specmodel.model.whatif): each changes exactly what it says."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.limits import GO_MIN_SPEEDUP
from specmodel.model.accept import from_mean
from specmodel.model.allreduce import oneshot_allreduce_s, tp_scale_factor
from specmodel.model.predict import predict
from specmodel.model.whatif import (
    DEFAULT_ALPHA_S,
    allreduce_faster,
    batch_sweep,
    choose_fit,
    custom_allreduce,
    drafter_without_tp,
    powers_of_two,
    retp,
    standard_whatifs,
    stop_paying_batch,
)
from specmodel.schema.costrows import AllReducePoint, CostRow
from specmodel.schema.profile import Profile, load_profile
from tests.conftest import REFERENCE


@pytest.fixture(scope="module")
def ref() -> Profile:
    return load_profile(REFERENCE)


def _rows(p: Profile) -> dict[tuple[str, int, int], CostRow]:
    return {(r.kind, r.batch, r.tokens): r for r in p.costs}


def test_allreduce_2x_halves_every_row_and_keeps_totals_consistent(ref: Profile) -> None:
    fast = allreduce_faster(ref, 2.0)
    old, new = _rows(ref), _rows(fast)
    assert old.keys() == new.keys()
    for k, r in old.items():
        n = new[k]
        assert n.allreduce_s == pytest.approx(r.allreduce_s / 2)
        assert n.compute_s == r.compute_s and n.other_s == r.other_s
        assert n.total_s == pytest.approx(n.allreduce_s + n.compute_s + n.other_s)
    dist = from_mean(2.0, 4)
    before, after = predict(ref, dist), predict(fast, dist)
    assert after.figures.baseline_tokens_per_s > before.figures.baseline_tokens_per_s
    assert after.costs.cycle_s < before.costs.cycle_s
    assert "all-reduce 2x faster" in fast.label


@settings(max_examples=25, deadline=None)
@given(f1=st.floats(1.0, 8.0), f2=st.floats(1.0, 8.0))
def test_faster_allreduce_never_slows_anything(f1: float, f2: float) -> None:
    ref = load_profile(REFERENCE)
    lo, hi = sorted((f1, f2))
    dist = from_mean(2.5, 4)
    a, b = predict(allreduce_faster(ref, lo), dist), predict(allreduce_faster(ref, hi), dist)
    assert b.costs.cycle_s <= a.costs.cycle_s + 1e-15
    assert b.figures.baseline_tokens_per_s >= a.figures.baseline_tokens_per_s - 1e-9


def test_custom_allreduce_uses_oneshot_per_call_but_never_slower_and_keeps_skew(ref: Profile) -> None:
    fit = choose_fit(ref).fit
    skewed = ref.with_costs([dataclasses.replace(r, skew_s=r.allreduce_s * 0.1) for r in ref.costs])
    custom, changed = custom_allreduce(skewed, fit)
    assert changed == len(ref.costs)
    for k, r in _rows(skewed).items():
        n = _rows(custom)[k]
        one = oneshot_allreduce_s(r.allreduce_msg_bytes, ref.tp, fit.alpha_s, fit.beta_bytes_per_s)
        expect = r.n_allreduce * min(one, (r.allreduce_s - r.skew_s) / r.n_allreduce) + r.skew_s
        assert n.allreduce_s == pytest.approx(expect)
        assert n.allreduce_s <= r.allreduce_s + 1e-15
        assert n.skew_s == pytest.approx(r.skew_s)


def test_custom_allreduce_leaves_rows_without_message_size_alone(ref: Profile) -> None:
    rows = list(ref.costs)
    rows[0] = dataclasses.replace(rows[0], n_allreduce=0, allreduce_msg_bytes=0)
    custom, changed = custom_allreduce(ref.with_costs(rows), choose_fit(ref).fit)
    assert changed == len(rows) - 1
    assert custom.costs[0] == rows[0]


def test_tp8_to_tp4_scales_allreduce_by_the_ring_model_and_doubles_compute(ref: Profile) -> None:
    fit = choose_fit(ref).fit
    tp4 = retp(ref, 4, fit)
    assert tp4.tp == 4
    for k, r in _rows(ref).items():
        n = _rows(tp4)[k]
        assert n.compute_s == pytest.approx(r.compute_s * 2)
        assert n.allreduce_s == pytest.approx(r.allreduce_s * tp_scale_factor(r.allreduce_msg_bytes, 8, 4, fit))
        assert n.allreduce_s < r.allreduce_s  # fewer hops on a latency-bound ring
    with pytest.raises(SpecmodelError, match="TP 1"):
        retp(dataclasses.replace(ref, tp=1), 4, fit)


def test_drafter_without_tp_removes_draft_allreduce_and_multiplies_its_compute(ref: Profile) -> None:
    solo = drafter_without_tp(ref)
    for k, r in _rows(ref).items():
        n = _rows(solo)[k]
        if r.kind == "draft":
            assert n.allreduce_s == 0.0
            assert n.compute_s == pytest.approx(r.compute_s * ref.tp)
        else:
            assert n == r
    dist = from_mean(2.0, 4)
    assert predict(solo, dist).costs.draft_s < predict(ref, dist).costs.draft_s  # 3 x 0.85 ms of mostly all-reduce


def test_choose_fit_prefers_fit_then_points_then_rows_then_default(ref: Profile) -> None:
    assert choose_fit(ref).fit == ref.allreduce_fit
    no_fit = dataclasses.replace(ref, allreduce_fit=None)
    assert "cost rows" in choose_fit(no_fit).origin
    pts = tuple(AllReducePoint(msg_bytes=b, tp=8, latency_s=1e-4 + b / 1e10) for b in (1024, 65536, 1 << 20))
    assert "measured all-reduce points" in choose_fit(dataclasses.replace(no_fit, allreduce_points=pts)).origin
    bare = no_fit.with_costs([dataclasses.replace(r, n_allreduce=0, allreduce_msg_bytes=0) for r in ref.costs])
    c = choose_fit(bare)
    assert c.origin.startswith("DEFAULT") and c.fit.alpha_s == DEFAULT_ALPHA_S


def test_standard_whatifs_cover_the_issue_list(ref: Profile) -> None:
    ws, _ = standard_whatifs(ref)
    assert [w.key for w in ws] == ["allreduce_2x", "custom_allreduce", "tp4", "drafter_no_tp"]
    assert all(w.assumptions for w in ws)
    tp1 = dataclasses.replace(ref, tp=1)
    assert [w.key for w in standard_whatifs(tp1)[0]] == ["allreduce_2x"]


def test_batch_sweep_finds_where_speculation_stops_paying(ref: Profile) -> None:
    dist = from_mean(3.0, 4)  # pays at batch 1 on the reference box (break-even 2.46)
    pts = batch_sweep(ref, dist, spec=ref.spec, batches=powers_of_two(64), generation_tokens=256)
    assert [p.point.batch for p in pts] == [1, 2, 4, 8, 16, 32, 64]
    stop = stop_paying_batch(pts)
    assert pts[0].figures.speedup > 1.0
    assert stop is not None
    # where the one decision rule stops saying speculate (GO): a MARGINAL batch does not pay either
    assert all(round(p.figures.speedup, 2) >= GO_MIN_SPEEDUP for p in pts if p.point.batch < stop)
    assert round(next(p for p in pts if p.point.batch == stop).figures.speedup, 2) < GO_MIN_SPEEDUP
    assert stop_paying_batch(pts[:1]) is None


def test_powers_of_two() -> None:
    assert powers_of_two(1) == (1,)
    assert powers_of_two(48) == (1, 2, 4, 8, 16, 32, 48)
    with pytest.raises(SpecmodelError, match="^max_batch: must be >= 1"):
        powers_of_two(0)
