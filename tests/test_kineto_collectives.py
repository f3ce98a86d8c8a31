"""The collective classifier table and the interval arithmetic under it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.trace import _intervals as iv
from specmodel.trace.collectives import (
    CPU_RULES,
    KERNEL_RULES,
    classify_cpu_op,
    classify_kernel,
    message_bytes,
    normalise_collective_name,
)


@pytest.mark.parametrize(("name", "collective", "impl"), [
    # NCCL 2.18
    ("ncclKernel_AllReduce_RING_LL_Sum___nv_bfloat16(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", "nccl"),
    # NCCL 2.19-2.27
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", "nccl"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather", "nccl"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter", "nccl"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv", "nccl"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "unknown", "nccl"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast", "nccl"),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce", "nccl"),
    # NCCL 2.32: no op, no protocol
    ("ncclDevKernel_AllReduce_bf16_RING", "all_reduce", "nccl"),
    # SGLang custom all-reduce, 0.5.5 and 0.5.23
    ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 2>(sglang::RankData*, ...)", "all_reduce", "sglang_custom"),
    ("void sglang::cross_device_reduce_2stage<float, 8>(...)", "all_reduce", "sglang_custom"),
    ("void all_reduce_2shot_pull_kernel<__nv_bfloat16, 4>(...)", "all_reduce", "sglang_custom"),
    ("void vllm::cross_device_reduce_1stage<c10::BFloat16, 2>(...)", "all_reduce", "vllm_custom"),
])
def test_kernel_names_across_versions(name: str, collective: str, impl: str) -> None:
    c = classify_kernel(name)
    assert c is not None and (c.collective, c.implementation) == (collective, impl)


# Collective kernels outside the ncclDevKernel_ family, which must not be counted as compute: one row each,
# names as the sources spell them
# (NCCL >= 2.27 src/device/symmetric/*, torch c10d/symm_mem/CUDASymmetricMemoryOps.cu, SGLang
# sgl-kernel trtllm MoE finalize + all-reduce fusion).
@pytest.mark.parametrize(("name", "collective", "impl"), [
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16(ncclSymkDevWorkArgs4K)", "all_reduce", "nccl"),
    ("ncclSymkDevKernel_AllReduce_RSxLDMC_AGxSTMC_sum_bf16(ncclSymkDevWorkArgs4K)", "all_reduce", "nccl"),
    ("ncclSymkDevKernel_AllGather_STMC(ncclSymkDevWorkArgs4K)", "all_gather", "nccl"),
    ("ncclSymkDevKernel_ReduceScatter_LL_sum_f32(ncclSymkDevWorkArgs4K)", "reduce_scatter", "nccl"),
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(...)", "all_reduce",
     "torch_symm_mem"),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 8>(...)", "all_reduce",
     "torch_symm_mem"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16, 8>(...)", "all_reduce",
     "torch_symm_mem"),
    ("void sglang::moe_finalize_all_reduce_kernel<__nv_bfloat16, 8>(...)", "all_reduce", "sglang_fused"),
    # vLLM QuickReduce (ROCm), as csrc/quickreduce/quick_reduce.h declares it
    ("void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__half, "
     "quickreduce::CodecQ8<__half, 8>>, __half>(...)", "all_reduce", "vllm_quick"),
])
def test_symmetric_memory_and_fused_kernels(name: str, collective: str, impl: str) -> None:
    c = classify_kernel(name)
    assert c is not None and (c.collective, c.implementation) == (collective, impl)


@pytest.mark.parametrize("name", [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_execute_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(...)",
    "flash_fwd_splitkv_kernel", "Memcpy DtoH (Device -> Pinned)", "reduce_kernel<512, 1>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>",
])
def test_compute_kernels_are_not_collectives(name: str) -> None:
    assert classify_kernel(name) is None


def test_collective_name_arg_wins_over_kernel_name() -> None:
    # a Generic NCCL kernel says nothing; record_param_comms' args say all-gather
    c = classify_kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", {"Collective name": "_allgather_base"})
    assert c is not None and (c.collective, c.implementation) == ("all_gather", "nccl")
    # any kernel carrying Collective name is communication, even with a name we do not know
    c = classify_kernel("some_future_comm_kernel", {"Collective name": "allreduce"})
    assert c is not None and (c.collective, c.implementation) == ("all_reduce", "unknown")


@pytest.mark.parametrize(("value", "expected"), [
    ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("allreduce_coalesced", "all_reduce"),
    ("_allgather_base", "all_gather"), ("all_gather_into_tensor", "all_gather"),
    ("_reduce_scatter_base", "reduce_scatter"), ("reduce_scatter_tensor", "reduce_scatter"),
    ("broadcast", "broadcast"), ("send", "send_recv"), ("recv", "send_recv"), ("all_to_all", "all_to_all"),
    ("barrier", "barrier"), ("mystery", "unknown"),
])
def test_collective_names(value: str, expected: str) -> None:
    assert normalise_collective_name(value) == expected


def test_cpu_ops() -> None:
    assert classify_cpu_op("gloo:all_reduce").collective == "all_reduce"  # type: ignore[union-attr]
    assert classify_cpu_op("c10d::allreduce_").implementation == "c10d"  # type: ignore[union-attr]
    assert classify_cpu_op("c10d::_allgather_base_").collective == "all_gather"  # type: ignore[union-attr]
    rpc = classify_cpu_op("record_param_comms", {"Collective name": "allreduce"})
    assert rpc is not None and rpc.collective == "all_reduce"
    assert classify_cpu_op("aten::mm") is None
    assert classify_cpu_op("aten::all") is None


def test_table_rows_are_data() -> None:
    # the classifier is a table: every row names a collective and an implementation
    for rule in KERNEL_RULES + CPU_RULES:
        assert rule.pattern and rule.collective and rule.implementation


def test_message_bytes() -> None:
    assert message_bytes({"In msg nelems": 7168, "dtype": "BFloat16"}) == 14336
    assert message_bytes({"In msg nelems": 1000, "dtype": "Float"}) == 4000
    assert message_bytes({"In msg nelems": 10, "dtype": "weird"}) == 0
    assert message_bytes({"dtype": "Float"}) == 0
    assert message_bytes(None) == 0


intervals = st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 100)).map(lambda t: (t[0], t[0] + t[1])),
                     max_size=30)


@given(intervals, intervals)
def test_interval_invariants(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> None:
    ma, mb = iv.merge(a), iv.merge(b)
    la, lb = iv.length(ma), iv.length(mb)
    assert la <= sum(e - s for s, e in a) + 1e-9
    assert all(x[1] < y[0] for x, y in zip(ma, ma[1:], strict=False))  # disjoint and sorted
    ov = iv.overlap(ma, mb)
    assert -1e-9 <= ov <= min(la, lb) + 1e-9
    # inclusion-exclusion: |A ∪ B| = |A| + |B| - |A ∩ B|
    assert abs(iv.length(iv.merge(ma + mb)) - (la + lb - ov)) < 1e-6


@given(intervals, intervals, st.randoms())
def test_the_sorted_input_union_is_the_union_exactly(a: list[tuple[float, float]], b: list[tuple[float, float]],
                                                     rnd: Any) -> None:
    # attribution feeds a pass's kernels in order of start: merge_sorted (no sort), and the busy union
    # as a merge of the two unions, must give merge()'s very floats (ties of start in any order)
    import heapq

    a = [x for x in a if x[1] > x[0]]
    b = [x for x in b if x[1] > x[0]]
    shuffled = a[:]
    rnd.shuffle(shuffled)
    in_start_order = sorted(shuffled, key=lambda x: x[0])  # (stable: equal starts keep a random order)
    assert iv.merge_sorted(in_start_order) == iv.merge(a)
    assert iv.merge_sorted(heapq.merge(iv.merge(a), iv.merge(b))) == iv.merge(a + b)


@given(st.integers(1, 4), st.lists(st.floats(0, 1e-3), min_size=0, max_size=40), st.booleans(), st.randoms())
def test_skew_of_aligned_ranks_is_the_keyed_sum_exactly(n_ranks: int, base: list[float], dup: bool, rnd: Any) -> None:
    # collective_skew's column-wise case (every rank the same distinct keys in order) against the
    # keyed formula it stands in for: the same floats
    from specmodel.trace.attribution import collective_skew

    keys = [("seq", i) for i in range(len(base))]
    if dup and keys:
        keys[-1] = keys[0]  # (a repeated key: the keyed formula itself)
    durs = {r: tuple((k, d * rnd.uniform(0.5, 2)) for k, d in zip(keys, base, strict=True)) for r in range(n_ranks)}
    got, matched = collective_skew(durs)
    by_key = {r: dict(durs[r]) for r in durs}
    fastest = {k: min(by_key[r][k] for r in durs) for k in keys}
    want = {r: sum(by_key[r][k] - fastest[k] for k in fastest) for r in durs} if n_ranks > 1 else {0: 0.0}
    assert matched and got == want


_kernel = st.tuples(st.integers(0, 60), st.integers(0, 12), st.booleans(), st.sampled_from([0, 2048, 14336]))


@given(st.lists(_kernel, max_size=60), st.integers(0, 20), st.integers(0, 80), st.randoms())
def test_a_pass_from_its_kernels_is_the_unions_formula(raw: list[tuple[int, int, bool, int]], lo: int, width: int,
                                                       rnd: Any) -> None:
    # the one-pass unions of _pass_from_kernels (compute, busy) against the formula they stand in
    # for: clip, merge() each kind, busy = |merge(all)|; the same record, float for float
    from specmodel.trace import attribution as A

    kernels = [(s / 4, (s + d) / 4, 0, i, "all_reduce" if c else None, "nccl" if c else "", b if c else 0, None)
               for i, (s, d, c, b) in enumerate(raw)]
    rnd.shuffle(kernels)
    kernels.sort(key=lambda k: k[0])  # (in order of start, equal starts in a random order)
    lo_us, hi_us = lo / 4, (lo + width) / 4
    span = A.Span(name="step", ts=lo_us, end=hi_us, pid=0, ext=None, tid=0)
    ph = A.PhaseSpan(span=span, kind="decode", batch=1, tokens=1, label="decode")
    got = A._pass_from_kernels(ph, {"decode": 0}, lo_us, hi_us, kernels)

    clipped = [(max(k[0], lo_us), min(k[1], hi_us), k) for k in kernels]
    clipped = [c for c in clipped if c[1] > c[0]]
    comm = [(s, e) for s, e, k in clipped if k[4] is not None]
    comp = [(s, e) for s, e, k in clipped if k[4] is None]
    colls = [(k[0], k[1], k[4], k[5], k[6], k[7]) for _, _, k in clipped if k[4] is not None]
    busy = iv.length(iv.merge(comm + comp))
    want = A._record(ph, 0, lo_us, hi_us, busy, iv.merge(comm), iv.merge(comp), colls, cpu=False, merged=True,
                     in_order=True)
    assert got == want


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5)), max_size=80))
def test_host_ops_sorted_in_c_are_sorted_as_python_sorts_them(ops: list[tuple[int, int]]) -> None:
    # _cscan.sort_pairs orders (start, end) pairs as sorted() of the tuples does; the collector's
    # own array stays as recorded
    from array import array

    from specmodel.trace import attribution as A

    flat = array("d", [x for s, d in ops for x in (s / 2, s / 2 + d / 4)])
    before = flat.tolist()
    got = A.host_ops_by_start(flat)
    saved = A._cscan
    try:
        A._cscan = None  # type: ignore[assignment]
        want = A.host_ops_by_start(flat)
    finally:
        A._cscan = saved
    assert (got[0].tolist(), got[1].tolist()) == (want[0].tolist(), want[1].tolist())
    assert flat.tolist() == before
    if saved is not None:
        with pytest.raises(TypeError):
            saved.sort_pairs(array("d", [1.0, 2.0, 3.0]))  # (not whole pairs)
