"""``scripts/gpu-check``: its CPU-possible parts run here (gloo, eager); the full check needs a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.torch  # the check runs the profiler

SCRIPT = REPO / "scripts" / "gpu-check"


@pytest.mark.slow  # starts ranks (the CPU dry run of scripts/gpu-check)
def test_cpu_dry_run_writes_a_passing_results_file(tmp_path):
    out = tmp_path / "results.json"
    # --dry-run: the alias of --cpu-dry-run
    r = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    doc = json.loads(out.read_text())
    assert doc["schema"] == "specmodel.gpu_check" and doc["schema_version"] == 1 and doc["mode"] == "cpu-dry-run"
    names = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] and all(c["ok"] for c in doc["checks"])
    assert {"profile runs", "rows carry a 95% interval", "ingest finds every profiled phase",
            "ingest all-reduce counts == profile's", "spec loop compared with the prediction"} <= set(names)
    counts = names["ingest all-reduce counts == profile's"]["counts"]
    assert counts and all(a == b and a > 0 for a, b in counts.values())  # gloo TP 2: real collectives
    assert "PASS" in r.stdout
    # the trace script's checks ran in the same dry run, the hooks' clocks among them
    trace = {c["name"]: c for c in doc["trace_checks"]["checks"]}
    assert {"vllm_hook_graph_replay", "vllm_hook_clocks", "vllm_hook_v2_runner", "vllm_hook_never_blocks",
            "sglang_scheduler_step", "vllm_hook_capture", "sglang_hook_capture"} <= set(trace)
    assert all(c["ok"] for c in trace.values()) and trace["vllm_hook_v2_runner"]["observed"]["model_runner"] == ["v2"]


def test_without_a_gpu_the_full_check_refuses_with_exit_2(tmp_path):
    import os

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU visible, on any box
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "r.json")], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 2 and "no CUDA GPU visible" in r.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.gpu
def test_full_gpu_check(tmp_path):
    out = tmp_path / "results.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=420)
    doc = json.loads(out.read_text())
    assert r.returncode == 0 and doc["ok"], [c for c in doc["checks"] if not c["ok"]]
