"""All-reduce isolation from trace events, skew across ranks, aggregation, the status board."""

from __future__ import annotations

import pytest

from specmodel.profile import analysis as A
from specmodel.profile import status
from specmodel.stats import iqr

LBL = "specmodel.decode[bs=1,toks=1]"
MAIN, GLOO = 100, 200


def X(name, ts, dur, tid=MAIN, cat="cpu_op", **args):
    e = {"ph": "X", "cat": cat, "name": name, "ts": float(ts), "dur": float(dur), "pid": 1, "tid": tid}
    if args:
        e["args"] = args
    return e


def gloo_rep(t0, waits):
    """One forward at t0 (µs): compute 100, then per collective: c10d enqueue 5 µs, gloo work on
    another thread, the caller's next op when the work is done + 3 µs wake-up, compute 100."""
    ev = []
    t = t0 + 100
    ev.append(X("aten::mm", t0 + 10, 80))
    for w in waits:
        ev.append(X("c10d::allreduce_", t, 5))
        ev.append(X("gloo:all_reduce", t + 8, w, tid=GLOO, cat="user_annotation"))
        t = t + 8 + w + 3
        ev.append(X("aten::add", t, 2))
        t += 100
    ev.append(X(LBL, t0, t - t0, cat="user_annotation"))
    return ev, t


def test_cpu_gloo_collective_time_is_what_the_caller_loses():
    ev1, end = gloo_rep(0, [50, 20])
    ev2, _ = gloo_rep(end + 1000, [10])
    ev = ev1 + ev2 + [X("c10d::barrier", end + 500, 3), X("gloo:barrier", end + 503, 400, tid=GLOO,
                                                                               cat="user_annotation")]
    reps = A.analyse_cpu(ev, LBL)
    assert len(reps) == 2
    # first: (8 + 50 + 3) + (8 + 20 + 3) µs from each c10d op to the caller's next op
    assert reps[0].comm_s == pytest.approx((61 + 31) * 1e-6)
    assert [c.collective for c in reps[0].calls] == ["all_reduce", "all_reduce"]
    assert [round(c.dur_s * 1e6) for c in reps[0].calls] == [61, 31]
    assert reps[0].n_allreduce == 2 and reps[1].n_allreduce == 1
    assert reps[1].comm_s == pytest.approx(21e-6)  # the barrier outside the spans is not counted


def test_cpu_nested_record_param_comms_counts_once():
    ev, _ = gloo_rep(0, [40])
    ev.append(X("record_param_comms", 99, 8, **{"Collective name": "allreduce"}))
    reps = A.analyse_cpu(ev, LBL)
    assert len(reps[0].calls) == 1 and reps[0].calls[0].collective == "all_reduce"


def test_cpu_no_spans():
    assert A.analyse_cpu([X("aten::mm", 0, 5)], LBL) == []


def gpu_trace():
    ev = [X(LBL, 0, 500, cat="user_annotation"), X(LBL, 1000, 500, cat="user_annotation"),
          X(LBL, 10, 600, tid=7, cat="gpu_user_annotation"), X(LBL, 1010, 600, tid=7, cat="gpu_user_annotation")]
    for base in (10, 1010):
        ev += [X("gemm_kernel", base, 100, tid=7, cat="kernel"),
               X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", base + 100, 200, tid=7,
                 cat="kernel"),
               X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", base + 250, 100, tid=8, cat="kernel"),  # overlaps
               X("ncclDevKernel_AllGather_RING_LL(x)", base + 400, 50, tid=7, cat="kernel")]
    ev.append(X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 700, 100, tid=7, cat="kernel"))  # between forwards
    return ev


def test_gpu_union_of_collective_kernels_in_the_device_window():
    reps = A.analyse_gpu(gpu_trace(), LBL)
    assert len(reps) == 2
    for r in reps:
        assert r.comm_s == pytest.approx((250 + 50) * 1e-6)  # [100,350) ∪ [400,450)
        assert r.n_allreduce == 2 and r.n_allgather == 1


def test_gpu_falls_back_to_correlation_without_gpu_annotations():
    ev = [X(LBL, 0, 50, cat="user_annotation"),
          X("cudaLaunchKernel", 5, 2, cat="cuda_runtime", correlation=1),
          X("cudaLaunchKernel", 9, 2, cat="cuda_runtime", correlation=2),
          X("gemm", 100, 30, tid=7, cat="kernel", correlation=1),
          X("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 130, 70, tid=7, cat="kernel", correlation=2),
          X("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 900, 70, tid=7, cat="kernel", correlation=3)]
    reps = A.analyse_gpu(ev, LBL)
    assert len(reps) == 1 and reps[0].comm_s == pytest.approx(70e-6) and reps[0].n_allreduce == 1


def test_skew_is_the_wait_for_the_slowest_rank():
    # 2 ranks, 1 rep, 2 collectives: rank 0 waits 3 in the first, rank 1 waits 5 in the second
    sk, ok = A.skews([[[4.0, 1.0]], [[1.0, 6.0]]])
    assert ok and sk == [[3.0], [5.0]]
    sk, ok = A.skews([[[1.0]], [[1.0, 2.0]]])
    assert not ok and sk == [[0.0], [0.0]]


def test_aggregate_point_median_clip_and_spread():
    C = A.Call
    totals = [[1.0, 2.0, 3.0, 10.0], [1.0, 2.0, 3.0, 10.0]]
    comms = [[0.5, 1.5, 2.5, 20.0], [0.3, 1.5, 2.5, 20.0]]  # last rep: comm above total is clipped
    calls = [[[C("all_reduce", 0.5)], [C("all_reduce", 1.5)], [C("all_reduce", 2.5)], [C("all_reduce", 9.0)]],
             [[C("all_reduce", 0.3)], [C("all_reduce", 1.5)], [C("all_reduce", 2.5)], [C("all_reduce", 10.0)]]]
    st = A.aggregate_point(totals, comms, calls)
    assert st.total_s == pytest.approx(2.5)
    assert st.allreduce_s == pytest.approx(2.0)  # median of rank means 0.4, 1.5, 2.5, 10
    assert st.compute_s == pytest.approx(0.5)
    assert 0 <= st.skew_s <= st.allreduce_s
    assert st.samples == 4 and st.n_allreduce == 1 and st.calls_matched
    assert st.spread_s == pytest.approx(iqr([1.0, 2.0, 3.0, 10.0]))
    assert [r["rank"] for r in st.per_rank] == [0, 1]
    assert all(r["transfer_s"] == pytest.approx(r["allreduce_s"] - r["skew_s"]) for r in st.per_rank)


def test_allreduce_latency():
    lat, spread = A.allreduce_latency([[1.0, 2.0, 3.0], [2.0, 1.0, 9.0]])
    assert lat == 1.0 and spread >= 0


def test_slice_keeps_one_repetition_and_slims():
    ev, end = gloo_rep(0, [50])
    ev.append(X("aten::view", 20, 1))  # short host op: dropped
    ev.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "main"}})
    later, _ = gloo_rep(end + 100, [5])
    kept = A.slice_events(ev + later, 0, end)
    names = [e["name"] for e in kept]
    assert LBL in names and "thread_name" in names and "aten::view" not in names
    assert "c10d::allreduce_" in names and names.count(LBL) == 1
    assert all("args" not in e for e in kept if e["name"] == "aten::mm")


