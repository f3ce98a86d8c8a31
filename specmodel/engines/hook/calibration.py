"""The box's condition, measured inside every hooked engine worker: one fixed probe, timed at the
first recorded step and then every :data:`PERIOD_S` seconds of steps, at a step boundary.

Why: a baseline server and a speculative server are recorded apart, and the speedup is the ratio
of their costs, so a box 30 % slower during one recording moves the speedup by 30 % (a false GO).
Each recording now carries the same yardstick -- the same kernel on the same device in the same
worker process -- and ``--summarize`` compares the two (:mod:`specmodel.model.consistency`,
``box_condition``) instead of guessing from a tolerance.

The probe (one :class:`Probe`, format :data:`specmodel.schema.formats.PROBE`, one JSON line in the
hook's own rank file): :data:`SAMPLES` timings of ``reps`` float32 ``n x n`` matmuls
(:data:`KERNELS`: sized per device so that a sample is bound by the device, not by launching
kernels), after one untimed one (lazy initialisation is not the box). CPU: ``perf_counter``;
GPU: CUDA events, resolved by the hook's deferred flush like its step records (never a
synchronise on the step path). Beside it what the box says of itself, each null where unreadable:
``wait_share``, the share of the step thread's runnable time since the previous probe spent waiting
for a CPU (``/proc/thread-self/schedstat``; null on the first probe: before it the thread started
the engine, and the box's load during start-up -- other servers loading, a test suite -- is not the
condition its steps ran in: seen to read 42 % there against 6 % over the steps), the 1-minute
load average (``/proc/loadavg``), the mean current frequency of the cores this worker may run on
(``scaling_cur_freq``) and, on a GPU, the SM clock and NVML's throttle reasons.

Why the wait share: a probe of a few ms runs inside one scheduler time slice, so a process sharing
the worker's core does not slow it (measured: a busy loop pinned to the worker's core left the
probe's median within 3 %) while it stretches every step; the worker's wait for a CPU over the
interval is that contention, measured. Together they give the yardstick the check compares:
``probe_s / (1 - wait_share)``, the fixed work's seconds in this worker, time-sharing included.

Why the others' share (``others_share``): on a CPU engine the probe's device is the server's own
host, so the probe and the wait share see the server's own processes too -- its API process
tokenising and streaming competes for the same cores, and a speculative server emitting tokens
faster keeps it busier. Measured on a clean interleaved pair (A B B A, idle 2-core box): the ngram
server's probe read 44 % slower than the baseline server's with no other work on the box. What
tells the box's load from the server's own is who asked for the CPU: the time every thread outside
the server's own process tree (its root: the topmost ancestor that carries this hook's
output-directory variable, and every descendant of it) ran or waited runnable
(``/proc/<pid>/task/<tid>/schedstat``), per core of the box -- a runnable-thread count of other
work, like a load average without the server. Demand, not the CPU time other work got: on a
saturated box (load 10-14 on 2 cores) the share of busy time others *got* moved 8 points when four
busy loops ran beside the baseline (its speedup read 3.68x against 1.1-2.3x clean), since the box
was already full. It is read
over a window of :data:`WINDOW_S` of steps just before each probe (after the first), kept only
if the server stepped throughout (no two step boundaries more than :data:`GAP_S` apart; else
the window starts again at the next boundary): an idle server's interval would count the other
server of an interleaved pair, serving meanwhile, as the box's load. Null on the first probe, on
a probe that ran a whole period overdue without a window, and wherever unreadable.

Cost: ~3 ms of CPU (0.5 ms of GPU) per probe, one probe per 5 s of steps: under 0.1 % of the
time the engine steps. The hook moves its ``gap_s`` clock past the probe, so no step carries it.

Never harms the server: :meth:`Calibrator.run` raises, and the hook warns once and drops that
probe (the next period tries again); reading load, frequency or NVML never raises (null).
Kept free of torch and of any engine import at module level (the hooks import it in the worker).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from specmodel.schema.formats import PROBE
from specmodel.units import from_khz, from_mhz

#: seconds of engine steps between two probes (the first runs at the first recorded step's end)
PERIOD_S = 5.0
#: timed samples per probe: their spread is the probe's own noise
SAMPLES = 5
#: device type -> (n, reps): ``reps`` float32 n x n matmuls per sample. CPU: 128 (42 us each on one
#: core of the 2-core test box, 0.7 ms a sample: compute, not dispatch); GPU: 1024 (~35 us each,
#: well above a kernel launch, so the sample times the device, not the host launching it)
KERNELS = {"cpu": (128, 16), "cuda": (1024, 8)}
KERNEL = "matmul_f32"
#: seconds of steps before each probe over which the others' share of the CPU is read (0.25 s: 50
#: clock ticks of a 2-core box at USER_HZ 100, one tick 2 % of the window, the median over the
#: windows finer; short enough to fit inside a round of requests: an ngram server's rounds of 2 x 512
#: tokens on the 2-core box ran ~0.5 s, too short for a window of 0.5 s after the probe was due)
WINDOW_S = 0.25
#: two step boundaries further apart than this: the server idled, and the window is dropped (a busy
#: server's boundaries are a step apart: ms on the CPU engine)
GAP_S = 0.5


def load_1m() -> float | None:
    """The 1-minute load average, None where unreadable."""
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_freq_hz(cpus: set[int] | None = None) -> float | None:
    """Mean ``scaling_cur_freq`` of ``cpus`` (default: the cores this process may run on), None
    where no core says (containers, VMs without cpufreq)."""
    try:
        cpus = cpus if cpus is not None else set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = set(range(os.cpu_count() or 1))
    vals = []
    for c in sorted(cpus):
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq", encoding="ascii") as fh:
                vals.append(from_khz(float(fh.read().strip())))  # the kernel reports kHz
        except (OSError, ValueError):
            continue
    return sum(vals) / len(vals) if vals else None


def schedstat_ns() -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one) of the calling thread since it started
    (``/proc/thread-self/schedstat``), None where unreadable."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            run, wait = fh.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def _proc_stats() -> dict[int, tuple[int, int]] | None:
    """pid -> (parent pid, user + system clock ticks) of every process readable, None where /proc is not."""
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return None
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                # the command name (field 2) may hold spaces and parentheses: split after its last ')'
                rest = fh.read().rsplit(")", 1)[1].split()
            out[pid] = (int(rest[1]), int(rest[11]) + int(rest[12]))
        except (OSError, ValueError, IndexError):
            continue  # exited between the listing and the read
    return out


def _hook_vars() -> dict[str, str]:
    """This process's hook output-directory variables (``SPECMODEL_<ENGINE>_DIR``, set by ``specmodel
    <engine>`` on the server command it starts: :func:`specmodel.engines.hook.run.child_env`)."""
    return {k: v for k, v in os.environ.items() if k.startswith("SPECMODEL_") and k.endswith("_DIR")}


def server_root(pid: int | None = None) -> int:
    """The server's own root process: the topmost ancestor of ``pid`` (default this one) whose
    environment carries this process's hook variables with the same values (the server command
    ``specmodel <engine>`` started; ``specmodel`` itself does not carry them). ``pid`` itself
    where no ancestor is readable or the variables are absent."""
    pid = os.getpid() if pid is None else pid
    mine = _hook_vars()
    root = pid
    if not mine:
        return root
    want = {f"{k}={v}".encode() for k, v in mine.items()}
    cur = pid
    for _ in range(64):  # bounded: a process tree is never this deep
        try:
            with open(f"/proc/{cur}/stat", encoding="ascii", errors="replace") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid <= 1:
                break
            with open(f"/proc/{ppid}/environ", "rb") as fh:
                env = set(fh.read().split(b"\0"))
        except (OSError, ValueError, IndexError):
            break
        if not want <= env:
            break
        root = cur = ppid
    return root


def _tree(root: int, procs: dict[int, tuple[int, int]]) -> set[int]:
    """``root`` and every descendant of it among ``procs``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    own, todo = set(), [root]
    while todo:
        pid = todo.pop()
        own.add(pid)
        todo.extend(children.get(pid, ()))
    return own


