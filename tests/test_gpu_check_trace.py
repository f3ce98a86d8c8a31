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
sys.path.insert(0, str(REPO / "scripts"))
import gpu_check_hooks as hooks  # noqa: E402  (scripts/ is no package)


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
                       "vllm_hook_graph_replay", "vllm_hook_clocks", "vllm_hook_v2_runner", "vllm_hook_never_blocks",
                       "sglang_scheduler_step", "nvml_topology"}
    cap = by["vllm_hook_capture"]["observed"]
    assert cap["default_on"] is False and cap["passes"] == {"decode b1 t1": 4, "verify b1 t4": 4}
    assert cap["attribution"] == "cpu span" and all(0 < v < 1 for v in cap["shares"].values())
    assert by["nvml_topology"]["skipped"]
    # the checks compare real observations, not constants
    assert by["kineto_categories"]["observed"]["msg_bytes"] == [4096]
    hook = by["sglang_hook_capture"]["observed"]["rows"]
    assert not any("ModelRunner.forward" in k and k.startswith("draft") for k in hook)  # no capture warm-ups
    assert by["innermost_annotation"]["observed"]["verify_passes_counted"] == 2
    # the hooks' clocks on the simulated device: figures the stand-ins' work fixes (gpu_check_hooks.py)
    assert all(by[n]["dry_run_cannot_show"] for n, _, _ in hooks.CHECKS)  # said in the results
    replay = by["vllm_hook_graph_replay"]["observed"]
    assert replay["forward_s_median"] == pytest.approx(hooks.FAKE_REPLAY_S) and replay["max_abs_diff_s"] == 0
    clocks = by["vllm_hook_clocks"]["observed"]
    assert all(o == pytest.approx(hooks.ASYNC_SAMPLE_S) for o in clocks["async_overhead_s"])
    assert all(d < 0 for d in clocks["async_host_step_minus_forward_s"])  # a host span would clamp it to 0
    never = by["vllm_hook_never_blocks"]["observed"]
    assert never["dropped_steps"] == hooks.EXTRA_STEPS and never["written_after_catch_up"] == 16
    sgl = by["sglang_scheduler_step"]["observed"]
    cycle = sum(hooks.SGLANG_FORWARD_S[k] for k in (("TARGET_VERIFY", False), ("DRAFT_EXTEND", True)))
    assert sgl["forwards_s"][1:] == [pytest.approx(cycle + 2 * hooks.SGLANG_FORWARD_S[("DECODE", True)])] * 8


def test_the_dry_run_alias(tmp_path: Path) -> None:
    """``--dry-run`` is ``--cpu-dry-run``: the usage names both."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "--cpu-dry-run, --dry-run" in r.stdout


# --------------------------------------------------------------------------- the hook checks can fail


def _run_hook_check(name: str, tmp_path: Path) -> dict:
    fn = dict((n, f) for n, f, _ in hooks.CHECKS)[name]
    d = tmp_path / name
    d.mkdir()
    return fn(d, False)


@pytest.mark.torch
def test_a_hook_that_waits_on_the_gpu_fails_the_never_blocks_check(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush that reads its events by waiting on them (a synchronise per record) would stall every
    step behind the GPU: the check counts the calls and sees records written while the GPU is behind."""
    from specmodel.engines.vllm import writer as vwriter

    def waiting_ready(self: object) -> bool:
        self.wait()  # type: ignore[attr-defined]
        return True

    monkeypatch.setattr(vwriter.Timer, "ready", waiting_ready)
    res = _run_hook_check("vllm_hook_never_blocks", tmp_path)
    assert not res["ok"]
    assert res["observed"]["sync_calls_on_step_path"] > 0 and res["observed"]["written_while_gpu_behind"] > 0


@pytest.mark.torch
def test_overhead_from_the_host_span_fails_the_clocks_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """overhead_s as host span − GPU forward (two clocks) clamps to 0 where the host returns first."""
    from specmodel.engines.vllm import writer as vwriter

    real = vwriter.resolve

    def host_clock(rec: dict) -> dict:
        out = real(rec)
        out["overhead_s"] = max(out["host_step_s"] - (out["forward_s"] or 0.0) - (out["draft_s"] or 0.0), 0.0)
        return out

    monkeypatch.setattr(vwriter, "resolve", host_clock)
    res = _run_hook_check("vllm_hook_clocks", tmp_path)
    assert not res["ok"] and res["observed"]["async_overhead_on_gpu_clock"] is False
    assert set(res["observed"]["async_overhead_s"]) == {0.0}


@pytest.mark.torch
def test_a_forward_span_that_misses_the_replay_fails_the_replay_check(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward span closed before the model runs (a seam in the wrong place) times nothing."""
    from specmodel.engines.vllm import hook as vhook

    real = vhook._open_span

    def open_and_close(role: str) -> bool:
        ok = real(role)
        if ok:
            vhook._close_span()
        return False

    monkeypatch.setattr(vhook, "_open_span", open_and_close)
    res = _run_hook_check("vllm_hook_graph_replay", tmp_path)
    assert not res["ok"] and res["observed"]["within_tolerance"] is False


@pytest.mark.torch
def test_a_step_record_that_waits_fails_the_sglang_step_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specmodel.engines.sglang import steps as sgsteps

    real = sgsteps.Step.record

    def waiting(self: object) -> dict:
        self.end.synchronize()  # type: ignore[attr-defined]
        return real(self)  # type: ignore[arg-type]

    monkeypatch.setattr(sgsteps.Step, "record", waiting)
    res = _run_hook_check("sglang_scheduler_step", tmp_path)
    assert not res["ok"] and res["observed"]["sync_calls_on_step_path"] > 0


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
