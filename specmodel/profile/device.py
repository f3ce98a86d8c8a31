"""Backend and device selection: the only place that decides GPU vs CPU.

``nccl`` on ``cuda:<local rank>`` when N CUDA GPUs are present, else ``gloo`` on the CPU;
``--backend`` overrides. The rest of the profiler is the same code on either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from specmodel.errors import FieldError

BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Placement:
    backend: str  # gloo | nccl
    device: str  # cpu | cuda


def cuda_device_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # a broken driver reads as "no GPU"
        return 0


def select(tp: int, requested: str | None = None, *, local_world: int | None = None) -> Placement:
    """Pick backend and device for ``tp`` ranks (``local_world`` ranks on this node, default ``tp``).

    Raises :class:`SpecmodelError` (exit 2, before anything is spawned) when ``nccl`` is asked
    for and this node has fewer GPUs than ranks.
    """
    req = (requested or "auto").lower()
    if req not in BACKENDS:
        raise FieldError("backend", f"unknown {requested!r} (expected auto, gloo or nccl)")
    local = local_world if local_world is not None else tp
    gpus = cuda_device_count()
    if req == "auto":
        req = "nccl" if gpus >= local and gpus > 0 else "gloo"
    if req == "nccl":
        if gpus < local:
            raise FieldError(None, f"{{backend}} nccl: needs {local} CUDA GPUs on this node for {{tp}} {tp}, found {gpus}")
        try:
            import torch.distributed as dist

            if not dist.is_nccl_available():
                raise FieldError(None, "{backend} nccl: this torch build has no NCCL")
        except ImportError:
            raise FieldError(None, "{backend} nccl: torch is not installed") from None
        return Placement("nccl", "cuda")
    return Placement("gloo", "cpu")


def torch_device(placement: Placement, local_rank: int) -> Any:
    """The torch device a rank computes on (sets the current CUDA device on GPU)."""
    import torch

    if placement.device == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def local_world_from_env() -> int | None:
    v = os.environ.get("LOCAL_WORLD_SIZE")
    return int(v) if v and v.isdigit() else None


def free_memory_bytes(device_index: int = 0) -> int:
    import torch

    free, _total = torch.cuda.mem_get_info(device_index)
    return int(free)


def free_memory_bytes_local() -> int:
    """Free memory on this process's GPU (``LOCAL_RANK``), not GPU 0's."""
    return free_memory_bytes(int(os.environ.get("LOCAL_RANK", "0") or 0))


class Replay:
    """A captured graph's replay that keeps the captured forward (and so its input tensors) alive.

    A CUDA graph holds device addresses, not tensors: once the forward's ``ids``/``hidden`` are
    freed, the caching allocator hands their blocks to the next tensor and every replay reads
    that tensor's bytes as token ids (on an H200: an embedding index out of range, a device-side
    assert, in the interleaved passes)."""

    __slots__ = ("_replay", "_captured")

    def __init__(self, replay: Any, captured: Any) -> None:
        self._replay, self._captured = replay, captured

    def __call__(self) -> None:
        self._replay()


def capture_graph(fn: Any, *, warmup: int, pool: Any = None) -> tuple[Any, Any]:
    """Run ``fn`` ``warmup`` times (≥ 1) on a side stream, then capture one call of it in a
    ``torch.cuda.CUDAGraph`` (as SGLang's CUDA-graph runners do); returns (replay, memory pool).
    Pass the pool back for the next capture: points replay one at a time, so they share it.
    The graph reads ``fn``'s input tensors at their captured addresses: the caller keeps ``fn``
    (and so those tensors) alive for as long as it replays (:class:`Replay`)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(max(warmup, 1)):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        fn()
    torch.cuda.synchronize()
    return g.replay, g.pool()