def box_ticks(root: int) -> tuple[int, dict[int, int]] | None:
    """(monotonic ns now, thread id -> ns it ran plus ns it waited runnable, for every thread outside
    ``root``'s process tree: ``/proc/<pid>/task/<tid>/schedstat``), None where unreadable: the
    difference of two readings is the CPU time other work asked for between them."""
    procs = _proc_stats()
    if procs is None or root not in procs:
        return None
    own = _tree(root, procs)
    demand: dict[int, int] = {}
    for pid in procs:
        if pid in own:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # exited
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as fh:
                    run, wait = fh.read().split()[:2]
                demand[int(tid)] = int(run) + int(wait)
            except (OSError, ValueError):
                continue
    return time.monotonic_ns(), demand


def others_share(before: tuple[int, dict[int, int]], after: tuple[int, dict[int, int]],
                 cpus: int | None = None) -> float | None:
    """Other work's demand for the box's CPUs between two :func:`box_ticks` readings: the ns its
    threads ran or waited to run, over the interval times the box's cores (0: nothing else wanted
    a CPU; 1: on average one runnable thread per core; above 1: more than the box could run). A
    thread started in between counts whole, one that exited is lost. None over an empty interval."""
    wall = after[0] - before[0]
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    if wall <= 0:
        return None
    asked = sum(max(v - before[1].get(t, 0), 0) for t, v in after[1].items())
    return asked / (wall * n)


