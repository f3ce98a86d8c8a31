"""`specmodel accept` and `predict --accept-log`, run as the installed command."""

from __future__ import annotations

import json

from tests.conftest import DATA

SG055 = str(DATA / "logs_sglang_055" / "server.log")
SG055_NOARGS = str(DATA / "logs_sglang_055_noargs" / "server.log")  # the same log without its server_args line
VNEW = str(DATA / "logs_vllm_new" / "server.log")
VOLD = str(DATA / "logs_vllm_old" / "server.log")
VK5 = str(DATA / "logs_vllm_k5" / "server.log")
UNRELATED = str(DATA / "logs_malformed" / "unrelated.log")


def test_accept_text_report_for_sglang(cli):
    r = cli("accept", SG055, "--steps", "3")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "SGLang decode log (0.5.5-style, trailing ', '), 15 of 22 lines matched" in out
    # the idle window (line 22, gen throughput 0.00) is left out: 3.100, not 3.056
    assert "accept len   3.100 tokens/step incl. bonus (= 2.100 accepted drafts)" in out
    assert "samples 1880, windows 14" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(" " * 13) and len(ln.split()) == 2]
    probs = {int(a): float(b) for a, b in rows}
    assert sorted(probs) == [1, 2, 3, 4] and abs(sum(probs.values()) - 1) < 1e-3
    assert "observed     batch  windows" in out and "8        3        3.05  724.2" in out


def test_accept_json_is_one_object_with_windows(cli):
    r = cli("accept", VNEW, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "specmodel.accept" and doc["steps"] == 3
    assert len(doc["per_position"]) == 3 and len(doc["windows"]) == 4
    assert abs(doc["mean_tokens"] - (1 + sum(doc["per_position"]))) < 1e-9
    assert [p["batch"] for p in doc["series"]] == [1, 4, 8]


def test_saved_distribution_feeds_predict(cli, tmp_path):
    out = tmp_path / "accept.json"
    r = cli("accept", SG055, "--steps", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr and out.exists()
    assert f"predict --accept-log {out}" in r.stdout
    a = cli("predict", "--accept-log", str(out), "--json")
    b = cli("predict", "--accept-log", SG055, "--json")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    pa, pb = json.loads(a.stdout), json.loads(b.stdout)
    assert pa["accept_probs"] == pb["accept_probs"] and pa["accept_samples"] == pb["accept_samples"] == 1880
    assert pa["tokens_per_s"] == pb["tokens_per_s"]


def test_bad_inputs_exit_2_with_one_line_and_write_nothing(cli, tmp_path):
    out = tmp_path / "accept.json"
    out.write_text("previous result\n")
    for args, msg in (
        ((UNRELATED, "--steps", "3"), "unrelated.log: no SGLang 'Decode batch' lines"),
        ((SG055_NOARGS,), "pass --steps"),
        ((SG055_NOARGS, "--steps", "2"), "exceeds steps + 1 = 3"),
        ((SG055, "--steps", "2"), "--steps 2 contradicts the log: the server ran with 3"),
        ((VOLD,), "--num-spec-tokens"),
        ((SG055, UNRELATED, "--steps", "3"), "unrelated.log"),
        ((str(tmp_path / "missing.log"),), "missing.log: file not found"),
    ):
        r = cli("accept", *args, "-o", str(out))
        assert r.returncode == 2, (args, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("specmodel: error: ") and msg in lines[0], lines
        assert "Traceback" not in r.stderr
        assert out.read_text() == "previous result\n"


def test_old_vllm_with_num_spec_tokens(cli):
    r = cli("accept", VOLD, "--num-spec-tokens", "4", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["steps"] == 4 and doc["per_position"] is None
    assert abs(doc["mean_tokens"] - (1 + 1330 / 720)) < 1e-9


def test_predict_accept_log_with_too_few_steps(cli):
    r = cli("predict", "--accept-log", VK5)
    assert r.returncode == 2
    assert "5 speculative tokens" in r.stderr and "pass --steps 5" in r.stderr
