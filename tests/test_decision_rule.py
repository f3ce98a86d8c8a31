"""One decision rule (model/decision.py) behind every verdict and every piece of advice: a speedup
of 1.05x is MARGINAL in predict, the optimizer, the plan, the schedules, the what-if sweep and
watch, and a drafter that fails its check is BLOCKED before any schedule names it.
On the code before: the optimizer paid at >= 1.0 (batch_limit, stop_paying_batch), watch advised
"keep" at 1.05x, and plan --engine exported a schedule without checking the drafter."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.limits import GO_MIN_P, GO_MIN_SPEEDUP
from specmodel.live.watch import assess, spec_for
from specmodel.live.window import Observed
from specmodel.model import decision as D
from specmodel.model import schedule as sch
from specmodel.model.accept import from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import Candidate, Optimum, batch_limit
from specmodel.model.predict import predict
from specmodel.model.serveplan import PlanCell
from specmodel.model.whatif import stop_paying_batch
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import load_profile
from tests.conftest import REFERENCE, run_cli

REF = load_profile(REFERENCE)
SPEC = SpecConfig(steps=3, topk=1, num_draft_tokens=4)


def counted(mean: float):  # a measured acceptance with its sample size (as watch's counters give)
    d = from_mean(mean, 4)
    return dataclasses.replace(d, samples=5000, samples_unknown=False)


def cand(batch: int, speedup: float) -> Candidate:
    return Candidate(steps=3, topk=1, num_draft_tokens=4, batch=batch, accept_tokens=2.0, draft_s=0.001,
                     verify_s=0.01, overhead_s=0.0, cycle_s=0.011, baseline_tokens_per_s=100.0 * batch,
                     tokens_per_s=100.0 * batch * speedup, speedup=speedup, cost_extrapolated=False,
                     accept_extrapolated=False)


def optimum(batch: int, speedup: float) -> Optimum:
    c = cand(batch, speedup)
    return Optimum(batch=batch, best=c, best_measured_topk=c, default=c, ranked=(c,), evaluated=1, recommended=c,
                   best_any=c)


@given(st.floats(0.5, 2.0), st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_the_rule(speedup: float, p: float | None) -> None:
    d = D.decide(speedup, p)
    sp = round(speedup, 2)
    if sp < 1.0:
        assert d.verdict == D.NO_GO and d.action == D.OFF
    elif sp >= GO_MIN_SPEEDUP and p is not None and round(p, 2) >= GO_MIN_P:
        assert d.verdict == D.GO and d.pays
    else:
        assert d.verdict == D.MARGINAL and not d.pays
    assert D.decide(speedup, p, blocked_by=("FAIL x",)).verdict == D.BLOCKED


def test_1_05x_is_marginal_for_every_caller() -> None:
    assert D.decide(1.05, 0.99).verdict == D.MARGINAL and D.action_for(1.05) == D.HOLD
    # the optimizer: a MARGINAL recommendation does not pay, so no batch limit comes from it
    o = optimum(1, 1.05)
    assert not o.pays and o.action == "marginal" and o.to_run is None
    assert batch_limit([optimum(1, 1.20), optimum(2, 1.05), optimum(4, 0.9)]) == 1
    # the plan's cell and the schedule it becomes
    cell = PlanCell(batch=1, context_tokens=0, recommended=cand(1, 1.05), best_any=cand(1, 1.05), default=cand(1, 1.05))
    assert cell.action == "marginal" and cell.to_run is None
    s = sch.batch_schedule([cell], max_batch=1)
    assert s.ranges[0].k == 0 and s.ranges[0].basis == sch.MEASURED_MARGINAL
    # the what-if batch sweep stops paying where the rule stops saying speculate
    p = predict(REF, from_mean(3.0, 4), OperatingPoint(batch=1, spec=SPEC))
    pts = [dataclasses.replace(p, point=dataclasses.replace(p.point, batch=b),
                               figures=dataclasses.replace(p.figures, speedup=x))
           for b, x in ((1, 1.2), (2, 1.05), (4, 0.9))]
    assert stop_paying_batch(pts) == 2


@pytest.mark.parametrize("accept", [2.4, 2.6, 2.9, 3.4])
def test_predict_and_watch_follow_the_rule(accept: float) -> None:
    p = predict(REF, counted(accept), OperatingPoint(batch=1, spec=SPEC))
    d = D.decide(p.figures.speedup, p.figures.p_speedup_gt_1)
    assert p.outcome.verdict == d.verdict
    obs = Observed(engine="vllm", dist=counted(accept), rates=None, steps=3, batch=1.0,
                   context_tokens=0.0, tokens_per_s=None, span_s=10.0, verify_steps=5000.0, method="EAGLE3")
    r = assess(REF, obs, spec_for(REF, obs, None))
    assert r.verdict == d.verdict and r.speedup == pytest.approx(p.figures.speedup)
    if d.verdict == D.GO:
        assert r.advice.startswith(("keep", "use k"))
    else:
        assert r.advice.startswith(("switch off", "use k")), r.advice
        if d.verdict == D.MARGINAL and not r.advice.startswith("use k"):
            assert "MARGINAL" in r.advice  # before: "keep"


def test_watch_at_a_marginal_speedup_does_not_advise_keep() -> None:
    obs = Observed(engine="vllm", dist=counted(2.6), rates=None, steps=3, batch=1.0,
                   context_tokens=0.0, tokens_per_s=None, span_s=10.0, verify_steps=5000.0, method="EAGLE3")
    r = assess(REF, obs, spec_for(REF, obs, None))
    assert 1.0 <= round(r.speedup, 2) < GO_MIN_SPEEDUP and r.verdict == "MARGINAL"
    assert r.advice != "keep" and "MARGINAL" in r.advice


def test_plan_engine_checks_the_drafter_first_and_refuses_a_fail(tmp_path: Path) -> None:
    from tests.test_drafter_safetensors import drafter_config, write_drafter, write_target

    bad = write_drafter(tmp_path / "bad", drafter_config(hidden=123))  # hidden size of another target
    tgt = write_target(tmp_path / "t")
    r = run_cli("plan", "--accept-len", "3.2", "--engine", "vllm", "--drafter", str(bad), "--target", str(tgt),
                "--json", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "BLOCKED" in r.stderr and "FAIL" in r.stderr
    good = write_drafter(tmp_path / "good")
    ok = run_cli("plan", "--accept-len", "3.2", "--engine", "vllm", "--drafter", str(good), "--target", str(tgt),
                 "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert '"model": "' + str(good) in ok.stdout and "checked against" in ok.stdout
    r = run_cli("plan", "--accept-len", "3.2", "--engine", "vllm", "--drafter", str(good), cwd=tmp_path)
    assert r.returncode == 2 and "pass --target" in r.stderr
