"""The engine hooks' clocks on a device: the checks ``scripts/gpu_check_trace.py`` runs for the vLLM and
SGLang hooks (``specmodel/engines/vllm/hook.py``, ``specmodel/engines/sglang/hook.py``) on the stand-ins the tests use
(``tests/standins.py``: vLLM's V1 and V2 runners, SGLang's scheduler loop in ``tests/data/sglang_standin``).

On a GPU the stand-ins' work is real device work -- a captured ``torch.cuda.CUDAGraph`` replayed as
the target forward (eight 4096² bf16 matmuls), ``torch.cuda._sleep`` kernels of a measured length for
the sampling, the drafter and a GPU kept busy -- and every figure is read from the hooks' own rank
files. The check times the same replays and kernels with its own CUDA events (the independent
figure) and counts every ``torch.cuda.Event.synchronize`` / ``torch.cuda.synchronize`` /
``torch.cuda.Stream.synchronize`` call made while a hook's step path runs (the stand-in engine's own
waits -- V1's sampling reading its tokens -- go around the counter: they are the engine's, not the
hook's).

``--cpu-dry-run``: the same code paths on a simulated device (``tests.standins.FakeGPU``: a stream
timeline beside a fake host clock, its events complete once the host's clock reaches them), the
hooks on their CUDA-event path. What it cannot show: that real CUDA events bracket a real graph
replay's kernels, the real launch latency and clock resolution, and that a real ``query()`` never
blocks -- on the simulated device the check's timings and the hook's agree by construction.

Checks (each: expected, observed, ok):

* ``vllm_hook_graph_replay``: the V1 hook's ``forward_s`` (CUDA events) around a graph replay is > 0
  and within ``REPLAY_REL_TOL`` · t + ``REPLAY_ABS_TOL_S`` of the check's own events around the
  same replay (a 2 ms kernel queued ahead of each step keeps the stream busy while the host records
  both pairs, so neither carries the host's launch latency);
* ``vllm_hook_clocks``: steps that synchronise at their end have ``host_step_s`` within
  ``STEP_REL_TOL`` · t + ``STEP_ABS_TOL_S`` of ``gpu_step_s`` (median over the judged steps); steps
  whose host returns before the GPU (a 5 ms kernel queued after the forward, no synchronise) have
  ``overhead_s`` ≥ ``OVERHEAD_MIN_SHARE`` × that kernel's own time, ``step_clock == "cuda_event"``
  and ``host_step_s`` < ``gpu_step_s``;
* ``vllm_hook_v2_runner``: a Model Runner V2 stand-in (``execute_model`` / ``forward_start`` /
  speculator ``propose`` / ``sample_tokens``): its steps recorded with ``model_runner: "v2"``, a
  dummy run left out, ``forward_s`` and ``draft_s`` within the replay tolerance of the check's own
  timings;
* ``vllm_hook_never_blocks``: a kernel keeps the GPU busy (2 s) while the host runs
  ``MAX_PENDING_VLLM_STEPS`` + 8 steps: no synchronise call on the step path, no record written
  while the GPU is behind, the queue full, the 8 newest dropped and counted; once the GPU catches up
  a query-only flush writes the rest, each carrying ``dropped_steps`` = 8;
* ``sglang_scheduler_step``: the SGLang hook on the stand-in scheduler's loop (a prefill, then EAGLE
  cycles: drafts, verify, draft-extend) on the device: ``step`` records with ``clock: "cuda_event"``,
  ``step_s`` ≥ ``forwards_s`` (both CUDA events on one stream), the cycle's phases, and no
  synchronise call while the loop runs.

The first ``WARMUP_STEPS`` steps of a run (the rank file opened, the calibration probe's kernels
queued) are recorded but not judged. The dry run leaves the calibration probe out (it would time
nothing on a simulated device).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: tolerance of the hook's forward / draft span against the check's own events around the same work
REPLAY_REL_TOL, REPLAY_ABS_TOL_S = 0.02, 20e-6
#: tolerance of host_step_s against gpu_step_s for a step that synchronises at its end (the host's
#: step starts before the hook writes the previous record and records its first event)
STEP_REL_TOL, STEP_ABS_TOL_S = 0.05, 0.3e-3
#: the share of the GPU work queued after the forward that overhead_s must hold
OVERHEAD_MIN_SHARE = 0.95
#: event resolution (about 0.5 us per event): step_s >= forwards_s is judged to this
EVENT_RESOLUTION_S = 2e-6
WARMUP_STEPS = 2
STEPS = 12
QUEUE_AHEAD_S = 0.002  # the kernel queued ahead of each step (graph-replay and V2 checks)
SAMPLE_S = 0.0005  # the sampling kernel
ASYNC_SAMPLE_S = 0.005  # the kernel queued after the forward when the host does not wait
DRAFT_S = 0.001  # the drafter's work (V2)
BUSY_S = 2.0  # the kernel that keeps the GPU behind the host (never-blocks check)
EXTRA_STEPS = 8  # steps beyond the hook's queue in the never-blocks check
FAKE_REPLAY_S = 0.0017  # the simulated device's graph replay
FAKE_LAUNCH_S = 20e-6  # host time to launch work on the simulated device
#: SGLang forwards' device work per (ForwardMode, drafter runner), seconds
SGLANG_FORWARD_S = {("EXTEND", False): 0.004, ("DECODE", False): 0.0015, ("TARGET_VERIFY", False): 0.002,
                    ("DECODE", True): 0.0003, ("DRAFT_EXTEND", True): 0.0004}
SGLANG_CYCLES = 8


def _nothing(_seconds: float) -> None:
    return None


class Device:
    """What the hook checks run their stand-ins on: the CUDA device (a captured graph, sleep kernels,
    the check's own CUDA events) or, in the dry run, a simulated one (``tests.standins.FakeGPU`` on a
    fake host clock patched into ``time.perf_counter``). As a context manager it also installs the
    synchronise counter and turns off the vLLM hook's torch.profiler capture; all undone on exit."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.syncs = 0
        self._counting = False
        self._undo: list[Callable[[], None]] = []
        self.graph: Any = None
        self.cycles_per_s = 0.0

    # ---------------------------------------------------------------- set-up

    def _set(self, obj: Any, name: str, value: Any) -> None:
        had = name in vars(obj) if isinstance(obj, type) else hasattr(obj, name)
        old = getattr(obj, name, None)
        setattr(obj, name, value)
        self._undo.append(lambda: setattr(obj, name, old) if had else delattr(obj, name))

    def __enter__(self) -> Device:
        try:
            return self._enter()
        except BaseException:
            self.__exit__()  # what was patched before the failure is put back
            raise

    def _enter(self) -> Device:
        import torch

        from specmodel.engines.hook import annotate
        from specmodel.engines.sglang import steps as sgsteps
        from specmodel.engines.vllm import hook as vhook
        from specmodel.engines.vllm.capture import ENV_STEPS

        saved = os.environ.get(ENV_STEPS)
        os.environ[ENV_STEPS] = "0"  # a capture is checked by vllm_hook_capture; here it would time itself
        self._undo.append(lambda: os.environ.__setitem__(ENV_STEPS, saved) if saved is not None
                          else os.environ.pop(ENV_STEPS, None))
        if self.cuda:
            self._orig_sync = torch.cuda.synchronize
            self._setup_gpu(torch)
            event_base = torch.cuda.Event
        else:
            from tests.standins import FakeClock, FakeGPU

            self.clock = FakeClock()
            self.gpu = FakeGPU(self.clock)
            self._set(time, "perf_counter", self.clock)
            event_base = self.gpu.event_class()
            self._orig_sync = lambda device=None: self.gpu.sync()
            self._set(annotate, "cuda_available", lambda: True)
            self._set(torch.cuda, "is_current_stream_capturing", lambda: False)
            # the calibration probe times nothing on a simulated device
            self._set(vhook, "_probe", lambda cal: None)
            self._set(sgsteps, "probe", lambda cal: None)
        dev = self

        class CountingEvent(event_base):  # type: ignore[misc, valid-type]
            def synchronize(self) -> None:
                dev._count()
                super().synchronize()

        self.Event = CountingEvent
        self._set(torch.cuda, "Event", CountingEvent)
        orig_sync = self._orig_sync

        def synchronize(device: Any = None) -> None:
            dev._count()
            orig_sync(device)

        self._set(torch.cuda, "synchronize", synchronize)
        stream_sync = getattr(torch.cuda.Stream, "synchronize", None)
        if stream_sync is not None:
            def stream_synchronize(s: Any) -> Any:
                dev._count()
                return stream_sync(s)

            self._set(torch.cuda.Stream, "synchronize", stream_synchronize)
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._undo:
            self._undo.pop()()

    def _setup_gpu(self, torch: Any) -> None:
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * (1 / 64)
        out = torch.empty_like(a)

        def body() -> None:
            y = a
            for _ in range(8):
                y = y @ a
            out.copy_(y)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body()  # warm-up outside capture (cuBLAS workspaces)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        self.graph, self._keep = g, (a, out)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        e0.record()
        torch.cuda._sleep(cycles)
        e1.record()
        e1.synchronize()
        self.cycles_per_s = cycles / (e0.elapsed_time(e1) / 1e3)

    # ---------------------------------------------------------------- counting

    def _count(self) -> None:
        if self._counting:
            self.syncs += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count every synchronise call made inside (the hooks' step path)."""
        self._counting = True
        try:
            yield
        finally:
            self._counting = False

    # ---------------------------------------------------------------- work

    def replay(self) -> None:
        """The target forward: one CUDA-graph replay (simulated: ``FAKE_REPLAY_S`` of device work)."""
        if self.cuda:
            self.graph.replay()
        else:
            self.gpu.launch(FAKE_REPLAY_S)
            self.clock.advance(FAKE_LAUNCH_S)

    def kernel(self, seconds: float) -> None:
        """A kernel of about ``seconds`` on the current stream; the host does not wait."""
        if self.cuda:
            import torch

            torch.cuda._sleep(max(int(seconds * self.cycles_per_s), 1))
        else:
            self.gpu.launch(seconds)
            self.clock.advance(FAKE_LAUNCH_S)

    def host(self, seconds: float) -> None:
        """Host work of ``seconds`` (simulated only: on a GPU box the host's own work is what it is)."""
        if not self.cuda:
            self.clock.advance(seconds)

    def sync(self) -> None:
        """The engine's (or the check's) own wait for the device: not counted."""
        self._orig_sync()

    def timed(self, fn: Callable[[], None]) -> tuple[Any, Any]:
        """Run ``fn`` between two of the check's own events (read with :meth:`seconds` later)."""
        e0, e1 = self.Event(enable_timing=True), self.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        return e0, e1

    @staticmethod
    def seconds(pair: tuple[Any, Any]) -> float:
        return float(pair[0].elapsed_time(pair[1])) / 1e3


def _lines(out: Path) -> list[dict[str, Any]]:
    files = sorted(out.glob("rank*.jsonl"))
    if len(files) != 1:
        raise RuntimeError(f"{out}: expected one rank file, found {[f.name for f in files]}")
    return [json.loads(x) for x in files[0].read_text().splitlines() if x.strip()]


def _steps(out: Path) -> list[dict[str, Any]]:
    return [x for x in _lines(out) if x.get("type") == "step"]


def _within(a: float, b: float, rel: float, abs_s: float) -> bool:
    return abs(a - b) <= rel * abs(b) + abs_s


#: what each check's dry run (the simulated device) cannot show, written beside its result
DRY_RUN_CANNOT_SHOW = {
    "vllm_hook_graph_replay": "that real CUDA events bracket a real graph replay's kernels (the check's timing "
                              "equals the hook's by construction on the simulated device)",
    "vllm_hook_clocks": "the real offset between the host's clock and the GPU's (launch latency, event resolution); "
                        "the simulated host waits exactly as long as the device runs",
    "vllm_hook_v2_runner": "V2's real classes (tests/test_vllm_v2.py reads them) and real CUDA events around them",
    "vllm_hook_never_blocks": "that a real cudaEventQuery never blocks and a real host outruns a busy GPU",
    "sglang_scheduler_step": "real CUDA events on a real stream around SGLang's forwards",
}


def _check(name: str, expected: dict[str, Any], observed: dict[str, Any], cuda: bool) -> dict[str, Any]:
    ok = all(observed.get(k) == v for k, v in expected.items())
    out = {"name": name, "ok": ok, "expected": expected, "observed": observed}
    if not cuda:
        out["dry_run_cannot_show"] = DRY_RUN_CANNOT_SHOW[name]
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 7)