def test_status_board_and_laggard(tmp_path):
    p = tmp_path / "status.bin"
    status.create(p, 3)
    ws = [status.Writer(p, r) for r in range(3)]
    for w in ws:
        w.set(stage=status.RUNNING, unit=2)
    for w in ws:
        w.enter_collective()
        w.leave_collective()
    ws[0].enter_collective()
    ws[2].enter_collective()  # ranks 0 and 2 wait in the next collective, rank 1 never arrives
    slots = status.read(p, 3)
    assert [s.coll_entered for s in slots] == [2, 1, 2] and slots[0].in_collective and not slots[1].in_collective
    assert status.laggard(slots) == (1, "1 collective(s) behind the others")
    ws[1].enter_collective()
    assert status.laggard(status.read(p, 3)) is None
    for w in ws:
        w.close()


def test_profiler_scale_maps_profiled_collective_time_onto_bare_totals():
    assert A.profiler_scale([8.0, 8.0, 9.0], [10.0, 10.0, 12.0]) == pytest.approx(0.8)
    assert A.profiler_scale([], [1.0]) == 1.0
    assert A.profiler_scale([1.0], [0.0]) == 1.0


def _ingest_skews(per_rank: list[list[tuple[str, float]]], *, seq: bool) -> list[float]:
    """The same collectives through ingest's skew (trace/ingest.skews), keyed as a trace keys them."""
    from specmodel.trace.attribution import PassRecord
    from specmodel.trace.ingest import skews as ingest_skews
    from specmodel.trace.kineto import RankTrace, TraceMeta

    traces = []
    for w, calls in enumerate(per_rank):
        keys = tuple(("seq", i) if seq else ("ord", i, name) for i, (name, _) in enumerate(calls))
        rec = PassRecord(label=LBL, occurrence=0, kind="decode", batch=1, tokens=1, span_s=1.0, busy_s=1.0,
                         comm_s=1.0, exposed_s=1.0, n_collectives=len(calls), n_allreduce=len(calls),
                         coll_keys=keys, coll_durs_s=tuple(d for _, d in calls))
        meta = TraceMeta(path=f"r{w}", rank=w, rank_source="file name", world_size=len(per_rank), backend="gloo",
                         base_time_ns=None, profile_id=None, nccl_version="", device_name="", device_count=0)
        traces.append(RankTrace(meta=meta, mode="cpu", attribution="cpu span", n_events=0, n_kernels=0,
                                passes=(rec,)))
    sk = ingest_skews(traces)
    return [sk[(w, LBL, 0)] for w in range(len(per_rank))]


@pytest.mark.parametrize("per_rank", [
    [[("all_reduce", 4.0), ("all_reduce", 1.0)], [("all_reduce", 1.0), ("all_reduce", 6.0)]],  # lined up
    [[("all_reduce", 3.0), ("all_reduce", 5.0)], [("all_reduce", 1.0)]],  # one rank issued an extra one
    [[("all_reduce", 2.0), ("all_gather", 1.0)], [("all_gather", 3.0), ("all_reduce", 1.0)]],  # order differs
])
def test_profiler_and_ingest_match_collectives_the_same_way(per_rank):
    # one matcher for the profiler and ingest (matching by position in one and by key in the other
    # gives partial sums over mismatched sequences); on a trace without Seq numbers both give the
    # profiler's numbers
    calls = [[[A.Call(n, d) for n, d in rank]] for rank in per_rank]
    prof, _ = A.skews(calls)
    assert _ingest_skews(per_rank, seq=False) == [r[0] for r in prof]
    if len(per_rank[0]) != len(per_rank[1]):
        assert prof == [[0.0], [0.0]]


def test_numbered_collectives_still_match_by_number_when_one_is_missing():
    from specmodel.trace.attribution import collective_skew

    sk, matched = collective_skew({0: ((("seq", 1), 4.0), (("seq", 2), 1.0)), 1: ((("seq", 2), 3.0),)})
    assert not matched and sk == {0: 0.0, 1: 2.0}
