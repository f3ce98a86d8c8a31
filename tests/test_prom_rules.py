"""`specmodel plan --prometheus-rules FILE`: rules promtool accepts, whose break-even is predict's at
each batch band, and whose alert fires on vLLM counters whose acceptance crosses below it for 10 m
and clears when it comes back (`promtool test rules` on hand-built series)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import specmodel_exe

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: `make prometheus` installs it")
SERVER = 'instance="s:8000",job="vllm",model_name="m"'


def _rules(tmp_path) -> tuple[str, dict]:
    path = tmp_path / "rules.yml"
    r = subprocess.run(specmodel_exe() + ["plan", "--accept-len", "3", "--prometheus-rules", str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return str(path), json.loads(path.read_text())


def _break_even(batch: int) -> float:
    r = subprocess.run(specmodel_exe() + ["predict", "--accept-len", "3", "--batch", str(batch), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return float(json.loads(r.stdout)["break_even_accept_tokens"])


def test_rules_pass_promtool_and_carry_predicts_break_even_per_batch_band(tmp_path):
    path, doc = _rules(tmp_path)
    chk = subprocess.run([PROMTOOL, "check", "rules", path], capture_output=True, text=True, timeout=300)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    be = {r["labels"]["batch_band"]: r["expr"] for r in doc["groups"][0]["rules"] if "labels" in r}
    for b in (1, 8):
        value = float(be[str(b)].split("* 0 + ")[1].split(")")[0])
        assert value == pytest.approx(_break_even(b), rel=1e-5)


def test_alert_fires_below_break_even_for_ten_minutes_and_clears_when_acceptance_recovers(tmp_path):
    path, doc = _rules(tmp_path)
    be = _break_even(1)
    bad, good = round(be - 0.3, 1), round(be + 0.5, 1)  # tokens per verify step, either side of the line
    d = 600  # drafts per minute; at batch 1 every step drafts: generated = d * E, engine steps = d
    acc_bad, acc_good = round((bad - 1) * d), round((good - 1) * d)
    series = [
        (f"vllm:spec_decode_num_drafts_total{{{SERVER},engine=\"0\"}}", f"0+{d}x40"),
        (f"vllm:spec_decode_num_accepted_tokens_total{{{SERVER},engine=\"0\"}}",
         f"0+{acc_bad}x20 {20 * acc_bad + acc_good}+{acc_good}x19"),
        (f"vllm:generation_tokens_total{{{SERVER},engine=\"0\"}}",
         f"0+{acc_bad + d}x20 {20 * (acc_bad + d) + acc_good + d}+{acc_good + d}x19"),
        (f"vllm:iteration_tokens_total_count{{{SERVER},engine=\"0\"}}", f"0+{d}x40"),
    ]
    alert = next(a for a in doc["groups"][1]["rules"] if a["alert"] == "SpeculationBelowBreakEven")
    margin = (1 + acc_bad / d) - be
    desc = (alert["annotations"]["description"].replace('{{ $value | printf "%.2f" }}', f"{margin:.2f}")
            .replace("{{ $labels.batch_band }}", "1"))
    labels = {"severity": "warning", "instance": "s:8000", "job": "vllm", "model_name": "m", "batch_band": "1",
              "context_tokens": "0"}
    fired = {"exp_labels": labels, "exp_annotations": {"summary": "s:8000: speculation does not pay at the running batch",
                                                        "description": desc}}
    test = {"rule_files": [path], "evaluation_interval": "30s", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [
            {"expr": "specmodel:accept_tokens:rate5m", "eval_time": "10m",
             "exp_samples": [{"labels": f"specmodel:accept_tokens:rate5m{{{SERVER}}}", "value": 1 + acc_bad / d}]},
            {"expr": "specmodel:batch_requests:rate5m", "eval_time": "10m",
             "exp_samples": [{"labels": f"specmodel:batch_requests:rate5m{{{SERVER}}}", "value": 1}]},
        ],
        "alert_rule_test": [
            {"eval_time": "8m", "alertname": "SpeculationBelowBreakEven", "exp_alerts": []},  # pending, not 10 m yet
            {"eval_time": "18m", "alertname": "SpeculationBelowBreakEven", "exp_alerts": [fired]},
            {"eval_time": "38m", "alertname": "SpeculationBelowBreakEven", "exp_alerts": []},  # acceptance back
        ],
    }]}
    tf = tmp_path / "test.yml"
    tf.write_text(json.dumps(test))
    r = subprocess.run([PROMTOOL, "test", "rules", str(tf)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
