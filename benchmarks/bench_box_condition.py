"""The box-condition guard on live interleaved pairs: false alarms on clean pairs, misses on loaded ones.

Each pair is a baseline server (no speculation) and an ngram k = 3 server of the tiny target on the
vLLM CPU engine, both up at once, each under the installed ``specmodel vllm --out DIR --`` (the
hook and its calibration probe), loaded in interleaved rounds (A B B A ...) of ``--batch``
concurrent requests of ``--tokens`` tokens. Then, through the installed commands only, ``specmodel
vllm --summarize`` of the two logs and ``specmodel predict --json`` from the ngram server's log.

* **clean** pairs: nothing else started. The guard (``box_condition`` in predict's
  inconsistencies) firing is a false alarm.
* **loaded** pairs: during one server's rounds only (the baseline in the first loaded pair, the
  ngram server in the next, in turn), ``--busy-per-core`` bounded busy-loop processes per core, pinned to it, started before that
  server's round and stopped (by its pid) after it. The guard not firing is a miss; a loaded
  baseline must be refused, a loaded speculative server qualified.
* **old format**: each pair's logs again with every probe record stripped (a hook before the
  probe): the steps both servers ran are the only witness, scored the same way.

The box is shared (other engineers' work runs beside the pairs): the 1-minute load average is
noted before and after every pair, and a clean pair flagged while the box's own load moved is said
as such in its row, not hidden.

Run (needs ``make engine``; about 2 min a pair on the shared 2-core box):
    .venv/bin/python benchmarks/bench_box_condition.py [--pairs 2] [--tokens 512] [--reps 6]
Targets: no clean pair flagged, every loaded pair caught (exit 1 otherwise). Table of a finished run: ``bench_box_condition.py --table benchmarks/results/box_condition_<stamp>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# the server's process and the tiny models only: nothing of specmodel itself
from benchmarks.bench_vllm_cli import cli, specmodel_exe  # noqa: E402 (the installed command, found one way)
from tests.vllm_engine import VllmServer, build_models, engine_python, ngram_spec  # noqa: E402

K = 3
PAUSE_S = 1.2  # between rounds (idle workers settle)
REQUEST_TIMEOUT_S = 300.0
#: a busy loop ends by itself after this long even if this script dies (it is stopped by pid well before)
BUSY_LIMIT_S = 120.0
PROMPT = ("the quick brown fox jumps over the lazy dog. " * 6).strip()
RESULTS = REPO / "benchmarks" / "results"
_BUSY = ("import os, sys, time\nos.sched_setaffinity(0, {int(sys.argv[1])})\nend = time.monotonic() + float(sys.argv[2])\n"
         "while time.monotonic() < end:\n    pass\n")


def _complete(url: str, tokens: int) -> int:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
        return int(json.loads(r.read())["usage"]["completion_tokens"])


def _round(ex: ThreadPoolExecutor, srv: VllmServer, batch: int, tokens: int) -> float:
    t0 = time.perf_counter()
    n = sum(ex.map(lambda _: _complete(srv.url, tokens), range(batch)))
    return n / (time.perf_counter() - t0)


class Busy:
    """``per_core`` bounded busy loops per core, pinned, each in its own session, stopped by its own pid."""

    def __init__(self, per_core: int) -> None:
        self.per_core = per_core
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Busy:
        for cpu in sorted(os.sched_getaffinity(0)) * self.per_core:
            self.procs.append(subprocess.Popen([sys.executable, "-c", _BUSY, str(cpu), str(BUSY_LIMIT_S)],
                                               start_new_session=True))
        time.sleep(0.2)  # running before the round's first request
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def run_pair(py: Path, model: Path, d: Path, *, loaded: str | None, batch: int, tokens: int,
             reps: int, busy_per_core: int) -> dict[str, Any]:
    """Both servers up, hooked; rounds A B B A ...; ``loaded``: "baseline" / "spec" / None."""
    rates: dict[str, list[float]] = {"baseline": [], "spec": []}
    load = [os.getloadavg()[0]]
    wrap = {k: [*specmodel_exe(), "vllm", "--out", str(d / f"hook_{k}"), "--"] for k in rates}
    with VllmServer(python=py, model=model, wrap=wrap["baseline"], log_path=d / "baseline.log") as base, \
            VllmServer(python=py, model=model, spec=ngram_spec(K), wrap=wrap["spec"], log_path=d / "spec.log") as spec, \
            ThreadPoolExecutor(batch) as ex:
        srvs = {"baseline": base, "spec": spec}
        for s in srvs.values():  # warm-up, unmeasured
            _round(ex, s, batch, tokens)
            time.sleep(PAUSE_S)
        for i in range(reps):
            for k in (("baseline", "spec") if i % 2 == 0 else ("spec", "baseline")):
                if k == loaded:
                    with Busy(busy_per_core):
                        rates[k].append(_round(ex, srvs[k], batch, tokens))
                else:
                    rates[k].append(_round(ex, srvs[k], batch, tokens))
                time.sleep(PAUSE_S)
        load.append(os.getloadavg()[0])
    b, s = sorted(rates["baseline"])[len(rates["baseline"]) // 2], sorted(rates["spec"])[len(rates["spec"]) // 2]
    return {"loaded": loaded, "base_rounds": rates["baseline"], "spec_rounds": rates["spec"],
            "measured_speedup": s / b, "load_avg_1m": load}


def strip_probes(src: Path, dst: Path) -> None:
    """The hook's logs as a hook before the probe wrote them: every probe record left out."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        if f.suffix == ".jsonl":
            keep = [ln for ln in f.read_text().splitlines() if '"type": "probe"' not in ln]
            (dst / f.name).write_text("\n".join(keep) + ("\n" if keep else ""))
        else:
            (dst / f.name).write_bytes(f.read_bytes())