def _cuda_runner(runner: Any) -> Any:
    runner.device = "cuda"  # the hook's clock follows the runner's device (the stand-in's class says cpu)
    return runner


# --------------------------------------------------------------------------- 1. graph replays timed


def check_vllm_hook_graph_replay(tmp: Path, cuda: bool) -> dict[str, Any]:
    from tests import standins

    own: list[tuple[Any, Any]] = []
    with Device(cuda) as dev:
        def sample(_s: float) -> None:
            dev.kernel(SAMPLE_S)
            dev.sync()  # V1's sampling reads its tokens back: the step ends with the GPU

        work = {"allreduce": _nothing, "forward": lambda _s: own.append(dev.timed(dev.replay)), "sample": sample}
        with standins.vllm_v1(tmp / "hook", work) as ns:
            runner = _cuda_runner(ns.Runner(None))
            for _ in range(STEPS):
                dev.kernel(QUEUE_AHEAD_S)  # the stream is busy while both pairs of events are recorded
                runner.execute_model(standins.so(4))
                runner.sample_tokens(None)
            runner.shutdown()  # the hook's shutdown flush writes what is pending
            steps = _steps(ns.out)
        own_s = [dev.seconds(p) for p in own]
    fwd = [s["forward_s"] for s in steps]
    judged = list(zip(fwd, own_s, strict=False))[WARMUP_STEPS:]  # (lengths compared below)
    diffs = [abs(a - b) for a, b in judged]
    obs = {"steps": len(steps), "step_clock": sorted({s["step_clock"] for s in steps}),
           "forward_positive": all(f is not None and f > 0 for f in fwd),
           "within_tolerance": len(fwd) == len(own_s) and all(_within(a, b, REPLAY_REL_TOL, REPLAY_ABS_TOL_S)
                                                              for a, b in judged),
           "tolerance": f"|forward_s - own replay time| <= {REPLAY_REL_TOL} x own + {REPLAY_ABS_TOL_S * 1e6:.0f} us",
           "forward_s_median": _r(statistics.median(a for a, _ in judged)) if judged else None,
           "own_replay_s_median": _r(statistics.median(b for _, b in judged)) if judged else None,
           "max_abs_diff_s": _r(max(diffs)) if diffs else None,
           "forward_s": [_r(f) for f in fwd], "own_replay_s": [_r(x) for x in own_s],
           "graph_replayed": cuda, "device": "cuda" if cuda else "simulated (FakeGPU)"}
    exp = {"steps": STEPS, "step_clock": ["cuda_event"], "forward_positive": True, "within_tolerance": True}
    return _check("vllm_hook_graph_replay", exp, obs, cuda)


