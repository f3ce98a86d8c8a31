"""`specmodel ingest` vs Holistic Trace Analysis on the same multi-rank Kineto trace set.

    .venv/bin/pip install -e '.[bench]'          # HolisticTraceAnalysis + ijson
    .venv/bin/python benchmarks/bench_ingest_vs_hta.py [--ranks 2 --mb 60 --rounds 3]

Generates the trace set (61-layer decode/verify steps, SGLang layout) into .bench/ (git-ignored)
unless it is there, then runs three contenders, each in its own subprocess: ``specmodel ingest``
(writing the profile); HTA's ``TraceAnalysis(trace_dir=...)`` (its trace loading) +
``get_comm_comp_overlap`` + ``get_temporal_breakdown`` (the comparable analysis) with its
default parser (``json.loads`` of each whole file); the same with its low-memory backend
(``ParserBackend.IJSON_BATCH_AND_COMPRESS``, ijson/yajl2_c streaming). Like pyperf, the three
are interleaved round by round (drift hits all alike) and each figure is the median over rounds
with its min..max. Wall time and peak RSS of the whole process tree (sum over the tool's
processes, sampled every 10 ms from /proc; both tools use a process pool) and the ratios
against both HTA backends are printed. Targets: >= 20x faster, <= 1/2 the peak memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

HTA_SCRIPT = """
import sys
if sys.argv[2] != "default":
    from hta.common.trace_parser import set_default_trace_parsing_backend
    from hta.configs.parser_config import ParserBackend
    set_default_trace_parsing_backend(ParserBackend(sys.argv[2]))
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_comm_comp_overlap(visualize=False)
a.get_temporal_breakdown(visualize=False)
"""
LOW_MEMORY = "ijson_batch_and_compress"
SPEED_TARGET = 20.0
MEMORY_TARGET = 0.5


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


def _stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}..{max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mb", type=float, default=60.0, help="uncompressed JSON per rank, MB")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median and range reported)")
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
        import ijson  # noqa: F401
    except ImportError:
        sys.exit("HolisticTraceAnalysis / ijson not installed: .venv/bin/pip install -e '.[bench]'")
    print(f"trace set: {len(files)} ranks, {gz_mb:.0f} MB gzipped (~{a.mb * len(files):.0f} MB JSON), "
          f"{os.cpu_count()} cores, {a.rounds} interleaved rounds (the machine may be shared: see the spread)")
    runs: dict[str, list[tuple[float, int]]] = {"ours": [], "default": [], LOW_MEMORY: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            runs["ours"].append(measure([sys.executable, "-m", "specmodel.cli", "ingest", str(traces),
                                         "-o", f"{tmp}/p{i}"]))
            for backend in ("default", LOW_MEMORY):
                runs[backend].append(measure([sys.executable, "-c", HTA_SCRIPT, str(traces), backend]))
    names = {"ours": "specmodel ingest", "default": "HTA default (json)", LOW_MEMORY: "HTA low-memory (ijson)"}
    print(f"{'':26}{'wall s: median (min..max)':>28}{'peak RSS MB: median (min..max)':>34}")
    for key, rs in runs.items():
        print(f"{names[key]:26}{_stats([w for w, _ in rs]):>28}{_stats([m / 1e6 for _, m in rs]):>34}")
    ours_wall = statistics.median(w for w, _ in runs["ours"])
    ours_mem = statistics.median(m for _, m in runs["ours"])
    missed = False
    for key in ("default", LOW_MEMORY):
        # per round ratios (interleaved pairs), then their median and range
        speed = [t[0] / o[0] for o, t in zip(runs["ours"], runs[key], strict=True)]
        mem = [o[1] / t[1] for o, t in zip(runs["ours"], runs[key], strict=True)]
        ok_s = statistics.median(speed) >= SPEED_TARGET
        ok_m = statistics.median(mem) <= MEMORY_TARGET
        missed = missed or not (ok_s and ok_m)
        print(f"vs {names[key]:24} speed-up {statistics.median(speed):.1f}x ({min(speed):.1f}..{max(speed):.1f}; "
              f"target >= {SPEED_TARGET:g}x) {'OK' if ok_s else 'MISSED'}   memory {statistics.median(mem):.2f} "
              f"of HTA's ({min(mem):.2f}..{max(mem):.2f}; target <= {MEMORY_TARGET}) {'OK' if ok_m else 'MISSED'}")
    print(f"specmodel ingest: {ours_wall:.2f} s, {ours_mem / 1e6:.0f} MB peak")
    if missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
