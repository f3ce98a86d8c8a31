"""The SGLang hook's records on their way to the rank file: the per-process state, the meta line
(where the process stands: TP / PP rank, DP replica), the queue of GPU timings waiting for their
events and its flush (a ``query()`` each, never a synchronise)."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any

from specmodel.engines.hook.calibration import Probe
from specmodel.engines.hook.patch import process_rank
from specmodel.engines.hook.state import HookState
from specmodel.engines.sglang.targets import DEFAULT_DIR, ENV_DIR
from specmodel.limits import MAX_PENDING_SGLANG_FORWARDS
from specmodel.schema.formats import SGLANG_FORWARD


class State(HookState):
    """Per-process hook state (:class:`HookState`) and the SGLang hook's own: the nesting flag of the
    thread in a wrapped call, and where the server's warm-up request stands."""

    def __init__(self) -> None:
        super().__init__(tag="sglang", env_dir=ENV_DIR, default_dir=DEFAULT_DIR)
        self.tls = threading.local()
        # the server's warm-up request (one /generate after start-up): "pending" until the first
        # target prefill, "running" until the next one, then "done"; only "done" is recorded
        self.warmup = "pending"


STATE = State()


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



# --------------------------------------------------------------------------- the meta line


def rank_of(runner: Any) -> str:
    r = getattr(runner, "tp_rank", None)
    return str(r) if isinstance(r, int) else process_rank()


_PROCTITLE = re.compile(r"_(DP|PP)(\d+)")


def place(runner: Any) -> dict[str, int | None]:
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


def meta(runner: Any, rank: str, place: dict[str, int | None]) -> dict[str, Any]:
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



def open_file(runner: Any) -> None:
    """Open this process's rank file on its first recorded forward (its meta line first), and the idle flusher."""
    where = place(runner)
    rank = str(where["tp_rank"]) if where["tp_rank"] is not None else rank_of(runner)
    STATE.open(rank=rank, dp=where["dp_rank"], pp=where["pp_rank"], meta=meta(runner, rank, where),
               device=getattr(runner, "device", None))
    STATE.start_flusher(_flush_loop, flush)


# --------------------------------------------------------------------------- writing


def write_line(obj: dict[str, Any]) -> None:
    STATE.write_line(obj)


def flush(wait: bool = False) -> int:
    """Write every finished timing (a ``query()`` each, never a synchronise). ``wait`` (exit,
    uninstall): first wait for the pending timings' events -- outside the lock, so no forward waits
    behind it -- then write them. Returns lines written."""
    n = 0
    queued: dict[int, Any] = {}
    if wait:
        with STATE.lock:
            queued = {id(sw): sw for _, sw in STATE.pending}
        for sw in queued.values():
            for w in (sw.watches if isinstance(sw, Probe) else [sw]):
                try:
                    w.wait()
                except Exception:  # noqa: BLE001 - read (or lost, warned) below
                    pass
    with STATE.lock:
        while STATE.pending:
            rec, sw = STATE.pending[0]
            if not sw.ready() and id(sw) not in queued:
                break  # FIFO on one stream: later ones are not done either
            STATE.pending.popleft()
            try:
                if rec is None:  # a calibration probe / scheduler step: its own record
                    write_line(sw.record())
                    n += 1
                    continue
                secs = float(sw.elapsed_s)
                rec["gpu_s" if sw.use_cuda else "cpu_s"] = secs
                rec["dropped_forwards"] = STATE.dropped  # at write time: a line after a drop carries it
                write_line(rec)
                n += 1
            except Exception as exc:  # noqa: BLE001 - a lost line, never a crashed server
                STATE.warn_once("write", f"SGLang {sglang_version()}: could not write a timing to {STATE.path} "
                                         f"({exc!r}); that forward is not recorded")
    return n


def _flush_loop() -> None:
    while not STATE.stop.wait(0.2):
        flush()



def enqueue(rec: dict[str, Any] | None, sw: Any) -> None:
    """Queue a GPU timing: a forward's record ``rec`` and its stopwatch, or (``rec`` None) a
    calibration probe or a scheduler step, which writes its own record. A full queue drops it (the
    newest: the queued ones complete first, FIFO on one stream) and counts a forward (a probe or a
    scheduler step is no forward: dropped, not counted; a dropped step leaves its server's host work
    median to the steps kept)."""
    with STATE.lock:
        if len(STATE.pending) < MAX_PENDING_SGLANG_FORWARDS:
            STATE.pending.append((rec, sw))
        elif rec is not None:
            STATE.dropped += 1

