"""Record what `specmodel watch` / `accept` / `validate` read from a live vLLM CPU engine into
tests/data/vllm_cpu_032_watch/ (one server at a time, 127.0.0.1, stopped by its process group):

    .venv/bin/python scripts/record_watch_fixtures.py [--out DIR]

* ``tp1_ngram/``: ngram k=3 under ``specmodel vllm`` (the step hook: ``hook/`` → a profile of the
  same engine), ``VLLM_LOG_STATS_INTERVAL=1``: ``metrics_0.txt`` scraped idle, a burst of requests
  (batch 1, then 2 and 4 concurrent), the stats flushed, ``metrics_1.txt``; ``server.log``;
  ``profile/`` from ``specmodel vllm --summarize hook``; ``run.json`` (what was run).
* ``tp1_none/``: the same server without speculation: ``server.log``, ``metrics.txt``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.vllm_engine import VllmServer, build_models, engine_python, ngram_spec  # noqa: E402

PROMPTS = ("the quick brown fox jumps over the lazy dog. " * 6, "a small cat sleeps on the warm mat and " * 8,
           "the engine serves tokens to every request in the batch " * 5, "the drafter guesses right " * 10)


def _burst(srv: VllmServer, tokens: int) -> list[dict[str, object]]:
    done: list[dict[str, object]] = []
    for conc in (1, 2, 4):
        with ThreadPoolExecutor(conc) as ex:
            list(ex.map(lambda i: srv.complete(PROMPTS[i % len(PROMPTS)], max_tokens=tokens), range(conc)))
        done.append({"concurrent": conc, "max_tokens": tokens})
        time.sleep(1.5)  # one stats interval per concurrency: windows at batch 1, 2, 4
    return done


def _clean(text: str, *paths: Path) -> str:
    for p in paths:
        text = text.replace(str(p), "<run>")
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "vllm_cpu_032_watch")
    ap.add_argument("--tokens", type=int, default=96)
    a = ap.parse_args()
    py = engine_python()
    if py is None:
        print("record_watch_fixtures: the engine is not installed (run `make engine`)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="watch-rec-"))
    models = build_models(py, work / "models")
    env = {"VLLM_LOG_STATS_INTERVAL": "1"}
    # ngram, with the hook, two scrapes around a burst
    dest = a.out / "tp1_ngram"
    hook = work / "hook"
    srv = VllmServer(python=py, model=models.target, tp=1, spec=ngram_spec(3), log_path=work / "ngram.log", env=env,
                     wrap=[str(REPO / ".venv" / "bin" / "specmodel"), "vllm", "--out", str(hook), "--"])
    with srv:
        srv.complete(max_tokens=8)
        time.sleep(3.0)  # the warm-up's stats flushed: metrics_0 starts a clean window
        page0 = srv.get("/metrics")
        t0 = time.time()
        reqs = _burst(srv, a.tokens)
        time.sleep(3.0)
        page1 = srv.get("/metrics")
        t1 = time.time()
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / "metrics_0.txt").write_text(page0)
    (dest / "metrics_1.txt").write_text(page1)
    (dest / "server.log").write_text(_clean((work / "ngram.log").read_text(errors="replace"), models.target.parent, work))
    prof = work / "profile"
    r = subprocess.run([str(REPO / ".venv" / "bin" / "specmodel"), "vllm", "--summarize", str(hook), "-o", str(prof),
                        "--name", "tiny-vllm-cpu-tp1"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"record_watch_fixtures: summarize failed: {r.stderr}", file=sys.stderr)
    else:
        shutil.copytree(prof, dest / "profile")
    ver = subprocess.run([str(py), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
                         capture_output=True, text=True, timeout=120).stdout.split()
    run = {"recorded": dt.date.today().isoformat(), "vllm": ver[0] if ver else None,
           "torch": ver[1] if len(ver) > 1 else None, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "load_avg_1m": os.getloadavg()[0], "command": _clean(" ".join(srv.command()), models.target.parent, work),
           "env": env, "requests": reqs, "scrape_gap_s": round(t1 - t0, 2),
           "note": "metrics_0 scraped idle after warm-up; metrics_1 after the burst and a flushed stats interval"}
    (dest / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    # no speculation
    dest = a.out / "tp1_none"
    srv = VllmServer(python=py, model=models.target, tp=1, spec=None, log_path=work / "none.log", env=env)
    with srv:
        srv.complete(max_tokens=32)
        time.sleep(2.0)
        page = srv.get("/metrics")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / "metrics.txt").write_text(page)
    (dest / "server.log").write_text(_clean((work / "none.log").read_text(errors="replace"), models.target.parent, work))
    shutil.rmtree(work, ignore_errors=True)
    print(f"recorded into {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
