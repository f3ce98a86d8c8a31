"""The engine hooks never harm the engine and never leave a record to ``atexit``.

Faults are injected at every seam's set-up and teardown (the annotation, its NVTX context's
enter / exit, a timer's start / stop, the writer): the wrapped engine call still runs and returns
its result, the hook warns once (stderr), that step is dropped, ``_STATE.where`` is restored and
the next steps are recorded -- for the vLLM hook (stand-ins of its classes, tests/test_vllm_hook.py)
and the SGLang hook (tests/data/sglang_standin).

The vLLM hook's CUDA-timer path runs on the CPU with a fake ``torch.cuda.Event`` (record /
query / synchronize / elapsed_time): records are written as their events complete, the queue is
bounded, the runner's ``shutdown`` writes the rest, and a forked worker that leaves through
``os._exit`` loses at most the step in flight.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from specmodel.profile import annotate
from specmodel.profile import sglang as sghook
from specmodel.profile import vllm as hook
from tests.test_sglang_hook import standin as sglang_standin  # noqa: F401 - the fixture
from tests.test_vllm_hook import _so, standin  # noqa: F401 - the fixture

GPU_LAG_S = 0.003  # a fake event completes this long after it was recorded


class FakeEvent:
    """``torch.cuda.Event(enable_timing=True)`` on the CPU: complete ``GPU_LAG_S`` after its
    ``record()`` unless the test holds the 'GPU' (``hold``), ``synchronize`` completes it."""

    hold = False
    syncs = 0

    def __init__(self, enable_timing: bool = False, **_: Any) -> None:
        assert enable_timing
        self.t: float | None = None
        self.done = False

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        assert self.t is not None
        return self.done or (not FakeEvent.hold and time.perf_counter() >= self.t + GPU_LAG_S)

    def synchronize(self) -> None:
        if not self.query():
            FakeEvent.syncs += 1  # a wait on work still queued
        self.done = True

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) * 1e3  # ms, as CUDA reports


@pytest.fixture()
def gpu(standin: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:  # noqa: F811
    """The vLLM stand-in on a 'cuda' device whose events are FakeEvents."""
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(FakeEvent, "hold", False)
    monkeypatch.setattr(FakeEvent, "syncs", 0)

    def runner(method: str | None = "draft_model") -> Any:
        r = standin.Runner(method)
        r.device = "cuda"
        return r

    standin.gpu_runner = runner
    yield standin


def _lines(out: Path) -> list[dict[str, Any]]:
    p = out / "rank1.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def _steps(out: Path) -> list[dict[str, Any]]:
    return [x for x in _lines(out) if x["type"] == "step"]


def _step(runner: Any, batch: int) -> None:
    """One engine step as V1 runs it; the engine's calls must return what the originals return."""
    assert runner.execute_model(_so(batch, k=3 if runner.speculative_config else 0)) is None
    assert runner.sample_tokens(None) == "output"
    assert hook._STATE.where is None and getattr(hook._STATE, "span", None) is None


def _warnings(err: str) -> list[str]:
    return [x for x in err.splitlines() if "hook: warning:" in x]


# --------------------------------------------------------------------------- vLLM: faults


class _Boom(RuntimeError):
    pass


class _Fault:
    """Raises on the first ``times`` calls (then behaves), counting how often it fired."""

    def __init__(self, times: int) -> None:
        self.left = times
        self.fired = 0

    def __call__(self) -> None:
        if self.left > 0:
            self.left -= 1
            self.fired += 1
            raise _Boom("injected")


def _inject(site: str, fault: _Fault, monkeypatch: pytest.MonkeyPatch) -> None:
    if site == "annotation":
        real = hook._annotated

        def annotated(label: Any, cuda: bool) -> Any:
            fault()
            return real(label, cuda)

        monkeypatch.setattr(hook, "_annotated", annotated)
    elif site in ("nvtx enter", "nvtx exit"):
        class Span:
            def __enter__(self) -> None:
                if site == "nvtx enter":
                    fault()

            def __exit__(self, *a: Any) -> None:
                if site == "nvtx exit":
                    fault()

        monkeypatch.setattr(hook, "_annotated", lambda label, cuda: Span() if label else None)
    elif site in ("timer start", "timer stop"):
        method = "start" if site == "timer start" else "stop"
        real_m = getattr(hook._Timer, method)

        def timed(self: Any) -> None:
            fault()
            real_m(self)

        monkeypatch.setattr(hook._Timer, method, timed)
    elif site == "writer":
        real_w = hook._write

        def write(obj: dict[str, Any]) -> None:
            if obj.get("type") == "step":
                fault()
            real_w(obj)

        monkeypatch.setattr(hook, "_write", write)
    else:
        raise AssertionError(site)


