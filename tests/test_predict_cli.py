"""`specmodel predict` run as a user runs it: the installed command, in a subprocess."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import DATA, REFERENCE, run_cli


def _json(*args, cwd=None):
    r = run_cli("predict", "--json", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_default_uses_reference_and_says_so(tmp_path):
    r = run_cli("predict", "--accept-len", "3.2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "shipped reference profile" in out and "not measured by this tool" in out
    assert "106.7 tok/s" in out
    assert "break-even   2.46" in out
    assert "verdict      GO" in out
    assert "97.0% of the cycle" in out


def test_published_figures_via_json(tmp_path):
    a = _json("--accept-len", "2.0", cwd=tmp_path)
    assert a["verdict"] == "NO-GO" and 60 <= a["tokens_per_s"] <= 67
    b = _json("--accept-len", "0.58", "--accept-convention", "drafts", cwd=tmp_path)
    assert b["tokens_per_s"] == pytest.approx(52, abs=1.5)
    assert b["accept_mean_tokens"] == pytest.approx(1.58)
    c = _json("--accept-len", "3.2", cwd=tmp_path)
    assert c["tokens_per_s"] == pytest.approx(107, abs=1)
    assert c["break_even_accept_tokens"] == pytest.approx(2.46, abs=0.01)
    assert c["profile_source_kind"] == "reference"


def test_every_accept_source(tmp_path):
    # every accept-length source the command line has (ScenarioArgs.ACCEPT_SOURCES less the API-only one)
    from specmodel.commands.flags import flag_of
    from specmodel.scenario.args import ACCEPT_SOURCES

    checked = {"--accept-len", "--accept-hist", "--per-position", "--alpha", "--accept-log"}
    assert checked == {flag_of(f) for f in ACCEPT_SOURCES if f != "accept_dist"}
    m = _json("--accept-len", "2.5", cwd=tmp_path)
    assert m["accept_mean_tokens"] == pytest.approx(2.5) and m["accept_samples"] == 0
    # that log's engine line names Qwen3-32B, which the (Kimi) reference profile refuses:
    # the same SpecDecoding lines without the model line
    vlog = tmp_path / "vllm.log"
    vlog.write_text("".join(ln for ln in (DATA / "logs_vllm_new" / "server.log").read_text().splitlines(keepends=True)
                            if "Qwen" not in ln))
    log = _json("--accept-log", str(vlog), cwd=tmp_path)
    assert log["accept_mean_tokens"] == pytest.approx(2.769, abs=1e-3) and log["accept_samples"] == 6830
    h = _json("--accept-hist", "1:10,2:20,3:30,4:40", cwd=tmp_path)
    assert h["accept_mean_tokens"] == pytest.approx(3.0)
    assert h["accept_samples"] == 100
    pp = _json("--per-position", "0.9,0.7,0.5", cwd=tmp_path)
    assert pp["accept_mean_tokens"] == pytest.approx(3.1)
    al = _json("--alpha", "0.8", cwd=tmp_path)
    assert al["accept_mean_tokens"] == pytest.approx((1 - 0.8**4) / 0.2)
    hist_file = tmp_path / "h.csv"
    hist_file.write_text("accepted_drafts,count\n0,5\n1,5\n2,5\n3,5\n")
    hf = _json("--accept-hist", str(hist_file), "--accept-convention", "drafts", cwd=tmp_path)
    assert hf["accept_mean_tokens"] == pytest.approx(2.5)


def test_batch_and_config_flags_change_the_prediction(tmp_path):
    b1 = _json("--accept-len", "3.0", cwd=tmp_path)
    b16 = _json("--accept-len", "3.0", "--batch", "16", cwd=tmp_path)
    assert b16["batch"] == 16 and b16["verify_tokens"] == 64
    assert b16["baseline_tokens_per_s"] > b1["baseline_tokens_per_s"]
    deeper = _json("--accept-len", "3.0", "--steps", "5", cwd=tmp_path)
    assert deeper["num_draft_tokens"] == 6 and deeper["draft_s"] > b1["draft_s"]


def test_plain_numbers_without_profile(tmp_path):
    d = _json("--baseline-tps", "82", "--verify-ms", "27", "--draft-ms", "0.85", "--overhead-ms", "0.45",
              "--allreduce-frac", "0.97", "--accept-len", "3.2", "--tp", "8", cwd=tmp_path)
    assert d["cycle_s"] == pytest.approx(0.030)
    assert d["break_even_accept_tokens"] == pytest.approx(2.46, abs=0.001)
    assert d["verify_allreduce_s"] == pytest.approx(0.97 * 0.027)
    assert d["profile_source_kind"] == "numbers"


def test_baseline_sweep_csv(tmp_path):
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("concurrency,tokens_per_s\n1,82\n4,250\n16,700\n64,1500\n")
    d = _json("--baseline-sweep", str(sweep), "--accept-len", "3.0", "--batch", "4", "--draft-ms", "1.0",
              cwd=tmp_path)
    assert d["baseline_tokens_per_s"] == pytest.approx(250)
    # verify stands in with T_fwd(batch x draft tokens) = decode step at 16 = 16/700 s
    assert d["verify_s"] == pytest.approx(16 / 700)
    assert any("decode curve" in w for w in d["warnings"])


def test_calibrate_flag(tmp_path):
    d = _json("--accept-len", "2.0", "--calibrate", "1,2.0,60", cwd=tmp_path)
    assert d["tokens_per_s"] == pytest.approx(60.0)


def test_measured_profile_in_cwd_is_picked_up(tmp_path):
    dst = tmp_path / "profiles" / "mine"
    dst.mkdir(parents=True)
    data = json.loads((REFERENCE / "profile.json").read_text())
    data["name"] = "mine"
    data["source"] = {"kind": "measured", "description": "measured here"}
    (dst / "profile.json").write_text(json.dumps(data))
    r = run_cli("predict", "--accept-len", "3.2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("note: using your measured profile profiles/mine")


@pytest.mark.parametrize("args,needle", [
    (["--accept-len", "-1"], "--accept-len"),
    (["--accept-len", "nan"], "--accept-len"),
    (["--accept-len", "9"], "--accept-len"),
    (["--accept-len", "3", "--batch", "0"], "--batch"),
    (["--accept-len", "3", "--alpha", "0.5"], "one accept-length source"),
    ([], "accept-length source is required"),
    (["--per-position", "0.5,0.9"], "--per-position"),
    (["--accept-len", "3", "--verify-ms", "-2"], "--verify-ms"),
    (["--accept-len", "3", "--allreduce-frac", "1.5"], "--allreduce-frac"),
    (["--accept-len", "3", "--no-such-flag"], "no-such-flag"),
    (["--accept-len", "3", "--profile", "/nonexistent/dir"], "not found"),
    (["--accept-len", "3", "--calibrate", "1,2"], "--calibrate"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, needle):
    r = run_cli("predict", *args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert needle in r.stderr
    msg_lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "error" in ln.lower()]
    assert len(msg_lines) == 1, r.stderr


@pytest.mark.parametrize("content,needle", [
    ("{oops", "invalid JSON"),
    ('{"schema": "specmodel.profile", "schema_version": 99}', "schema_version"),
    ('{"schema": "other"}', "schema"),
    ("[]", "JSON object"),
])
def test_malformed_profile_files(tmp_path, content, needle):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "profile.json").write_text(content)
    r = run_cli("predict", "--accept-len", "3", "--profile", "bad", cwd=tmp_path)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
    assert "bad/profile.json" in r.stderr


def test_profile_dir_and_file_both_accepted(tmp_path):
    shutil.copy(REFERENCE / "profile.json", tmp_path / "p.json")
    a = _json("--accept-len", "3", "--profile", str(tmp_path / "p.json"), cwd=tmp_path)
    b = _json("--accept-len", "3", "--profile", str(REFERENCE), cwd=tmp_path)
    assert a["tokens_per_s"] == b["tokens_per_s"]
