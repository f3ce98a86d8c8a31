"""``plan --engine vllm --export`` accepted and used by the live vLLM engine.

The schedule here: speculation measured to pay at batch 1 only (a plain-number profile at batch 1;
batches 2..4 are not measured, so k = 0 there). The engine must (1) start with the exported
``--speculative-config`` and log it back (``non-default args`` and ``speculative_config=``), and
(2) run that k per step: a request alone drafts k tokens per draft (the engine's own counters:
draft tokens / drafts), four requests at once draft (almost) nothing: only in the steps where
fewer than two are scheduled. Added CI time: one server start and ~10 s of requests (~40 s).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks._vllm_live import complete_together, metrics_counters, run_load
from tests.conftest import run_cli
from tests.vllm_engine import VllmServer

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
TOKENS = 40
#: the four requests sent at once generate this many each: long enough that they overlap on the engine
#: even when the other test worker loads the box (at 40 tokens each, ~0.1 s apiece, a fresh-clone run saw
#: all four served one after another at batch 1: 144 draft tokens per 160, the solo rate)
BATCHED_TOKENS = 4 * TOKENS


def test_exported_schedule_is_accepted_and_used_by_the_live_engine(vllm_python: Path, tiny_models: Any,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "schedule.json"
    r = run_cli("plan", "--baseline-tps", "20", "--verify-ms", "55", "--draft-ms", "2", "--accept-len", "2.5",
                "--steps", "3", "--tp", "1", "--engine", "vllm", "--max-num-seqs", "4",
                "--speculative-config", json.dumps({"method": "draft_model", "model": str(tiny_models.draft_noisy)}),
                "--export", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cfg = json.loads(out.read_text())["bands"][0]["vllm"]["speculative_config"]
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 1, 3], [2, 4, 0]], cfg
    with VllmServer(python=vllm_python, model=tiny_models.target, spec=cfg, extra=["--max-num-seqs", "4"]) as srv:
        log = srv.log_text()
        # the engine's own echo of what it was given, and the config it built from it
        assert re.search(r"non-default args: .*'num_speculative_tokens_per_batch_size': \[\[1, 1, 3\], \[2, 4, 0\]\]",
                         log), log[-3000:]
        assert re.search(r"speculative_config=SpeculativeConfig\(method='draft_model'.*num_spec_tokens=3\)", log), \
            log[-3000:]
        run_load(srv.url, concurrency=1, requests=1, prompt_words=30, max_tokens=4)  # warm-up
        before = metrics_counters(srv.url)
        run_load(srv.url, concurrency=1, requests=2, prompt_words=30, max_tokens=TOKENS)
        solo = {k: v - before[k] for k, v in metrics_counters(srv.url).items()}
        assert solo["drafts"] > 0, solo
        # k = 3 at batch 1 (a draft can be cut short only where max_tokens ends the request)
        assert 2.5 <= solo["draft_tokens"] / solo["drafts"] <= 3.0, solo
        before = metrics_counters(srv.url)
        complete_together(srv.url, n=4, prompt_words=30, max_tokens=BATCHED_TOKENS)  # side by side: batch 4
        four = {k: v - before[k] for k, v in metrics_counters(srv.url).items()}
        assert four["generated"] >= 4 * BATCHED_TOKENS, four
        # per generated token, four at once draft far less than one alone: k = 0 at batch >= 2. Static
        # k = 3 would draft at the solo rate (ratio ~1)
        assert four["draft_tokens"] / four["generated"] < 0.5 * solo["draft_tokens"] / solo["generated"], (solo, four)
