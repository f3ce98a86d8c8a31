"""The configuration optimizer (specmodel.model.optimize): acceptance model, costs, ranking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.model.accept import from_mean, from_per_position
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import (
    SIBLING_CORRELATION,
    AcceptModel,
    accept_model,
    batch_limit,
    best_of_k,
    evaluate,
    evaluate_all,
    expected_tokens,
    optimize,
    search_space,
    top1_rate_from_best_of_k,
)
from specmodel.model.predict import predict
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import load_profile
from tests.conftest import REFERENCE

REF = load_profile(REFERENCE)


def test_chain_expected_tokens_is_one_plus_the_per_position_rates() -> None:
    rates = [0.8, 0.6, 0.45]
    m = accept_model(from_per_position(rates), rates=rates)
    for ndt in (2, 3, 4):
        assert expected_tokens(m.conditional, steps=3, topk=1, num_draft_tokens=ndt) == pytest.approx(
            1 + sum(rates[: ndt - 1]))
    assert expected_tokens(m.conditional, steps=3, topk=1, num_draft_tokens=4) == pytest.approx(
        from_per_position(rates).mean_tokens)


def test_depth_beyond_the_data_extrapolates_with_the_last_conditional_rate() -> None:
    rates = [0.8, 0.6]
    m = accept_model(from_per_position(rates), rates=rates, max_steps=4)
    assert m.measured_depth == 2
    assert m.conditional == pytest.approx((0.8, 0.75, 0.75, 0.75))
    assert m.chain_rates == pytest.approx((0.8, 0.6, 0.45, 0.3375))
    assert any("extrapolated" in n for n in m.notes)


def test_best_of_k_at_one_depth() -> None:
    c = 0.6
    x = (1 - c) * SIBLING_CORRELATION
    for k in (1, 2, 4, 8):
        e = expected_tokens((c,), steps=1, topk=k, num_draft_tokens=k + 1)
        assert e == pytest.approx(1 + c * (1 - x**k) / (1 - x))
    # independence (rho = 1) is the classic best-of-k rate 1 - (1 - c)^k
    assert best_of_k(c, 4, rho=1.0) == pytest.approx(1 - (1 - c) ** 4)
    # correlated siblings: the 2nd..kth candidates add less than independence says
    assert best_of_k(c, 4) < best_of_k(c, 4, rho=1.0)


@given(st.floats(0.01, 0.99), st.integers(1, 8))
def test_best_of_k_inverts(c: float, k: int) -> None:
    assert top1_rate_from_best_of_k(best_of_k(c, k), k) == pytest.approx(c, abs=1e-9)


def test_tree_measured_rates_invert_back() -> None:
    t = 0.84  # best-of-2 rate measured at depth 1
    m = accept_model(from_per_position([t]), rates=[t], measured_topk=2, max_steps=1)
    assert expected_tokens(m.conditional, steps=1, topk=2, num_draft_tokens=3) == pytest.approx(1 + t)


def test_search_space_is_the_issue_grid_and_every_point_is_a_valid_spec() -> None:
    pts = list(search_space())
    # SGLang drafts topk + (steps-1)*topk^2 nodes and verifies any budget up to that + 1; the search
    # goes there, cut at 64 verified tokens but never below the one-per-node grid steps*topk + 1
    assert len(pts) == sum(min(k + (s - 1) * k * k + 1, max(64, s * k + 1)) - 1 for s in range(1, 9)
                           for k in (1, 2, 4, 8))
    for s, k, n in pts:
        SpecConfig(steps=s, topk=k, num_draft_tokens=n)  # raises if SGLang would reject it
    assert max(n for s, k, n in pts if k == 1 and s == 3) == 4
    assert max(n for s, k, n in pts if k == 2 and s == 3) == 11  # 2 + 2*4 drafted + the root
    assert (3, 2, 8) in pts


def test_evaluate_all_matches_evaluate_config_by_config() -> None:
    m = accept_model(from_mean(2.5, 4))
    fast = {c.key: c for c in evaluate_all(REF, m, batch=4, max_steps=4, topks=(1, 2))}
    for key, c in fast.items():
        slow = evaluate(REF, m, batch=4, steps=key[0], topk=key[1], num_draft_tokens=key[2])
        assert c == slow  # bit for bit: the shared-work path must not drift from the one-config path


def test_default_config_in_the_optimizer_is_the_same_prediction_as_predict() -> None:
    dist = from_mean(2.0, 4)
    opt = optimize(REF, accept_model(dist), batch=1, default=REF.spec)
    pred = predict(REF, dist, OperatingPoint(batch=1, spec=REF.spec))
    assert opt.default.tokens_per_s == pytest.approx(pred.figures.tokens_per_s)
    assert opt.default.accept_tokens == pytest.approx(pred.accept.mean_tokens)
    assert opt.default.speedup == pytest.approx(pred.figures.speedup)


@pytest.mark.parametrize("accept", [1.6, 2.0, 3.2])
def test_optimizer_choice_beats_the_default_configuration(accept: float) -> None:
    dist = from_mean(accept, 4)
    opt = optimize(REF, accept_model(dist), batch=1, default=REF.spec)
    assert opt.best.tokens_per_s >= opt.default.tokens_per_s
    assert opt.gain >= 1.0
    assert opt.ranked[0] == opt.best_any  # the ranking lists extrapolated configurations too
    assert opt.recommended is not None and opt.best == opt.recommended and opt.best.measured
    assert [c.tokens_per_s for c in opt.ranked] == sorted((c.tokens_per_s for c in opt.ranked), reverse=True)
    assert opt.best_measured_topk.topk == 1


def test_batch_limit_is_the_last_batch_up_to_which_the_best_config_pays() -> None:
    # at 3.0 tokens/step the default (3, 1, 4) is GO at batch 1; larger batches make verify dearer
    # until no measured configuration is GO (the one decision rule: a MARGINAL gain does not pay)
    marginal = accept_model(from_mean(2.6, 4))  # just above the published break-even (2.46): 1.06x
    assert batch_limit([optimize(REF, marginal, batch=b, default=REF.spec) for b in (1, 2, 4)]) is None
    m = accept_model(from_mean(3.0, 4))
    optima = [optimize(REF, m, batch=b, default=REF.spec) for b in (1, 2, 4, 8, 16, 32, 64)]
    speedups = [o.best.speedup for o in optima]
    assert speedups == sorted(speedups, reverse=True)
    lim = batch_limit(optima)
    assert lim is not None and optima[0].pays
    assert all(o.pays for o in optima if o.batch <= lim)
    assert lim == 64 or not next(o for o in optima if o.batch > lim).pays
    assert batch_limit([o for o in optima if not o.pays]) is None


def test_batch_limit_ignores_configurations_that_only_pay_when_extrapolated() -> None:
    # just under break-even only deeper / wider drafts than measured would pay: those are
    # listed (best_any) but the batch limit, like the recommendation, rests on measured ones
    m = accept_model(from_mean(2.3, 4))
    optima = [optimize(REF, m, batch=b, default=REF.spec) for b in (1, 2, 4)]
    assert optima[0].best_any is not None and optima[0].best_any.speedup > 1.0
    assert not optima[0].best_any.measured
    assert batch_limit(optima) is None


rates_st = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6).map(lambda xs: sorted(xs, reverse=True))


@settings(max_examples=20, deadline=None)
@given(rates=rates_st, batch=st.sampled_from([1, 2, 8, 32]))
def test_optimum_beats_every_evaluated_configuration(rates: list[float], batch: int) -> None:
    dist = from_per_position(rates)
    m = accept_model(dist, rates=rates)
    default = SpecConfig(steps=len(rates), topk=1, num_draft_tokens=len(rates) + 1)
    opt = optimize(REF, m, batch=batch, default=default)
    every = evaluate_all(REF, m, batch=batch)
    assert opt.evaluated == len(every)  # the default is inside the grid
    assert opt.best_any is not None and all(opt.best_any.tokens_per_s >= c.tokens_per_s for c in every)
    # the recommendation: best among configurations with measured costs and measured acceptance
    assert opt.best.measured or opt.recommended is None
    assert all(opt.best.tokens_per_s >= c.tokens_per_s for c in every if c.measured)
    if opt.default.measured:
        assert opt.best.tokens_per_s >= opt.default.tokens_per_s


def test_extrapolated_configuration_is_listed_but_never_recommended() -> None:
    # a high accept rate makes wide trees look best, but trees (topk > 1) and depths > 3 were
    # never measured: they may lead the ranking, never the recommendation
    dist = from_mean(3.6, 4)
    opt = optimize(REF, accept_model(dist), batch=1, default=REF.spec)
    assert opt.best_any is not None and not opt.best_any.measured
    assert opt.recommended is not None and opt.recommended.measured
    assert opt.recommended.topk == 1 and opt.recommended.steps <= 3
    assert opt.best == opt.recommended


def test_no_recommendation_when_no_configuration_is_measured() -> None:
    # batch 128 is beyond the reference profile's measured batches: every cost is extrapolated
    opt = optimize(REF, accept_model(from_mean(3.0, 4)), batch=128, default=REF.spec)
    assert opt.recommended is None
    assert all(c.cost_extrapolated for c in opt.ranked)


@settings(max_examples=30, deadline=None)
@given(cond=st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4), topk=st.sampled_from([2, 4, 8]),
       steps=st.integers(1, 4))
def test_tree_never_expects_fewer_tokens_than_the_chain_and_more_budget_never_hurts(
        cond: list[float], topk: int, steps: int) -> None:
    chain = expected_tokens(cond, steps=steps, topk=1, num_draft_tokens=steps + 1)
    tree = expected_tokens(cond, steps=steps, topk=topk, num_draft_tokens=steps + 1)
    assert tree >= chain - 1e-12
    es = [expected_tokens(cond, steps=steps, topk=topk, num_draft_tokens=n)
          for n in range(2, topk + (steps - 1) * topk * topk + 2)]
    assert all(b >= a - 1e-12 for a, b in zip(es, es[1:], strict=False))
    assert es[-1] <= steps + 1 + 1e-9


def test_bad_inputs_are_clear_errors() -> None:
    m = AcceptModel(conditional=(0.5, 0.5), measured_depth=2, source="test")
    with pytest.raises(SpecmodelError, match="depth"):
        expected_tokens(m.conditional, steps=3, topk=1, num_draft_tokens=2)
    with pytest.raises(SpecmodelError, match="num_draft_tokens"):
        expected_tokens(m.conditional, steps=1, topk=1, num_draft_tokens=1)
    with pytest.raises(SpecmodelError, match="conditional"):
        AcceptModel(conditional=(1.5,), measured_depth=1, source="test")
    with pytest.raises(SpecmodelError, match="depth"):
        optimize(REF, m, batch=1, default=REF.spec)


