"""The SGLang forward-pass hook: every forward a TP worker runs, annotated and timed per phase.

``install()`` wraps, by name and only where found:

* ``ModelRunner.forward`` (target and drafter runners; eager forwards and the target's
  CUDA-graph replays go through it);
* ``EAGLEDraftCudaGraphRunner.execute`` (0.5.23) or ``.replay`` (0.5.5), and the same on
  ``EAGLEDraftExtendCudaGraphRunner``: the drafter's CUDA-graph replays bypass
  ``ModelRunner.forward``;
* 0.5.23's other drafters' graph replays (:data:`~specmodel.engines.sglang.targets.DRAFTER_TARGETS_0523`):
  multi-layer EAGLE's per-layer ``MultiLayerEagleDraftExtendCudaGraphRunner.replay`` (draft_extend,
  one MTP layer each) and its single-graph ``OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner.replay``
  (every layer, replayed at step 0), FROZEN_KV_MTP's ``FrozenKVMTPCudaGraphRunner.execute`` (the
  whole draft: the seed forward + steps - 1).

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
on the drafter's runner (``is_draft_worker``) a forward is the drafter's whatever its mode --
DECODE and TARGET_VERIFY (DFlash's draft block) → draft; on the target TARGET_VERIFY → verify,
DECODE → decode; DRAFT_EXTEND/DRAFT_EXTEND_V2 → draft_extend; EXTEND/MIXED/SPLIT_PREFILL →
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
  l. 2026-2058 and 2061-2134). PD-disaggregated servers' loops call
  ``get_next_disagg_decode_batch_to_run`` / ``get_next_disagg_prefill_batch_to_run`` instead
  (:data:`~specmodel.engines.sglang.targets.DISAGG_STEP_TARGETS`), which bound their steps. A step runs from one call to the next, so steps tile the loop:
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

import os
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from specmodel.engines.hook.patch import as_wrapper
from specmodel.engines.sglang import steps as st
from specmodel.engines.sglang import writer as w
from specmodel.engines.sglang.seams import seam_figure
from specmodel.engines.sglang.steps import STEPS, make_step_wrapper, step_forward
from specmodel.engines.sglang.targets import (
    CAPTURE_MODE_MODULES,
    DISAGG_STEP_TARGETS,
    DRAFTER_TARGETS_0523,
    MODEL_RUNNER_MODULE,
    STEP_ROLES,
    STEP_TARGETS,
    TARGETS,
    Target,
    expected_absent,
    phase_for_mode,
)
from specmodel.engines.sglang.writer import STATE, flush, sglang_version
from specmodel.schema.formats import SGLANG_FORWARD

__all__ = ["ALL_TARGETS", "flush", "install", "patched_members", "uninstall"]

#: every seam the hook wraps (forwards, 0.5.23's other drafters, the scheduler's step bounds)
ALL_TARGETS: tuple[Target, ...] = TARGETS + DRAFTER_TARGETS_0523 + STEP_TARGETS + DISAGG_STEP_TARGETS


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
    if STATE.warmup == "done":
        return False
    if STATE.warmup == "pending":
        sa = getattr(runner, "server_args", None)
        if getattr(sa, "skip_server_warmup", False) is True or getattr(sa, "disaggregation_mode", "null") == "decode":
            STATE.warmup = "done"
            return False
    if role == "model_runner" and ph == "extend" and not getattr(runner, "is_draft_worker", False):
        STATE.warmup = "running" if STATE.warmup == "pending" else "done"
    return STATE.warmup == "running"


def _describe(role: str, member: str, runner_self: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> tuple[str, int, int, int, str, Any] | None:
    """(phase, batch, tokens, forwards, forward_mode, model_runner) for a call, None = do not record."""
    if role == "mle_step":
        # one MTP layer's draft-extend over each request's accepted window (bs is the padded bucket;
        # the composite runner sets raw_bs, the real batch, before each replay)
        raw = getattr(runner_self, "raw_bs", None)
        batch = raw if isinstance(raw, int) and raw > 0 else int(args[0] if args else kwargs["bs"])
        width = getattr(runner_self, "captured_req_width", 1)
        return "draft_extend", batch, batch * (width if isinstance(width, int) and width > 0 else 1), 1, \
            "DRAFT_EXTEND_V2", getattr(runner_self, "model_runner", None)
    if role == "mle_one_graph":
        step = args[0] if args else kwargs.get("step")
        if step != 0:
            return None  # steps > 0 are served from the graph replayed at step 0
        layers = [r for r in getattr(runner_self, "runners", ()) if r is not None]
        batch = int(runner_self.raw_bs)
        tokens = getattr(runner_self, "raw_num_tokens", None)
        tokens = tokens if isinstance(tokens, int) and tokens > 0 else batch
        # one replay = every MTP layer's draft-extend: tokens per forward, forwards = layers
        return "draft_extend", batch, tokens, max(len(layers), 1), "DRAFT_EXTEND_V2", \
            getattr(layers[0], "model_runner", None) if layers else None
    fb = args[0] if args else kwargs.get("forward_batch")
    if fb is None:
        return None
    batch = int(fb.batch_size)
    if role == "model_runner":
        mode = getattr(getattr(fb, "forward_mode", None), "name", None)
        if not isinstance(mode, str):
            raise AttributeError("forward_batch.forward_mode has no .name")
        is_draft = bool(getattr(runner_self, "is_draft_worker", False))
        try:
            ph = phase_for_mode(mode, is_draft=is_draft)
        except KeyError:
            STATE.warn_once(f"mode:{mode}", f"SGLang {sglang_version()}: ForwardMode.{mode} is not known to specmodel; "
                                            "those forwards are not recorded")
            return None
        if ph is None:
            return None
        return ph, batch, _tokens(fb, batch), 1, mode, runner_self
    mr = getattr(runner_self, "model_runner", None)
    topk = getattr(runner_self, "topk", None)
    topk = topk if isinstance(topk, int) and topk > 0 else 1
    steps = getattr(runner_self, "speculative_num_steps", None)
    if role == "draft":
        # one replay = the whole multi-step draft: steps - 1 drafter forwards of batch × topk tokens
        fwd = steps - 1 if isinstance(steps, int) and steps > 1 else 1
        return "draft", batch, batch * topk, fwd, "DECODE", mr
    if role == "frozen_draft":
        # one replay = the seed forward + steps - 1 recurrent forwards, each over batch × topk tokens;
        # forward_batch.batch_size is already expanded to batch × topk when topk > 1 (execute, l. 395-400)
        reqs = batch // topk if topk > 1 else batch
        fwd = steps if isinstance(steps, int) and steps >= 1 else 1
        return "draft", reqs, reqs * topk, fwd, "DECODE", mr
    return "draft_extend", batch, _tokens(fb, batch), 1, "DRAFT_EXTEND", mr


def _make_wrapper(target: Target, method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    member = f"{target.cls}.{method}"
    runner_kind = "target" if target.role == "model_runner" else "draft"

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        tls = STATE.tls
        if getattr(tls, "active", False):  # nested (a replay that calls a wrapped forward): outer wins
            return orig(self, *args, **kwargs)
        started = None
        try:
            started = _begin(target, member, runner_kind, self, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the hook must never break a forward
            STATE.warn_once(f"begin:{member}", f"SGLang {sglang_version()}: cannot annotate {member} ({exc!r}); "
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
                    step_forward(started[1], started[2])
            except Exception as exc:  # noqa: BLE001
                STATE.warn_once(f"end:{member}", f"SGLang {sglang_version()}: timing {member} failed ({exc!r})")

    return as_wrapper(wrapper, orig, name=method, qualname=member)


def _begin(target: Target, member: str, runner_kind: str, self: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]] | None:
    from specmodel.engines.hook.annotate import Stopwatch, phase
    from specmodel.schema.phases import phase_label

    desc = _describe(target.role, member, self, args, kwargs)
    if desc is None:
        return None
    ph, batch, tokens, forwards, mode, runner = desc
    sw = Stopwatch.for_device(getattr(runner, "device", None))
    if _capturing(sw.use_cuda):
        return None  # graph capture and its uncaptured warm-up runs: dummy inputs, not a forward
    if _in_warmup(target.role, ph, runner if runner is not None else self):
        return None
    if STATE.fd is None:
        with STATE.lock:
            if STATE.fd is None:
                w.open_file(runner if runner is not None else self)
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
        with STATE.lock:  # CPU timings are final now: written at once, never left to atexit
            rec["cpu_s"] = float(sw.elapsed_s)
            rec["dropped_forwards"] = STATE.dropped
            w.write_line(rec)
    else:
        w.enqueue(rec, sw)
        flush()  # every timing whose events completed (a query each, never a synchronise)
    cal = STATE.calibrator
    if rec["runner"] == "target" and cal is not None and cal.due(time.perf_counter()):
        st.probe(cal)


# --------------------------------------------------------------------------- patching


def _patch_module(mod: ModuleType, target: Target) -> bool:
    """Wrap ``target`` in ``mod``; warn (once) and leave it alone when it is not there."""
    key = (target.module, target.cls if target.role not in STEP_ROLES else f"{target.cls}:{target.methods[0]}")
    if key in STATE.patched:
        return True
    cls = getattr(mod, target.cls, None)
    if not isinstance(cls, type) or not any(callable(getattr(cls, m, None)) for m in target.methods):
        if expected_absent(target, sglang_version()):
            return False  # a seam of a later version than the one installed: nothing is lost
    if not isinstance(cls, type):
        STATE.warn_once(f"missing:{target.qualname}",
                        f"SGLang {sglang_version()}: class {target.qualname} not found; {target.what} (server runs unpatched there)")
        STATE.seams.miss(f"{target.cls}.{target.methods[0]}", seam_figure(target), f"not found ({target.cls} not in {target.module})")
        return False
    for method in target.methods:
        orig = getattr(cls, method, None)
        if callable(orig):
            if getattr(orig, "__specmodel_wrapped__", None) is not None:
                return True
            STATE.seams.wrapped(f"{target.cls}.{method}")
            make = make_step_wrapper if target.role in STEP_ROLES else _make_wrapper
            setattr(cls, method, make(target, method, orig))
            STATE.patched[key] = (cls, method, orig)
            return True
    STATE.warn_once(f"missing:{target.qualname}.{target.methods}",
                    f"SGLang {sglang_version()}: {target.qualname} has no {' / '.join(target.methods)} method; "
                    f"{target.what} (server runs unpatched there)")
    STATE.seams.miss(f"{target.cls}.{'/'.join(target.methods)}", seam_figure(target))
    return False


def _on_import(name: str, mod: ModuleType) -> None:
    if name == MODEL_RUNNER_MODULE:
        _warn_spec_v2_bypass()
    for t in ALL_TARGETS:
        if t.module == name:
            try:
                _patch_module(mod, t)
            except Exception as exc:  # noqa: BLE001
                STATE.warn_once(f"patch:{t.qualname}", f"SGLang {sglang_version()}: patching {t.qualname} failed ({exc!r})")


def _warn_spec_v2_bypass() -> None:
    """0.5.5's experimental overlap worker (SGLANG_ENABLE_SPEC_V2) runs eager draft steps and the
    draft-extend through ``model.forward`` directly; nothing we can wrap by name sees them."""
    fbi = sys.modules.get("sglang.srt.model_executor.forward_batch_info")
    members = getattr(getattr(fbi, "ForwardMode", None), "__members__", {})
    if "DRAFT_EXTEND" in members and os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes"):
        STATE.warn_once("specv2", f"SGLang {sglang_version()} with SGLANG_ENABLE_SPEC_V2: eager draft steps and "
                                  "draft-extend bypass ModelRunner.forward and are not timed (CUDA-graph replays are)")


def install(out_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Patch SGLang now (modules already imported) and on import (the rest). Idempotent.

    ``out_dir`` (else ``$SPECMODEL_SGLANG_DIR``, else ``./sglang-forward``) receives one rank
    file per process. Returns the members patched so far (``Class.method``).
    """
    STATE.install(out_dir, (t.module for t in ALL_TARGETS), _on_import)
    return patched_members()


def patched_members() -> list[str]:
    return [f"{cls.__name__}.{method}" for cls, method, _ in STATE.patched.values()]


def uninstall() -> None:
    """Undo :func:`install` (restore originals, flush, close the file). For tests and notebooks."""
    STATE.uninstall(flush)
    STATE.__init__()  # type: ignore[misc]
    STEPS.__init__()  # type: ignore[misc]
