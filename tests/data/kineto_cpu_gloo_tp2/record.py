"""Re-record this fixture: ``.venv/bin/python tests/data/kineto_cpu_gloo_tp2/record.py``.

Two gloo ranks on the CPU, torch.profiler around labelled forwards (specmodel.engines.hook.annotate.phase):
a toy 2-layer tensor-parallel MLP, one all-reduce per layer, so every pass has exactly 2 all-reduces.
"""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from specmodel.engines.hook.annotate import phase
from specmodel.schema.phases import phase_label

HERE = Path(__file__).resolve().parent
LAYERS = 2
HIDDEN = 256


def forward(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    for w in weights:
        x = torch.relu(x @ w)
        dist.all_reduce(x)
    return x


def worker(rank: int, world: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    weights = [torch.randn(HIDDEN, HIDDEN) / HIDDEN for _ in range(LAYERS)]
    plan = [("decode", 1, 1), ("verify", 1, 4), ("draft", 1, 1)] * 3
    forward(torch.randn(4, HIDDEN), weights)  # warm-up outside the trace
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for kind, batch, tokens in plan:
            with phase(phase_label(kind, batch, tokens)):
                forward(torch.randn(tokens, HIDDEN), weights)
            dist.barrier()
    tmp = HERE / f".rank{rank}.json"
    prof.export_chrome_trace(str(tmp))
    with gzip.open(HERE / f"cpu-gloo-rank{rank}.trace.json.gz", "wb", compresslevel=9) as fh:
        fh.write(tmp.read_bytes())
    tmp.unlink()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]) if len(sys.argv) > 1 else 29561), nprocs=2)
