"""Generate a synthetic multi-rank Kineto trace set in SGLang's layout for bench_ingest_vs_hta.py.

    .venv/bin/python benchmarks/make_kineto_trace_set.py --ranks 8 --mb 60 --out .bench/kineto_tp8

Per rank: ``bench-TP-{r}.trace.json.gz`` (~``--mb`` MB of JSON before gzip) holding what a real
torch.profiler GPU trace of SGLang decode/verify steps holds: per layer, ``aten::`` cpu_ops,
``cudaLaunchKernel`` runtime events with ac2g flows, GEMM / attention / elementwise kernels and
an NCCL all-reduce launched through ``record_param_comms`` (kernel args carry Collective name,
In msg nelems, dtype, Seq), inside ``step[DECODE bs=1]`` / ``step[VERIFY bs=1]`` spans with their
``gpu_user_annotation``. Deterministic (seeded); written to a git-ignored folder.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

LAYERS = 61
KERNELS = (
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x64x64_warpgroupsize1x1x1_execute_kernel__5x_cublas",
     "aten::mm", 18.0),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<true, 128u, 4u, 8u>(...)", "aten::_flash_attention", 9.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(...)",
     "aten::add", 2.5),
    ("void sglang::fused_add_rmsnorm_kernel<c10::BFloat16>(...)", "sgl_kernel::fused_add_rmsnorm", 3.0),
)
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _x(cat: str, name: str, pid: object, tid: object, ts: float, dur: float, args: dict[str, object]) -> str:
    return json.dumps({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
                       "dur": round(dur, 3), "args": args})


class _Rank:
    def __init__(self, rank: int, world: int, seed: int) -> None:
        self.rank, self.world = rank, world
        self.rng = random.Random(seed * 1000 + rank)
        self.corr = 1
        self.ext = 1
        self.seq = 0
        self.cpu = 1_000_000.0
        self.gpu = 1_000_300.0 + rank * 2.0
        self.pid = 4000 + rank

    def _op(self, out: list[str], op: str, kname: str, kdur: float, stream: int,
            kargs: dict[str, object] | None = None) -> None:
        rng = self.rng
        c, e = self.corr, self.ext
        self.corr += 1
        self.ext += 1
        out.append(_x("cpu_op", op, self.pid, self.pid, self.cpu, 6.0,
                      {"External id": e, "Record function id": 0, "Sequence number": e, "Fwd thread id": 0,
                       "Ev Idx": e}))
        out.append(_x("cuda_runtime", "cudaLaunchKernel", self.pid, self.pid, self.cpu + 1.0, 4.0,
                      {"External id": e, "cbid": 211, "correlation": c}))
        start = max(self.gpu, self.cpu + 8.0)
        dur = kdur * (1 + 0.1 * rng.random())
        args: dict[str, object] = {"External id": e, "queued": 0, "device": 0, "context": 1, "stream": stream,
                                   "correlation": c, "registers per thread": 128, "shared memory": 0,
                                   "blocks per SM": 1.2, "warps per SM": 4.8, "grid": [132, 1, 1],
                                   "block": [128, 1, 1], "est. achieved occupancy %": 6}
        if kargs:
            args.update(kargs)
        out.append(_x("kernel", kname, 0, stream, start, dur, args))
        out.append(json.dumps({"ph": "s", "id": c, "pid": self.pid, "tid": self.pid, "ts": round(self.cpu + 1.0, 3),
                               "cat": "ac2g", "name": "ac2g"}))
        out.append(json.dumps({"ph": "f", "id": c, "pid": 0, "tid": stream, "ts": round(start, 3), "cat": "ac2g",
                               "name": "ac2g", "bp": "e"}))
        self.cpu += 7.0
        self.gpu = start + dur

    def forward(self, out: list[str], label: str, tokens: int) -> None:
        rng = self.rng
        e = self.ext
        self.ext += 1
        cpu0, gpu0 = self.cpu, max(self.gpu, self.cpu + 8.0)
        self.gpu = gpu0
        for _ in range(LAYERS):
            for kname, op, kdur in KERNELS:
                self._op(out, op, kname, kdur * (1 + 0.05 * tokens), 7)
            self.seq += 1
            nelems = 7168 * tokens
            # the all-reduce waits for the slowest rank: its duration varies by rank
            wait = rng.expovariate(1 / 8.0)
            self._op(out, "record_param_comms", NCCL, 40.0 + wait, 7,
                     {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                      "Group size": self.world, "dtype": "BFloat16", "Process Group Name": "0",
                      "Process Group Description": "tp", "Seq": self.seq})
        out.append(_x("user_annotation", label, self.pid, self.pid, cpu0, self.cpu - cpu0, {"External id": e}))
        out.append(_x("gpu_user_annotation", label, 0, 7, gpu0, self.gpu - gpu0, {"External id": e}))
        self.cpu = max(self.cpu, self.gpu - 200.0) + 30.0


def write_rank(path: Path, rank: int, world: int, target_bytes: int, seed: int) -> int:
    r = _Rank(rank, world, seed)
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                              "totalGlobalMem": 102005473280, "computeMajor": 12, "computeMinor": 0,
                              "maxThreadsPerBlock": 1024, "numSms": 188}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": 1,
                            "nccl_version": "2.27.3"},
        "record_shapes": 0, "with_stack": 0,
    }
    written = 0
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        i = 0
        while written < target_bytes:
            out: list[str] = []
            if i % 2 == 0:
                r.forward(out, "step[DECODE bs=1]", 1)
            else:
                r.forward(out, "step[VERIFY bs=1]", 4)
            i += 1
            chunk = ",\n".join(out)
            fh.write(("" if first else ",\n") + chunk)
            first = False
            written += len(chunk)
        fh.write('\n], "traceName": "bench", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1764000000000000000}\n')
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=60.0, help="uncompressed JSON per rank, MB")
    ap.add_argument("--out", type=Path, default=Path(".bench/kineto_tp8"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for old in a.out.glob("*.trace.json*"):
        old.unlink()
    total = 0
    for rank in range(a.ranks):
        total += write_rank(a.out / f"bench-TP-{rank}.trace.json.gz", rank, a.ranks, int(a.mb * 1e6), a.seed)
    print(f"wrote {a.ranks} ranks, {total / 1e6:.0f} MB of JSON (gzipped) to {a.out}")


if __name__ == "__main__":
    main()
