"""The one annotation seam: an NVTX range + a torch.profiler ``record_function`` span per phase,
and a stopwatch that uses CUDA events on a GPU and ``perf_counter`` on the CPU.

Used by ``specmodel profile`` (the TP runner) and the SGLang hook alike, so a phase looks the
same in Nsight Systems, in a Kineto trace and in our own JSONL. GPU-only calls live here and
nowhere else; everything degrades to no-ops / CPU timing without CUDA.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from specmodel.schema.phases import parse_phase_label
from specmodel.units import from_ms


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # the seam must work (as a no-op) without torch
        return None
    return torch


def cuda_available() -> bool:
    t = _torch()
    return bool(t is not None and t.cuda.is_available())


def profiler_recording(t: Any = None) -> bool:
    """True while a torch.profiler / Kineto capture records (``record_function`` spans are seen)."""
    t = t if t is not None else _torch()
    if t is None:
        return False
    try:
        return bool(t._C._autograd._profiler_enabled())
    except AttributeError:  # an older torch without the query: always record
        return True


#: NVTX domain of every specmodel range when the ``nvtx`` package is installed (Nsight Systems
#: lists it as its own row under "NVTX", apart from the engine's and PyTorch's ranges).
NVTX_DOMAIN = "specmodel"
#: One ARGB colour per phase (ints: the nvtx package resolves colour names through matplotlib).
PHASE_COLORS = {
    "decode": 0xFF1F77B4,  # blue: the baseline step
    "verify": 0xFFD62728,  # red: the target's verify forward
    "draft": 0xFF2CA02C,  # green: one drafter step
    "draft_extend": 0xFF98DF8A,  # light green: drafter over the accepted tokens
    "extend": 0xFF9467BD,  # purple: prefill
    "allreduce": 0xFFFF7F0E,  # orange
    "idle": 0xFFC7C7C7,  # grey
}
_OTHER_COLOR = 0xFF7F7F7F


@functools.lru_cache(maxsize=1)
def _nvtx_package() -> Any:
    """The ``nvtx`` package (``pip install nvtx``), or None: then ``torch.cuda.nvtx``."""
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx


@functools.lru_cache(maxsize=4096)
def _nvtx_range(label: str) -> tuple[Any, Any]:
    """(domain, event attributes) for ``label``, built once per label: the message is registered
    once and a push costs one call. The payload is the phase's (batch, tokens) as a structured
    record (Nsight shows both fields by name); an nvtx without extended payloads gets tokens."""
    nv = _nvtx_package()
    domain = nv.get_domain(NVTX_DOMAIN)
    parsed = parse_phase_label(label)
    kind = parsed[0] if parsed else None
    color = PHASE_COLORS.get(kind or "", _OTHER_COLOR)
    if parsed is None:
        return domain, domain.get_event_attributes(message=label, color=color)
    import numpy as np

    record = np.array((parsed[1], parsed[2]), dtype=[("batch", np.int64), ("tokens", np.int64)])
    try:
        attrs = domain.get_event_attributes(message=label, color=color, category=kind, payload=record)
    except (TypeError, ValueError):  # an nvtx without extended (NumPy) payloads: int and float only
        attrs = domain.get_event_attributes(message=label, color=color, category=kind, payload=int(parsed[2]))
    return domain, attrs


def _nvtx_push(label: str, t: Any) -> Callable[[], None]:
    """Open an NVTX range for ``label``; returns the matching pop."""
    if _nvtx_package() is not None:
        domain, attrs = _nvtx_range(label)
        domain.push_range(attrs)
        return cast(Callable[[], None], domain.pop_range)
    t.cuda.nvtx.range_push(label)
    return cast(Callable[[], None], t.cuda.nvtx.range_pop)


@contextmanager
def phase(label: str, *, nvtx: bool = True, record: bool = True) -> Iterator[None]:
    """Annotate a span: NVTX range (GPU only; visible in Nsight Systems) + record_function
    (visible in torch.profiler/Kineto traces as a ``user_annotation``).

    NVTX: with the ``nvtx`` package installed, a range in the ``specmodel`` domain coloured by
    phase with (batch, tokens) as its payload; without it, ``torch.cuda.nvtx`` (default domain).
    The ``record_function`` is only entered while a profiler records: outside one nothing would
    see it, and entering it is not free (a dispatcher round trip; ~2 % of a 12 ms CPU forward,
    see benchmarks/bench_annotation_overhead.py)."""
    t = _torch()
    pop: Callable[[], None] | None = None
    rf = None
    if t is not None:
        if nvtx and t.cuda.is_available():
            pop = _nvtx_push(label, t)
        if record and profiler_recording(t):
            rf = t.autograd.profiler.record_function(label)
            rf.__enter__()
    try:
        yield
    finally:
        if rf is not None:
            rf.__exit__(None, None, None)
        if pop is not None:
            pop()


@dataclass
class Stopwatch:
    """Times a span on the device that runs it.

    On CUDA, two events on the current stream (asynchronous work such as CUDA-graph replays
    is timed correctly; ``elapsed_s`` synchronises on the end event unless :meth:`ready`). On the CPU,
    ``perf_counter`` (gloo collectives are synchronous from the caller's view).
    """

    use_cuda: bool = False
    _start: Any = None
    _end: Any = None
    _t0: float = 0.0
    _t1: float = 0.0

    @classmethod
    def for_device(cls, device: Any = None) -> Stopwatch:
        dev_type = getattr(device, "type", str(device) if device is not None else "")
        return cls(use_cuda=dev_type.startswith("cuda") and cuda_available())

    def start(self) -> None:
        if self.use_cuda:
            t = _torch()
            self._start = t.cuda.Event(enable_timing=True)
            self._end = t.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.use_cuda:
            self._end.record()
        else:
            self._t1 = time.perf_counter()

    def ready(self) -> bool:
        """True once :attr:`elapsed_s` can be read without waiting (CUDA: the end event has
        completed; never synchronises, so a hook can resolve timings off the hot path)."""
        if self.use_cuda:
            return bool(self._end is not None and self._end.query())
        return True

    def wait(self) -> None:
        """Block until the end event has completed (CUDA; nothing on the CPU). Only a hook's exit
        flush calls it, never on the step path."""
        if self.use_cuda and self._end is not None:
            self._end.synchronize()

    @property
    def elapsed_s(self) -> float:
        if self.use_cuda:
            if not self._end.query():  # a hook reads it once ready: no synchronise call at all then
                self._end.synchronize()
            return from_ms(float(self._start.elapsed_time(self._end)))  # CUDA events report ms
        return self._t1 - self._t0


@contextmanager
def timed_phase(label: str, device: Any = None, *, nvtx: bool = True, record: bool = True) -> Iterator[Stopwatch]:
    """``phase`` + ``Stopwatch`` in one: ``with timed_phase(lbl, dev) as sw: ...; sw.elapsed_s``."""
    sw = Stopwatch.for_device(device)
    with phase(label, nvtx=nvtx, record=record):
        sw.start()
        try:
            yield sw
        finally:
            sw.stop()
