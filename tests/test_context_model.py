"""Context as a first-class axis in the model: T_fwd(kind, tokens, context), extrapolation flags,
the qualified verdict, 4-field calibration, the serve plan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.engines.vllm.spec import paste as vllm_speculative_config
from specmodel.errors import SpecmodelError
from specmodel.model.accept import from_mean
from specmodel.model.calibrate import Observation, parse_observation
from specmodel.model.costs import context_axis, default_context, forward_cost
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import accept_model
from specmodel.model.predict import predict
from specmodel.model.serveplan import MARGINAL, OFF, SPECULATE, UNMEASURED, serve_plan
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile, profile_from_dict, profile_to_dict

BATCHES = (1, 4, 16)
CONTEXTS = (0, 4096, 32768)


def _decode_s(b: int, L: int) -> float:
    # a made-up but plausible surface: a floor, a per-token term and a KV-read term per request
    return 0.010 + 0.0002 * b + 2e-8 * b * L


def _verify_s(b: int, L: int) -> float:
    return 0.020 + 0.0001 * 4 * b + 6e-8 * b * L


def _row(kind: str, b: int, tokens: int, L: int, total: float) -> CostRow:
    ar = 0.6 * total
    return CostRow(kind=kind, batch=b, tokens=tokens, context_tokens=L, total_s=total, allreduce_s=ar,
                   compute_s=total - ar, other_s=0.0)


def sweep_profile() -> Profile:
    rows = []
    for L in CONTEXTS:
        for b in BATCHES:
            rows.append(_row("decode", b, b, L, _decode_s(b, L)))
            rows.append(_row("verify", b, 4 * b, L, _verify_s(b, L)))
            rows.append(_row("draft", b, b, L, 0.001 + 1e-9 * b * L))
    return Profile(name="ctx-sweep", source={"kind": "measured"}, tp=2, costs=tuple(rows))


PROF = sweep_profile()


def test_measured_points_are_returned_exactly() -> None:
    for L in CONTEXTS:
        for b in BATCHES:
            assert forward_cost(PROF, "decode", b, L).total_s == pytest.approx(_decode_s(b, L))
            fc = forward_cost(PROF, "verify", 4 * b, L)
            assert fc.total_s == pytest.approx(_verify_s(b, L)) and not fc.extrapolated


def test_interpolation_in_context_is_linear_in_L() -> None:
    # KV reads grow linearly with L: halfway between 4096 and 32768 in L is halfway in cost
    L = 0.5 * (4096 + 32768)
    fc = forward_cost(PROF, "decode", 4, L)
    assert context_axis(L) == L
    assert fc.total_s == pytest.approx(0.5 * (_decode_s(4, 4096) + _decode_s(4, 32768)), rel=1e-12)
    assert not fc.extrapolated


def test_a_short_context_is_near_the_short_measurement_not_the_long_one() -> None:
    # contexts 0 and 32K measured; in ln(1 + L) the step at 1K would be 67 % of the way to 32K
    rows = [_row("decode", 1, 1, 0, 0.010), _row("decode", 1, 1, 32768, 0.020)]
    p = Profile(name="two", source={}, tp=1, costs=tuple(rows))
    frac = (forward_cost(p, "decode", 1, 1024).total_s - 0.010) / (0.020 - 0.010)
    assert frac == pytest.approx(1024 / 32768, rel=1e-9)


def test_interpolation_in_both_axes_at_once() -> None:
    b, L = 8, 0.25 * 4096 + 0.75 * 32768
    # tokens: linear between the measured 4 and 16; context: 3/4 of the way from 4096 to 32768 in L
    wb, wl = (8 - 4) / (16 - 4), 0.75
    lo = _decode_s(4, 4096) + wb * (_decode_s(16, 4096) - _decode_s(4, 4096))
    hi = _decode_s(4, 32768) + wb * (_decode_s(16, 32768) - _decode_s(4, 32768))
    assert forward_cost(PROF, "decode", b, L).total_s == pytest.approx(lo + wl * (hi - lo), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(t1=st.floats(1, 64), t2=st.floats(1, 64), l1=st.floats(0, 200_000), l2=st.floats(0, 200_000))
def test_surface_is_monotone_in_tokens_and_context(t1: float, t2: float, l1: float, l2: float) -> None:
    (ta, tb), (la, lb) = sorted((t1, t2)), sorted((l1, l2))
    assert forward_cost(PROF, "decode", ta, la).total_s <= forward_cost(PROF, "decode", tb, la).total_s + 1e-15
    assert forward_cost(PROF, "decode", ta, la).total_s <= forward_cost(PROF, "decode", ta, lb).total_s + 1e-15


def test_monotone_even_when_a_measurement_dips() -> None:
    # a noisy long-context row cheaper than the short one: the surface keeps the running maximum
    rows = [_row("decode", 1, 1, 0, 0.010), _row("decode", 1, 1, 32768, 0.009)]
    p = Profile(name="dip", source={}, tp=1, costs=tuple(rows))
    assert forward_cost(p, "decode", 1, 32768).total_s == pytest.approx(0.010)


def test_extrapolation_is_flagged_per_axis_never_silent() -> None:
    inside = forward_cost(PROF, "decode", 4, 4096)
    assert inside.extrapolations == ()
    big = forward_cost(PROF, "decode", 64, 131072)
    axes = {e.axis: e for e in big.extrapolations}
    assert set(axes) == {"batch", "context"}
    assert (axes["batch"].requested, axes["batch"].measured_min, axes["batch"].measured_max) == (64, 1, 16)
    assert (axes["context"].requested, axes["context"].measured_max) == (131072, 32768)
    assert axes["batch"].label == "batch 64 > measured 16"
    # 2 verify tokens < the 4 measured: between the decode forward and the smallest verify, measured both sides
    v = forward_cost(PROF, "verify", 2, 0)
    assert v.extrapolations == () and "between the decode forward" in v.note
    d2, v4 = forward_cost(PROF, "decode", 2, 0).total_s, forward_cost(PROF, "verify", 4, 0).total_s
    assert min(d2, v4) <= v.total_s <= max(d2, v4)
    # beyond the last context: linear in L along the last segment, never below it
    assert big.total_s > forward_cost(PROF, "decode", 64, 32768).total_s


def test_verify_falls_back_to_decode_at_same_tokens_and_same_context() -> None:
    no_verify = PROF.with_costs([r for r in PROF.costs if r.kind != "verify"])
    for L in (0, 10_000, 32768):
        fc = forward_cost(no_verify, "verify", 16, L)
        assert fc.from_kind == "decode"
        assert fc.total_s == pytest.approx(forward_cost(no_verify, "decode", 16, L).total_s)


def test_default_context_is_the_smallest_measured_one() -> None:
    assert default_context(PROF) == 0
    p = predict(PROF, from_mean(3.0, 4), OperatingPoint(batch=4))
    assert p.point.context_tokens == 0 and "smallest measured" in p.point.context_source
    q = predict(PROF, from_mean(3.0, 4), OperatingPoint(batch=4, context_tokens=32768))
    assert q.figures.baseline_tokens_per_s == pytest.approx(4 / _decode_s(4, 32768))
    assert q.baseline_tokens_per_s_per_request == pytest.approx(q.figures.baseline_tokens_per_s / 4)
    assert q.tokens_per_s_per_request == pytest.approx(q.figures.tokens_per_s / 4)


def test_v1_profile_is_read_as_one_context() -> None:
    d = profile_to_dict(PROF)
    d["schema_version"] = 1
    d["model"] = {"context_len": 2048}
    for c in d["costs"]:
        c.pop("context_tokens")
    d["costs"] = [c for c in d["costs"] if c["kind"] == "decode"][:3]
    p = profile_from_dict(d, "v1.json")
    assert default_context(p) == 2048
    assert not forward_cost(p, "decode", 4, 2048).extrapolated
    assert forward_cost(p, "decode", 4, 4096).extrapolations[0].axis == "context"


def test_verdict_from_extrapolated_costs_is_qualified() -> None:
    p = predict(PROF, from_mean(1.2, 4), OperatingPoint(batch=32))
    assert p.outcome.verdict == "NO-GO"
    assert p.verdict_label.startswith("NO-GO (extrapolated: batch 32 > measured 16")
    assert {e.axis for e in p.outcome.extrapolated} >= {"batch", "tokens"}
    d = p.to_dict()
    batch_entry = next(e for e in d["extrapolated"] if e["axis"] == "batch")
    assert {"axis": "batch", "requested": 32.0, "measured_min": 1.0, "measured_max": 16.0}.items() <= batch_entry.items()
    # no interval was measured out there: P(speedup > 1) is not given beside it
    assert p.p_text.startswith("not given (rests on a cost extrapolated beyond the measured range: batch 32 > measured")
    assert d["p_speedup_gt_1"] is None and d["p_withheld"].startswith("rests on a cost extrapolated")
    inside = predict(PROF, from_mean(3.0, 4), OperatingPoint(batch=4, context_tokens=4096))
    assert inside.outcome.extrapolated == () and inside.verdict_label == inside.outcome.verdict and not inside.figures.p_withheld


def test_calibration_four_fields_is_modelled_at_its_own_context() -> None:
    obs = parse_observation("4,32768,3.0,300")
    assert (obs.batch, obs.context_tokens, obs.accept_tokens, obs.tokens_per_s) == (4, 32768, 3.0, 300.0)
    assert parse_observation("4,3.0,300").context_tokens is None  # the old form: the prediction's context
    dist = from_mean(3.0, 4)
    # predicted at the calibration point itself, the model reproduces the observation exactly
    same = predict(PROF, dist, OperatingPoint(batch=4, observation=obs, context_tokens=32768))
    assert same.figures.tokens_per_s == pytest.approx(300.0)
    # elsewhere the unseen per-cycle seconds are carried unchanged
    other = predict(PROF, dist, OperatingPoint(batch=16, observation=obs, context_tokens=4096))
    plain = predict(PROF, dist, OperatingPoint(batch=16, context_tokens=4096))
    assert other.costs.overhead_s - plain.costs.overhead_s == pytest.approx(same.costs.calibrated_overhead_s)
    with pytest.raises(SpecmodelError, match="BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S"):
        parse_observation("4,1,2,3,4")
    with pytest.raises(SpecmodelError, match="context must be >= 0"):
        Observation(batch=1, accept_tokens=2.0, tokens_per_s=10.0, context_tokens=-1)


def test_serve_plan_recommends_only_measured_and_marks_the_rest() -> None:
    model = accept_model(from_mean(3.0, 4))
    plan = serve_plan(PROF, model, batches=(1, 16, 64), contexts=(0, 32768, 131072), default=SpecConfig())
    assert len(plan.cells) == 9
    for c in plan.cells:
        if c.batch <= 16 and c.context_tokens <= 32768:
            assert c.measured and c.recommended is not None and c.recommended.measured
            # predict's rule: speculate from 1.10x, marginal between, off below 1
            sp = round(c.recommended.speedup, 2)
            assert c.action == (SPECULATE if sp >= 1.10 else MARGINAL if sp >= 1.0 else OFF)
        else:
            assert c.action == UNMEASURED and c.recommended is None
    # with a barely useful drafter at long context speculation is switched off
    weak = serve_plan(PROF, accept_model(from_mean(1.3, 4)), batches=(16,), contexts=(32768,), default=SpecConfig())
    assert weak.cells[0].action == OFF


def test_vllm_config_only_for_chains() -> None:
    model = accept_model(from_mean(3.0, 4))
    plan = serve_plan(PROF, model, batches=(1,), contexts=(0,), default=SpecConfig())
    rec = plan.cells[0].recommended
    assert rec is not None and rec.topk == 1
    assert vllm_speculative_config(rec, "EAGLE3") == \
        f'--speculative-config \'{{"method": "eagle3", "num_speculative_tokens": {rec.steps}, "model": "<drafter>"}}\''
    tree = plan.cells[0].best_any
    if tree.topk > 1:
        assert vllm_speculative_config(tree, "EAGLE3") is None


_row_st = st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([0, 1024, 8192, 65536]),
                    st.floats(1e-4, 1.0), st.floats(0.0, 1.0))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(_row_st, min_size=1, max_size=20, unique_by=lambda r: (r[0], r[1])),
       t=st.tuples(st.floats(0.5, 40), st.floats(0.5, 40)), ls=st.tuples(st.floats(0, 1e5), st.floats(0, 1e5)))
def test_any_noisy_table_gives_a_surface_monotone_in_both_axes(rows: list[tuple[int, int, float, float]],
                                                               t: tuple[float, float],
                                                               ls: tuple[float, float]) -> None:
    # measured medians in any order (noise can make a bigger forward look cheaper): the lookup
    # must still never reward more tokens or more context
    costs = tuple(CostRow(kind="decode", batch=b, tokens=b, context_tokens=L, total_s=s, allreduce_s=s * f,
                          compute_s=s * (1 - f)) for b, L, s, f in rows)
    p = Profile(name="noisy", source={}, tp=1, costs=costs)
    (ta, tb), (la, lb) = sorted(t), sorted(ls)
    lo = forward_cost(p, "decode", ta, la)
    assert lo.total_s <= forward_cost(p, "decode", tb, la).total_s + 1e-12
    assert lo.total_s <= forward_cost(p, "decode", ta, lb).total_s + 1e-12
    assert lo.allreduce_s <= forward_cost(p, "decode", tb, lb).allreduce_s + 1e-12
    measured_ctx = {r[1] for r in rows}
    flagged = any(e.axis == "context" for e in lo.extrapolations)
    assert flagged == (la < min(measured_ctx) or la > max(measured_ctx))


def test_beyond_the_last_knot_the_slope_spans_the_top_half_of_the_measured_range() -> None:
    """The vLLM CPU engine's verify rows at batch 1-4 (benchmarks/results/vllm_cli_2026-12-02_1639.md; steps per row in
    brackets): 4 tokens 14.91 ms [216], 8 tokens 19.81 ms [20], 15 tokens 24.99 ms [6], 16 tokens 29.55 ms
    [181]. At 64 tokens, along the last segment (15 -> 16): 29.55 + 48 x 4.56 = 248.43 ms; through the
    knot at half the last one's tokens (8 -> 16): 29.55 + 48 x (29.55 - 19.81) / 8 = 88.0 ms. The engine's
    speculative step at batch 16 (~64 verify tokens) took ~90 ms (507 tok/s at 2.91 tokens per request-step)."""
    from specmodel.model.costs import interpolate

    toks = [4.0, 8.0, 15.0, 16.0]
    comps = [(0.0, t / 1e3, 0.0) for t in (14.91, 19.81, 24.99, 29.55)]
    got, outside = interpolate(toks, comps, 64.0)
    assert outside and got[1] * 1e3 == pytest.approx(29.55 + 48 * (29.55 - 19.81) / 8, abs=1e-9)
    assert got[1] * 1e3 == pytest.approx(87.99, abs=0.01)
    # no knot at or below half the last: the first knot; two knots: the one segment there is
    assert interpolate([10.0, 16.0], [(0.0, 1.0, 0.0), (0.0, 1.6, 0.0)], 32.0)[0][1] == pytest.approx(1.6 + 16 * 0.1)
    assert interpolate([12.0, 14.0, 16.0], [(0.0, 1.0, 0.0), (0.0, 1.1, 0.0), (0.0, 1.6, 0.0)],
                       20.0)[0][1] == pytest.approx(1.6 + 4 * 0.6 / 4)
    # the running max first: a dip below never makes the slope negative
    assert interpolate([4.0, 8.0], [(0.0, 2.0, 0.0), (0.0, 1.0, 0.0)], 16.0)[0][1] == pytest.approx(2.0)
