"""The SGLang forward-pass hook: every forward a TP worker runs, annotated and timed per phase.

``install()`` wraps, by name and only where found:

* ``ModelRunner.forward`` (target and drafter runners; eager forwards and the target's
  CUDA-graph replays go through it);
* ``EAGLEDraftCudaGraphRunner.execute`` (0.5.23) or ``.replay`` (0.5.5), and the same on
  ``EAGLEDraftExtendCudaGraphRunner``: the drafter's CUDA-graph replays bypass
  ``ModelRunner.forward``.

Each call is wrapped in the annotation seam (:func:`specmodel.engines.hook.annotate.phase`: NVTX
range + ``record_function`` span ``specmodel.<phase>[bs=..,toks=..]``) and timed with a
:class:`~specmodel.engines.hook.annotate.Stopwatch` (CUDA events on a GPU, recorded on the stream
and written once a ``query()`` says they completed -- after the next forward or by a background
thread -- so no forward ever waits on the GPU; ``perf_counter`` on the CPU). One JSON line per
forward goes to ``<dir>/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl`` (one file per process: a DP
replica's or a PP stage's TP rank 0, or a second server sharing ``--out``, never appends into
another's file; appended, one ``write`` per line), preceded by one ``meta`` line naming the
process's ranks. At most ``limits.MAX_PENDING_SGLANG_FORWARDS`` timings wait for their events; a
forward that finds the queue full is dropped (the newest: the queued ones complete first) and
counted in ``dropped_forwards`` on every later line, and ``--summarize`` reports it. Only the exit
flush waits on events, outside the hook's lock.

Phases come from ``forward_batch.forward_mode.name`` (member values shift between versions):
TARGET_VERIFY → verify; DECODE → draft on the drafter's runner (``is_draft_worker``), decode
on the target; DRAFT_EXTEND/DRAFT_EXTEND_V2 → draft_extend; EXTEND/MIXED/SPLIT_PREFILL →
extend; IDLE → not recorded; anything else → one warning, not recorded.

Never crashes the server: a class or method that is not there gives one warning line naming
the SGLang version and the member, and that member stays unpatched; a failure inside the hook
disables recording for that call and is logged once. The original method's own exceptions
propagate untouched.

Modules not yet imported when ``install()`` runs are patched when they are imported (a
``sys.meta_path`` finder), which is how ``specmodel sglang`` patches TP workers spawned by
the server: its ``sitecustomize`` shim calls ``install()`` in every Python process.

The scheduler's step (host work beside the forwards). Each TP rank's scheduler process runs
the forwards in its own thread (0.5.5 ``Scheduler.run_batch`` calls
``model_worker.forward_batch_generation`` inline), so a step and the forwards inside it are
seen by one process. Seams, read in SGLang 0.5.5 and 0.5.23 ``srt/managers/scheduler.py``:

* ``Scheduler.get_next_batch_to_run`` bounds a step: both event loops call it once per pass
  (0.5.5 ``event_loop_normal`` l. 958-974 and ``event_loop_overlap`` l. 977-1004; 0.5.23
  l. 2026-2058 and 2061-2134). A step runs from one call to the next, so steps tile the loop:
  batch building, ``run_batch`` (EAGLE: ``EAGLEWorker.forward_batch_generation``, 0.5.5
  ``eagle_worker.py`` l. 249-303: draft, tree building, verify and its bookkeeping,
  draft-extend), ``process_batch_result`` and the next pass's request intake.
* ``Scheduler.run_batch(batch)`` names the step's batch (``forward_mode``, ``batch_size()``).
  A pass that runs no batch (idle) or no timed forward (warm-up, capture) is not a step, nor
  one the hook's calibration probe ran in (first step, then every few seconds: its time would
  pass for the engine's host work).

Per step one ``step`` record: ``step_s`` (the step's span), ``forwards_s`` (the forwards timed
inside it), ``overhead_s = step_s - forwards_s`` and ``phases`` (timed calls per phase), all on
one clock (``clock``): on a GPU a CUDA event at each bound, recorded on the stream the forwards
are queued on, and the forwards' own CUDA events; on the CPU ``perf_counter`` for both. ``host_s``
is the step's ``perf_counter`` span, for reading only: a CUDA-event time is never subtracted from
it. On the GPU's clock the host work a step costs is the time the forwards' stream spends outside
the forwards between the bounds: the host's work while the GPU waits, and kernels outside a
forward (sampling, tree building).

The overlap scheduler (0.5.23's speculative workers are all "v2" workers that run under it
unless ``--disable-overlap-schedule``; 0.5.5 turns it off for EAGLE unless SGLANG_ENABLE_SPEC_V2,
``server_args.py`` l. 1548-1552) runs the host one batch ahead: pass k launches batch k
(``run_batch`` queues it on ``forward_stream`` inside ``forward_stream_ctx``: 0.5.5 l. 1984,
0.5.23 l. 4671) and then processes batch k - 1's results. The bounds are recorded on
``forward_stream`` there, so step k's span on the GPU's clock holds exactly batch k's queued work
plus the stream's idle time before it; host work that overlaps the GPU costs nothing there, as in
the engine. On the host clock (a CPU
device) step k carries batch k - 1's result processing: steps tile the loop, so the mean is the
loop's. The step in flight when the process ends is not written.

On a GPU, ``scripts/gpu_check_trace.py`` (``sglang_scheduler_step``) runs the stand-in scheduler's
loop (``tests/data/sglang_standin``) under this hook on CUDA events: ``step_s`` ≥ ``forwards_s`` on
one clock, and no synchronise call while the loop runs.

Reading back (no SGLang needed): :mod:`specmodel.engines.sglang.hooklog` (``read_forward_log``,
``summarize``: median per phase × batch × tokens → a :class:`Profile`; decode and verify rows
carry their steps' host work).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from specmodel.engines.hook.calibration import Calibrator, Probe
from specmodel.engines.hook.patch import PatchOnImport, as_wrapper, open_rank_file
from specmodel.limits import MAX_PENDING_SGLANG_FORWARDS
from specmodel.schema.formats import SGLANG_FORWARD
from specmodel.schema.phases import SGLANG_IGNORED_MODES, SGLANG_MODE_KINDS

log = logging.getLogger("specmodel.sglang")

#: Environment variable naming the output directory (set by ``specmodel sglang --out``).
ENV_DIR = "SPECMODEL_SGLANG_DIR"
DEFAULT_DIR = "sglang-forward"
LINE_SCHEMA = SGLANG_FORWARD.name
LINE_SCHEMA_VERSION = SGLANG_FORWARD.version

MODEL_RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
#: Where SGLang keeps ``get_is_capture_mode()`` (True inside ``model_capture_mode()``, around
#: every CUDA-graph ``capture()``): 0.5.23 and 0.5.5.
CAPTURE_MODE_MODULES = ("sglang.srt.model_executor.runner_utils.capture_mode",
                        "sglang.srt.model_executor.cuda_graph_runner")
DRAFT_RUNNER_MODULE = "sglang.srt.speculative.eagle_draft_cuda_graph_runner"
DRAFT_EXTEND_RUNNER_MODULE = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"


@dataclass(frozen=True, kw_only=True)
class Target:
    """One member to wrap: ``module.cls`` and the first of ``methods`` that the class has."""

    module: str
    cls: str
    methods: tuple[str, ...]
    role: str  # "model_runner" | "draft" | "draft_extend"
    what: str  # what the user loses when it is missing

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.cls}"


TARGETS: tuple[Target, ...] = (
    Target(module=MODEL_RUNNER_MODULE, cls="ModelRunner", methods=("forward",), role="model_runner",
           what="no forward will be timed"),
    # 0.5.23 (eagle_worker_v2) calls .execute; 0.5.5 calls .replay. execute first: where a
    # version has both, replay may wrap execute and would be counted twice.
    Target(module=DRAFT_RUNNER_MODULE, cls="EAGLEDraftCudaGraphRunner", methods=("execute", "replay"),
           role="draft", what="draft CUDA-graph replays will not be timed"),
    Target(module=DRAFT_EXTEND_RUNNER_MODULE, cls="EAGLEDraftExtendCudaGraphRunner", methods=("execute", "replay"),
           role="draft_extend", what="draft-extend CUDA-graph replays will not be timed"),
)

#: The scheduler's step (see "The scheduler's step" above): the loop's once-per-iteration call
#: bounds a step, ``run_batch`` names its batch. Kept apart from :data:`TARGETS` (forward seams).
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
STEP_TARGETS: tuple[Target, ...] = (
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("get_next_batch_to_run",), role="step_boundary",
           what="the scheduler's host work per step will not be timed (the profile counts GPU forwards only)"),
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("run_batch",), role="step_batch",
           what="the scheduler's host work per step will not be timed (the profile counts GPU forwards only)"),
)
STEP_ROLES = ("step_boundary", "step_batch")

#: ForwardMode name -> phase (``None``: deliberately not recorded). "DECODE" depends on the runner.
#: (from the forward-kind table, schema/phases.py; DLLM_EXTEND: 0.5.23 diffusion LLMs; PREBUILT:
#: 0.5.23 disaggregated decode, KV arrived, no model forward of its own)
MODE_PHASES: dict[str, str | None] = {
    **{m: k for m, k in SGLANG_MODE_KINDS.items() if m != "DECODE"},
    **dict.fromkeys(SGLANG_IGNORED_MODES),
}


def phase_for_mode(mode_name: str, *, is_draft: bool) -> str | None:
    """Phase of a ``ModelRunner.forward`` call; raises ``KeyError`` for a mode we do not know."""
    if mode_name == "DECODE":
        return "draft" if is_draft else "decode"
    return MODE_PHASES[mode_name]


# --------------------------------------------------------------------------- state


class _State:
    """Per-process hook state: output file, pending timings, patched members, warnings."""

    def __init__(self) -> None:
        self.out_dir: Path | None = None
        self.fd: int | None = None
        self.path: Path | None = None
        self.pending: deque[tuple[dict[str, Any], Any]] = deque()
        self.lock = threading.Lock()
        self.patched: dict[tuple[str, str], tuple[type, str, Any]] = {}  # (module, cls) -> (cls, method, original)
        self.warned: set[str] = set()
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.finder: PatchOnImport | None = None
        self.atexit = False
        self.tls = threading.local()
        # the server's warm-up request (one /generate after start-up): "pending" until the first
        # target prefill, "running" until the next one, then "done"; only "done" is recorded
        self.warmup = "pending"
        self.calibrator: Calibrator | None = None  # the box's condition, probed between target forwards
        self.dropped = 0  # GPU timings dropped because the queue was full (stamped on every later line)


_STATE = _State()


def _warn_once(key: str, msg: str) -> None:
    if key in _STATE.warned:
        return
    _STATE.warned.add(key)
    # stderr directly, not logging: the server's logging config must not hide it
    print(f"specmodel sglang hook: warning: {msg}", file=sys.stderr, flush=True)


def sglang_version() -> str:
    mod = sys.modules.get("sglang")
    v = getattr(mod, "__version__", None) if mod is not None else None
    if isinstance(v, str) and v:
        return v
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001 - any failure means "unknown", never a crash
        return "unknown"


# --------------------------------------------------------------------------- writing


def _rank_of(runner: Any) -> str:
    r = getattr(runner, "tp_rank", None)
    if isinstance(r, int):
        return str(r)
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


_PROCTITLE = re.compile(r"_(DP|PP)(\d+)")


def _place(runner: Any) -> dict[str, int | None]:
    """This process's TP / PP rank and DP replica. SGLang keeps ``tp_rank`` / ``pp_rank`` on the
    ModelRunner (0.5.5) or in ``runtime_context.get_parallel()`` (0.5.23); the DP replica is the
    scheduler's (``get_parallel().dp_rank``, ``$SGLANG_DP_RANK``, or the ``_DP<k>`` its process
    title carries: ``sglang::scheduler_DP1_TP0``)."""
    par = None
    try:
        get = getattr(sys.modules.get("sglang.srt.runtime_context"), "get_parallel", None)
        par = get() if callable(get) else None
    except Exception:  # noqa: BLE001 - an unset context: the other sources
        par = None

    def val(name: str) -> int | None:
        for src in (runner, par):
            try:
                v = getattr(src, name, None)
            except Exception:  # noqa: BLE001 - SGLang's context raises on a name not published yet
                v = None
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    place = {"tp_rank": val("tp_rank"), "pp_rank": val("pp_rank"), "dp_rank": val("dp_rank"),
             "pp_size": val("pp_size"), "dp_size": val("dp_size")}
    title = ""
    try:
        title = str(sys.modules["setproctitle"].getproctitle()) if "setproctitle" in sys.modules else ""
    except Exception:  # noqa: BLE001
        pass
    from_title = {k: int(v) for k, v in _PROCTITLE.findall(title)}
    if place["dp_rank"] is None:
        env = os.environ.get("SGLANG_DP_RANK", "")
        place["dp_rank"] = int(env) if env.isdigit() else from_title.get("DP")
    if place["pp_rank"] is None:
        place["pp_rank"] = from_title.get("PP")
    return place


def _attr(obj: Any, *names: str) -> Any:
    for n in names:
        obj = getattr(obj, n, None)
        if obj is None:
            return None
    return obj


def _meta(runner: Any, rank: str, place: dict[str, int | None]) -> dict[str, Any]:
    sa = getattr(runner, "server_args", None)

    def sa_get(name: str) -> Any:
        v = getattr(sa, name, None)
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else None

    spec = None
    if sa_get("speculative_algorithm"):
        spec = {"algorithm": sa_get("speculative_algorithm"), "steps": sa_get("speculative_num_steps"),
                "topk": sa_get("speculative_eagle_topk"), "num_draft_tokens": sa_get("speculative_num_draft_tokens")}
    tp_size = getattr(runner, "tp_size", None)
    if not isinstance(tp_size, int):
        tp_size = sa_get("tp_size")
    device = str(getattr(runner, "device", "") or "")
    device_name = ""
    if device.startswith("cuda"):
        try:
            import torch

            device_name = torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001
            pass
    return {**SGLANG_FORWARD.header(), "type": "meta",
            "sglang_version": sglang_version(), "pid": os.getpid(), "rank": rank, **place,
            "max_pending_forwards": MAX_PENDING_SGLANG_FORWARDS,
            "tp_size": tp_size if isinstance(tp_size, int) else None, "device": device,
            "device_name": device_name, "model_path": sa_get("model_path"),
            "draft_model_path": sa_get("speculative_draft_model_path"), "spec": spec,
            "started_unix_s": time.time()}


def _open(runner: Any) -> None:
    """Open this process's rank file on its first recorded forward."""
    out = _STATE.out_dir or Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)
    out.mkdir(parents=True, exist_ok=True)
    place = _place(runner)
    rank = str(place["tp_rank"]) if place["tp_rank"] is not None else _rank_of(runner)
    if _STATE.path is None:
        _STATE.fd, _STATE.path = open_rank_file(out, rank=rank, dp=place["dp_rank"], pp=place["pp_rank"])
    else:  # a retry after the meta line failed: the same file
        _STATE.fd = os.open(_STATE.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _write_line(_meta(runner, rank, place))
    except BaseException:
        os.close(_STATE.fd)  # no forward line without its meta line: the next forward tries again
        _STATE.fd = None
        raise
    _STATE.calibrator = Calibrator(getattr(runner, "device", None))
    if _STATE.thread is None:
        _STATE.thread = threading.Thread(target=_flush_loop, name="specmodel-sglang-flush", daemon=True)
        _STATE.thread.start()
    if not _STATE.atexit:
        atexit.register(flush, wait=True)
        _STATE.atexit = True


def _write_line(obj: dict[str, Any]) -> None:
    # one os.write per line on an O_APPEND fd: a crash loses at most the line in flight,
    # and two processes sharing a file never interleave inside a line
    if _STATE.fd is not None:
        os.write(_STATE.fd, (json.dumps(obj, allow_nan=False) + "\n").encode())


def flush(wait: bool = False) -> int:
    """Write every finished timing (a ``query()`` each, never a synchronise). ``wait`` (exit,
    uninstall): first wait for the pending timings' events -- outside the lock, so no forward waits
    behind it -- then write them. Returns lines written."""
    n = 0
    queued: dict[int, Any] = {}
    if wait:
        with _STATE.lock:
            queued = {id(sw): sw for _, sw in _STATE.pending}
        for sw in queued.values():
            for w in (sw.watches if isinstance(sw, Probe) else [sw]):
                try:
                    w.wait()
                except Exception:  # noqa: BLE001 - read (or lost, warned) below
                    pass
    with _STATE.lock:
        while _STATE.pending:
            rec, sw = _STATE.pending[0]
            if not sw.ready() and id(sw) not in queued:
                break  # FIFO on one stream: later ones are not done either
            _STATE.pending.popleft()
            try:
                if isinstance(sw, (Probe, _Step)):  # a calibration probe / scheduler step: its own record
                    _write_line(sw.record())
                    n += 1
                    continue
                secs = float(sw.elapsed_s)
                rec["gpu_s" if sw.use_cuda else "cpu_s"] = secs
                rec["dropped_forwards"] = _STATE.dropped  # at write time: a line after a drop carries it
                _write_line(rec)
                n += 1
            except Exception as exc:  # noqa: BLE001 - a lost line, never a crashed server
                _warn_once("write", f"SGLang {sglang_version()}: could not write a timing to {_STATE.path} "
                                    f"({exc!r}); that forward is not recorded")
    return n


def _flush_loop() -> None:
    while not _STATE.stop.wait(0.2):
        flush()


# --------------------------------------------------------------------------- wrapping


def _tokens(fb: Any, batch: int) -> int:
    for name in ("input_ids", "positions"):
        t = getattr(fb, name, None)
        if t is None:
            continue
        numel = getattr(t, "numel", None)
        if callable(numel):
            return int(numel())
        try:
            return len(t)
        except TypeError:
            continue
    return batch


def _capturing(sw_cuda: bool) -> bool:
    if _sglang_capture_mode():
        return True
    if not sw_cuda:
        return False
    import torch

    return bool(torch.cuda.is_current_stream_capturing())


def _sglang_capture_mode() -> bool:
    """SGLang's own capture flag. Before capturing each batch size SGLang runs ``run_once()``
    twice *outside* stream capture (0.5.5 ``capture_one_batch_size``, 0.5.23 ``capture_one`` plus a
    flashinfer autotune run): forwards with dummy inputs that only this flag tells apart. The
    module is already imported whenever the flag can be on (the runner imported it to set it)."""
    for name in CAPTURE_MODE_MODULES:
        fn = getattr(sys.modules.get(name), "get_is_capture_mode", None)
        if callable(fn):
            try:
                if fn():
                    return True
            except Exception:  # noqa: BLE001 - an unreadable flag is "not capturing"
                pass
    return False


def _in_warmup(role: str, ph: str, runner: Any) -> bool:
    """True for the forwards of the server's warm-up request (``_execute_server_warmup``: one
    short generate right after start-up, before the server reports ready). It is the first target
    prefill and everything up to the next one (nothing but graph capture runs before it);
    ``--skip-server-warmup`` and PD-disaggregated decode servers (no prefill of their own) have none."""
    if _STATE.warmup == "done":
        return False
    if _STATE.warmup == "pending":
        sa = getattr(runner, "server_args", None)
        if getattr(sa, "skip_server_warmup", False) is True or getattr(sa, "disaggregation_mode", "null") == "decode":
            _STATE.warmup = "done"
            return False
    if role == "model_runner" and ph == "extend" and not getattr(runner, "is_draft_worker", False):
        _STATE.warmup = "running" if _STATE.warmup == "pending" else "done"
    return _STATE.warmup == "running"


def _describe(role: str, member: str, runner_self: Any, fb: Any) -> tuple[str, int, int, int, str, Any] | None:
    """(phase, batch, tokens, forwards, forward_mode, model_runner) for a call, None = do not record."""
    batch = int(fb.batch_size)
    if role == "model_runner":
        mode = getattr(getattr(fb, "forward_mode", None), "name", None)
        if not isinstance(mode, str):
            raise AttributeError("forward_batch.forward_mode has no .name")
        is_draft = bool(getattr(runner_self, "is_draft_worker", False))
        try:
            ph = phase_for_mode(mode, is_draft=is_draft)
        except KeyError:
            _warn_once(f"mode:{mode}", f"SGLang {sglang_version()}: ForwardMode.{mode} is not known to specmodel; "
                                       "those forwards are not recorded")
            return None
        if ph is None:
            return None
        return ph, batch, _tokens(fb, batch), 1, mode, runner_self
    mr = getattr(runner_self, "model_runner", None)
    if role == "draft":
        # one replay = the whole multi-step draft: steps - 1 drafter forwards of batch × topk tokens
        topk = getattr(runner_self, "topk", None)
        steps = getattr(runner_self, "speculative_num_steps", None)
        topk = topk if isinstance(topk, int) and topk > 0 else 1
        fwd = steps - 1 if isinstance(steps, int) and steps > 1 else 1
        return "draft", batch, batch * topk, fwd, "DECODE", mr
    return "draft_extend", batch, _tokens(fb, batch), 1, "DRAFT_EXTEND", mr


def _make_wrapper(target: Target, method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    member = f"{target.cls}.{method}"
    runner_kind = "target" if target.role == "model_runner" else "draft"

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        tls = _STATE.tls
        if getattr(tls, "active", False):  # nested (a replay that calls a wrapped forward): outer wins
            return orig(self, *args, **kwargs)
        started = None
        try:
            started = _begin(target, member, runner_kind, self, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the hook must never break a forward
            _warn_once(f"begin:{member}", f"SGLang {sglang_version()}: cannot annotate {member} ({exc!r}); "
                                          "those calls run unannotated")
        if started is None:
            return orig(self, *args, **kwargs)
        tls.active = True
        ok = False
        try:
            out = orig(self, *args, **kwargs)
            ok = True
            return out
        finally:
            tls.active = False
            try:
                _end(*started, keep=ok)  # a forward that raised is not a timing
                if ok:
                    _step_forward(started[1], started[2])
            except Exception as exc:  # noqa: BLE001
                _warn_once(f"end:{member}", f"SGLang {sglang_version()}: timing {member} failed ({exc!r})")

    return as_wrapper(wrapper, orig, name=method, qualname=member)


def _begin(target: Target, member: str, runner_kind: str, self: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]] | None:
    from specmodel.engines.hook.annotate import Stopwatch, phase
    from specmodel.schema.phases import phase_label

    fb = args[0] if args else kwargs.get("forward_batch")
    if fb is None:
        return None
    desc = _describe(target.role, member, self, fb)
    if desc is None:
        return None
    ph, batch, tokens, forwards, mode, runner = desc
    sw = Stopwatch.for_device(getattr(runner, "device", None))
    if _capturing(sw.use_cuda):
        return None  # graph capture and its uncaptured warm-up runs: dummy inputs, not a forward
    if _in_warmup(target.role, ph, runner if runner is not None else self):
        return None
    if _STATE.fd is None:
        with _STATE.lock:
            if _STATE.fd is None:
                _open(runner if runner is not None else self)
    if target.role == "model_runner" and getattr(self, "is_draft_worker", False):
        runner_kind = "draft"
    rec = {**SGLANG_FORWARD.header(), "type": "forward",
           "phase": ph, "batch": batch, "tokens": tokens, "forwards": forwards,
           "forward_mode": mode, "runner": runner_kind, "member": member,
           "t_start_unix_s": time.time()}
    cm = phase(phase_label(ph, batch, tokens, forwards=forwards))
    cm.__enter__()
    try:
        sw.start()
    except BaseException:
        cm.__exit__(None, None, None)
        raise
    return cm, sw, rec


def _end(cm: Any, sw: Any, rec: dict[str, Any], *, keep: bool = True) -> None:
    """Stop the timer and close the span -- both, even when one of them fails (an NVTX range
    left open would nest every later range under it); a failure drops the record and raises."""
    err: BaseException | None = None
    try:
        sw.stop()
    except Exception as exc:  # noqa: BLE001
        err = exc
    try:
        cm.__exit__(None, None, None)
    except Exception as exc:  # noqa: BLE001
        err = err or exc
    if err is not None:
        raise err
    if not keep:
        return
    if not sw.use_cuda:
        with _STATE.lock:  # CPU timings are final now: written at once, never left to atexit
            rec["cpu_s"] = float(sw.elapsed_s)
            rec["dropped_forwards"] = _STATE.dropped
            _write_line(rec)
    else:
        _enqueue(rec, sw)
        flush()  # every timing whose events completed (a query each, never a synchronise)
    cal = _STATE.calibrator
    if rec["runner"] == "target" and cal is not None and cal.due(time.perf_counter()):
        _probe(cal)


def _probe(cal: Calibrator) -> None:
    """The box's condition after a target forward (:mod:`specmodel.engines.hook.calibration`). Never
    raises: a probe that fails is dropped, warned once, and the next period tries again."""
    st = _STEPS.open
    if st is not None:
        st.probed = True  # the probe's own time is no host work of the engine's: that step is not written
    try:
        probe = cal.run()
        if probe.use_cuda:
            _enqueue({}, probe)
        else:
            with _STATE.lock:
                _write_line(probe.record())
    except Exception as exc:  # noqa: BLE001 - the probe must never harm the server
        _warn_once("probe", f"SGLang {sglang_version()}: the calibration probe failed ({exc!r}); that probe is "
                            "not recorded (forwards are)")


def _enqueue(rec: dict[str, Any], sw: Any) -> None:
    """Queue a GPU timing; a full queue drops it (the newest: the queued ones complete first, FIFO
    on one stream) and counts a forward (a probe or a scheduler step is no forward: dropped, not
    counted; a dropped step leaves its server's host work median to the steps kept)."""
    with _STATE.lock:
        if len(_STATE.pending) < MAX_PENDING_SGLANG_FORWARDS:
            _STATE.pending.append((rec, sw))
        elif not isinstance(sw, (Probe, _Step)):
            _STATE.dropped += 1


# --------------------------------------------------------------------------- the scheduler's step


class _Step:
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
        self.open: _Step | None = None


_STEPS = _StepState()


def _step_stream(sched: Any) -> Any:
    """The stream the forwards are queued on: the overlap scheduler's ``forward_stream`` (its
    ``run_batch`` enters ``forward_stream_ctx``), else the current stream (``None``)."""
    if getattr(sched, "enable_overlap", False) is True:
        return getattr(sched, "forward_stream", None)
    return None


def _step_boundary(sched: Any) -> None:
    """``get_next_batch_to_run`` entry: close the open step (written if it ran a batch with a
    timed forward) and open the next. One marker is both the closing and the opening bound, so
    consecutive steps tile the loop's time."""
    from specmodel.engines.hook.annotate import Stopwatch

    now = time.perf_counter()
    prev = _STEPS.open
    _STEPS.open = None  # a failure below leaves no step open
    keep = prev is not None and prev.mode is not None and bool(prev.forwards) and not prev.probed
    cuda = Stopwatch.for_device(getattr(sched, "device", None)).use_cuda
    if keep and prev is not None and any(bool(sw.use_cuda) != prev.cuda for _, sw in prev.forwards):
        # never one clock's span minus another's: a step whose forwards ran on another clock is dropped
        keep = False
        _warn_once("step:clock", f"SGLang {sglang_version()}: the scheduler's device ({getattr(sched, 'device', None)!r}) "
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
            _enqueue({}, prev)  # resolved by flush, like a forward's events (a full queue drops it)
        else:
            with _STATE.lock:
                if _STATE.fd is not None:
                    _write_line(prev.record())
    _STEPS.open = _Step(host_t0=now, start=marker, cuda=cuda, start_shared=keep)


def _step_batch(batch: Any) -> None:
    """``run_batch`` entry: the open step runs ``batch`` (its ForwardMode and size)."""
    st = _STEPS.open
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


def _step_forward(sw: Any, rec: dict[str, Any]) -> None:
    """A timed forward belongs to the open step once its batch runs."""
    st = _STEPS.open
    if st is not None and st.mode is not None:
        st.forwards.append((str(rec["phase"]), sw))


def _make_step_wrapper(target: Target, method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    member = f"{target.cls}.{method}"
    boundary = target.role == "step_boundary"

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if boundary:
                _step_boundary(self)
            else:
                _step_batch(args[0] if args else kwargs.get("batch"))
        except Exception as exc:  # noqa: BLE001 - the hook must never break the scheduler
            _STEPS.open = None
            _warn_once(f"step:{member}", f"SGLang {sglang_version()}: timing the scheduler's step at {member} failed "
                                         f"({exc!r}); those steps' host work is not recorded (forwards are)")
        return orig(self, *args, **kwargs)

    return as_wrapper(wrapper, orig, name=method, qualname=member)


def _patch_module(mod: ModuleType, target: Target) -> bool:
    """Wrap ``target`` in ``mod``; warn (once) and leave it alone when it is not there."""
    key = (target.module, target.cls if target.role not in STEP_ROLES else f"{target.cls}:{target.role}")
    if key in _STATE.patched:
        return True
    cls = getattr(mod, target.cls, None)
    if not isinstance(cls, type):
        _warn_once(f"missing:{target.qualname}",
                   f"SGLang {sglang_version()}: class {target.qualname} not found; {target.what} (server runs unpatched there)")
        return False
    for method in target.methods:
        orig = getattr(cls, method, None)
        if callable(orig):
            if getattr(orig, "__specmodel_wrapped__", None) is not None:
                return True
            make = _make_step_wrapper if target.role in STEP_ROLES else _make_wrapper
            setattr(cls, method, make(target, method, orig))
            _STATE.patched[key] = (cls, method, orig)
            return True
    _warn_once(f"missing:{target.qualname}.{target.methods}",
               f"SGLang {sglang_version()}: {target.qualname} has no {' / '.join(target.methods)} method; "
               f"{target.what} (server runs unpatched there)")
    return False


def _on_import(name: str, mod: ModuleType) -> None:
    if name == MODEL_RUNNER_MODULE:
        _warn_spec_v2_bypass()
    for t in TARGETS + STEP_TARGETS:
        if t.module == name:
            try:
                _patch_module(mod, t)
            except Exception as exc:  # noqa: BLE001
                _warn_once(f"patch:{t.qualname}", f"SGLang {sglang_version()}: patching {t.qualname} failed ({exc!r})")


def _warn_spec_v2_bypass() -> None:
    """0.5.5's experimental overlap worker (SGLANG_ENABLE_SPEC_V2) runs eager draft steps and the
    draft-extend through ``model.forward`` directly; nothing we can wrap by name sees them."""
    fbi = sys.modules.get("sglang.srt.model_executor.forward_batch_info")
    members = getattr(getattr(fbi, "ForwardMode", None), "__members__", {})
    if "DRAFT_EXTEND" in members and os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes"):
        _warn_once("specv2", f"SGLang {sglang_version()} with SGLANG_ENABLE_SPEC_V2: eager draft steps and "
                             "draft-extend bypass ModelRunner.forward and are not timed (CUDA-graph replays are)")


def install(out_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Patch SGLang now (modules already imported) and on import (the rest). Idempotent.

    ``out_dir`` (else ``$SPECMODEL_SGLANG_DIR``, else ``./sglang-forward``) receives one rank
    file per process. Returns the members patched so far (``Class.method``).
    """
    if out_dir is not None:
        _STATE.out_dir = Path(out_dir)
    elif os.environ.get(ENV_DIR):
        _STATE.out_dir = Path(os.environ[ENV_DIR])
    for name in dict.fromkeys(t.module for t in TARGETS + STEP_TARGETS):
        mod = sys.modules.get(name)
        if mod is not None:
            _on_import(name, mod)
    if _STATE.finder is None:
        _STATE.finder = PatchOnImport((t.module for t in TARGETS + STEP_TARGETS), _on_import)
        sys.meta_path.insert(0, _STATE.finder)
    return patched_members()


def patched_members() -> list[str]:
    return [f"{cls.__name__}.{method}" for cls, method, _ in _STATE.patched.values()]


def uninstall() -> None:
    """Undo :func:`install` (restore originals, flush, close the file). For tests and notebooks."""
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
    _STEPS.__init__()  # type: ignore[misc]
