"""What `specmodel vllm`'s step hook costs the engine: tok/s with the hook off vs on, servers
started alternately (off, on, off, on, ...), each measured with the same bounded client.

Default: TP 2 with draft_model k = 3 -- the case with the most wrapped calls per step (the target
forward, the proposal, 9 + 27 all-reduces). Target (issue 16 item 2): cost <= 2 % of tok/s.
The figure is the ratio of the medians over pairs; the spread is the range of per-pair ratios.

Run: .venv/bin/python benchmarks/bench_vllm_hook_overhead.py [--pairs 2] [--tp 2] [--batch 1]
(needs `make engine`; ~2 server starts per pair).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.vllm_engine import VllmServer, build_models, draft_spec, engine_python, measure, ngram_spec  # noqa: E402

TARGET = 0.02


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--drafter", choices=("draft_model", "ngram", "none"), default="draft_model")
    ap.add_argument("--models", type=Path, default=None)
    a = ap.parse_args()
    py = engine_python()
    if py is None:
        print("bench_vllm_hook_overhead: the engine is not installed (make engine)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-vllm-hook-"))
    models = build_models(py, a.models or work / "models")
    spec = {"draft_model": draft_spec(models.draft_noisy, 3), "ngram": ngram_spec(3), "none": None}[a.drafter]
    rates: dict[str, list[float]] = {"off": [], "on": []}
    ratios = []
    loads = [os.getloadavg()[0]]
    t0 = time.monotonic()
    for i in range(a.pairs):
        pair = {}
        for arm in ("off", "on"):
            wrap = ([str(REPO / ".venv" / "bin" / "specmodel"), "vllm", "--out", str(work / f"hook{i}"), "--"]
                    if arm == "on" else [])
            with VllmServer(python=py, model=models.target, tp=a.tp, spec=spec, wrap=wrap,
                            log_path=work / f"{arm}{i}.log") as srv:
                t = measure(srv, batch=a.batch, tokens=a.tokens, reps=a.reps)
            pair[arm] = t.median_tokens_per_s
            rates[arm].extend(t.tokens_per_s)
            loads.append(os.getloadavg()[0])
            print(f"pair {i} hook {arm:<3}: {t.median_tokens_per_s:7.1f} tok/s (rounds {', '.join(f'{x:.1f}' for x in t.tokens_per_s)})",
                  flush=True)
        ratios.append(pair["on"] / pair["off"])
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    cost = 1 - on / off
    print(f"\nTP {a.tp}, {a.drafter}, batch {a.batch}, {a.tokens} tokens x {a.reps} rounds, {a.pairs} pair(s):")
    print(f"hook off {off:.1f} tok/s, on {on:.1f} tok/s: cost {cost:+.1%} (per-pair on/off "
          f"{min(ratios):.3f}-{max(ratios):.3f}); target <= {TARGET:.0%}")
    print(f"box: {os.cpu_count()} cores, load avg (1 min) {min(loads):.1f}-{max(loads):.1f}; {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