class _Nvml:
    """SM clock and throttle reasons of one CUDA device; every failure is a null, said nowhere."""

    def __init__(self, index: int) -> None:
        self.handle: Any = None
        self.nvml: Any = None
        try:
            import pynvml

            from specmodel.profile.hardware import _handle, cuda_uuids

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle, _ = _handle(pynvml, index, cuda_uuids([index])[0])
        except Exception:  # noqa: BLE001 - absent NVML: nulls
            self.handle = None

    def read(self) -> tuple[float | None, int | None]:
        if self.handle is None:
            return None, None
        clock = reasons = None
        try:
            clock = from_mhz(float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)))
        except Exception:  # noqa: BLE001
            pass
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            try:
                reasons = int(getattr(self.nvml, fn)(self.handle))
                break
            except Exception:  # noqa: BLE001
                continue
        return clock, reasons


@dataclass
class Probe:
    """One probe: its record (without ``samples_s`` until resolved) and its samples' stopwatches."""

    rec: dict[str, Any]
    watches: list[Any] = field(default_factory=list)

    @property
    def use_cuda(self) -> bool:
        return bool(self.watches and self.watches[0].use_cuda)

    def ready(self) -> bool:
        """Every sample can be read without waiting (CUDA: a query, never a synchronise)."""
        return all(w.ready() for w in self.watches)

    def record(self) -> dict[str, Any]:
        """The line to write (on a GPU: call once :meth:`ready`, or it waits)."""
        return {**self.rec, "samples_s": [float(w.elapsed_s) for w in self.watches]}