# --------------------------------------------------------------------------- 2. the clocks agree


def check_vllm_hook_clocks(tmp: Path, cuda: bool) -> dict[str, Any]:
    from tests import standins

    mode = {"async": False}
    queued_after: list[tuple[Any, Any]] = []
    with Device(cuda) as dev:
        def sample(_s: float) -> None:
            if mode["async"]:  # the host returns with the kernel still queued
                queued_after.append(dev.timed(lambda: dev.kernel(ASYNC_SAMPLE_S)))
            else:
                dev.kernel(SAMPLE_S)
                dev.sync()

        def forward(_s: float) -> None:
            dev.replay()
            dev.kernel(0.001)  # a forward of ~2.7 ms beside the ~0.1 ms the host spends before its first event

        work = {"allreduce": _nothing, "forward": forward, "sample": sample, "draft": _nothing}
        with standins.vllm_v1(tmp / "hook", work) as ns:
            runner = _cuda_runner(ns.Runner(None))
            for _ in range(STEPS):  # batch 1: steps that synchronise at their end
                runner.execute_model(standins.so(1))
                runner.sample_tokens(None)
            mode["async"] = True
            for _ in range(STEPS):  # batch 2: the host's step ends first
                runner.execute_model(standins.so(2))
                runner.sample_tokens(None)
            dev.sync()
            runner.shutdown()
            steps = _steps(ns.out)
        after_s = [dev.seconds(p) for p in queued_after]
    sync = [s for s in steps if s["batch"] == 1][WARMUP_STEPS:]
    late = [s for s in steps if s["batch"] == 2][WARMUP_STEPS:]
    after = after_s[WARMUP_STEPS:]
    diffs = [s["host_step_s"] - s["gpu_step_s"] for s in sync]
    med_gpu = statistics.median(s["gpu_step_s"] for s in sync) if sync else 0.0
    med_diff = statistics.median(abs(d) for d in diffs) if diffs else None
    obs = {
        "steps": [len([s for s in steps if s["batch"] == b]) for b in (1, 2)],
        "step_clock": sorted({s["step_clock"] for s in steps}),
        "sync_host_step_agrees": med_diff is not None and med_diff <= STEP_REL_TOL * med_gpu + STEP_ABS_TOL_S,
        "sync_tolerance": f"median |host_step_s - gpu_step_s| <= {STEP_REL_TOL} x median gpu_step_s + "
                          f"{STEP_ABS_TOL_S * 1e3:.1f} ms",
        "sync_gpu_step_s_median": _r(med_gpu), "sync_abs_diff_s_median": _r(med_diff),
        "sync_host_minus_gpu_s": [_r(d) for d in diffs],
        "async_overhead_on_gpu_clock": len(late) == len(after) > 0 and all(
            s["overhead_s"] >= OVERHEAD_MIN_SHARE * a for s, a in zip(late, after, strict=True)),
        "async_rule": f"overhead_s >= {OVERHEAD_MIN_SHARE} x the kernel queued after the forward (own events)",
        "async_host_returned_first": bool(late) and all(s["host_step_s"] < s["gpu_step_s"] for s in late),
        "async_overhead_s": [_r(s["overhead_s"]) for s in late], "async_queued_after_s": [_r(a) for a in after],
        # what a host span minus the GPU forward would have said (clamped to 0 where negative)
        "async_host_step_minus_forward_s": [_r(s["host_step_s"] - s["forward_s"]) for s in late],
        "device": "cuda" if cuda else "simulated (FakeGPU)",
    }
    exp = {"steps": [STEPS, STEPS], "step_clock": ["cuda_event"], "sync_host_step_agrees": True,
           "async_overhead_on_gpu_clock": True, "async_host_returned_first": True}
    return _check("vllm_hook_clocks", exp, obs, cuda)


