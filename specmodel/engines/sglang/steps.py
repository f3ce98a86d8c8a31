"""The SGLang scheduler's step (one pass of its event loop: see "The scheduler's step" in
:mod:`specmodel.engines.sglang.hook`): its two bounds, the batch it runs, the forwards timed inside
it, and the calibration probe, whose time must not pass for the engine's host work."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from specmodel.engines.hook.annotate import Stopwatch
from specmodel.engines.hook.calibration import Calibrator
from specmodel.engines.hook.patch import as_wrapper
from specmodel.engines.sglang import writer as w
from specmodel.engines.sglang.targets import Target
from specmodel.engines.sglang.writer import STATE, sglang_version
from specmodel.schema.formats import SGLANG_FORWARD


def probe(cal: Calibrator) -> None:
    """The box's condition after a target forward (:mod:`specmodel.engines.hook.calibration`). Never
    raises: a probe that fails is dropped, warned once, and the next period tries again."""
    st = STEPS.open
    if st is not None:
        st.probed = True  # the probe's own time is no host work of the engine's: that step is not written
    try:
        probe = cal.run()
        if probe.use_cuda:
            w.enqueue(None, probe)
        else:
            with STATE.lock:
                w.write_line(probe.record())
    except Exception as exc:  # noqa: BLE001 - the probe must never harm the server
        STATE.warn_once("probe", f"SGLang {sglang_version()}: the calibration probe failed ({exc!r}); that probe is "
                                 "not recorded (forwards are)")



class Step:
    """One scheduler step (one pass of the event loop, module docstring): its host span
    (``perf_counter``), its span on the clock the forwards are timed on (CUDA events at its two
    bounds on the forwards' stream, or ``perf_counter`` on the CPU) and the forwards timed inside it.
    Quacks like a :class:`~specmodel.engines.hook.calibration.Probe` for :func:`flush`: ``ready()`` and
    ``record()``."""

    def __init__(self, *, host_t0: float, start: Any, cuda: bool, start_shared: bool) -> None:
        self.host_t0 = host_t0
        self.start = start  # perf_counter seconds, or the CUDA event recorded at the opening bound
        self.start_shared = start_shared  # that event also ends the step before (never re-recorded)
        self.end: Any = None
        self.host_s = 0.0
        self.cuda = cuda
        self.mode: str | None = None  # the batch's ForwardMode name, set by run_batch
        self.batch: int | None = None
        self.t_unix = time.time()
        self.forwards: list[tuple[str, Any]] = []  # (phase, stopwatch) of each forward timed inside
        self.probed = False  # a calibration probe ran inside it (its time would pass for host work)

    def ready(self) -> bool:
        """Every figure readable without waiting (CUDA: the closing bound's event and every forward's)."""
        if not self.cuda:
            return True
        return bool(self.end.query()) and all(sw.ready() for _, sw in self.forwards)

    def wait(self) -> None:
        """Exit only (``flush(wait=True)``, outside the hook's lock): the closing bound's event done."""
        if self.cuda and self.end is not None:
            self.end.synchronize()

    def record(self) -> dict[str, Any]:
        # one clock for the step and its forwards: CUDA events on the GPU, perf_counter on the CPU
        fwd = sum(float(sw.elapsed_s) for _, sw in self.forwards)
        if self.cuda:
            from specmodel.units import from_ms

            if not self.end.query():  # flush reads a step once ready: no synchronise call at all then
                self.end.synchronize()
            step = from_ms(float(self.start.elapsed_time(self.end)))  # CUDA events report ms
        else:
            step = float(self.end - self.start)
        phases: dict[str, int] = {}
        for ph, _ in self.forwards:
            phases[ph] = phases.get(ph, 0) + 1
        return {**SGLANG_FORWARD.header(), "type": "step", "forward_mode": self.mode, "batch": self.batch,
                "phases": phases, "clock": "cuda_event" if self.cuda else "perf_counter", "step_s": step,
                "forwards_s": fwd, "overhead_s": max(step - fwd, 0.0), "host_s": self.host_s,
                "t_start_unix_s": self.t_unix}


class _StepState:
    def __init__(self) -> None:
        self.open: Step | None = None


STEPS = _StepState()


def _step_stream(sched: Any) -> Any:
    """The stream the forwards are queued on: the overlap scheduler's ``forward_stream`` (its
    ``run_batch`` enters ``forward_stream_ctx``), else the current stream (``None``)."""
    if getattr(sched, "enable_overlap", False) is True:
        return getattr(sched, "forward_stream", None)
    return None


def step_boundary(sched: Any) -> None:
    """``get_next_batch_to_run`` entry: close the open step (written if it ran a batch with a
    timed forward) and open the next. One marker is both the closing and the opening bound, so
    consecutive steps tile the loop's time."""
    now = time.perf_counter()
    prev = STEPS.open
    STEPS.open = None  # a failure below leaves no step open
    keep = prev is not None and prev.mode is not None and bool(prev.forwards) and not prev.probed
    cuda = Stopwatch.for_device(getattr(sched, "device", None)).use_cuda
    if keep and prev is not None and any(bool(sw.use_cuda) != prev.cuda for _, sw in prev.forwards):
        # never one clock's span minus another's: a step whose forwards ran on another clock is dropped
        keep = False
        STATE.warn_once("step:clock", f"SGLang {sglang_version()}: the scheduler's device ({getattr(sched, 'device', None)!r}) "
                                      "is not timed on its forwards' clock; the scheduler's host work is not recorded")
    marker: Any = now
    if cuda:
        import torch

        # an idle pass (no batch) re-records its own opening event: no allocation per idle spin
        reuse = prev is not None and prev.cuda and not keep and not prev.start_shared
        marker = prev.start if reuse and prev is not None else torch.cuda.Event(enable_timing=True)
        marker.record(_step_stream(sched))
    if keep and prev is not None:
        prev.end, prev.host_s = marker, now - prev.host_t0
        if prev.cuda:
            w.enqueue(None, prev)  # resolved by flush, like a forward's events (a full queue drops it)
        else:
            with STATE.lock:
                if STATE.fd is not None:
                    w.write_line(prev.record())
    STEPS.open = Step(host_t0=now, start=marker, cuda=cuda, start_shared=keep)


def step_batch(batch: Any) -> None:
    """``run_batch`` entry: the open step runs ``batch`` (its ForwardMode and size)."""
    st = STEPS.open
    if st is None:
        return
    mode = getattr(getattr(batch, "forward_mode", None), "name", None)
    st.mode = mode if isinstance(mode, str) else "unknown"
    size = getattr(batch, "batch_size", None)
    n = size() if callable(size) else size
    if not isinstance(n, int) or isinstance(n, bool):
        reqs = getattr(batch, "reqs", None)
        n = len(reqs) if isinstance(reqs, list) else None
    st.batch = n


def step_forward(sw: Any, rec: dict[str, Any]) -> None:
    """A timed forward belongs to the open step once its batch runs."""
    st = STEPS.open
    if st is not None and st.mode is not None:
        st.forwards.append((str(rec["phase"]), sw))


def make_step_wrapper(target: Target, method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    member = f"{target.cls}.{method}"
    boundary = target.role == "step_boundary"

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if boundary:
                step_boundary(self)
            else:
                step_batch(args[0] if args else kwargs.get("batch"))
        except Exception as exc:  # noqa: BLE001 - the hook must never break the scheduler
            STEPS.open = None
            STATE.warn_once(f"step:{member}", f"SGLang {sglang_version()}: timing the scheduler's step at {member} failed "
                                              f"({exc!r}); those steps' host work is not recorded (forwards are)")
        return orig(self, *args, **kwargs)

    return as_wrapper(wrapper, orig, name=method, qualname=member)