def judge(d: Path, name: str, hooks: tuple[str, str], batch: int) -> dict[str, Any]:
    """Summarize and predict through the installed commands; what the box guard said."""
    args = ["vllm", "--summarize", hooks[0], "--summarize", hooks[1], "-o", f"profiles/{name}"]
    r = cli(args, d)
    if r.returncode != 0:
        return {"summarize": "specmodel " + " ".join(args), "error": (r.stderr or r.stdout).strip()[-400:]}
    notes = [ln for ln in r.stdout.splitlines() if "box condition" in ln]
    pargs = ["predict", "--json", "--profile", f"profiles/{name}", "--accept-log", "spec.log", "--batch", str(batch),
             "--steps", str(K)]
    p = cli(pargs, d)
    out: dict[str, Any] = {"summarize": "specmodel " + " ".join(args), "predict": "specmodel " + " ".join(pargs),
                           "condition_note": notes[0] if notes else None}
    if p.returncode != 0:
        msg = [ln for ln in p.stderr.splitlines() if ln.strip()]
        line = msg[-1].removeprefix("specmodel: error: ") if msg else f"exit {p.returncode}"
        out.update({"verdict": "refused", "guard": "refuse" if "box" in line or "calibration probe" in line
                    or "other work" in line or "not recorded" in line else None, "line": line})
        return out
    doc = json.loads(p.stdout)
    doc = doc.get("prediction", doc)
    box = [i for i in doc.get("inconsistencies", []) if i.get("check") == "box_condition"]
    out.update({"verdict": doc.get("verdict"), "speedup": doc.get("speedup"), "p_withheld": doc.get("p_withheld"),
                "guard": box[0]["severity"] if box else None, "line": box[0]["message"] if box else None,
                "to_measure": box[0]["to_measure"] if box else None})
    return out


def score(kind: str, loaded: str | None, guard: str | None) -> str:
    """``ok`` / ``false alarm`` / ``miss`` / ``wrong severity`` for one judged recording."""
    if loaded is None:
        return "ok" if guard is None else "false alarm"
    if guard is None:
        return "miss"
    want = "refuse" if loaded == "baseline" else "qualify"
    return "ok" if guard == want else f"wrong severity ({guard})"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in ("probe", "old_format"):
        clean = [r for r in rows if r["loaded"] is None and fmt in r]
        loaded = [r for r in rows if r["loaded"] is not None and fmt in r]
        out[fmt] = {"false_alarms": [sum(r[fmt]["score"] != "ok" for r in clean), len(clean)],
                    "misses": [sum(r[fmt]["score"] == "miss" for r in loaded), len(loaded)],
                    "wrong_severity": [sum(r[fmt]["score"].startswith("wrong") for r in loaded), len(loaded)]}
    return out