# --------------------------------------------------------------------------- 3. the V2 runner


def check_vllm_hook_v2_runner(tmp: Path, cuda: bool) -> dict[str, Any]:
    from specmodel.engines.vllm import writer as vwriter
    from tests import standins

    fwd_own: list[tuple[Any, Any]] = []
    draft_own: list[tuple[Any, Any]] = []
    with Device(cuda) as dev:
        work = {"allreduce": _nothing, "prepare": dev.host,
                "forward": lambda _s: fwd_own.append(dev.timed(dev.replay)),
                "sample": lambda _s: dev.kernel(SAMPLE_S),
                "draft": lambda _s: draft_own.append(dev.timed(lambda: dev.kernel(DRAFT_S)))}
        with standins.vllm_v2(tmp / "hook", work) as ns:
            runner = _cuda_runner(ns.Runner("draft_model", k=3))
            runner._dummy_run(8)  # warm-up / capture / DP padding: not a step
            dev.sync()
            fwd_own.clear()
            draft_own.clear()
            for _ in range(STEPS):
                dev.kernel(QUEUE_AHEAD_S)
                runner.execute_model(standins.so(2, k=3, ctx=50))
                runner.sample_tokens(None)
            dev.sync()
            runner.shutdown()
            lines = _lines(ns.out)
            patched = sorted(ns.patched)
        fwd_s = [dev.seconds(p) for p in fwd_own]
        draft_s = [dev.seconds(p) for p in draft_own]
    meta = [x for x in lines if x.get("type") == "meta"]
    steps = [x for x in lines if x.get("type") == "step"]
    judged = list(zip(steps, fwd_s, draft_s, strict=False))[WARMUP_STEPS:]  # (lengths compared below)
    obs = {
        "model_runner": [m.get("model_runner") for m in meta], "steps": len(steps),
        "kinds": sorted({s["kind"] for s in steps}), "step_clock": sorted({s["step_clock"] for s in steps}),
        "v2_seams_patched": all(f"v2:{m}" in patched for m in (
            "GPUModelRunner.execute_model", "StepTimingCollector.forward_start", "StandaloneARSpeculator.propose",
            "GPUModelRunner.sample_tokens")),
        "draft_n_allreduce": sorted({s["draft_n_allreduce"] for s in steps}),
        "forward_within_tolerance": len(steps) == len(fwd_s) and all(
            s["forward_s"] > 0 and _within(s["forward_s"], f, REPLAY_REL_TOL, REPLAY_ABS_TOL_S) for s, f, _ in judged),
        "draft_within_tolerance": len(steps) == len(draft_s) and all(
            s["draft_s"] > 0 and _within(s["draft_s"], d, REPLAY_REL_TOL, REPLAY_ABS_TOL_S) for s, _, d in judged),
        "tolerance": f"|hook span - own events| <= {REPLAY_REL_TOL} x own + {REPLAY_ABS_TOL_S * 1e6:.0f} us",
        "forward_s": [_r(s["forward_s"]) for s in steps], "own_forward_s": [_r(x) for x in fwd_s],
        "draft_s": [_r(s["draft_s"]) for s in steps], "own_draft_s": [_r(x) for x in draft_s],
        "patched": patched, "max_pending_steps": vwriter.MAX_PENDING_VLLM_STEPS,
    }
    exp = {"model_runner": ["v2"], "steps": STEPS, "kinds": ["verify"], "step_clock": ["cuda_event"],
           "v2_seams_patched": True, "draft_n_allreduce": [3], "forward_within_tolerance": True,
           "draft_within_tolerance": True}
    return _check("vllm_hook_v2_runner", exp, obs, cuda)


