"""specmodel's schedule for the live engine, from measurements of that same engine (not from the
head-to-head's own rounds), through ``specmodel plan``'s existing profile-free path:

1. no speculation at concurrency 1, 2, 4, …, ``sweep_max`` (bounded requests, one context) →
   ``sweep.csv`` (``batch,context,tokens_per_s``, totals): the decode cost T_fwd(n) per step,
   scheduler and sampling included; a verify over n tokens is looked up on the same surface
   (``model/costs.py`` FALLBACK), so verifying B·(k+1) tokens up to the sweep's top is measured;
2. static k at concurrency 1 → its tok/s and acceptance (the engine's own counters: mean
   acceptance length = 1 + accepted / drafts, vLLM's convention, bonus included) and the
   server log (``--accept-log``: per-position rates from its SpecDecoding lines);
3. ``specmodel plan --baseline-sweep sweep.csv --accept-log server.log --calibrate
   1,CTX,ACC,TPS --engine vllm --export schedule.json``: the one observed speculative point
   calibrates the per-cycle cost nobody measured (rejection sampling, proposer host time), carried
   unchanged to other batches.

This stands in for ``specmodel vllm``'s hook profile (per-forward costs) until that lands; it is
coarser (one cost surface for decode and verify, the calibrated overhead constant over batch).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._vllm_live import VllmServer, metrics_counters, run_load


def derive_schedule(*, target: str, base: dict[str, Any], static_k: int, prompt_tokens: int, max_tokens: int,
                    out_dir: Path, sweep: tuple[int, ...] = (1, 2, 4, 8, 16, 32), max_num_seqs: int = 8,
                    tp: int = 1) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    max_len = prompt_tokens + max_tokens + 64
    rows = []
    srv = VllmServer(model=target, speculative_config=None, max_num_seqs=max(sweep), max_model_len=max_len, tp=tp)
    ok, why = srv.start()
    if not ok:
        raise RuntimeError(f"baseline engine did not start: {why}")
    try:
        run_load(srv.url, concurrency=1, requests=1, prompt_tokens=prompt_tokens, max_tokens=8)
        for c in sweep:
            tps = run_load(srv.url, concurrency=c, requests=2 * c, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
            rows.append(f"{c},{prompt_tokens},{tps:.3f}")
            print(f"profile: no speculation c={c}: {tps:.1f} tok/s", flush=True)
    finally:
        srv.stop()
    sweep_csv = out_dir / "sweep.csv"
    sweep_csv.write_text("batch,context,tokens_per_s\n" + "\n".join(rows) + "\n")
    spec = {**base, "num_speculative_tokens": static_k}
    srv = VllmServer(model=target, speculative_config=spec, max_num_seqs=max_num_seqs, max_model_len=max_len, tp=tp)
    ok, why = srv.start()
    if not ok:
        raise RuntimeError(f"speculative engine did not start: {why}")
    try:
        run_load(srv.url, concurrency=1, requests=1, prompt_tokens=prompt_tokens, max_tokens=8)
        before = metrics_counters(srv.url)
        tps = run_load(srv.url, concurrency=1, requests=4, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
        after = metrics_counters(srv.url)
    finally:
        srv.stop()
    log = out_dir / "server.log"
    log.write_text(srv.log())
    drafts = after["drafts"] - before["drafts"]
    if drafts <= 0:
        raise RuntimeError("the speculative engine drafted nothing: no acceptance to calibrate on")
    acc = 1.0 + (after["accepted"] - before["accepted"]) / drafts
    print(f"profile: static k={static_k} c=1: {tps:.1f} tok/s, mean acceptance length {acc:.2f}", flush=True)
    exe = Path(sys.executable).parent / "specmodel"
    sched = out_dir / "schedule.json"
    cmd = [str(exe), "plan", "--baseline-sweep", str(sweep_csv), "--accept-log", str(log), "--tp", str(tp),
           "--steps", str(static_k), "--calibrate", f"1,{prompt_tokens},{acc:.4f},{tps:.3f}", "--engine", "vllm",
           "--speculative-config", _json(base), "--max-num-seqs", str(max_num_seqs), "--export", str(sched)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out_dir / "plan.txt").write_text(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"specmodel plan failed: {r.stderr.strip()}")
    print(r.stdout[r.stdout.find("vllm schedule"):], flush=True)
    return sched


def _json(d: dict[str, Any]) -> str:
    import json

    return json.dumps(d, separators=(",", ":"))