class Calibrator:
    """When to probe and how, for one worker on one device (``device``: the runner's)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.next_at: float | None = None  # perf_counter of the next probe; None: at the next boundary
        self._mats: tuple[Any, Any, Any] | None = None
        self._nvml: _Nvml | None = None
        # the step thread's schedstat at the last probe; None until the first probe (start-up is no interval of steps)
        self._sched: tuple[int, int] | None = None
        # the server's root process (found at the first probe), the open window (ticks at its start, its
        # start, the last step boundary seen) and the share of the last window closed, for the next probe
        self._root: int | None = None
        self._window: tuple[tuple[int, dict[int, int]], float, float] | None = None
        self._others: float | None = None

    def due(self, now: float) -> bool:
        """Whether to probe at this step boundary (``now``: perf_counter). The first probe runs at
        once; each later one after a window of :data:`WINDOW_S` of steps that reads the others'
        share, opened at the first boundary from :data:`WINDOW_S` before the probe is due and
        reopened wherever the server idled in it; a probe a whole period overdue (the server never
        stepped that long at a stretch) or on a box whose ticks are unreadable runs without it.
        Never raises (the step path)."""
        if self.next_at is None:
            return True
        if now < self.next_at - WINDOW_S:
            return False
        overdue = now >= self.next_at + PERIOD_S
        try:
            if self._window is not None:
                start_ticks, start, last = self._window
                if now - last > GAP_S:
                    self._window = None  # the server idled: not a window of steps
                elif now - start >= WINDOW_S:
                    ticks = box_ticks(self._root) if self._root is not None else None
                    self._others = others_share(start_ticks, ticks) if ticks is not None else None
                    self._window = None
                    return True
                else:
                    self._window = (start_ticks, start, now)
                    return overdue
            if not overdue and self._root is not None:
                ticks = box_ticks(self._root)
                if ticks is not None:
                    self._window = (ticks, now, now)
                    return False
        except Exception:  # noqa: BLE001 - a share not read is a null, never a fault in the step path
            self._window = None
        return now >= self.next_at

    def run(self) -> Probe:
        """Queue (GPU) or run (CPU) one probe now; raises on any failure (the hook's fault path).
        The next one is due :data:`PERIOD_S` later whatever happens, so a probe that keeps failing
        costs one attempt per period."""
        from specmodel.engines.hook.annotate import Stopwatch

        self.next_at = time.perf_counter() + PERIOD_S
        sw = Stopwatch.for_device(self.device)
        kind = "cuda" if sw.use_cuda else "cpu"
        n, reps = KERNELS[kind]
        if self._mats is None:
            import torch

            dev = self.device if sw.use_cuda else "cpu"
            # fixed values: the probe's work is the same in every worker and every run
            a = torch.full((n, n), 0.5, dtype=torch.float32, device=dev)
            b = torch.full((n, n), 0.25, dtype=torch.float32, device=dev)
            self._mats = (a, b, torch.empty((n, n), dtype=torch.float32, device=dev))
            if sw.use_cuda:
                self._nvml = _Nvml(int(getattr(self.device, "index", None) or torch.cuda.current_device()))
        import torch

        a, b, c = self._mats
        torch.mm(a, b, out=c)  # untimed: first-call set-up is not the box
        watches = []
        for _ in range(SAMPLES):
            w = Stopwatch(use_cuda=sw.use_cuda)
            w.start()
            for _ in range(reps):
                torch.mm(a, b, out=c)
            w.stop()
            watches.append(w)
        clock, reasons = self._nvml.read() if self._nvml is not None else (None, None)
        sched, wait_share = schedstat_ns(), None
        if sched is not None and self._sched is not None:
            run_ns, wait_ns = sched[0] - self._sched[0], sched[1] - self._sched[1]
            wait_share = wait_ns / (run_ns + wait_ns) if run_ns + wait_ns > 0 and run_ns >= 0 <= wait_ns else None
        self._sched = sched
        if self._root is None:
            self._root = server_root()
        others, self._others, self._window = self._others, None, None
        rec = {**PROBE.header(), "type": "probe", "kernel": KERNEL, "n": n, "reps": reps,
               "device": kind, "clock": "cuda_event" if sw.use_cuda else "perf_counter",
               "wait_share": wait_share, "others_share": others, "load_1m": load_1m(), "cpu_freq_hz": cpu_freq_hz(), "sm_clock_hz": clock,
               "throttle_reasons": reasons, "t_unix_s": time.time()}
        return Probe(rec=rec, watches=watches)
