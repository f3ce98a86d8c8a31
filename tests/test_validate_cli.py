"""`specmodel validate`: predicted vs observed tok/s per log window."""

from __future__ import annotations

import json
import statistics

import pytest

from specmodel.model.accept import from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema.profile import load_profile
from tests.conftest import DATA, run_cli_batch

SG055 = str(DATA / "logs_sglang_055" / "server.log")
SG055_NOARGS = str(DATA / "logs_sglang_055_noargs" / "server.log")  # the same log without its server_args line
BENCH = str(DATA / "logs_bench_speculative" / "output.jsonl")
UNRELATED = str(DATA / "logs_malformed" / "unrelated.log")


def test_sglang_windows_against_the_model(cli, reference_profile):
    r = cli("validate", "--profile", str(reference_profile), SG055, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ws = doc["windows"]
    assert len(ws) == 14 and doc["skipped"] == {"throughput 0": 1}
    prof = load_profile(reference_profile)
    for w in ws:
        p = predict(prof, from_mean(w["accept_len"], 4), OperatingPoint(batch=w["batch"], spec=prof.spec))
        assert w["predicted_tokens_per_s"] == pytest.approx(p.figures.tokens_per_s)
        assert w["error"] == pytest.approx((w["predicted_tokens_per_s"] - w["observed_tokens_per_s"]) / w["observed_tokens_per_s"])
    assert doc["summary"]["median_abs_error"] == pytest.approx(statistics.median(abs(w["error"]) for w in ws))
    assert doc["summary"]["windows_compared"] == 14


def test_text_table_and_summary(cli, reference_profile):
    r = cli("validate", "--profile", str(reference_profile), SG055)
    assert r.returncode == 0, r.stderr
    assert "server.log:5 2025-11-30 04:32:01" in r.stdout
    assert "summary      14 windows compared: median |error|" in r.stdout and "1 (throughput 0)" in r.stdout


def test_calibrate_first_matches_the_first_window_exactly(cli, reference_profile):
    r = cli("validate", "--profile", str(reference_profile), SG055, "--calibrate-first", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    first = doc["windows"][0]
    assert first["calibration"] and first["error"] == pytest.approx(0.0, abs=1e-9)
    assert doc["summary"]["windows_compared"] == 13
    assert not any(w["calibration"] for w in doc["windows"][1:])


def test_bench_rows_use_their_own_spec_and_baseline(cli, reference_profile):
    r = cli("validate", "--profile", str(reference_profile), BENCH, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    prof = load_profile(reference_profile)
    base = [w for w in doc["windows"] if w["steps"] == 0]
    assert len(base) == 3 and all(w["spec"] is None for w in base)
    for w in base:
        p = predict(prof, from_mean(1.0, 4), OperatingPoint(batch=w["batch"]))
        assert w["predicted_tokens_per_s"] == pytest.approx(p.figures.baseline_tokens_per_s)
    deep = [w for w in doc["windows"] if w["steps"] == 5]
    assert deep and all(w["spec"]["num_draft_tokens"] == 6 for w in deep)


def test_bad_inputs(reference_profile, tmp_path):
    # the real command lines, run in order in one interpreter (tests/cli_batch.py: no start-up apiece)
    bad = (
        ((UNRELATED,), "unrelated.log: no SGLang 'Decode batch' lines"),
        ((SG055, "--steps", "1"), "--steps 1 contradicts the log: the server ran with 3"),
        ((SG055_NOARGS, "--steps", "1"), "exceeds steps + 1 = 2"),
        ((str(tmp_path / "none.log"),), "none.log: file not found"),
        ((), "give at least one server log"),
    )
    saved = tmp_path / "a.json"
    cases = {str(i): (["validate", "--profile", str(reference_profile), *args], tmp_path)
             for i, (args, _) in enumerate(bad)}
    cases["accept"] = (["accept", SG055, "--steps", "3", "-o", str(saved)], tmp_path)
    cases["saved"] = (["validate", "--profile", str(reference_profile), str(saved)], tmp_path)
    runs = run_cli_batch(cases)
    for i, (args, msg) in enumerate(bad):
        r = runs[str(i)]
        assert r["rc"] == 2, (args, r["stdout"])
        lines = r["stderr"].strip().splitlines()
        assert len(lines) == 1 and msg in lines[0], lines
    assert runs["accept"]["rc"] == 0, runs["accept"]["stderr"]
    assert runs["saved"]["rc"] == 2 and "has no throughput windows" in runs["saved"]["stderr"]
