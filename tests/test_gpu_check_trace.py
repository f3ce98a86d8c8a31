"""scripts/gpu_check_trace.py: its CPU-possible parts run here (--cpu-dry-run); the full check
runs where there is a CUDA device (``gpu`` marker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check_trace.py"


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "result.json"
    r = subprocess.run([sys.executable, str(SCRIPT), *args, "--out", str(out)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    return r, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.slow  # starts ranks (the CPU dry run of scripts/gpu-check)
@pytest.mark.torch
def test_cpu_dry_run_passes_and_writes_results(tmp_path: Path) -> None:
    r, doc = _run(tmp_path, "--cpu-dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert doc["schema"] == "specmodel.gpu_check_trace" and doc["schema_version"] == 1
    assert doc["mode"] == "cpu-dry-run" and doc["ok"] is True
    by = {c["name"]: c for c in doc["checks"]}
    assert set(by) == {"kineto_categories", "innermost_annotation", "sglang_hook_capture", "vllm_hook_capture",
                       "nvml_topology"}
    cap = by["vllm_hook_capture"]["observed"]
    assert cap["default_on"] is False and cap["passes"] == {"decode b1 t1": 4, "verify b1 t4": 4}
    assert cap["attribution"] == "cpu span" and all(0 < v < 1 for v in cap["shares"].values())
    assert by["nvml_topology"]["skipped"]
    # the checks compare real observations, not constants
    assert by["kineto_categories"]["observed"]["msg_bytes"] == [4096]
    hook = by["sglang_hook_capture"]["observed"]["rows"]
    assert not any("ModelRunner.forward" in k and k.startswith("draft") for k in hook)  # no capture warm-ups
    assert by["innermost_annotation"]["observed"]["verify_passes_counted"] == 2


@pytest.mark.torch
def test_without_cuda_the_gpu_mode_refuses(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the GPU mode runs (test_full_gpu_check)")
    r, doc = _run(tmp_path)
    assert r.returncode == 2 and "no CUDA device" in r.stderr and not doc


@pytest.mark.gpu
@pytest.mark.torch
def test_full_gpu_check(tmp_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run scripts/gpu_check_trace.py on a GPU box)")
    r, doc = _run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert doc["mode"] == "gpu" and doc["ok"] is True
