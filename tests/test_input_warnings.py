"""Inputs the model accepts but a user should look at again: each is said
once, next to the figure it changes, and the GO rule is applied as stated or not at all."""

from __future__ import annotations

import json
import math
import tempfile

import pytest

from specmodel.model.calibrate import SUSPECT_CYCLE_RATIO, Observation, looks_per_request
from specmodel.model.predict import verdict_for
from specmodel.scenario.accept import fractions_warning
from tests.conftest import run_cli


def _predict_json(*args: str) -> dict:
    # an empty folder: the default profile is then the shipped reference, as on a fresh checkout
    # (after `make demo` the checkout's ./profiles holds cpu-demo, which a bare predict would use)
    with tempfile.TemporaryDirectory() as empty:
        r = run_cli("predict", "--json", *args, cwd=empty)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_calibration_whose_tok_s_looks_per_request_is_warned_with_the_total() -> None:
    # 60 tok/s at batch 8 is a 266 ms cycle, 8x the forwards; 480 would be the total
    d = _predict_json("--accept-len", "2.0", "--batch", "8", "--calibrate", "8,2.0,60")
    w = [x for x in d["warnings"] if "one request's rate" in x]
    assert len(w) == 1
    assert "60 tok/s at batch 8 means a 266.67 ms cycle" in w[0] and "the total is 480 tok/s (8 x 60)" in w[0]
    # the total given as the total: no such warning
    d = _predict_json("--accept-len", "2.0", "--batch", "8", "--calibrate", "8,2.0,480")
    assert not any("one request's rate" in x for x in d["warnings"])


@pytest.mark.parametrize("batch,ratio,warned", [(8, 8.0, True), (8, 3.0, True), (8, 1.5, False), (1, 8.0, False),
                                                (2, 8.0, True), (16, 2.5, False)])
def test_per_request_suspicion_rule(batch: int, ratio: float, warned: bool) -> None:
    model_s = 0.030
    obs = Observation(batch=batch, accept_tokens=2.0, tokens_per_s=batch * 2.0 / (ratio * model_s))
    got = looks_per_request(obs, model_s)
    # warned iff the cycle is >= SUSPECT_CYCLE_RATIO x the model and cycle / B is nearer it (in log)
    assert (got is not None) == warned
    assert warned == (batch > 1 and ratio >= SUSPECT_CYCLE_RATIO and abs(math.log(ratio / batch)) < abs(math.log(ratio)))


def test_fractions_not_summing_to_one_are_warned_not_renormalised_silently() -> None:
    d = _predict_json("--accept-hist", "1:0.1,2:0.2,3:0.3,4:0.3")
    w = [x for x in d["warnings"] if "fractions sum to 0.9" in x]
    assert len(w) == 1 and "renormalised" in w[0]
    # fractions that do sum to 1 (or percentages to 100) and counts: nothing to say
    assert fractions_warning({1: 0.1, 2: 0.3, 3: 0.4, 4: 0.2}) is None
    assert fractions_warning({1: 10.5, 2: 29.5, 3: 40.0, 4: 20.0}) is None
    assert fractions_warning({1: 10, 2: 30, 3: 40, 4: 20}) is None
    assert fractions_warning({1: 0.2, 2: 0.3, 3: 0.4, 4: 0.2}) is not None  # 1.1


def test_no_go_without_the_p_the_go_rule_checks() -> None:
    # "needs counts" beside a GO means the P >= 0.90 half of the rule was skipped
    d = _predict_json("--accept-hist", "1:0.1,2:0.2,3:0.4,4:0.3")
    assert d["p_speedup_gt_1"] is None and d["speedup"] >= 1.10
    assert d["verdict"].startswith("MARGINAL")
    counts = _predict_json("--accept-hist", "1:10,2:30,3:40,4:20")
    assert counts["verdict"].startswith(("GO", "MARGINAL"))  # decided on its P, whatever it is
    v, why = verdict_for(1.5, None)
    assert v == "MARGINAL" and "P(speedup>1) unknown" in why and "counts" in why
    assert verdict_for(1.5, 0.95)[0] == "GO" and verdict_for(1.5, 0.5)[0] == "MARGINAL"


def test_the_spec_loop_prints_the_speedup_error_the_verdict_rests_on() -> None:
    # tok/s error +4 % while the speedup error is -16 %: the speedup is what decides
    from specmodel.profile.output import compare_loop, format_comparison
    from specmodel.scenario.profiles import reference_profile_path
    from specmodel.schema.profile import load_profile

    prof = load_profile(reference_profile_path())
    from specmodel.model.accept import from_histogram
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict

    hist = {"1": 10, "2": 30, "3": 40, "4": 20}
    pr = predict(prof, from_histogram({int(k): v for k, v in hist.items()}, max_tokens=4), OperatingPoint(batch=1))
    tps = pr.figures.tokens_per_s / 1.04
    base = tps * 0.84 / pr.figures.speedup
    from specmodel.profile.result import LoopBaseline, LoopSpec, SpecLoopResult

    loop = SpecLoopResult(
        batch=1, cycles=100, steps=3, topk=1, num_draft_tokens=4, accept_len_requested=2.7, rounds=1,
        round_cycle_over_step=(),
        spec=LoopSpec(elapsed_s=1.0, tokens=270, tokens_per_s=tps, cycle_s=0.03, draft_extend_s=0.001,
                      draft_step_s=0.001, verify_s=0.027, overhead_s=0.001, accept_hist=hist, accept_mean=2.7),
        baseline=LoopBaseline(elapsed_s=1.0, tokens=100, tokens_per_s=base, step_s=0.01))
    # result.json keeps its shape: the typed record round-trips through its dict
    assert SpecLoopResult.from_dict(loop.to_dict()) == loop
    c = compare_loop(prof, loop)
    assert c["predicted"]["rel_error"] == pytest.approx(0.04, abs=1e-9)
    assert c["speedup_rel_error"] == pytest.approx(-0.16, abs=1e-9)
    text = format_comparison(c)
    assert "speedup error -16.0% (the go/no-go quantity)" in text
    assert "tok/s error +4.0%" in text