SITES = ("annotation", "nvtx enter", "nvtx exit", "timer start", "timer stop", "writer")


@pytest.mark.parametrize("site", SITES)
def test_vllm_a_fault_at_a_seam_drops_that_step_only(gpu: Any, site: str, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    runner = gpu.gpu_runner("draft_model")
    _step(runner, 1)
    time.sleep(2 * GPU_LAG_S)
    hook.flush()  # step 1's events completed: written before the fault is armed
    assert [s["batch"] for s in _steps(gpu.out)] == [1]
    fault = _Fault(times=1)
    _inject(site, fault, monkeypatch)
    _step(runner, 2)  # the fault fires here
    _step(runner, 3)
    _step(runner, 4)
    hook.flush(wait=True)
    assert fault.fired == 1
    assert [s["batch"] for s in _steps(gpu.out)] == [1, 3, 4]
    for s in _steps(gpu.out):
        assert s["forward_s"] > 0 and s["draft_s"] > 0 and s["forward_n_allreduce"] == 3
    warned = _warnings(capsys.readouterr().err)
    assert len(warned) == 1 and "not recorded" in warned[0] and "injected" in warned[0], warned


@pytest.mark.parametrize("site", SITES)
def test_vllm_a_lasting_fault_warns_once_and_the_engine_runs_on(gpu: Any, site: str, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    runner = gpu.gpu_runner("draft_model")
    fault = _Fault(times=10**9)
    _inject(site, fault, monkeypatch)
    for b in range(1, 6):
        _step(runner, b)
    time.sleep(2 * GPU_LAG_S)
    hook.flush()  # what the fault hit is gone with it
    assert fault.fired >= 5
    fault.left = 0  # the fault goes away: recording resumes
    _step(runner, 7)
    hook.flush(wait=True)
    assert [s["batch"] for s in _steps(gpu.out)] == [7]
    assert len(_warnings(capsys.readouterr().err)) == 1


def test_vllm_a_fault_in_an_allreduce_timer_inside_the_forward(gpu: Any, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The forward's own span opened fine; its all-reduce's timer fails: the all-reduce still
    runs, the forward's span still closes (no 'where' left behind), the step is dropped."""
    runner = gpu.gpu_runner(None)
    real = hook._Timer.start
    calls = {"n": 0}

    def start(self: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the forward's timer is the first, its first all-reduce the second
            raise _Boom("injected")
        real(self)

    monkeypatch.setattr(hook._Timer, "start", start)
    _step(runner, 1)
    _step(runner, 2)
    hook.flush(wait=True)
    assert [s["batch"] for s in _steps(gpu.out)] == [2]
    assert len(_warnings(capsys.readouterr().err)) == 1


def test_vllm_cpu_writer_fault_drops_one_step(standin: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                              capsys: pytest.CaptureFixture[str]) -> None:
    runner = standin.Runner(None)
    _step(runner, 1)
    fault = _Fault(times=1)
    _inject("writer", fault, monkeypatch)
    _step(runner, 2)
    _step(runner, 3)
    assert [s["batch"] for s in _steps(standin.out)] == [1, 3]
    assert len(_warnings(capsys.readouterr().err)) == 1


def test_vllm_meta_line_that_cannot_be_written_is_retried(standin: Any,  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No step line without its meta line: a first write that fails leaves no file open."""
    real = hook._write_fd
    fault = _Fault(times=1)

    def write_fd(fd: int, obj: dict[str, Any]) -> None:
        fault()
        real(fd, obj)

    monkeypatch.setattr(hook, "_write_fd", write_fd)
    runner = standin.Runner(None)
    _step(runner, 1)
    _step(runner, 2)
    lines = [x for x in _lines(standin.out) if x["type"] != "probe"]  # (the box's condition: its own lines)
    assert [x["type"] for x in lines] == ["meta", "step"] and lines[1]["batch"] == 2


# --------------------------------------------------------------------------- vLLM: no lost GPU records


def test_vllm_cuda_timer_path_with_fake_events(gpu: Any) -> None:
    runner = gpu.gpu_runner("draft_model")
    for b in (1, 2, 3):
        _step(runner, b)
        time.sleep(2 * GPU_LAG_S)
    # each record went out once its events completed, at the next step at the latest: no sync
    assert [s["batch"] for s in _steps(gpu.out)] == [1, 2]
    assert FakeEvent.syncs == 0  # nothing waited on an event that had not completed
    lines = _lines(gpu.out)
    assert lines[0]["clock"] == "cuda_event" and lines[0]["model_runner"] == "v1"
    s = _steps(gpu.out)[0]
    # the fake events' elapsed times are the wall times of the spans they bracket
    assert s["forward_s"] >= s["forward_allreduce_s"] + 0.003 and s["forward_allreduce_s"] >= 3 * 0.002
    assert s["forward_n_allreduce"] == 3 and s["draft_n_allreduce"] == 1 and s["draft_s"] >= 0.004
    assert s["step_s"] == pytest.approx(s["forward_s"] + s["draft_s"] + s["overhead_s"], rel=1e-9)


def test_vllm_pending_records_are_bounded(gpu: Any) -> None:
    """A GPU that lags far behind: at most MAX_PENDING records wait; older ones are resolved."""
    FakeEvent.hold = True
    runner = gpu.gpu_runner(None)
    n = hook.MAX_PENDING_VLLM_STEPS + 3
    for b in range(1, n + 1):
        _step(runner, b)
    assert len(hook._STATE.pending) == hook.MAX_PENDING_VLLM_STEPS and FakeEvent.syncs > 0
    assert [s["batch"] for s in _steps(gpu.out)] == list(range(1, n - hook.MAX_PENDING_VLLM_STEPS + 1))


def test_vllm_the_runners_shutdown_writes_what_is_pending(gpu: Any) -> None:
    FakeEvent.hold = True
    runner = gpu.gpu_runner(None)
    for b in (1, 2, 3):
        _step(runner, b)
    assert _steps(gpu.out) == []
    runner.shutdown()
    assert [s["batch"] for s in _steps(gpu.out)] == [1, 2, 3]


def test_vllm_an_idle_engine_writes_its_last_steps(gpu: Any) -> None:
    """Nothing follows the last step: the flusher writes it once its events complete."""
    runner = gpu.gpu_runner(None)
    FakeEvent.hold = True
    _step(runner, 1)
    FakeEvent.hold = False
    deadline = time.monotonic() + 5
    while not _steps(gpu.out) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [s["batch"] for s in _steps(gpu.out)] == [1]


def _forked(fn: Any) -> int:
    pid = os.fork()
    if pid == 0:  # the child: leaves like a vLLM worker, through os._exit (no atexit)
        code = 1
        try:
            # the hook's probe is this stand-in worker's first torch op, and GNU OpenMP's first parallel
            # region in a child forked after the parent's hangs; a real worker's own forwards run first
            torch.set_num_threads(1)
            fn()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("idle_s", [0.0, 1.0])
def test_vllm_a_forked_worker_leaving_through_os_exit_loses_at_most_the_step_in_flight(gpu: Any,
                                                                                        idle_s: float) -> None:
    n = 5

    def child() -> None:
        runner = gpu.gpu_runner("draft_model")
        for b in range(1, n + 1):
            _step(runner, b)
        time.sleep(idle_s)

    assert _forked(child) == 0
    got = [s["batch"] for s in _steps(gpu.out)]
    assert got == list(range(1, n + 1)) or (idle_s == 0 and got == list(range(1, n))), got


# --------------------------------------------------------------------------- SGLang: faults


def _sg_inject(site: str, fault: _Fault, monkeypatch: pytest.MonkeyPatch) -> None:
    if site == "annotation":
        real = annotate.phase

        def phase(label: str, **kw: Any) -> Any:
            fault()
            return real(label, **kw)

        monkeypatch.setattr(annotate, "phase", phase)
    elif site in ("nvtx enter", "nvtx exit"):
        class Span:
            def __enter__(self) -> None:
                if site == "nvtx enter":
                    fault()

            def __exit__(self, *a: Any) -> None:
                if site == "nvtx exit":
                    fault()

        monkeypatch.setattr(annotate, "phase", lambda label, **kw: Span())
    elif site in ("timer start", "timer stop"):
        method = "start" if site == "timer start" else "stop"
        real_m = getattr(annotate.Stopwatch, method)

        def timed(self: Any) -> None:
            fault()
            real_m(self)

        monkeypatch.setattr(annotate.Stopwatch, method, timed)
    elif site == "writer":
        real_w = sghook._write_line

        def write(obj: dict[str, Any]) -> None:
            if obj.get("type") == "forward":
                fault()
            real_w(obj)

        monkeypatch.setattr(sghook, "_write_line", write)
    else:
        raise AssertionError(site)


@pytest.mark.parametrize("site", SITES)
def test_sglang_a_fault_at_a_seam_drops_that_forward_only(sglang_standin: Any, tmp_path: Path, site: str,  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    sglang_standin("0.5.5")
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    runner = ModelRunner(tp_rank=0)
    runner.server_args.skip_server_warmup = True

    def forward(batch: int) -> None:
        out = runner.forward(ForwardBatch(ForwardMode.DECODE, batch, torch.zeros(batch, dtype=torch.long)))
        assert isinstance(out, tuple) and out[0].shape[0] == batch  # the original's result
        assert not getattr(sghook._STATE.tls, "active", False)

    forward(1)
    fault = _Fault(times=1)
    _sg_inject(site, fault, monkeypatch)
    forward(2)
    forward(3)
    lasting = _Fault(times=10**9)
    _sg_inject(site, lasting, monkeypatch)
    for b in (5, 6, 7):
        forward(b)
    lasting.left = 0
    forward(8)
    sghook.flush(wait=True)
    lines = [json.loads(x) for x in (tmp_path / "logs" / "rank0.jsonl").read_text().splitlines()]
    assert [r["batch"] for r in lines if r["type"] == "forward"] == [1, 3, 8]
    assert fault.fired == 1 and lasting.fired == 3
    warned = _warnings(capsys.readouterr().err)
    assert len(warned) == 1 and "injected" in warned[0], warned


def test_sglang_a_timer_that_fails_to_stop_still_closes_its_span(sglang_standin: Any,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An NVTX range / record_function left open would nest every later range under it."""
    sglang_standin("0.5.5")
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    open_spans = []
    real = annotate.phase

    class Counted:
        def __init__(self, label: str) -> None:
            self.cm = real(label)

        def __enter__(self) -> None:
            open_spans.append(self)
            self.cm.__enter__()

        def __exit__(self, *a: Any) -> None:
            open_spans.remove(self)
            self.cm.__exit__(*a)

    monkeypatch.setattr(annotate, "phase", lambda label, **kw: Counted(label))
    _sg_inject("timer stop", _Fault(times=1), monkeypatch)
    runner = ModelRunner(tp_rank=0)
    runner.server_args.skip_server_warmup = True
    runner.forward(ForwardBatch(ForwardMode.DECODE, 2, torch.zeros(2, dtype=torch.long)))
    assert open_spans == []


def test_sglang_a_worker_leaving_through_os_exit_keeps_its_records(tmp_path: Path) -> None:
    """A TP worker that leaves through os._exit (no atexit) has written every forward it ran.
    (A subprocess, not a fork: torch's CPU thread pool does not survive a fork.)"""
    import subprocess
    import sys

    from tests.test_sglang_hook import STANDIN

    code = f"""
import os, sys, torch
sys.path.insert(0, {str(STANDIN)!r})
from specmodel.profile import sglang as hook
hook.install({str(tmp_path / "logs")!r})
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner
runner = ModelRunner(tp_rank=0)
runner.server_args.skip_server_warmup = True
for b in range(1, 6):
    runner.forward(ForwardBatch(ForwardMode.DECODE, b, torch.zeros(b, dtype=torch.long)))
os._exit(0)
"""
    env = {**os.environ, "SGLANG_STANDIN_FLAVOR": "0.5.5", "PYTHONPATH": str(Path(__file__).parents[1])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in (tmp_path / "logs" / "rank0.jsonl").read_text().splitlines()]
    assert [r["batch"] for r in lines if r["type"] == "forward"] == [1, 2, 3, 4, 5]
