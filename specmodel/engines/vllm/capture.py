"""A torch.profiler capture of a few engine steps, taken inside every vLLM worker the hook runs in
(:mod:`specmodel.engines.vllm.hook`): the measurement of the all-reduce where the hook's Python wrapper
cannot see it.

Why: on GPUs vLLM replays CUDA graphs for decode, verify and draft; Python inside a replayed
forward does not run, so ``GroupCoordinator._all_reduce_out_place`` (the wrapper that times each
all-reduce) is never called there and those rows record 0 all-reduces. A Kineto trace still sees
the collective kernels of a replay (each carries the correlation id of the ``cudaGraphLaunch``
issued inside the hook's ``specmodel.<phase>`` span: docs/allreduce-capture.md), so a capture of a
few cycle steps gives each phase's all-reduce *share*; ``specmodel vllm --summarize`` multiplies
the rows the wrapper did not see by it (:mod:`specmodel.engines.vllm.capture_ingest`).

When: ``SPECMODEL_VLLM_CAPTURE_STEPS=N`` (``specmodel vllm --capture-steps N``) records N
*cycle* steps (decode / verify, each with its proposal) after :data:`WARMUP_STEPS` cycle steps;
other steps that fall inside the window (a prefill) are recorded too. ``0`` turns it off. Unset:
on (:data:`GPU_DEFAULT_STEPS`) in a worker that runs CUDA graphs (a CUDA device without
``enforce_eager``) or fuses the all-reduce with its RMSNorm (:func:`fuses_allreduce`), off elsewhere
(on the CPU and in eager, unfused mode the wrapper sees every all-reduce).

What it writes, per process, in ``<hook dir>/capture/``, named like its rank file
(``rank<tp>-dp<dp>-pp<pp>-pid<pid>``): ``<name>.pt.trace.json.gz`` (the Kineto trace, CPU activity,
plus CUDA on a GPU) and ``<name>.json`` (format ``specmodel.vllm_capture``:
the window on the wall clock, the steps' kinds, the export's own time), each written to a temp
file and renamed. Steps inside the window (and the step whose gap holds the export) are
stretched by the profiler: the summary leaves them out of the step rows.

Cost: the profiler's own overhead on the N captured steps (those steps are not used for timing)
and one stall of the export (the trace is written synchronously at the end of the last captured
step, while the other ranks wait in their next collective): measured in ``export_s``.

Never harms the server: any failure (a profiler already running, a full disk) warns once on
stderr and the run goes on without a capture.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specmodel.limits import MAX_CAPTURE_STEPS
from specmodel.schema.formats import VLLM_CAPTURE

#: N cycle steps to capture (``specmodel vllm --capture-steps``); 0 = off; unset = the device's default
ENV_STEPS = "SPECMODEL_VLLM_CAPTURE_STEPS"
#: diagnostic: ``1`` leaves ``GroupCoordinator._all_reduce_out_place`` unwrapped, as a CUDA-graph
#: replay leaves it unseen ("what a graph replay looks like"); the rows then record 0 all-reduces
ENV_NO_ALLREDUCE_WRAPPER = "SPECMODEL_VLLM_NO_ALLREDUCE_WRAPPER"
SUBDIR = "capture"
#: cycle steps before the window: the first steps of a batch shape pay one-off costs
#: (allocations, a compile, the profiler's own first-use set-up)
WARMUP_STEPS = 3
#: the default where a worker runs CUDA graphs: enough steps for a median per phase, a trace of a
#: few MB on a large model
GPU_DEFAULT_STEPS = 8
#: the step kinds a cycle is made of (a verify step holds its proposal)
CYCLE_KINDS = ("decode", "verify")


def wrapper_off(environ: Any = None) -> bool:
    """Whether the all-reduce wrapper is switched off (:data:`ENV_NO_ALLREDUCE_WRAPPER`)."""
    env = os.environ if environ is None else environ
    return str(env.get(ENV_NO_ALLREDUCE_WRAPPER, "")).strip().lower() in ("1", "true", "yes")


def parse_steps(value: str | None) -> int | None:
    """:data:`ENV_STEPS` as a step count (None: unset, the device's default). Raises ValueError."""
    if value is None or not value.strip():
        return None
    n = int(value.strip())
    if not 0 <= n <= MAX_CAPTURE_STEPS:
        raise ValueError(f"${ENV_STEPS}: expected 0..{MAX_CAPTURE_STEPS}, got {value!r}")
    return n


def runs_graphs(runner: Any) -> bool:
    """A worker that replays CUDA graphs: a CUDA device whose ``compilation_config.cudagraph_mode``
    is not ``NONE`` (vllm 0.32 ``config/compilation.py`` ``CUDAGraphMode``: PIECEWISE graphs hold the
    all-reduces too), or without that field, no ``enforce_eager``."""
    dev = getattr(runner, "device", None)
    if not str(getattr(dev, "type", dev or "")).startswith("cuda"):
        return False
    cc = getattr(getattr(runner, "vllm_config", None), "compilation_config", None)
    mode = getattr(cc, "cudagraph_mode", None)
    if mode is not None:
        return str(getattr(mode, "name", mode)) != "NONE"
    return not bool(getattr(getattr(runner, "model_config", None), "enforce_eager", False))


def fuses_allreduce(runner: Any) -> bool:
    """A CUDA worker whose compiled graphs fuse the all-reduce with the RMSNorm after it
    (``compilation_config.pass_config.fuse_allreduce_rms``, vllm 0.32-0.34; 0.34 ``config/vllm.py:208``
    turns it on at ``-O2`` with TP > 1 on sm90 / sm100 with FlashInfer and on ROCm with aiter): the
    fused op (``flashinfer_trtllm_fused_allreduce_norm``) never reaches the wrapper, even without graphs."""
    dev = getattr(runner, "device", None)
    if not str(getattr(dev, "type", dev or "")).startswith("cuda"):
        return False
    cc = getattr(getattr(runner, "vllm_config", None), "compilation_config", None)
    return getattr(getattr(cc, "pass_config", None), "fuse_allreduce_rms", None) is True


class Capture:
    """One worker's capture: armed by the first step, started at a cycle step after the warm-up,
    stopped and exported after N cycle steps. Every method never raises."""

    def __init__(self) -> None:
        self.decided = False
        self.steps = 0  # N; 0 = off
        self.cuda = False
        self.seen = 0  # cycle steps before the window
        self.prof: Any = None
        self.kinds: list[str] = []
        self.cycle = 0
        self.started_unix_s = 0.0
        self.done = False
        self.warned = False

    def _warn(self, msg: str) -> None:
        if not self.warned:
            self.warned = True
            print(f"specmodel vllm hook: warning: {msg}; the run goes on without a capture", file=sys.stderr,
                  flush=True)

    def _decide(self, runner: Any) -> None:
        self.decided = True
        try:
            n = parse_steps(os.environ.get(ENV_STEPS))
        except ValueError as exc:
            self._warn(str(exc))
            self.done = True
            return
        self.cuda = str(getattr(getattr(runner, "device", None), "type", "")).startswith("cuda")
        self.steps = (GPU_DEFAULT_STEPS if runs_graphs(runner) or fuses_allreduce(runner) else 0) if n is None else n
        if self.steps == 0:
            self.done = True

    def begin(self, runner: Any, kind: str) -> None:
        """A step of ``kind`` starts (its record is open): start the profiler when the window opens."""
        try:
            if not self.decided:
                self._decide(runner)
            if self.done:
                return
            if self.prof is not None:
                self.kinds.append(kind)
                return
            if kind not in CYCLE_KINDS:
                return
            if self.seen < WARMUP_STEPS:
                self.seen += 1
                return
            self._start()
            self.kinds.append(kind)
        except Exception as exc:  # noqa: BLE001 - a capture never harms the server
            self._abort(f"starting the capture failed ({exc!r})")

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        prof = profile(activities=acts, record_shapes=False, with_stack=False, profile_memory=False)
        self.started_unix_s = time.time()
        prof.start()
        self.prof = prof

    def end(self, kind: str | None, out_dir: Path, rank: str, stem: str | None = None) -> None:
        """The step in flight ended (``kind`` None: it was not recorded): stop and export after N cycle steps."""
        if self.prof is None or self.done:
            return
        try:
            if kind in CYCLE_KINDS:
                self.cycle += 1
            if self.cycle >= self.steps:
                self._finish(out_dir, rank, stem or f"rank{rank}")
        except Exception as exc:  # noqa: BLE001
            self._abort(f"writing the capture to {out_dir / SUBDIR} failed ({exc!r})")

    def _finish(self, out_dir: Path, rank: str, stem: str) -> None:
        prof, self.prof = self.prof, None
        self.done = True
        t0 = time.perf_counter()
        if self.cuda:  # the last step's kernels (its proposal may still run) into the trace: one wait a capture
            import torch

            torch.cuda.synchronize()
        stopped_unix_s = time.time()
        prof.stop()
        dest = out_dir / SUBDIR
        dest.mkdir(parents=True, exist_ok=True)
        trace = dest / f"{stem}.pt.trace.json.gz"
        with tempfile.TemporaryDirectory(dir=dest, prefix=".capture-") as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            packed = Path(tmp) / "trace.json.gz"
            with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.replace(packed, trace)
        export_s = time.perf_counter() - t0
        meta = VLLM_CAPTURE.stamp({
            "rank": rank, "pid": os.getpid(), "trace": trace.name, "activities": "cpu+cuda" if self.cuda else "cpu",
            "warmup_steps": WARMUP_STEPS, "cycle_steps": self.cycle, "step_kinds": self.kinds,
            "started_unix_s": self.started_unix_s, "stopped_unix_s": stopped_unix_s,
            "ended_unix_s": time.time(), "export_s": export_s,
            "allreduce_wrapper": not wrapper_off(),
        })
        fd, tmp_meta = tempfile.mkstemp(dir=dest, prefix=".capture-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(meta, fh)
        os.chmod(tmp_meta, 0o644)  # (mkstemp makes it 0600: readable like the rank logs)
        os.replace(tmp_meta, dest / f"{stem}.json")

    def _abort(self, msg: str) -> None:
        prof, self.prof = self.prof, None
        self.done = True
        if prof is not None:
            try:
                prof.stop()
            except Exception:  # noqa: BLE001
                pass
        self._warn(msg)