# --------------------------------------------------------------------------- 4. the flush never blocks


def check_vllm_hook_never_blocks(tmp: Path, cuda: bool) -> dict[str, Any]:
    from specmodel.engines.vllm import hook as vhook
    from specmodel.engines.vllm import writer as vwriter
    from tests import standins

    m = vwriter.MAX_PENDING_VLLM_STEPS
    k = m + EXTRA_STEPS
    with Device(cuda) as dev:
        work = {"allreduce": _nothing, "forward": lambda _s: dev.replay(), "sample": lambda _s: dev.kernel(SAMPLE_S)}
        with standins.vllm_v1(tmp / "hook", work) as ns:
            runner = _cuda_runner(ns.Runner(None))
            runner.execute_model(standins.so(1))  # the warm-up step: the file opened, the probe queued
            runner.sample_tokens(None)
            dev.sync()
            vhook.flush()
            before = len(_steps(ns.out))
            t0 = time.perf_counter()
            with dev.counting():
                busy = dev.timed(lambda: dev.kernel(BUSY_S))  # the GPU is K steps behind the host from here
                for _ in range(k):
                    runner.execute_model(standins.so(2))
                    runner.sample_tokens(None)
                vhook.flush()  # what the idle flusher does: a query per record
                host_loop_s = time.perf_counter() - t0
                gpu_behind = not busy[1].query()
                written_during = len(_steps(ns.out)) - before
                pending = len(vwriter.STATE.pending)
                dropped = vwriter.STATE.dropped
            syncs = dev.syncs
            dev.sync()  # the check waits for the GPU (not the hook)
            vhook.flush()  # query-only: the records are complete now
            after = [s for s in _steps(ns.out) if s["batch"] == 2]
            pending_after = len(vwriter.STATE.pending)
            runner.shutdown()
        busy_s = dev.seconds(busy)
    obs = {"sync_calls_on_step_path": syncs, "gpu_behind_when_host_loop_ended": gpu_behind,
           "written_while_gpu_behind": written_during, "pending_after_loop": pending, "dropped_steps": dropped,
           "written_after_catch_up": len(after), "pending_after_catch_up": pending_after,
           "dropped_steps_on_lines": sorted({s["dropped_steps"] for s in after}),
           "batches_written": [s["batch"] for s in after][:1],
           "steps_run": k, "max_pending_steps": m, "busy_kernel_s": _r(busy_s),
           "host_loop_s": _r(host_loop_s) if cuda else None,
           "device": "cuda" if cuda else "simulated (FakeGPU)"}
    exp = {"sync_calls_on_step_path": 0, "gpu_behind_when_host_loop_ended": True, "written_while_gpu_behind": 0,
           "pending_after_loop": m, "dropped_steps": k - m, "written_after_catch_up": m, "pending_after_catch_up": 0,
           "dropped_steps_on_lines": [k - m]}
    return _check("vllm_hook_never_blocks", exp, obs, cuda)


