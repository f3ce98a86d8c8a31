"""specmodel's schedule for the live engine, from a profile of that same engine and model, in runs
separate from the head-to-head's rounds:

1. ``specmodel vllm --out base -- <server without speculation>`` under concurrency 1, 2, 4, 8
   (bounded requests, the benchmark's prompt length): decode steps per batch;
2. ``specmodel vllm --out spec -- <server with static k>`` under the same load: verify steps at
   B·(k+1) tokens, drafter forwards (or the host proposer's time), the step's host work measured;
   its server log carries the acceptance (``SpecDecoding metrics`` lines, per position);
3. ``specmodel vllm --summarize base --summarize spec -o profile`` → the profile; rows seen fewer
   than ``MIN_SAMPLES`` times are dropped (``profile_steady``): they are the ramp-up / tail steps of
   a load (batch 3, 5, 7 of a concurrency-8 run), whose host time holds the wait for the next
   request, and the cost surface is a running maximum over tokens (``model/costs.py``), so one such
   step would price every larger verify;
4. ``specmodel plan --profile profile --accept-log spec/server.log --engine vllm
   --serve-model <target> --serve-tp <tp> --export schedule.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._vllm_live import metrics_counters, run_load
from tests.vllm_engine import VllmServer

SPECMODEL = str(Path(sys.executable).parent / "specmodel")
MIN_SAMPLES = 5


def steady_rows(profile_json: Path, out_dir: Path) -> Path:
    """A copy of the profile without the rows seen fewer than MIN_SAMPLES times (see the module docstring)."""
    doc = json.loads(profile_json.read_text())
    kept = [r for r in doc["costs"] if r.get("samples", 1) >= MIN_SAMPLES]
    dropped = len(doc["costs"]) - len(kept)
    doc["costs"] = kept
    doc["notes"] = [*doc.get("notes", []), f"{dropped} row(s) seen fewer than {MIN_SAMPLES} times dropped "
                    "(ramp-up/tail steps of the load; benchmarks/_engine_schedule.py)"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "profile.json").write_text(json.dumps(doc, indent=2))
    return out_dir


def _hooked_run(py: Path, target: Path, spec: dict[str, Any] | None, out: Path, *, conc: tuple[int, ...],
                prompt_words: int, max_tokens: int, max_num_seqs: int, max_model_len: int, tp: int) -> str:
    srv = VllmServer(python=py, model=target, tp=tp, spec=spec, wrap=[SPECMODEL, "vllm", "--out", str(out), "--"],
                     extra=["--max-num-seqs", str(max_num_seqs), "--max-model-len", str(max_model_len)],
                     log_path=out.parent / f"{out.name}.server.log")
    with srv:
        run_load(srv.url, concurrency=1, requests=1, prompt_words=prompt_words, max_tokens=8)
        for c in conc:
            before = metrics_counters(srv.url)
            tps = run_load(srv.url, concurrency=c, requests=2 * c, prompt_words=prompt_words, max_tokens=max_tokens)
            after = metrics_counters(srv.url)
            d = after["drafts"] - before["drafts"]
            acc = f", acceptance {1 + (after['accepted'] - before['accepted']) / d:.2f}" if d else ""
            print(f"profile run {out.name} c={c}: {tps:.1f} tok/s (hooked){acc}", flush=True)
        return srv.log_text()


def derive_schedule(*, python: Path, target: Path, base: dict[str, Any], static_k: int, prompt_words: int,
                    max_tokens: int, out_dir: Path, conc: tuple[int, ...], max_num_seqs: int, max_model_len: int,
                    tp: int = 1) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    kw = {"conc": conc, "prompt_words": prompt_words, "max_tokens": max_tokens, "max_num_seqs": max_num_seqs,
          "max_model_len": max_model_len, "tp": tp}
    for d in ("base", "spec"):
        for f in (out_dir / d).glob("rank*.jsonl"):
            f.unlink()  # the hook refuses a directory holding an earlier run's files
    _hooked_run(python, target, None, out_dir / "base", **kw)  # type: ignore[arg-type]
    spec_log = _hooked_run(python, target, {**base, "num_speculative_tokens": static_k}, out_dir / "spec",
                           **kw)  # type: ignore[arg-type]
    (out_dir / "spec_server.log").write_text(spec_log)
    prof = out_dir / "profile"
    r = subprocess.run([SPECMODEL, "vllm", "--summarize", str(out_dir / "base"), "--summarize", str(out_dir / "spec"),
                        "-o", str(prof)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"specmodel vllm --summarize failed: {r.stderr.strip()}")
    return plan_schedule(prof, out_dir, base=base, target=target, tp=tp, max_num_seqs=max_num_seqs)


def plan_schedule(prof: Path, out_dir: Path, *, base: dict[str, Any], target: Path, tp: int, max_num_seqs: int) -> Path:
    steady = steady_rows(prof / "profile.json", out_dir / "profile_steady")
    sched = out_dir / "schedule.json"
    cmd = [SPECMODEL, "plan", "--profile", str(steady), "--accept-log", str(out_dir / "spec_server.log"),
           "--engine", "vllm", "--speculative-config", json.dumps(base, separators=(",", ":")),
           "--serve-model", str(target), "--serve-tp", str(tp), "--max-num-seqs", str(max_num_seqs),
           "--export", str(sched)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out_dir / "plan.txt").write_text(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"specmodel plan failed: {r.stderr.strip()}")
    print(r.stdout, flush=True)
    return sched