def markdown(res: dict[str, Any]) -> str:
    out = ["| pair | extra CPU work during | measured speedup | load avg (1 min) before-after | probe: verdict | "
           "probe: guard | score | old format: verdict | old format: guard | score |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        cells = []
        for fmt in ("probe", "old_format"):
            j = r.get(fmt, {})
            cells += [str(j.get("verdict", "—")), str(j.get("guard") or "none"), j.get("score", "—")]
        la = r["load_avg_1m"]
        out.append(f"| {r['pair']} | {r['loaded'] or 'nothing (clean)'} | {r['measured_speedup']:.2f}x | "
                   f"{la[0]:.2f}-{la[-1]:.2f} | " + " | ".join(cells) + " |")
    s = res["summary"]

    def frac(x: list[int]) -> str:
        return f"{x[0]}/{x[1]}"

    out += ["", f"With the probe: false alarms {frac(s['probe']['false_alarms'])} clean pairs, misses "
            f"{frac(s['probe']['misses'])} loaded pairs (wrong severity {frac(s['probe']['wrong_severity'])}). "
            f"Old format (probe records stripped, the shared steps the witness): false alarms "
            f"{frac(s['old_format']['false_alarms'])}, misses {frac(s['old_format']['misses'])} (wrong severity "
            f"{frac(s['old_format']['wrong_severity'])}). {res['date']}, {res['box']}, load average "
            f"{res['load_avg_1m'][0]:.2f}-{res['load_avg_1m'][1]:.2f} (1 min, over the run; the box is shared), "
            f"--pairs {res['pairs']} --batch {res['batch']} --tokens {res['tokens']} --reps {res['reps']} "
            f"--busy-per-core {res.get('busy_per_core', 1)}, "
            f"{res['wall_s']:.0f} s."]
    for r in res["rows"]:
        for fmt in ("probe", "old_format"):
            j = r.get(fmt, {})
            if j.get("line"):
                out.append(f"\n- pair {r['pair']} ({fmt.replace('_', ' ')}): {j['line']}")
    return "\n".join(out)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(markdown(json.loads(Path(sys.argv[2]).read_text())))
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2, help="clean pairs, and as many loaded ones")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--reps", type=int, default=6,
                    help="measured rounds per server and pair (3-4 windows of the others' demand a server at 6)")
    ap.add_argument("--busy-per-core", type=int, default=2,
                    help="busy loops per core beside the loaded server (a shared box's own load dilutes one)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--models", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=RESULTS)
    a = ap.parse_args()
    py = engine_python()
    if py is None:
        print("bench_box_condition: the engine is not installed (make engine)", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-box-condition-"))
    out.mkdir(parents=True, exist_ok=True)
    models = build_models(py, a.models or out / "models")
    t0 = time.monotonic()
    plan: list[str | None] = [None] * a.pairs + ["baseline" if i % 2 == 0 else "spec" for i in range(a.pairs)]
    rows = []
    load = [os.getloadavg()[0]]
    for n, loaded in enumerate(plan):
        d = out / f"pair{n}"
        d.mkdir()
        row: dict[str, Any] = {"pair": n, **run_pair(py, models.target, d, loaded=loaded, batch=a.batch,
                                                       tokens=a.tokens, reps=a.reps,
                                                       busy_per_core=a.busy_per_core)}
        load += row["load_avg_1m"]
        row["probe"] = judge(d, "probe", ("hook_baseline", "hook_spec"), a.batch)
        for k in ("baseline", "spec"):
            strip_probes(d / f"hook_{k}", d / f"old_{k}")
        row["old_format"] = judge(d, "old", ("old_baseline", "old_spec"), a.batch)
        for fmt in ("probe", "old_format"):
            row[fmt]["score"] = score(fmt, loaded, row[fmt].get("guard"))
        rows.append(row)
        print(f"pair {n} ({loaded or 'clean'}): {row['measured_speedup']:.2f}x; probe {row['probe'].get('verdict')} "
              f"guard {row['probe'].get('guard')} [{row['probe']['score']}]; old {row['old_format'].get('verdict')} "
              f"guard {row['old_format'].get('guard')} [{row['old_format']['score']}]", flush=True)
    stamp = dt.datetime.now(dt.timezone.utc)
    res = {"benchmark": "bench_box_condition", "date": stamp.isoformat(timespec="minutes"), "rows": rows,
           "summary": summary(rows), "load_avg_1m": [min(load), max(load)],
           "box": f"{platform.machine()} {os.cpu_count()} cores", "pairs": a.pairs, "batch": a.batch,
           "tokens": a.tokens, "reps": a.reps, "busy_per_core": a.busy_per_core, "wall_s": time.monotonic() - t0, "argv": sys.argv[1:],
           "work_dir": str(out)}
    base = a.results / f"box_condition_{stamp:%Y-%m-%d_%H%M}"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    base.with_suffix(".md").write_text(markdown(res) + "\n")
    print(markdown(res))
    # the targets: no clean pair flagged, every loaded one caught, with the probe and without it
    missed = [f"{fmt} {k}" for fmt in ("probe", "old_format") for k in ("false_alarms", "misses")
              if res["summary"][fmt][k][0]]
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
