"""Record the hook logs of tests/data/vllm_cpu_032_condition/: a TP 1 server without speculation and
a TP 1 ngram (k = 3) server, each under ``specmodel vllm --out`` (the step hook with its
calibration probe), one after the other on 127.0.0.1, as a user records the two servers.

    .venv/bin/python scripts/record_condition_fixtures.py [--out tests/data/vllm_cpu_032_condition]

Per server: one warm-up request (8 tokens), then ``--requests`` greedy requests of ``--tokens``
tokens one at a time (batch 1), then stop. Written per server (``base`` / ``ngram``):
``hook/rank0.jsonl`` (step and probe records) and ``run.json`` (what was run). The server's log
and its kept ``/metrics`` page are not kept (the tests read the hook's records).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.vllm_engine import build_models, engine_python, hooked, ngram_spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "vllm_cpu_032_condition"))
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=48)
    a = ap.parse_args()
    py = engine_python()
    if py is None:
        print("no engine: run `make engine` first", file=sys.stderr)
        return 2
    out = Path(a.out)
    with tempfile.TemporaryDirectory(prefix="cond-") as tmp:
        models = build_models(py, Path(tmp) / "models")
        for name, spec in (("base", None), ("ngram", ngram_spec(3))):
            d = Path(tmp) / name
            with hooked(py, models.target, d / "hook", tp=1, spec=spec) as srv:
                srv.complete(max_tokens=8)
                for _ in range(a.requests):
                    srv.complete(max_tokens=a.tokens)
            dst = out / name
            if dst.exists():
                shutil.rmtree(dst)
            (dst / "hook").mkdir(parents=True)
            for f in sorted((d / "hook").glob("rank*.jsonl")):
                shutil.copy(f, dst / "hook" / f.name)
            (dst / "run.json").write_text(json.dumps({
                "command": srv.command(), "spec": spec, "requests": a.requests, "tokens": a.tokens,
                "recorded_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(), "script": "scripts/record_condition_fixtures.py"}, indent=1) + "\n")
            (f0,) = sorted((dst / "hook").glob("rank0*.jsonl"))  # rank0.jsonl (v1) or rank0-dp0-pp0-pid<pid>.jsonl
            print(f"{dst}: {sum(1 for _ in f0.open())} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
