"""Out-of-sample check of the cost model: one ``specmodel profile --tp 2``, then three
separate ``specmodel profile --spec-loop --profile P --accept-len 3`` runs against it; each run's
measured speedup (speculative loop tok/s over its own decode loop) vs the speedup ``predict``
gives on the profile for the acceptance the loop drew. Target: median |speedup error| ≤ 5 %.

The profile is never fitted to the loops it is compared with (out of sample): the loops run as
separate processes, later, on the same box. On a shared 2-core box with gloo the figure moves from
run to run; it is printed with every run's numbers.

Each loop reads its speedup off the median of interleaved rounds, adding rounds until that median's
95 % interval is within --ci-target or its --loop-budget (30 s) is spent; each run prints the interval,
the summary the median error and the spread of the runs' errors.

Run: python benchmarks/bench_spec_loop_oos.py [RUNS [PROFILE FLAGS...]]   (about 3 min on 2 cores)
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_REL = 0.05


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _intervals(profile_dir: Path) -> str:
    """The batch-1 rows the loop is predicted from, each with its 95 % interval."""
    doc = json.loads((profile_dir / "profile.json").read_text())
    ndt = doc["spec"]["num_draft_tokens"]
    used = [r for r in doc.get("costs", []) if r["batch"] == 1 and (r["kind"] != "verify" or r["tokens"] == ndt)]
    return ", ".join(f"{r['kind']} {r['total_s'] * 1e3:.2f} ms"
                     + (f" ±{r['ci95_rel']:.0%}" if r.get("ci95_rel") is not None else "") for r in used)


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    exe = Path(sys.executable).parent / "specmodel"
    out = Path(tempfile.mkdtemp(prefix="specmodel-oos-"))
    try:
        t0 = time.perf_counter()
        # one context, the one the loops run at (the profile's smallest): this checks the cost
        # side of the model, not the lookup across contexts
        r = subprocess.run([str(exe), "profile", "--tp", "2", "--name", "P", "--out-dir", str(out), "--quiet",
                            "--contexts", "256", *sys.argv[2:]], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"specmodel profile --tp 2 failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
            return 1
        print(f"profile --tp 2 --contexts 256 {' '.join(sys.argv[2:])}: {time.perf_counter() - t0:.0f} s (load "
              f"{_load()}); batch-1 rows: {_intervals(out / 'P')}", flush=True)
        errs, tps_errs = [], []
        cis: list[float | None] = []
        for i in range(runs):
            r = subprocess.run([str(exe), "profile", "--spec-loop", "--profile", str(out / "P"), "--accept-len", "3",
                                "--json", "--quiet"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"spec loop run {i + 1} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
                return 1
            c = json.loads(r.stdout)["comparison"]
            meas, pred = c["measured"]["speedup"], c["predicted"]["speedup"]
            rounds = c["measured"].get("speedup_by_round") or [meas]
            err = pred / meas - 1.0
            errs.append(err)
            tps_errs.append(c["predicted"]["rel_error"])
            ci = c["measured"].get("speedup_ci95_rel")
            cis.append(ci)
            print(f"run {i + 1}: measured speedup {meas:.3f}x"
                  + (f" ±{ci:.1%} (95 %, median of {c['measured']['rounds']} interleaved rounds, stopped: "
                     f"{c['measured']['stopped']})" if ci is not None else "")
                  + f" (loop {c['measured']['tokens_per_s']:.1f} tok/s, "
                  f"baseline {c['measured']['baseline_tokens_per_s']:.1f}), predicted {pred:.3f}x "
                  f"({c['predicted']['tokens_per_s']:.1f} tok/s, baseline {c['predicted']['baseline_tokens_per_s']:.1f})"
                  f": speedup error {err:+.1%}, tok/s error {c['predicted']['rel_error']:+.1%}, "
                  f"baseline error {c['baseline_rel_error']:+.1%}; measured speedup by round "
                  f"{min(rounds):.2f}-{max(rounds):.2f}x; load {_load()}", flush=True)
        med = statistics.median(abs(e) for e in errs)
        ok = med <= TARGET_REL
        known = [x for x in cis if x is not None]
        print(f"out-of-sample median |speedup error| over {runs} runs: {med:.1%} (target <= {TARGET_REL:.0%}); "
              f"errors {', '.join(f'{e:+.1%}' for e in errs)} (spread {max(errs) - min(errs):.1%}"
              + (f"; each loop's own 95 % interval {min(known):.1%}-{max(known):.1%}" if known else "")
              + f"); median |tok/s error| {statistics.median(abs(e) for e in tps_errs):.1%}: "
              f"{'OK' if ok else 'OVER TARGET'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
