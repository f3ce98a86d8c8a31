"""The vLLM hook's records on their way to the rank file: the per-process state, the CUDA-event
timers, a record's clocks resolved into seconds, the queue of GPU records waiting for their events
and its flush (the module docstring of :mod:`specmodel.engines.vllm.hook` says why the newest is
dropped when the queue is full, and why the step never waits on the GPU)."""

from __future__ import annotations

from typing import Any

from specmodel.engines.hook.calibration import Probe
from specmodel.engines.hook.state import HookState
from specmodel.engines.vllm.place import is_cuda, meta, parallel, rank, vllm_version
from specmodel.engines.vllm.targets import DEFAULT_DIR, ENV_DIR, FLUSH_PERIOD_S
from specmodel.limits import MAX_PENDING_VLLM_STEPS
from specmodel.units import from_ms


class State(HookState):
    def __init__(self) -> None:
        super().__init__(tag="vllm", env_dir=ENV_DIR, default_dir=DEFAULT_DIR)
        self.step: dict[str, Any] | None = None  # the step in flight
        self.where: str | None = None  # "forward" | "draft" while inside one: all-reduces count there
        self.span: tuple[str, Any, Any, float, dict[str, Any]] | None = None  # (role, cm, timer, t0, rec)
        self.last_end: float | None = None
        self.gpu_last_end: Any = None  # the last recorded step's GPU end event: the next step's GPU gap starts there


STATE = State()


def fault(site: str, exc: BaseException) -> None:
    """The hook's own code failed around a vLLM call: that step is not recorded (the call itself
    runs as usual); warned once per site."""
    STATE.step = None
    STATE.gpu_last_end = None  # GPU work no record covers: the next step's GPU gap is unknown
    STATE.warn_once(f"fault:{site}", f"vLLM {vllm_version()}: {site} failed ({exc!r}); that step is not recorded "
                                     "(the engine's call ran as usual)")


# --------------------------------------------------------------------------- clocks


def new_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


class Timer:
    """Two CUDA events on the current stream (a CPU step times with perf_counter, no timer):
    recorded in the hot path, read once :meth:`ready` (never synchronising there); only
    :meth:`wait` blocks, and only the shutdown flush calls it."""

    __slots__ = ("ev0", "ev1")

    def __init__(self) -> None:
        self.ev0: Any = None
        self.ev1: Any = None

    def start(self) -> None:
        self.ev0 = new_event()
        self.ev1 = new_event()
        self.ev0.record()

    def stop(self) -> None:
        if self.ev1 is None:
            raise RuntimeError("timer stopped before it started")
        self.ev1.record()

    def ready(self) -> bool:
        return bool(self.ev1 is not None and self.ev1.query())

    def wait(self) -> None:
        if self.ev1 is not None:
            self.ev1.synchronize()

    def seconds(self) -> float:
        if self.ev0 is None or self.ev1 is None:
            raise RuntimeError("timer never ran")
        if not self.ready():  # reading an incomplete event would wait (or fail): never here
            raise RuntimeError("timer read before its events completed")
        return from_ms(float(self.ev0.elapsed_time(self.ev1)))  # CUDA events report ms



# --------------------------------------------------------------------------- writing


def open_file(runner: Any, runner_kind: str) -> None:
    """This process's rank file, its meta line first (:meth:`HookState.open`); the idle flusher where
    a worker runs CUDA (its records wait for their events)."""
    r = rank()
    par = parallel(runner)
    from specmodel.engines.vllm.seams import runtime_missing

    for seam, figure, why in runtime_missing(runner, runner_kind):
        STATE.seams.miss(seam, figure, why)
    STATE.open(rank=r, dp=par["dp_rank"], pp=par["pp_rank"], meta=meta(runner, r, runner_kind, par),
               device=getattr(runner, "device", None))
    if is_cuda(runner):
        STATE.start_flusher(_flush_loop, flush)
    else:
        STATE.flush_at_exit(flush)


def write(obj: dict[str, Any]) -> None:
    STATE.write_line(obj)


