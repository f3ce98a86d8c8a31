"""A GPU capture, built here from the record shapes Kineto writes (docs/allreduce-capture.md): the
kernels of a CUDA-graph replay each carry the correlation id of the ``cudaGraphLaunch`` issued
inside the hook's ``specmodel.<phase>`` span; with GPU_USER_ANNOTATION recorded, a
``gpu_user_annotation`` of the same name spans them (first kernel's start to last kernel's end)
with the CPU range's ``External id``.

Per rank (µs), three decode replays: GEMM [20,60], NCCL all-reduce [60,90] (rank 1: [60,100], it
waits 10 µs), GEMM [90,100] (rank 1: [100,110]); two verify replays: GEMM [20,100], vLLM custom
all-reduce ``cross_device_reduce_1stage`` [100,120]. A graph replayed outside any span (another
correlation id) must not count."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm.capture_ingest import read_capture
from specmodel.trace.kineto import IngestOptions, parse_rank_file

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CUSTOM = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals, int)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"


def _trace(rank: int, *, device_spans: bool, tp: int = 2) -> dict[str, Any]:
    ev: list[dict[str, Any]] = []
    corr = 1000 * (rank + 1)
    ext = 1
    t = 0.0

    def replay(name: str, kernels: list[tuple[str, float, float]], *, inside: bool = True) -> None:
        nonlocal corr, ext, t
        corr += 1
        ext += 1
        if inside:
            ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 7, "tid": 7, "ts": t, "dur": 50.0,
                       "args": {"External id": ext}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 7, "tid": 7, "ts": t + 10,
                   "dur": 5.0, "args": {"correlation": corr, "External id": ext}})
        for kname, a, b in kernels:
            ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": t + a, "dur": b - a,
                       "args": {"correlation": corr, "stream": 7, "device": 0, "graph id": 3, "graph node id": 9}})
        if inside and device_spans:
            lo, hi = min(k[1] for k in kernels), max(k[2] for k in kernels)
            ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7, "ts": t + lo - 0.001,
                       "dur": hi - lo + 0.002, "args": {"External id": ext}})
        t += 1000.0

    wait = 10.0 * rank
    for _ in range(3):
        kernels = [(GEMM, 20, 60), (NCCL, 60, 90 + wait), (GEMM, 90 + wait, 100 + wait)] if tp > 1 else \
            [(GEMM, 20, 60), (GEMM, 60, 100)]
        replay("specmodel.decode[bs=1,toks=1]", kernels)
    replay("", [(NCCL, 0, 500)], inside=False)  # a replay outside any span
    for _ in range(2):
        replay("specmodel.verify[bs=1,toks=4]", [(GEMM, 20, 100), (CUSTOM, 100, 120)] if tp > 1 else [(GEMM, 20, 120)])
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": tp},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": ev}


def _capture_dir(tmp: Path, *, device_spans: bool, tp: int = 2) -> Path:
    cap = tmp / "capture"
    cap.mkdir(parents=True)
    for r in range(tp):
        (cap / f"rank{r}.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(_trace(r, device_spans=device_spans, tp=tp)).encode()))
        (cap / f"rank{r}.json").write_text(json.dumps({
            "schema": "specmodel.vllm_capture", "schema_version": 1, "rank": str(r), "trace": f"rank{r}.pt.trace.json.gz",
            "started_unix_s": 100.0, "ended_unix_s": 101.0, "cycle_steps": 5, "activities": "cpu+cuda"}))
    return tmp


@pytest.mark.parametrize("device_spans, attribution", [(True, "gpu_user_annotation"), (False, "correlation")])
def test_graph_replay_kernels_map_to_the_span_that_launched_them(tmp_path: Path, device_spans: bool,
                                                                 attribution: str) -> None:
    cap = read_capture(_capture_dir(tmp_path, device_spans=device_spans))
    assert cap is not None and cap.mode == "gpu" and cap.attribution == attribution
    shares = dict(cap.shares)
    # decode: rank 0 30 of 80 µs, rank 1 40 of 90 µs, 3 passes each: median all-reduce 35 µs over
    # median span 85 µs (both ranks pooled, as the hook's rows are); verify: 20 of 100 µs on both
    assert shares[("decode", 1, 1)] == pytest.approx(35 / 85, rel=1e-4)
    assert shares[("verify", 1, 4)] == pytest.approx(0.2, rel=1e-4)
    assert dict(cap.passes) == {("decode", 1, 1): 3, ("verify", 1, 4): 2}


def test_the_replay_outside_any_span_is_not_counted(tmp_path: Path) -> None:
    _capture_dir(tmp_path, device_spans=False)
    rt = parse_rank_file(str(tmp_path / "capture" / "rank0.pt.trace.json.gz"), IngestOptions())
    assert [p.n_allreduce for p in rt.passes] == [1, 1, 1, 1, 1]
    assert max(p.span_s for p in rt.passes) == pytest.approx(100e-6, rel=1e-6)  # not the 500 µs one


def test_one_gpu_shows_the_replays_mapped_but_no_allreduce_share(tmp_path: Path) -> None:
    """TP 1: the replays' kernels map to their phases; there is no collective, so the share is 0 --
    and a 0 share prices no row (a TP 1 row's all-reduce is none; a TP > 1 one stays unknown)."""
    cap = read_capture(_capture_dir(tmp_path, device_spans=True, tp=1))
    assert cap is not None and dict(cap.passes) == {("decode", 1, 1): 3, ("verify", 1, 4): 2}
    assert set(dict(cap.shares).values()) == {0.0}
