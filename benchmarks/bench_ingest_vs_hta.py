"""`specmodel ingest` vs Holistic Trace Analysis on the same multi-rank Kineto trace set.

    .venv/bin/pip install -e '.[bench]'          # HolisticTraceAnalysis
    .venv/bin/python benchmarks/bench_ingest_vs_hta.py [--ranks 8 --mb 60]

Generates the trace set into .bench/ (git-ignored) unless it is there, then runs each tool in
its own subprocess, one after the other: HTA's ``TraceAnalysis(trace_dir=...)`` (its trace
loading) + ``get_comm_comp_overlap`` + ``get_temporal_breakdown`` (the comparable analysis),
and ``specmodel ingest`` (writing the profile). Wall time and peak RSS of the whole process tree
(sum over the tool's processes, sampled every 10 ms from /proc; both tools use a process pool)
are printed with the ratios. Targets: >= 5x faster, <= 1/2 the peak memory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

HTA_SCRIPT = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_comm_comp_overlap(visualize=False)
a.get_temporal_breakdown(visualize=False)
"""


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _tree_rss(root: int) -> int:
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_bytes(pid)
        todo.extend(_children(pid))
    return total


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS of the process tree in bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n{err[-2000:]}")
    return wall, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=60.0, help="uncompressed JSON per rank, MB")
    ap.add_argument("--traces", type=Path, default=None, help="trace dir (default .bench/kineto_tp<ranks>_<mb>mb)")
    a = ap.parse_args()
    traces = a.traces or REPO / ".bench" / f"kineto_tp{a.ranks}_{a.mb:g}mb"
    if not list(traces.glob("*.trace.json.gz")):
        from make_kineto_trace_set import write_rank

        traces.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        for r in range(a.ranks):
            write_rank(traces / f"bench-TP-{r}.trace.json.gz", r, a.ranks, int(a.mb * 1e6), 1)
        print(f"generated {a.ranks} ranks x {a.mb:g} MB in {traces} ({time.perf_counter() - t:.0f} s)")
    files = sorted(traces.glob("*.trace.json.gz"))
    gz_mb = sum(f.stat().st_size for f in files) / 1e6
    try:
        import hta  # noqa: F401
    except ImportError:
        sys.exit("HolisticTraceAnalysis is not installed: .venv/bin/pip install -e '.[bench]'")
    print(f"trace set: {len(files)} ranks, {gz_mb:.0f} MB gzipped (~{a.mb * len(files):.0f} MB JSON), "
          f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        ours = measure([sys.executable, "-m", "specmodel.cli", "ingest", str(traces), "-o", f"{tmp}/p"])
    theirs = measure([sys.executable, "-c", HTA_SCRIPT, str(traces)])
    print(f"{'':28}{'wall s':>10}{'peak RSS MB':>14}")
    print(f"{'HTA (load + overlap + bd)':28}{theirs[0]:>10.1f}{theirs[1] / 1e6:>14.0f}")
    print(f"{'specmodel ingest':28}{ours[0]:>10.1f}{ours[1] / 1e6:>14.0f}")
    speed = theirs[0] / ours[0]
    mem = ours[1] / theirs[1]
    print(f"speed-up: {speed:.1f}x (target >= 5x)  {'OK' if speed >= 5 else 'MISSED'}")
    print(f"memory:   {mem:.2f} of HTA's peak (target <= 0.5)  {'OK' if mem <= 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
