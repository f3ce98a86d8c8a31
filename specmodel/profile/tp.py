"""Megatron-style tensor-parallel building blocks on torch.distributed.

* :class:`Comm` — the only place a collective is issued (all-reduce, all-gather, barrier); it
  counts calls on the status board so the supervisor can tell who hangs, and turns a failing
  collective (a peer died) into :class:`CollectiveFailed`.
* :class:`ColumnParallelLinear` — output dim sharded, no communication.
* :class:`RowParallelLinear` — input dim sharded, partial sums all-reduced.
* :class:`VocabParallelEmbedding` — vocabulary sharded, rows outside the shard zeroed, all-reduced.
* :class:`ParallelLMHead` — vocabulary sharded, logits all-gathered (SGLang's logits processor).

Weights are random (timing does not depend on their values); every rank seeds identically so
replicated weights (routers, MLA down-projections) agree and MoE routing matches across ranks.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class CollectiveFailed(RuntimeError):
    """A collective raised: almost always because another rank died or hung."""


class Comm:
    """Collectives of one TP group. ``world == 1`` makes every collective a no-op."""

    def __init__(self, world: int, rank: int, *, backend: str = "gloo", status: Any = None,
                 group: Any = None) -> None:
        self.world = world
        self.rank = rank
        self.backend = backend
        self.status = status
        self.group = group

    def _run(self, fn: Any, *args: Any, **kw: Any) -> None:
        st = self.status
        if st is not None:
            st.enter_collective()
        try:
            fn(*args, group=self.group, **kw)
        except Exception as exc:  # a peer died / timed out
            raise CollectiveFailed(f"{fn.__name__} failed on rank {self.rank}: {exc}") from exc
        if st is not None:
            st.leave_collective()

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.world > 1:
            if op == "sum":
                self._run(dist.all_reduce, t)
            else:
                self._run(dist.all_reduce, t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
        return t

    def all_gather_last(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's ``t`` along the last dim (vocab-parallel logits)."""
        if self.world == 1:
            return t
        t = t.contiguous()
        if self.backend == "nccl":
            out = torch.empty((self.world, *t.shape), dtype=t.dtype, device=t.device)
            self._run(dist.all_gather_into_tensor, out, t)
            return out.movedim(0, -2).reshape(*t.shape[:-1], self.world * t.shape[-1])
        parts = [torch.empty_like(t) for _ in range(self.world)]
        self._run(dist.all_gather, parts, t)
        return torch.cat(parts, dim=-1)

    def barrier(self) -> None:
        if self.world > 1:
            if self.backend == "nccl":
                # a tiny all-reduce: barrier() on NCCL warns about device ids and syncs the host anyway
                t = torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device()))
                self._run(dist.all_reduce, t)
                torch.cuda.synchronize()
            else:
                self._run(dist.barrier)


class RecordingComm(Comm):
    """No communication; records (collective, bytes) per call. For tests and counting."""

    def __init__(self, world: int, rank: int = 0) -> None:
        super().__init__(world, rank)
        self.calls: list[tuple[str, int]] = []

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.world > 1:
            self.calls.append(("all_reduce", t.numel() * t.element_size()))
        return t

    def all_gather_last(self, t: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return t
        self.calls.append(("all_gather", t.numel() * t.element_size()))
        return torch.cat([t] * self.world, dim=-1)

    def barrier(self) -> None:
        pass


def shard(n: int, world: int, what: str) -> int:
    if n % world:
        raise ValueError(f"{what} = {n} is not divisible by tp {world}")
    return n // world


def _param(*shape: int, fan_in: int, dtype: torch.dtype, device: Any) -> nn.Parameter:
    w = torch.empty(*shape, dtype=dtype, device=device)
    w.normal_(0.0, 1.0 / math.sqrt(max(fan_in, 1)))
    return nn.Parameter(w, requires_grad=False)


class ReplicatedLinear(nn.Module):
    def __init__(self, in_f: int, out_f: int, *, dtype: torch.dtype, device: Any, bias: bool = False) -> None:
        super().__init__()
        self.weight = _param(out_f, in_f, fan_in=in_f, dtype=dtype, device=device)
        self.bias = nn.Parameter(torch.zeros(out_f, dtype=dtype, device=device), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class ColumnParallelLinear(ReplicatedLinear):
    """y_local = x W_localᵀ with W sharded along the output dim (``out_f`` is the total)."""

    def __init__(self, in_f: int, out_f: int, comm: Comm, *, dtype: torch.dtype, device: Any,
                 bias: bool = False) -> None:
        super().__init__(in_f, shard(out_f, comm.world, "column-parallel out_features"), dtype=dtype,
                         device=device, bias=bias)


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_local W_localᵀ) with W sharded along the input dim (``in_f`` is the total)."""

    def __init__(self, in_f: int, out_f: int, comm: Comm, *, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.comm = comm
        self.weight = _param(out_f, shard(in_f, comm.world, "row-parallel in_features"), fan_in=in_f, dtype=dtype,
                             device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(F.linear(x, self.weight))


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, comm: Comm, *, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.comm = comm
        per = shard(vocab, comm.world, "vocab_size")
        self.start, self.end = comm.rank * per, (comm.rank + 1) * per
        self.weight = _param(per, hidden, fan_in=1, dtype=dtype, device=device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.comm.world == 1:
            return F.embedding(ids, self.weight)
        outside = (ids < self.start) | (ids >= self.end)
        local = (ids - self.start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return self.comm.all_reduce(out)


class ParallelLMHead(nn.Module):
    def __init__(self, vocab: int, hidden: int, comm: Comm, *, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.comm = comm
        self.weight = _param(shard(vocab, comm.world, "vocab_size"), hidden, fan_in=hidden, dtype=dtype,
                             device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_gather_last(F.linear(x, self.weight))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, *, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype, device=device), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


class Rotary:
    """cos/sin tables for rotary position embedding over ``dim`` (even) dims."""

    def __init__(self, dim: int, max_pos: int, *, dtype: torch.dtype, device: Any, base: float = 10000.0) -> None:
        half = dim // 2
        inv = 1.0 / (base ** (torch.arange(half, dtype=torch.float32, device=device) / max(half, 1)))
        ang = torch.arange(max_pos, dtype=torch.float32, device=device)[:, None] * inv[None, :]
        self.cos = ang.cos().to(dtype)
        self.sin = ang.sin().to(dtype)

    def apply(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``x``: (..., t, dim); ``pos``: (t,) positions."""
        half = x.shape[-1] // 2
        cos, sin = self.cos[pos], self.sin[pos]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
