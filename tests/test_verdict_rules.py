"""Verdicts the inputs cannot contradict.

Each test holds one way a verdict could contradict its own inputs: it builds that input and checks
the verdict that follows from it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from specmodel.model.accept import from_mean, from_per_position
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import MARGINAL, OFF, SPECULATE, Optimum, accept_model, action_for, evaluate, optimize
from specmodel.model.predict import predict, verdict_for
from specmodel.model.serveplan import serve_plan
from specmodel.model.whatif import standard_whatifs
from specmodel.report.content import build_report
from specmodel.report.text import measurement_text
from specmodel.report.view import DrafterView, FindingRow
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import load_profile
from specmodel.schema.source import Source
from specmodel.trace.sweep import sweep_profile
from tests.conftest import REFERENCE, run_cli

REF = load_profile(REFERENCE)
SPEC = SpecConfig(steps=3, topk=1, num_draft_tokens=4)
RATES = [0.8, 0.6, 0.45]


# ---- acceptance above the tokens verified

def test_accept_above_the_verified_tokens_is_refused(tmp_path: Path) -> None:
    # a chain verifying 2 of steps + 1 = 4: SGLang resets num_draft_tokens to 4 (server_args.py), and 3.2
    # tokens/step cannot come out of a 2-token verify (taken at face value: 107.6 tok/s GO)
    r = run_cli("predict", "--accept-len", "3.2", "--steps", "3", "--num-draft-tokens", "2", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "--num-draft-tokens: 2 with --topk 1 and --steps 3: SGLang resets it to steps + 1 = 4" in r.stderr
    # a tree verifying 3 tokens per request emits at most 3
    r = run_cli("predict", "--accept-len", "3.2", "--steps", "3", "--topk", "2", "--num-draft-tokens", "3",
                cwd=tmp_path)
    assert r.returncode == 2 and "accept length 3.20 tokens/step exceeds the 3 tokens verified" in r.stderr
    ok = run_cli("predict", "--json", "--accept-len", "2.9", "--steps", "3", "--topk", "2", "--num-draft-tokens", "3",
                 cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["num_draft_tokens"] == 3


# ---- one decision rule for predict and plan

@given(st.floats(0.5, 2.0))
def test_plan_action_is_predicts_verdict(speedup: float) -> None:
    # the optimizer has no sample count: the same rule's speedup thresholds (as predict with a certain P)
    v = verdict_for(speedup, 1.0)[0]
    assert action_for(speedup) == {"GO": SPECULATE, "MARGINAL": MARGINAL, "NO-GO": OFF}[v]


def test_plan_says_marginal_at_1_05x_and_off_rows_fill_no_configuration(tmp_path: Path) -> None:
    assert action_for(1.05) == MARGINAL and action_for(1.10) == SPECULATE and action_for(0.99) == OFF
    # the reference at 2.6 tokens/step: batch 1 is 1.06x (predict: MARGINAL), so plan must not say "speculate"
    p = predict(REF, from_mean(2.6, 4), OperatingPoint(batch=1, spec=SPEC))
    assert p.outcome.verdict == "MARGINAL"
    r = run_cli("plan", "--accept-len", "2.6", "--batches", "1", "--contexts", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [row] = [ln.split() for ln in r.stdout.splitlines() if ln[:6].strip().isdigit()]
    assert row[2:9] == ["measured", "marginal", "-", "-", "-", "-", "-"], row
    assert "(marginal)" in r.stdout and "--speculative-num-steps" not in r.stdout
    j = json.loads(run_cli("plan", "--json", "--accept-len", "2.0", "--batches", "1", "--contexts", "0",
                           cwd=tmp_path).stdout)
    [cell] = j["cells"]
    assert cell["action"] == "off" and "engine_flags" not in cell  # off: no flags to paste


# ---- one recommendation, CLI and PDF

def test_a_config_below_the_baseline_is_never_the_recommendation() -> None:
    # accept 2.0 on the reference: the best measured configuration gives 66.7 < 82 tok/s
    model = accept_model(from_per_position([0.6, 0.4, 0.2]), rates=[0.6, 0.4, 0.2])
    opt = optimize(REF, model, batch=1, default=SPEC)
    assert opt.recommended is not None and opt.recommended.speedup < 1.0
    assert opt.to_run is None and opt.recommendation_text().startswith("turn speculation off")


# ---- what was measured, how noisy; no recommendation inside the noise

def test_page_one_says_what_was_measured_and_how_noisy() -> None:
    rows = tuple(dataclasses.replace(r, ci95_rel=c) for r, c in zip(REF.costs, [0.5, 0.01] * 40, strict=False))
    src = Source.measured(description="measured by specmodel profile: TP8 gloo (4 of 61 layers)", tool="t",
                          created_utc="2026-12-01T00:00:00+00:00", method="m")
    prof = dataclasses.replace(REF, costs=rows, source=src)
    text = measurement_text(prof)
    n = len(rows)
    assert text.startswith("measured by specmodel profile: TP8 gloo (4 of 61 layers)")
    assert f"95 % intervals of its {n} cost rows" in text and "worst +/-50.0%" in text
    assert f"({sum(1 for r in rows if (r.ci95_rel or 0) <= 0.02)}/{n} within +/-2%)" in text
    assert "no 95 % intervals" in measurement_text(REF)


def test_no_switch_recommended_on_a_difference_inside_the_noise() -> None:
    model = accept_model(from_per_position(RATES), rates=RATES)
    d = evaluate(REF, model, batch=1, steps=3, topk=1, num_draft_tokens=4)
    better = dataclasses.replace(d, steps=2, num_draft_tokens=3, tokens_per_s=d.tokens_per_s * 1.028,
                                 speedup=d.speedup * 1.028)
    opt = Optimum(batch=1, best=better, best_measured_topk=better, default=d, ranked=(better, d), evaluated=2,
                  recommended=better, best_any=better)
    noisy = opt.recommendation_text(noise_rel=0.5)
    assert noisy.startswith("keep steps 3, topk 1, draft tokens 4") and "2.8% better, inside the +/-50% noise" in noisy
    assert opt.recommendation_text(noise_rel=0.01).startswith("steps 2, topk 1, draft tokens 3")


# ---- a blocking drafter FAIL

def test_a_drafter_fail_blocks_the_report_verdict() -> None:
    p = predict(REF, from_mean(3.2, 4), OperatingPoint(batch=1, spec=SPEC))
    assert p.outcome.verdict == "GO"
    clean = build_report(profile=REF, dist=from_mean(3.2, 4), spec=SPEC, prediction=p, max_batch=2)
    assert clean.verdict == "GO" and clean.blocked_by == ()
    fail = DrafterView(status="FAIL", findings=(FindingRow(name="weights.d2t", status="FAIL", message="d2t differs"),),
                       acceptance_ceiling=None, ceiling_tokens=None, warning=None, inputs=(), raw={})

    class _Rep:  # a DrafterReportLike whose d2t check FAILs
        findings = fail.findings
        acceptance_ceiling = None
        status = "FAIL"

        def to_dict(self) -> dict:
            return {}

    c = build_report(profile=REF, dist=from_mean(3.2, 4), spec=SPEC, prediction=p, max_batch=2,
                     drafter=_Rep())  # type: ignore[arg-type]
    assert c.verdict == "BLOCKED" and c.blocked_by == ("FAIL weights.d2t",)
    assert c.verdict_reason.startswith("check-drafter: FAIL weights.d2t") and "the model alone says GO" in c.verdict_reason
    d = c.to_dict()
    assert d["verdict"] == "BLOCKED" and d["prediction"]["verdict"] == "GO"  # the prediction stays predict's
    assert c.optimizer.recommendation.startswith("none: the drafter check blocks") and c.optimizer.recommends_off


# ---- what-ifs that cannot apply

def test_tp4_for_kimi_int4_is_na_because_the_weights_do_not_fit() -> None:
    assert REF.model["weight_bytes"] == 595e9 and REF.hardware["gpu_memory_bytes"] == 96e9
    w = {x.key: x for x in standard_whatifs(REF)[0]}
    assert w["tp4"].unavailable.startswith("not available: does not fit: weights 148.8 GB per GPU on TP 4")
    assert not w["allreduce_2x"].unavailable  # the reference has an all-reduce split


def test_allreduce_whatifs_on_a_sweep_are_na(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("batch,context,tokens_per_s\n1,0,80\n4,0,300\n")
    prof = sweep_profile(str(p), tp=8)
    w = {x.key: x for x in standard_whatifs(prof)[0]}
    for key in ("allreduce_2x", "custom_allreduce", "tp4"):
        assert w[key].unavailable.startswith("not available: the profile records no all-reduce split"), key
    pred = predict(prof, from_mean(3.0, 4), OperatingPoint(batch=1, spec=SPEC))
    c = build_report(profile=prof, dist=from_mean(3.0, 4), spec=SPEC, prediction=pred, max_batch=2)
    assert c.allreduce.unavailable.startswith("N/A: no all-reduce data in this profile")
    rows = {r.key: r for r in c.whatifs}
    assert rows["allreduce_2x"].verdict == "N/A"
    # the plan built from it shows the assumed verify too
    model = accept_model(from_per_position(RATES), rates=RATES)
    assert all(cell.region == "ASSUMED" for cell in serve_plan(prof, model, batches=(1,), contexts=(0,),
                                                               default=SPEC).cells)
