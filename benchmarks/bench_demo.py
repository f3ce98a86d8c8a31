"""A newcomer's first run: ``make demo`` from a fresh clone (``git clone`` of this checkout's
HEAD into a temporary directory), start to finish, install included. Target: ≤ 3 min wall on
2 idle cores, the profile step ≤ 90 s.

Each run's output is read line by line as it comes: the install ends where ``specmodel profile``
starts, the profile step is its own ``took`` line, the rest is predict + report. The load average
is printed beside every run (the box may be shared: a figure without it means little).

Run: python benchmarks/bench_demo.py [RUNS [MAKE ARGS...]]   (e.g. 1, or 3 TP=4)
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 180.0
PROFILE_TARGET_S = 90.0


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def one(make_args: list[str]) -> dict[str, float | str]:
    tmp = Path(tempfile.mkdtemp(prefix="specmodel-demo-"))
    try:
        clone = tmp / "specmodel"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        load0 = _load()
        t0 = time.perf_counter()
        p = subprocess.Popen(["make", "demo", *make_args], cwd=clone, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert p.stdout is not None
        t_profile = t_predict = None
        took = ""
        tail: list[str] = []
        for line in p.stdout:
            now = time.perf_counter() - t0
            tail = (tail + [line.rstrip()])[-20:]
            if t_profile is None and "specmodel profile" in line and "starting ranks" in line:
                t_profile = now
            if line.startswith("took"):
                took = line.split(None, 1)[1].strip()
            if t_predict is None and " predict " in line and "specmodel" in line and t_profile is not None:
                t_predict = now
        rc = p.wait()
        wall = time.perf_counter() - t0
        if rc != 0:
            raise SystemExit(f"make demo failed (exit {rc}):\n" + "\n".join(tail))
        m = re.match(r"(\d+) s", took)
        profile_s = float(m.group(1)) if m else float("nan")
        return {"wall_s": wall, "install_s": t_profile if t_profile is not None else float("nan"),
                "profile_s": profile_s, "rest_s": wall - (t_predict if t_predict is not None else wall),
                "took": took, "load": f"{load0} -> {_load()}"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    make_args = sys.argv[2:]
    rows = []
    for i in range(runs):
        r = one(make_args)
        rows.append(r)
        print(f"run {i + 1}: make demo {r['wall_s']:.0f} s (install {r['install_s']:.0f} s, profile "
              f"{r['profile_s']:.0f} s, predict + report {r['rest_s']:.0f} s); load {r['load']}; profile took "
              f"{r['took']}", flush=True)

    def cell(key: str) -> str:
        xs = [float(r[key]) for r in rows]
        med = statistics.median(xs)
        return f"{med:.0f} s ({min(xs):.0f}-{max(xs):.0f})" if len(xs) > 1 else f"{med:.0f} s"

    print("\n| `make demo` from a fresh clone | install | profile step | predict + report | runs |")
    print("|---|---|---|---|---|")
    print(f"| {cell('wall_s')} | {cell('install_s')} | {cell('profile_s')} | {cell('rest_s')} | {runs} |")
    wall = statistics.median(float(r["wall_s"]) for r in rows)
    prof = statistics.median(float(r["profile_s"]) for r in rows)
    ok = wall <= TARGET_S and prof <= PROFILE_TARGET_S
    print(f"median {wall:.0f} s (target <= {TARGET_S:.0f} s), profile {prof:.0f} s (target <= "
          f"{PROFILE_TARGET_S:.0f} s): {'OK' if ok else 'OVER TARGET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