def resolve(rec: dict[str, Any]) -> dict[str, Any]:
    """Turn the record's clocks into seconds (the line that is written). CPU steps carry floats
    already (the hot path allocates nothing); GPU steps carry CUDA-event timers."""
    timers = rec.pop("_timers")
    acc = rec.pop("_ar")
    rec.pop("_cuda", None)
    for key in ("forward", "draft"):
        t = timers.get(key)
        if t is None:
            rec[f"{key}_s"] = rec[f"{key}_allreduce_s"] = rec[f"{key}_n_allreduce"] = None
            continue
        rec[f"{key}_s"] = t if isinstance(t, float) else t.seconds()
        ars = timers.get(f"{key}_ar", [])
        rec[f"{key}_allreduce_s"] = acc[key][0] + sum(a.seconds() for a in ars)
        rec[f"{key}_n_allreduce"] = int(acc[key][1]) + len(ars)
    first = rec.pop("_first", None)
    if first is not None and rec["draft_s"] is not None:
        t, (ar_s, ar_n), n_timers = first
        ars = timers.get("draft_ar", [])[:n_timers]
        rec["draft_first_s"] = min(t if isinstance(t, float) else t.seconds(), rec["draft_s"])
        rec["draft_first_allreduce_s"] = ar_s + sum(a.seconds() for a in ars)
        rec["draft_first_n_allreduce"] = int(ar_n) + len(ars)
    step, gap = timers.get("step"), timers.get("gap")
    if isinstance(step, Timer):  # a GPU step: the cycle's figures on the CUDA events' clock
        rec["gpu_step_s"] = rec["step_s"] = step.seconds()
        rec["gpu_gap_s"] = gap.seconds() if isinstance(gap, Timer) else None
        rec["step_clock"] = "cuda_event"
    else:
        rec["step_s"] = rec["host_step_s"]
        rec["gpu_step_s"] = rec["gpu_gap_s"] = None
        rec["step_clock"] = "perf_counter"
    used = (rec["forward_s"] or 0.0) + (rec["draft_s"] or 0.0)
    # one clock: the spans are nested on one stream (or all perf_counter), so this is rounding only
    rec["overhead_s"] = max(rec["step_s"] - used, 0.0)
    rec["dropped_steps"] = STATE.dropped  # at write time: a line written after a drop carries it
    return rec


def _ready(rec: dict[str, Any] | Probe) -> bool:
    if isinstance(rec, Probe):
        return rec.ready()
    first = rec.get("_first")
    return all(t.ready() for t in _all_timers(rec["_timers"])) and \
        (first is None or not isinstance(first[0], Timer) or first[0].ready())


def _line(rec: dict[str, Any] | Probe) -> dict[str, Any]:
    return rec.record() if isinstance(rec, Probe) else resolve(rec)


def _wait(rec: dict[str, Any] | Probe) -> None:
    """Block until ``rec``'s events complete (shutdown only; never under the hook's lock)."""
    if isinstance(rec, Probe):
        for w in rec.watches:
            w.wait()
        return
    timers = _all_timers(rec["_timers"])
    first = rec.get("_first")
    if first is not None and isinstance(first[0], Timer):
        timers.append(first[0])
    for t in timers:
        t.wait()


def flush(wait: bool = False) -> int:
    """Write the pending GPU records whose events have completed, oldest first (FIFO on one
    stream: a later one is not done before an earlier); the step path and the idle flusher only
    query. With ``wait`` (the runner's shutdown, atexit) first wait for every pending record's
    events -- outside the lock, so a step never waits behind it -- then write them. Never raises:
    a record that cannot be resolved or written is lost, warned once."""
    n = 0
    queued: dict[int, Any] = {}
    if wait:
        with STATE.lock:
            queued = {id(r): r for r in STATE.pending}
        for rec in queued.values():
            try:
                _wait(rec)
            except Exception:  # noqa: BLE001 - resolved (or lost, warned) below
                pass
    with STATE.lock:
        while STATE.pending:
            rec = STATE.pending[0]
            try:
                if not _ready(rec) and id(rec) not in queued:
                    break
                STATE.pending.popleft()
                write(_line(rec))
                n += 1
            except Exception as exc:  # noqa: BLE001 - a lost line, never a crashed server
                if STATE.pending and STATE.pending[0] is rec:
                    STATE.pending.popleft()
                STATE.warn_once("fault:writer", f"vLLM {vllm_version()}: could not write a step to {STATE.path} "
                                                f"({exc!r}); that step is not recorded")
    return n


def flush_all() -> None:
    flush(wait=True)


def enqueue(rec: dict[str, Any] | Probe) -> None:
    """Queue a GPU record for the flusher; a full queue drops ``rec`` (the newest) and counts a
    step (see the module docstring for why the newest)."""
    with STATE.lock:
        if len(STATE.pending) < MAX_PENDING_VLLM_STEPS:
            STATE.pending.append(rec)
        elif not isinstance(rec, Probe):  # (a probe is no step: dropped, not counted)
            STATE.dropped += 1


def _flush_loop() -> None:
    while not STATE.stop.wait(FLUSH_PERIOD_S):
        if STATE.pending:
            flush()


def _all_timers(timers: dict[str, Any]) -> list[Timer]:
    out: list[Timer] = []
    for v in timers.values():
        out.extend(x for x in (v if isinstance(v, list) else [v]) if isinstance(x, Timer))
    return out

