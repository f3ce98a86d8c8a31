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
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from specmodel.engines.hook import annotate
from specmodel.engines.hook import state as hookstate
from specmodel.engines.sglang import hook as sghook
from specmodel.engines.sglang import writer as sgwriter
from specmodel.engines.vllm import hook
from specmodel.engines.vllm import writer as vwriter
from tests.rank_files import rank_file, rank_files
from tests.test_sglang_hook import standin as sglang_standin  # noqa: F401 - the fixture
from tests.test_vllm_hook import _so, standin  # noqa: F401 - the fixture

GPU_LAG_S = 0.003  # a fake event completes this long after it was recorded


class FakeEvent:
    """``torch.cuda.Event(enable_timing=True)`` on the CPU: complete ``GPU_LAG_S`` after its
    ``record()`` unless the test holds the 'GPU' (``hold``); ``synchronize`` completes it and every
    event recorded before it (one stream); ``elapsed_time`` of an incomplete event fails, as CUDA's does."""

    hold = False
    syncs = 0  # synchronize() calls that waited on work still queued
    sync_calls = 0  # every synchronize() call, waiting or not
    done_until = float("-inf")  # the stream has run up to here (a synchronize drains it)

    def __init__(self, enable_timing: bool = False, **_: Any) -> None:
        assert enable_timing
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        assert self.t is not None
        return self.t <= FakeEvent.done_until or (not FakeEvent.hold and time.perf_counter() >= self.t + GPU_LAG_S)

    def synchronize(self) -> None:
        FakeEvent.sync_calls += 1
        if not self.query():
            FakeEvent.syncs += 1  # a wait on work still queued
        assert self.t is not None
        FakeEvent.done_until = max(FakeEvent.done_until, self.t)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")  # cudaEventElapsedTime's answer
        return (end.t - self.t) * 1e3  # ms, as CUDA reports


