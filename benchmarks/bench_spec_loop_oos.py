"""Out-of-sample check of the cost model: one ``specmodel profile``, then separate
``specmodel profile --spec-loop --profile P --accept-len A --batch B`` runs against it; each run's
measured speedup (speculative loop tok/s over its own decode loop) vs the speedup ``predict``
gives on the profile for the acceptance the loop drew. Target: median |speedup error| ≤ 5 %.

The profile is never fitted to the loops it is compared with (out of sample): the loops run as
separate processes, later, on the same box. A loop at a batch the profile did not measure is
predicted from the batches around it. On a shared 2-core box with gloo the figure moves from run
to run; it is printed with every run's numbers.

Each loop reads its speedup off the median of interleaved rounds, adding rounds until that median's
95 % interval is within --ci-target or its --loop-budget is spent; each run prints the interval,
the summary the median error and the spread of the runs' errors.

Run: python benchmarks/bench_spec_loop_oos.py [RUNS] [--loops B:A,...] [--loop-budget S] [--json FILE]
         [-- PROFILE FLAGS...]
  RUNS                 loops at batch 1, accept 3 (default 3; ignored with --loops)
  --loops 1:2,4:3,8:3  one loop per batch:accept-len pair
  PROFILE FLAGS        the profile's flags (default ``--tp 2 --contexts 256``: the CPU stack, ~3 min
                       on 2 cores); on one GPU e.g. ``-- --tp 1 --backend nccl --batches 1,4,16
                       --contexts 2K --layers 2``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_REL = 0.05
CPU_PROFILE = ["--tp", "2", "--contexts", "256"]


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


def _command() -> list[str]:
    """The installed command beside this interpreter; ``python -m specmodel`` (the same entry point)
    where the package is imported from a checkout that was not installed (a GPU box with no network)."""
    exe = Path(sys.executable).parent / "specmodel"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "specmodel"]


def _pairs(text: str) -> list[tuple[int, float]]:
    out = []
    for part in text.split(","):
        b, _, a = part.partition(":")
        out.append((int(b), float(a)))
    return out


def main(argv: list[str]) -> int:
    own, _, flags = (argv[:argv.index("--")], None, argv[argv.index("--") + 1:]) if "--" in argv else (argv, None, [])
    ap = argparse.ArgumentParser(prog="bench_spec_loop_oos.py")
    ap.add_argument("runs", nargs="?", type=int, default=3)
    ap.add_argument("--loops", type=_pairs, default=None, help="batch:accept-len pairs, one loop each")
    ap.add_argument("--json", type=Path, default=None, help="also write every loop's comparison here")
    ap.add_argument("--loop-budget", type=float, default=None, help="each loop's --loop-budget (seconds)")
    a = ap.parse_args(own)
    loops = a.loops or [(1, 3.0)] * a.runs
    profile_flags = flags or CPU_PROFILE
    cmd = _command()
    out = Path(tempfile.mkdtemp(prefix="specmodel-oos-"))
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        # one context, the one the loops run at: this checks the cost side of the model, not the
        # lookup across contexts
        r = subprocess.run([*cmd, "profile", "--name", "P", "--out-dir", str(out), "--quiet", *profile_flags],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"specmodel profile {' '.join(profile_flags)} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
            return 1
        print(f"profile {' '.join(profile_flags)}: {time.perf_counter() - t0:.0f} s (load "
              f"{_load()}); batch-1 rows: {_intervals(out / 'P')}", flush=True)
        errs, tps_errs = [], []
        cis: list[float | None] = []
        for i, (batch, accept) in enumerate(loops):
            r = subprocess.run([*cmd, "profile", "--spec-loop", "--profile", str(out / "P"), "--accept-len", str(accept),
                                "--batch", str(batch), "--json", "--quiet",
                                *(["--loop-budget", str(a.loop_budget)] if a.loop_budget is not None else [])],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"spec loop run {i + 1} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
                return 1
            c = json.loads(r.stdout)["comparison"]
            rows.append(c)
            meas, pred = c["measured"]["speedup"], c["predicted"]["speedup"]
            rounds = c["measured"].get("speedup_by_round") or [meas]
            err = pred / meas - 1.0
            errs.append(err)
            tps_errs.append(c["predicted"]["rel_error"])
            ci = c["measured"].get("speedup_ci95_rel")
            cis.append(ci)
            print(f"run {i + 1} (batch {batch}, accept {accept:g}): measured speedup {meas:.3f}x"
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
        print(f"out-of-sample median |speedup error| over {len(loops)} runs: {med:.1%} (target <= {TARGET_REL:.0%}); "
              f"errors {', '.join(f'{e:+.1%}' for e in errs)} (spread {max(errs) - min(errs):.1%}"
              + (f"; each loop's own 95 % interval {min(known):.1%}-{max(known):.1%}" if known else "")
              + f"); median |tok/s error| {statistics.median(abs(e) for e in tps_errs):.1%}: "
              f"{'OK' if ok else 'OVER TARGET'}")
        if a.json is not None:
            tmp = a.json.with_name(a.json.name + ".tmp")
            tmp.write_text(json.dumps({"schema": "specmodel.bench_spec_loop_oos", "schema_version": 1,
                                       "profile_flags": profile_flags, "loops": rows,
                                       "median_abs_speedup_error": med}, indent=1))
            os.replace(tmp, a.json)
        return 0 if ok else 1
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
