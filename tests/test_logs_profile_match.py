"""A log is held against a profile only when they describe the same model, TP degree and device
(an engine line names the model): another model's --accept-log is refused, as mixing two logs is; validate
of a CPU-measured profile against a GPU server's log is refused."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import DATA, REFERENCE

SG055 = DATA / "logs_sglang_055" / "server.log"


def _log_of(tmp_path: Path, model: str) -> str:
    text = SG055.read_text().replace("model_path='moonshotai/Kimi-K2.5'", f"model_path='{model}'")
    assert model in text
    p = tmp_path / f"{model.replace('/', '_')}.log"
    p.write_text(text)
    return str(p)


def _cpu_profile(tmp_path: Path) -> str:
    # the reference profile as if measured on CPU ranks (gloo): same model, TP and spec
    d = json.loads((REFERENCE / "profile.json").read_text())
    d["name"] = "kimi-cpu-scaled"
    d["backend"] = "gloo"
    d["hardware"] = {"cpu_name": "x86_64 test CPU", "gpu_count": 0}
    out = tmp_path / "cpu"
    out.mkdir()
    (out / "profile.json").write_text(json.dumps(d))
    return str(out)


def test_accept_log_of_another_model_is_refused_by_predict(cli, tmp_path):
    qwen = _log_of(tmp_path, "Qwen/Qwen3-32B")
    r = cli("predict", "--profile", str(REFERENCE), "--accept-log", qwen)
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "the server ran model 'Qwen/Qwen3-32B'" in lines[0] and "Kimi-K2.5" in lines[0]
    # the same model under another org / spelling is accepted
    ok = cli("predict", "--profile", str(REFERENCE), "--accept-log", _log_of(tmp_path, "someorg/kimi-k2.5"))
    assert ok.returncode == 0, ok.stderr


def test_validate_refuses_a_gpu_servers_log_against_a_cpu_profile(cli, tmp_path):
    cpu = _cpu_profile(tmp_path)
    r = cli("validate", "--profile", cpu, str(SG055))
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "ran on GPU" in lines[0] and "measured on CPU" in lines[0], lines
    # the device comes from the decode lines ("cuda graph: True") even without a server_args line
    r2 = cli("validate", "--profile", cpu, "--steps", "3", str(DATA / "logs_sglang_055_noargs" / "server.log"))
    assert r2.returncode == 2 and "ran on GPU" in r2.stderr
    # and the GPU reference profile still validates that log
    assert cli("validate", "--profile", str(REFERENCE), str(SG055)).returncode == 0