@pytest.fixture()
def gpu(standin: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:  # noqa: F811
    """The vLLM stand-in on a 'cuda' device whose events are FakeEvents."""
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    # a fake device runs no kernels: the graph default's torch.profiler capture would hold nothing to read
    monkeypatch.setenv("SPECMODEL_VLLM_CAPTURE_STEPS", "0")
    monkeypatch.setattr(FakeEvent, "hold", False)
    monkeypatch.setattr(FakeEvent, "syncs", 0)
    monkeypatch.setattr(FakeEvent, "sync_calls", 0)
    monkeypatch.setattr(FakeEvent, "done_until", float("-inf"))

    def runner(method: str | None = "draft_model") -> Any:
        r = standin.Runner(method)
        r.device = "cuda"
        return r

    standin.gpu_runner = runner
    yield standin


def _lines(out: Path) -> list[dict[str, Any]]:
    ps = rank_files(out, 1)
    return [json.loads(x) for x in rank_file(out, 1).read_text().splitlines()] if ps else []


def _steps(out: Path) -> list[dict[str, Any]]:
    return [x for x in _lines(out) if x["type"] == "step"]


def _step(runner: Any, batch: int) -> None:
    """One engine step as V1 runs it; the engine's calls must return what the originals return."""
    assert runner.execute_model(_so(batch, k=3 if runner.speculative_config else 0)) is None
    assert runner.sample_tokens(None) == "output"
    assert vwriter.STATE.where is None and getattr(vwriter.STATE, "span", None) is None


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
        real_m = getattr(vwriter.Timer, method)

        def timed(self: Any) -> None:
            fault()
            real_m(self)

        monkeypatch.setattr(vwriter.Timer, method, timed)
    elif site == "writer":
        real_w = vwriter.write

        def write(obj: dict[str, Any]) -> None:
            if obj.get("type") == "step":
                fault()
            real_w(obj)

        monkeypatch.setattr(vwriter, "write", write)
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
    real = vwriter.Timer.start
    calls = {"n": 0}

    def start(self: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # the step's GPU span is the first, the forward's the second, its first all-reduce the third
            raise _Boom("injected")
        real(self)

    monkeypatch.setattr(vwriter.Timer, "start", start)
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
    real = hookstate.write_fd
    fault = _Fault(times=1)

    def write_fd(fd: int, obj: dict[str, Any]) -> None:
        fault()
        real(fd, obj)

    monkeypatch.setattr(hookstate, "write_fd", write_fd)
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
    # each record went out once its events completed, at the next step at the latest: no sync (the
    # last one too if the idle thread's query found it done meanwhile: the box's timing decides that)
    assert [s["batch"] for s in _steps(gpu.out)] in ([1, 2], [1, 2, 3])
    assert FakeEvent.syncs == 0  # nothing waited on an event that had not completed
    lines = _lines(gpu.out)
    assert lines[0]["clock"] == "cuda_event" and lines[0]["model_runner"] == "v1"
    s = _steps(gpu.out)[0]
    # the fake events' elapsed times are the wall times of the spans they bracket
    assert s["forward_s"] >= s["forward_allreduce_s"] + 0.003 and s["forward_allreduce_s"] >= 3 * 0.002
    assert s["forward_n_allreduce"] == 3 and s["draft_n_allreduce"] == 1 and s["draft_s"] >= 0.004
    assert s["step_s"] == pytest.approx(s["forward_s"] + s["draft_s"] + s["overhead_s"], rel=1e-9)


def test_vllm_a_gpu_running_ahead_never_makes_a_step_wait_and_drops_are_counted(gpu: Any) -> None:
    """The GPU runs K steps behind the host (its events stay not ready): no wrapped engine call
    synchronises (the fake counts every call, waiting or not), MAX records wait, the K - MAX newest
    are dropped and counted on every line written after, and the summary says how many and where."""
    from specmodel.engines.vllm.hooklog import summarize

    m, extra = vwriter.MAX_PENDING_VLLM_STEPS, 5
    FakeEvent.hold = True
    runner = gpu.gpu_runner(None)
    for b in range(1, m + extra + 1):
        _step(runner, b)
    hook.flush()  # what the idle flusher does: a query, never a wait
    assert FakeEvent.sync_calls == 0
    assert len(vwriter.STATE.pending) == m and _steps(gpu.out) == []
    runner.shutdown()  # shutdown may wait: the engine is going away
    steps = _steps(gpu.out)
    assert [s["batch"] for s in steps] == list(range(1, m + 1))  # the newest were dropped
    assert {s["dropped_steps"] for s in steps} == {extra}
    assert {s["step_clock"] for s in steps} == {"cuda_event"}
    notes = summarize([gpu.out], name="t", min_samples=1).notes
    (note,) = [n for n in notes if "dropped" in n]
    assert note.startswith(f"{extra} steps dropped: the GPU ran more than {m} steps ahead of the hook's reader")
    assert "(decode)" in note and "may read low" in note


class _DeviceClock:
    """A device that runs the engine's work on its own clock: ``launch`` queues work and returns at
    once (the host does not wait), an event records where the stream has got to."""

    t = 0.0

    @classmethod
    def launch(cls, seconds: float) -> None:
        cls.t += seconds


class StreamEvent(FakeEvent):
    """A FakeEvent stamped with the device clock (complete unless held)."""

    def record(self, stream: Any = None) -> None:
        self.t = _DeviceClock.t

    def query(self) -> bool:
        assert self.t is not None
        return self.t <= FakeEvent.done_until or not FakeEvent.hold


#: device seconds per stand-in second of work: far beyond any host time the step takes, so the host
#: step ends long before the device's (async scheduling) whatever the box's load
DEVICE_SCALE = 1000.0


def test_vllm_overhead_is_on_the_gpu_clock_when_the_host_step_ends_first(gpu: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's step returns before its GPU work runs (the stand-in's work is queued on a device
    clock): overhead_s is the GPU's own time outside the forward -- the sampling work, hand-derived
    from the stand-in's constants -- not host span − GPU forward clamped to 0; the host span is kept
    apart and is shorter than the GPU's forward."""
    import tests.standins as standin_mod
    from specmodel.engines.vllm.hooklog import summarize
    from tests.test_vllm_hook import AR_S, FWD_COMPUTE_S, HOST_S

    monkeypatch.setattr(torch.cuda, "Event", StreamEvent)
    monkeypatch.setattr(_DeviceClock, "t", 0.0)
    monkeypatch.setattr(standin_mod, "_busy", lambda seconds: _DeviceClock.launch(seconds * DEVICE_SCALE))
    runner = gpu.gpu_runner(None)
    for _ in range(5):
        _step(runner, 1)
    hook.flush()
    steps = _steps(gpu.out)
    assert len(steps) == 5
    forward = DEVICE_SCALE * (3 * AR_S + FWD_COMPUTE_S)  # three all-reduces and the compute
    sampling = DEVICE_SCALE * HOST_S  # sample_tokens' work, after the forward
    for s in steps:
        assert s["forward_s"] == pytest.approx(forward, rel=1e-9)
        assert s["overhead_s"] == pytest.approx(sampling, rel=1e-9)  # host span − GPU forward would clamp to 0
        assert s["forward_allreduce_s"] == pytest.approx(DEVICE_SCALE * 3 * AR_S, rel=1e-9)
        assert s["step_clock"] == "cuda_event"
        assert s["gpu_step_s"] == s["step_s"] == pytest.approx(forward + sampling, rel=1e-9)
        assert s["host_step_s"] < s["forward_s"]  # the host's step ended first
    # nothing runs on the device between steps: the GPU gap is 0 (the host's gap is not used)
    assert steps[0]["gpu_gap_s"] is None and all(s["gpu_gap_s"] == pytest.approx(0.0, abs=1e-9) for s in steps[1:])
    prof = summarize([gpu.out], name="t", min_samples=1)
    (row,) = prof.rows("decode")
    assert row.total_s == pytest.approx(forward + sampling, rel=1e-9)
    assert row.other_s == pytest.approx(sampling, rel=1e-9)
    assert any("on the CUDA events' clock" in n for n in prof.notes)


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


def _fork(fn: Any) -> int:
    """Start ``fn`` in a forked child (its pid)."""
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
    return pid


def _reap(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _forked(fn: Any) -> int:
    return _reap(_fork(fn))


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


def test_vllm_two_dp_replicas_with_the_same_tp_rank_write_two_files_read_as_two_series(
        standin: Any, tmp_path: Path) -> None:  # noqa: F811
    """Two DP replicas' TP rank 1 workers (two processes, stepping at the same time) write a file
    each, named by DP rank and pid, whose meta line carries the ranks; --summarize reads one
    replica at a time (and refuses the mix without --dp-rank); each replica's steps stay its own."""
    import types

    from specmodel.commands.flags import flag_of
    from specmodel.engines.vllm.hooklog import summarize
    from specmodel.engines.vllm.steplog import read_step_log
    from specmodel.errors import FieldError

    go = tmp_path / "go"

    def replica(dp: int, batch: int) -> Any:
        def run() -> None:
            runner = standin.Runner(None)
            runner.vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(
                tensor_parallel_size=2, data_parallel_index=dp, data_parallel_size=2, pipeline_parallel_size=1))
            deadline = time.monotonic() + 60
            while not go.exists() and time.monotonic() < deadline:  # both start together: their steps interleave
                time.sleep(0.001)
            for _ in range(6):
                _step(runner, batch)
        return run

    pids = [_fork(replica(0, 1)), _fork(replica(1, 2))]
    go.touch()
    assert [_reap(p) for p in pids] == [0, 0]
    files = rank_files(standin.out, 1)
    assert len(files) == 2, files  # one TP rank, two processes: two files
    for f, dp, batch, pid in zip(sorted(files, key=lambda f: "dp1" in f.name), (0, 1), (1, 2), pids, strict=True):
        assert f.name == f"rank1-dp{dp}-pp0-pid{pid}.jsonl"
        lg = read_step_log(f)
        ((meta, steps),) = lg.runs  # one process, one series
        assert (meta["pid"], meta["dp_rank"], meta["pp_size"]) == (pid, dp, 1)
        assert [s["batch"] for s in steps] == [batch] * 6
    with pytest.raises(FieldError) as err:
        summarize([standin.out], name="t")
    assert re.search(r"2 data-parallel replicas \(0, 1\).*--dp-rank", err.value.render(flag_of))  # (as the CLI spells it)
    for dp, batch in ((0, 1), (1, 2)):
        prof = summarize([standin.out], name="t", dp_rank=dp)
        assert [r.batch for r in prof.rows("decode")] == [batch]
        assert prof.rows("decode")[0].samples == 6
    out = tmp_path / "p"
    r = subprocess.run([sys.executable, "-m", "specmodel", "vllm", "--summarize", str(standin.out), "-o", str(out),
                        "--dp-rank", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    assert [c["batch"] for c in doc["costs"] if c["kind"] == "decode"] == [2]
    r = subprocess.run([sys.executable, "-m", "specmodel", "vllm", "--summarize", str(standin.out), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--dp-rank" in r.stderr and "Traceback" not in r.stderr


def test_vllm_a_pipeline_parallel_recording_is_refused_in_one_line(standin: Any) -> None:  # noqa: F811
    """A PP stage times its own layers: the model prices one TP group's whole step, so PP > 1 is
    refused, naming the file."""
    import types

    from specmodel.engines.vllm.hooklog import summarize
    from specmodel.errors import SpecmodelError

    runner = standin.Runner(None)
    runner.vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(
        tensor_parallel_size=2, data_parallel_index=0, data_parallel_size=1, pipeline_parallel_size=2))
    for _ in range(5):
        _step(runner, 1)
    with pytest.raises(SpecmodelError, match=r"rank1-dp0-pp0-pid\d+\.jsonl: recorded with pipeline parallelism"):
        summarize([standin.out], name="t")


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
        real_w = sgwriter.write_line

        def write(obj: dict[str, Any]) -> None:
            if obj.get("type") == "forward":
                fault()
            real_w(obj)

        monkeypatch.setattr(sgwriter, "write_line", write)
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
        assert not getattr(sgwriter.STATE.tls, "active", False)

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
    lines = [json.loads(x) for x in rank_file(tmp_path / "logs", 0).read_text().splitlines()]
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
from specmodel.engines.sglang import hook
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
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in rank_file(tmp_path / "logs", 0).read_text().splitlines()]
    assert [r["batch"] for r in lines if r["type"] == "forward"] == [1, 2, 3, 4, 5]


def test_sglang_a_gpu_running_ahead_never_makes_a_forward_wait_and_drops_are_counted(
        sglang_standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The SGLang hook on a 'GPU' whose events stay not ready: no forward synchronises (every
    call counted), MAX timings wait, the newest beyond are dropped and counted on the lines
    written after, and the summary says how many."""
    from specmodel.engines.sglang.hooklog import summarize

    sglang_standin("0.5.5")
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(FakeEvent, "hold", True)
    monkeypatch.setattr(FakeEvent, "sync_calls", 0)
    monkeypatch.setattr(FakeEvent, "done_until", float("-inf"))
    monkeypatch.setattr(annotate.Stopwatch, "for_device", classmethod(lambda cls, device=None: cls(use_cuda=True)))
    monkeypatch.setattr(sghook, "_capturing", lambda sw_cuda: False)  # (no CUDA stream to ask on the CPU)
    runner = ModelRunner(tp_rank=0)
    runner.server_args.skip_server_warmup = True
    m, extra = sgwriter.MAX_PENDING_SGLANG_FORWARDS, 5
    for i in range(m + extra):
        b = 1 + i % 2
        runner.forward(ForwardBatch(ForwardMode.DECODE, b, torch.zeros(b, dtype=torch.long)))
    sghook.flush()  # what the background flusher does: a query, never a wait
    assert FakeEvent.sync_calls == 0
    assert len(sgwriter.STATE.pending) == m
    sghook.flush(wait=True)  # exit: may wait
    fwd = [r for r in json.loads("[" + ",".join(rank_file(tmp_path / "logs", 0).read_text().splitlines()) + "]")
           if r["type"] == "forward"]
    assert len(fwd) == m and {r["dropped_forwards"] for r in fwd} == {extra} and all("gpu_s" in r for r in fwd)
    notes = summarize([tmp_path / "logs"], name="t").notes
    (note,) = [n for n in notes if "dropped" in n]
    assert note.startswith(f"{extra} forwards dropped: the GPU ran more than {m} forwards ahead")


def test_sglang_two_dp_replicas_with_the_same_tp_rank_write_two_files(tmp_path: Path) -> None:
    """Two SGLang schedulers of a --dp 2 server (TP rank 0 each; the replica in $SGLANG_DP_RANK,
    as SGLang's router sets it) forwarding at the same time write a file each, read back as two
    series; --summarize reads one replica at a time."""
    from specmodel.engines.sglang.hooklog import read_forward_log, summarize
    from specmodel.errors import SpecmodelError
    from tests.test_sglang_hook import STANDIN

    go = tmp_path / "go"
    code = f"""
import os, sys, time, torch
sys.path.insert(0, {str(STANDIN)!r})
from specmodel.engines.sglang import hook
hook.install({str(tmp_path / "logs")!r})
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner
runner = ModelRunner(tp_rank=0)
runner.server_args.skip_server_warmup = True
b = int(sys.argv[1])
deadline = time.monotonic() + 60
while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
    time.sleep(0.001)
for _ in range(6):
    runner.forward(ForwardBatch(ForwardMode.DECODE, b, torch.zeros(b, dtype=torch.long)))
"""
    procs = [subprocess.Popen([sys.executable, "-c", code, str(dp + 1)], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "SGLANG_STANDIN_FLAVOR": "0.5.5", "SGLANG_DP_RANK": str(dp),
                                   "PYTHONPATH": str(Path(__file__).parents[1])}) for dp in (0, 1)]
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    files = sorted(rank_files(tmp_path / "logs", 0), key=lambda f: "dp1" in f.name)
    assert [f.name.split("-pid")[0] for f in files] == ["rank0-dp0-pp0", "rank0-dp1-pp0"]
    for f, dp, p in zip(files, (0, 1), procs, strict=True):
        ((meta, fwds),) = read_forward_log(f).runs
        assert (meta["pid"], meta["dp_rank"], meta["tp_rank"]) == (p.pid, dp, 0)
        assert [r["batch"] for r in fwds] == [dp + 1] * 6
    with pytest.raises(SpecmodelError, match=r"2 data-parallel replicas \(0, 1\)"):
        summarize([tmp_path / "logs"], name="t")
    assert [r.batch for r in summarize([tmp_path / "logs"], name="t", dp_rank=1).rows("decode")] == [2]