# --------------------------------------------------------------------------- 5. SGLang's scheduler step


def check_sglang_scheduler_step(tmp: Path, cuda: bool) -> dict[str, Any]:
    from tests import standins

    with Device(cuda) as dev, standins.sglang(tmp / "logs", "0.5.5"):
        from sglang.srt.managers.scheduler import ScheduleBatch, Scheduler
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.model_executor.model_runner import ModelRunner

        from specmodel.engines.sglang import hook as sghook

        def on_forward(runner: Any, fb: Any) -> None:
            dev.kernel(SGLANG_FORWARD_S[(fb.forward_mode.name, runner.is_draft_worker)])

        def host_work(what: str) -> None:
            dev.host(0.0002)
            if what in ("verify_bookkeeping", "process"):  # they read the GPU's results: the engine waits
                dev.sync()

        ModelRunner.on_forward = on_forward
        target = ModelRunner(device="cuda" if cuda else "cpu")
        draft = ModelRunner(is_draft_worker=True, device="cuda" if cuda else "cpu")
        for r in (target, draft):
            r.device = "cuda"  # (the simulated device's tensors stay on the CPU)
            r.server_args.skip_server_warmup = True
        sched = Scheduler(target, draft, host_work=host_work, device="cuda")
        sched.queue = [ScheduleBatch(ForwardMode.EXTEND, 2)] + [ScheduleBatch(ForwardMode.DECODE, 2)
                                                                for _ in range(SGLANG_CYCLES)]
        with dev.counting():
            sched.event_loop_normal()
            sghook.flush()
        syncs = dev.syncs
        sghook.flush(wait=True)  # the exit flush may wait
        lines = _lines(tmp / "logs")
    steps = [x for x in lines if x.get("type") == "step"]
    cycles = [s for s in steps if s["forward_mode"] == "DECODE"]
    obs = {"decode_steps": len(cycles), "clock": sorted({s["clock"] for s in steps}),
           "phases": sorted({json.dumps(s["phases"], sort_keys=True) for s in cycles}),
           "step_s_ge_forwards_s": bool(steps) and all(s["step_s"] >= s["forwards_s"] - EVENT_RESOLUTION_S
                                                       for s in steps),
           "forwards_positive": bool(steps) and all(s["forwards_s"] > 0 for s in steps),
           "sync_calls_on_step_path": syncs,
           "step_s": [_r(s["step_s"]) for s in steps], "forwards_s": [_r(s["forwards_s"]) for s in steps],
           "overhead_s": [_r(s["overhead_s"]) for s in steps], "host_s": [_r(s["host_s"]) for s in steps],
           "rule": f"step_s >= forwards_s - {EVENT_RESOLUTION_S * 1e6:.0f} us (event resolution)",
           "device": "cuda" if cuda else "simulated (FakeGPU)"}
    exp = {"decode_steps": SGLANG_CYCLES, "clock": ["cuda_event"],
           "phases": [json.dumps({"draft": 2, "draft_extend": 1, "verify": 1}, sort_keys=True)],
           "step_s_ge_forwards_s": True, "forwards_positive": True, "sync_calls_on_step_path": 0}
    return _check("sglang_scheduler_step", exp, obs, cuda)


CHECKS: tuple[tuple[str, Callable[[Path, bool], dict[str, Any]], bool], ...] = (
    ("vllm_hook_graph_replay", check_vllm_hook_graph_replay, True),
    ("vllm_hook_clocks", check_vllm_hook_clocks, True),
    ("vllm_hook_v2_runner", check_vllm_hook_v2_runner, True),
    ("vllm_hook_never_blocks", check_vllm_hook_never_blocks, True),
    ("sglang_scheduler_step", check_sglang_scheduler_step, True),
)
