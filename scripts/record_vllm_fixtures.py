"""Record small real artefacts from a live vLLM CPU engine into tests/data/vllm_cpu_032/.

    .venv/bin/python scripts/record_vllm_fixtures.py [--out tests/data/vllm_cpu_032] [--only tp2_ngram]

Per configuration (TP 1 / TP 2 × ngram / draft_model, plus a TP 1 server without speculation),
one server at a time on 127.0.0.1 under ``specmodel vllm`` (the step hook on), with
``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`` and the torch profiler (stack off: with stack on two
seconds make a gigabyte): a warm-up request, ``/start_profile``, a few greedy requests (batch 1 then
2 concurrent), ``/stop_profile``, ``/metrics``, one more request so a ``SpecDecoding metrics``
line is logged, then stop. Written per configuration:

* ``server.log`` -- the server's stdout+stderr (engine-config, throughput and SpecDecoding lines);
* ``metrics.txt`` -- the Prometheus page after the profiled requests;
* ``traces/*.pt.trace.json.gz`` -- one torch-profiler trace per rank (+ the frontend's);
* ``hook/rank<k>.jsonl`` -- the specmodel step hook's records of the same run;
* ``run.json`` -- what was run (command, versions, date, requests), so a reader can cite it.

Every trace must stay under 1 MB gzipped (checked; the script fails otherwise).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.vllm_engine import (  # noqa: E402
    PROMPT,
    VllmServer,
    build_models,
    draft_spec,
    engine_python,
    ngram_spec,
)

MAX_TRACE_BYTES = 1_000_000


def configs(models: object) -> dict[str, dict[str, object]]:
    m = models
    return {
        "tp1_none": {"tp": 1, "spec": None},
        "tp1_ngram": {"tp": 1, "spec": ngram_spec(3)},
        "tp2_ngram": {"tp": 2, "spec": ngram_spec(3)},
        "tp1_draft_model": {"tp": 1, "spec": draft_spec(m.draft_noisy, 3)},  # type: ignore[attr-defined]
        "tp2_draft_model": {"tp": 2, "spec": draft_spec(m.draft_noisy, 3)},  # type: ignore[attr-defined]
    }


def record(name: str, cfg: dict[str, object], models: object, py: Path, out: Path, tokens: int) -> None:
    dest = out / name
    work = Path(tempfile.mkdtemp(prefix=f"vllm-rec-{name}-"))
    trace_dir = work / "traces"
    hook_dir = work / "hook"
    prof = {"profiler": "torch", "torch_profiler_dir": str(trace_dir), "torch_profiler_with_stack": False,
            "torch_profiler_record_shapes": False}
    srv = VllmServer(python=py, model=models.target, tp=int(cfg["tp"]), spec=cfg["spec"],  # type: ignore[attr-defined,arg-type]
                     extra=["--profiler-config", json.dumps(prof)], log_path=work / "server.log",
                     env={"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"},
                     wrap=[str(REPO / ".venv" / "bin" / "specmodel"), "vllm", "--out", str(hook_dir), "--"])
    t0 = time.monotonic()
    requests: list[dict[str, object]] = []
    with srv:
        srv.complete(max_tokens=8)  # warm-up, outside the trace
        srv.post("/start_profile", timeout_s=60)
        srv.complete(max_tokens=tokens)
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda _: srv.complete(max_tokens=tokens), range(2)))
        srv.post("/stop_profile", timeout_s=180)
        requests.append({"profiled": [{"batch": 1, "max_tokens": tokens}, {"batch": 2, "max_tokens": tokens}]})
        (work / "metrics.txt").write_text(srv.get("/metrics"))
        time.sleep(2.5)  # VLLM_LOG_STATS_INTERVAL=2: the stats line of the last interval
        srv.complete(max_tokens=tokens)
        time.sleep(2.5)
    elapsed = time.monotonic() - t0
    traces = sorted(trace_dir.rglob("*.pt.trace.json.gz"))
    if not traces:
        raise SystemExit(f"{name}: no traces under {trace_dir} (log: {work / 'server.log'})")
    for t in traces:
        if t.stat().st_size > MAX_TRACE_BYTES:
            raise SystemExit(f"{name}: {t.name} is {t.stat().st_size} bytes (> {MAX_TRACE_BYTES}); record fewer tokens")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "traces").mkdir(parents=True)
    for t in traces:
        shutil.copy2(t, dest / "traces" / t.name)
    shutil.copytree(hook_dir, dest / "hook")
    log = (work / "server.log").read_text(errors="replace").replace(str(work), "<run>")
    (dest / "server.log").write_text(log.replace(str(models.target.parent), "<models>"))  # type: ignore[attr-defined]
    shutil.copy2(work / "metrics.txt", dest / "metrics.txt")
    import subprocess

    ver = subprocess.run([str(py), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
                         capture_output=True, text=True, timeout=120).stdout.split()
    run = {"config": name, "tp": cfg["tp"], "speculative_config": cfg["spec"], "recorded": dt.date.today().isoformat(),
           "vllm": ver[0] if ver else None, "torch": ver[1] if len(ver) > 1 else None,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_avg_1m": os.getloadavg()[0],
           "command": srv.command(), "requests": requests, "prompt": PROMPT, "seconds": round(elapsed, 1),
           "env": {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                   "VLLM_CPU_OMP_THREADS_BIND": "|".join(str(r) for r in range(int(cfg["tp"]))),  # type: ignore[call-overload]
                   "VLLM_LOG_STATS_INTERVAL": "2"}}
    run_txt = json.dumps(run, indent=1).replace(str(models.target.parent), "<models>").replace(str(work), "<run>")  # type: ignore[attr-defined]
    (dest / "run.json").write_text(run_txt + "\n")
    shutil.rmtree(work, ignore_errors=True)
    sizes = ", ".join(f"{t.name} {t.stat().st_size // 1024} KB" for t in sorted((dest / 'traces').iterdir()))
    print(f"{name}: {elapsed:.0f} s; {sizes}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "vllm_cpu_032")
    ap.add_argument("--models", type=Path, default=None, help="where to build the tiny models (default: a temp dir)")
    ap.add_argument("--only", action="append", default=None, help="record only this configuration (repeatable)")
    ap.add_argument("--tokens", type=int, default=24, help="tokens per profiled request")
    a = ap.parse_args()
    py = engine_python()
    if py is None:
        print("record_vllm_fixtures: the engine is not installed (run `make engine`)", file=sys.stderr)
        return 2
    models = build_models(py, a.models or Path(tempfile.mkdtemp(prefix="vllm-models-")))
    todo = configs(models)
    for name in a.only or list(todo):
        if name not in todo:
            print(f"record_vllm_fixtures: --only {name}: expected one of {', '.join(todo)}", file=sys.stderr)
            return 2
        record(name, todo[name], models, py, a.out, a.tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
