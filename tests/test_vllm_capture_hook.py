"""The hook's torch.profiler capture (engines/vllm/capture.py) at its step seams, on the stand-in
vLLM classes of tests/test_vllm_hook.py: when it starts and stops, what it writes, the default, the
diagnostic wrapper switch, and that a capture that fails never harms a step."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm import capture as vc
from specmodel.engines.vllm import hook
from tests.rank_files import rank_file
from tests.test_vllm_hook import _run, _so, _steps, standin  # noqa: F401 - the fixture

pytestmark = pytest.mark.torch  # the capture runs torch.profiler


def _serve(runner: Any, n_verify: int) -> None:
    _run(runner, _so(1, prefill=40))  # a prefill: no cycle step
    for _ in range(n_verify):
        _run(runner, _so(1, k=3))
    hook.flush(wait=True)


def _spans(trace: Path) -> list[str]:
    ev = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return [e["name"] for e in sorted(ev, key=lambda e: e.get("ts", 0)) if str(e.get("name", "")).startswith("specmodel.")]


def test_capture_records_n_cycle_steps_after_the_warmup(standin: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(vc.ENV_STEPS, "2")
    _serve(standin.Runner("draft_model", k=3), vc.WARMUP_STEPS + 4)
    cap = standin.out / "capture"
    # named like the process's rank file: one capture per process
    stem = rank_file(standin.out, 1).name.removesuffix(".jsonl")
    assert sorted(p.name for p in cap.iterdir()) == [f"{stem}.json", f"{stem}.pt.trace.json.gz"]
    meta = json.loads((cap / f"{stem}.json").read_text())
    assert meta["schema"] == "specmodel.vllm_capture" and meta["cycle_steps"] == 2
    assert meta["step_kinds"] == ["verify", "verify"] and meta["activities"] == "cpu" and meta["allreduce_wrapper"]
    assert meta["started_unix_s"] <= meta["stopped_unix_s"] <= meta["ended_unix_s"]
    # the hook's own spans, entered because a profiler records: one forward and one proposal a step
    assert _spans(cap / f"{stem}.pt.trace.json.gz") == ["specmodel.verify[bs=1,toks=4]",
                                                      "specmodel.draft[bs=1,toks=1,fwd=3]"] * 2
    steps = _steps(standin.out)
    assert len(steps) == 1 + vc.WARMUP_STEPS + 4  # every step still recorded
    inside = [s for s in steps if s["t_start_unix_s"] + s["step_s"] >= meta["started_unix_s"]
              and s["t_start_unix_s"] <= meta["stopped_unix_s"]]
    assert len(inside) == 2
    assert "warning" not in capsys.readouterr().err


def test_capture_is_off_by_default_on_the_cpu(standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.delenv(vc.ENV_STEPS, raising=False)
    _serve(standin.Runner("draft_model", k=3), vc.WARMUP_STEPS + 4)
    assert not (standin.out / "capture").exists()


def test_the_default_is_on_where_a_worker_replays_cuda_graphs() -> None:
    import types

    gpu = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"),
                                model_config=types.SimpleNamespace(enforce_eager=False))
    eager = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"),
                                  model_config=types.SimpleNamespace(enforce_eager=True))
    cpu = types.SimpleNamespace(device=types.SimpleNamespace(type="cpu"), model_config=None)

    def mode(name: str) -> Any:  # vllm 0.32 CompilationConfig.cudagraph_mode (an enum member)
        return types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"), model_config=None,
                                     vllm_config=types.SimpleNamespace(compilation_config=types.SimpleNamespace(
                                         cudagraph_mode=types.SimpleNamespace(name=name))))

    assert [vc.runs_graphs(r) for r in (gpu, eager, cpu)] == [True, False, False]
    assert [vc.runs_graphs(mode(m)) for m in ("FULL_AND_PIECEWISE", "PIECEWISE", "NONE")] == [True, True, False]
    assert vc.parse_steps(None) is None and vc.parse_steps(" 0 ") == 0 and vc.parse_steps("12") == 12
    for bad in ("-1", "x", str(vc.MAX_CAPTURE_STEPS + 1)):
        with pytest.raises(ValueError):
            vc.parse_steps(bad)


def test_the_wrapper_switch_leaves_the_allreduce_unwrapped(standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv(vc.ENV_NO_ALLREDUCE_WRAPPER, "1")
    hook.uninstall()
    patched = hook.install(standin.out)
    assert "GroupCoordinator._all_reduce_out_place" not in patched and "GPUModelRunner._model_forward" in patched
    _serve(standin.Runner("draft_model", k=3), 2)
    for s in _steps(standin.out):
        assert s["forward_n_allreduce"] == 0 and s["forward_allreduce_s"] == 0.0 and s["forward_s"] > 0


@pytest.mark.parametrize("how", ["unwritable", "bad value"])
def test_a_failing_capture_warns_once_and_the_steps_go_on(standin: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                          capsys: pytest.CaptureFixture[str], how: str) -> None:
    if how == "unwritable":
        monkeypatch.setenv(vc.ENV_STEPS, "1")
        standin.out.mkdir(parents=True, exist_ok=True)
        (standin.out / "capture").write_text("a file where the directory goes")
    else:
        monkeypatch.setenv(vc.ENV_STEPS, "lots")
    _serve(standin.Runner("draft_model", k=3), vc.WARMUP_STEPS + 4)
    err = capsys.readouterr().err
    assert err.count("specmodel vllm hook: warning:") == 1 and "the run goes on without a capture" in err
    steps = _steps(standin.out)
    assert len(steps) == 1 + vc.WARMUP_STEPS + 4 and all(s["forward_s"] > 0 for s in steps)


def _vllm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specmodel", "vllm", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("flag, want", [(("--capture-steps", "5"), "5"), (("--capture-steps", "0"), "0"), ((), None)])
def test_the_flag_reaches_the_servers_environment(tmp_path: Path, flag: tuple[str, ...], want: str | None) -> None:
    seen = tmp_path / "env.json"
    # a "server" that records what it was given and exits before it is healthy
    code = (f"import json, os; json.dump({{'steps': os.environ.get({vc.ENV_STEPS!r})}}, open({str(seen)!r}, 'w')); "
            "raise SystemExit(3)")
    r = _vllm("--out", str(tmp_path / "o"), *flag, "--", sys.executable, "-c", code)
    assert r.returncode == 2 and "exited with status 3 before" in r.stderr
    assert json.loads(seen.read_text()) == {"steps": want}  # unset: the hook's default (on where graphs run)


def test_flag_misuse_is_one_line(tmp_path: Path) -> None:
    r = _vllm("--capture-steps", "3", "--summarize", str(tmp_path), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and "--capture-steps applies to a server run" in r.stderr and "Traceback" not in r.stderr
    r = _vllm("--capture-steps", "-1", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "--capture-steps" in r.stderr and "Traceback" not in r.stderr
    old = tmp_path / "o"
    (old / "capture").mkdir(parents=True)
    (old / "capture" / "rank0.json").write_text("{}")
    r = _vllm("--out", str(old), "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "already holds rank0.json" in r.stderr
