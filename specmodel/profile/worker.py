"""One rank of ``specmodel profile``: ``python -m specmodel.profile.worker --plan P --run-dir D``.

Started by the command (one process per rank, env ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/
``MASTER_PORT`` as torchrun sets them), or in-process under ``torchrun`` (see
``docs/profile.md``). Every rank runs rank 0's plan (broadcast after joining), builds the same
TP stack, and per point warms up (or captures a CUDA graph), runs a profiled pass with the
annotation seam around each forward to isolate all-reduce time from the trace; then times all
points in interleaved passes until each one's 95 % interval is tight or the budget is spent, and
sends its numbers to rank 0, which writes ``result.json`` + per-rank traces.

Exit codes: 0 ok; 1 this rank failed; 3 a collective failed (another rank died or hung);
4 the supervising parent went away.

One module: everything a rank process runs, from its ``python -m`` entry point to the result rank 0
writes, reads top to bottom in one place (the spec loop and the analysis live beside it).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from specmodel.engines.hook.annotate import Stopwatch, timed_phase
from specmodel.io import atomic_write_bytes, gzip_bytes
from specmodel.procs import die_with_parent
from specmodel.profile import analysis, hardware, status
from specmodel.profile.device import Placement, Replay, capture_graph, torch_device
from specmodel.profile.models import Drafter, TargetModel
from specmodel.profile.plan import CHILD_ENV, Point, RunPlan
from specmodel.profile.result import AllReduceResult, RankResult, RankRow, RowResult, RunResult
from specmodel.profile.specloop import measure_overhead, run_loop
from specmodel.profile.tp import CollectiveFailed, Comm
from specmodel.schema.phases import TARGET_KINDS
from specmodel.stats import iqr, median, median_ci95_rel
from specmodel.units import from_us

EXIT_OK, EXIT_FAILED, EXIT_PEER, EXIT_ORPHAN = 0, 1, 3, 4
FAULT_ENV = "SPECMODEL_PROFILE_FAULT"  # test-only: "rank=1,at=verify,mode=hang|raise|exit|kill|sleep[,secs=S]"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Fault:
    """Test-only fault injection, read from ``$SPECMODEL_PROFILE_FAULT`` (documented in docs/profile.md)."""

    def __init__(self, spec: str | None, rank: int) -> None:
        self.active = False
        if not spec:
            return
        kv = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
        self.active = int(kv.get("rank", "-1")) == rank
        self.at = kv.get("at", "start")
        self.mode = kv.get("mode", "raise")
        self.secs = float(kv.get("secs", "30"))

    def check(self, where: str) -> None:
        if not self.active or self.at not in where:
            return
        sys.stderr.write(f"specmodel profile: injected fault ({self.mode}) at {where}\n")
        sys.stderr.flush()
        if self.mode == "hang":
            while True:
                time.sleep(3600)
        if self.mode == "sleep":  # a slow rank: pauses, then carries on (a window to kill it mid-run)
            self.active = False
            time.sleep(self.secs)
            return
        if self.mode == "exit":
            os._exit(17)
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected fault at {where}")


class Rank:
    """Everything one rank holds: plan, process group, models, inputs."""

    def __init__(self, plan: RunPlan, *, rank: int, world: int, local_rank: int, local_world: int,
                 board: status.Writer | None) -> None:
        self.plan = plan
        self.rank, self.world, self.local_rank, self.local_world = rank, world, local_rank, local_world
        self.board = board
        self.placement = Placement(plan.backend, plan.device)
        self.device = torch_device(self.placement, local_rank)
        self.dtype = DTYPES[plan.dtype]
        self.cuda = self.device.type == "cuda"
        self.comm = Comm(world, rank, backend=plan.backend, status=board)
        self.fault = Fault(os.environ.get(FAULT_ENV), rank)
        self.unit = 0
        self.target: TargetModel | None = None
        self.drafter: Drafter | None = None
        self.capture = capture_graph  # the CUDA-graph seam (tests pass a CPU stand-in)
        self.graph_pool: Any = None
        self.loop_pool: Any = None  # the spec loop's and the overhead pass's graphs

    # ------------------------------------------------------------ setup
    def build(self) -> None:
        p = self.plan
        torch.manual_seed(p.seed)  # identical on every rank: replicated weights agree, routing matches
        t_slots, t_pos = p.kv_need("target")
        d_slots, d_pos = p.kv_need("drafter")
        self.target = TargetModel(p.target, self.comm, kv_tokens=t_slots, max_pos=t_pos, past=p.context_len,
                                  dtype=self.dtype, device=self.device, static_moe=p.graphs)
        self.drafter = Drafter(p.drafter, self.comm, kv_tokens=d_slots, max_pos=d_pos, past=p.context_len,
                               dtype=self.dtype, device=self.device)

    def next_unit(self, label: str) -> None:
        if self.board is not None:
            self.board.set(stage=status.RUNNING, unit=self.unit)
        self.fault.check(label)
        self.unit += 1

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    # ------------------------------------------------------------ one forward of a sweep point
    def forward_fn(self, pt: Point) -> Any:
        p = self.plan
        g = torch.Generator(device="cpu").manual_seed(p.seed + 1)
        assert self.target is not None and self.drafter is not None
        target, drafter = self.target, self.drafter
        b, t, L = pt.batch, pt.per_request, pt.context
        vocab = p.target.vocab_size
        ids = torch.randint(0, vocab, (b, t), generator=g).to(self.device)
        if pt.kind in TARGET_KINDS:
            return lambda: target(ids, "causal", past=L)
        H = p.drafter.hidden_size
        if pt.kind == "draft":
            hidden = torch.randn(b, t, H, generator=g).to(self.device, self.dtype)
            mask = "diag" if t > 1 else "causal"
            return lambda: drafter(ids, hidden, mask, past=L)
        aux = torch.randn(b, t, 3 * p.drafter.target_hidden_size, generator=g).to(self.device, self.dtype)
        return lambda: drafter(ids, aux, "causal", last_only=True, past=L)

    def point_callable(self, pt: Point) -> Any:
        """What one repetition of ``pt`` runs, warmed up: a CUDA-graph replay (``plan.graphs``,
        as SGLang replays decode / verify / draft) or the eager forward."""
        p = self.plan
        fn = self.forward_fn(pt)
        if p.graphs:
            self.comm.barrier()
            replay, self.graph_pool = self.capture(fn, warmup=p.warmup, pool=self.graph_pool)
            return Replay(replay, fn)
        for _ in range(p.warmup):
            self.comm.barrier()
            fn()
        self.sync()
        return fn

    def profiled_pass(self, pt: Point, fn: Any, trace_dir: Path) -> dict[str, Any]:
        """``repeats`` repetitions under torch.profiler: how a forward splits into all-reduce and
        compute (and, on a GPU, kernel-busy time), plus the trace of every repetition.
        The row's seconds come from the unprofiled :meth:`timing_passes`."""
        p = self.plan
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        watches: list[Stopwatch] = []
        # record_shapes: the collectives' Input Dims/type give the all-reduce message bytes
        with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=False) as prof:
            for _ in range(p.repeats):
                self.comm.barrier()
                with timed_phase(pt.label, self.device) as sw:
                    fn()
                watches.append(sw)
            self.sync()
        totals = [sw.elapsed_s for sw in watches]
        tmp = trace_dir / f".rank{self.rank}.point.json"
        prof.export_chrome_trace(str(tmp))
        raw = json.loads(tmp.read_text())
        tmp.unlink()
        events = raw.get("traceEvents", []) if isinstance(raw, dict) else raw
        reps = (analysis.analyse_gpu if self.cuda else analysis.analyse_cpu)(events, pt.label)
        if len(reps) != len(totals):
            raise RuntimeError(f"{pt.label}: found {len(reps)} annotated spans in the trace, expected {len(totals)}")
        # the trace keeps every repetition: `specmodel ingest` of it re-derives this point's row
        t0, t1 = analysis.trace_window(analysis.spans(events, pt.label), reps)
        return {
            "label": pt.label, "kind": pt.kind, "batch": pt.batch, "tokens": pt.tokens, "context": pt.context,
            "profiled_totals": totals, "comms_raw": [r.comm_s for r in reps],
            "calls_raw": [[(c.collective, c.dur_s) for c in r.calls] for r in reps],
            "busy": [kernel_busy_s(events, r.span_ts, r.span_end) for r in reps] if self.cuda else None,
            "trace": analysis.slice_events(events, t0, t1), "trace_meta": {k: v for k, v in raw.items()
                                                                           if k != "traceEvents"}
            if isinstance(raw, dict) else {},
        }

    def timing_passes(self, fns: list[Any]) -> tuple[list[list[float]], int]:
        """Measure like pyperf: passes over every point in turn (the start rotating each pass), one
        timed repetition per point per pass, until the 95 % interval of each point's median
        (rank mean per repetition) is within ``ci_target_rel`` or ``time_budget_s`` is spent.

        Drift on the box then lands on every point alike instead of on whichever ran during it.
        Every rank decides from the same all-reduced numbers (rank 0's clock for the budget), so
        all ranks run the same passes. Returns (this rank's samples per point, passes run)."""
        p = self.plan
        n = len(fns)
        burst = max(1, p.burst)
        mine: list[list[float]] = [[] for _ in range(n)]
        means: list[list[float]] = [[] for _ in range(n)]
        done = [False] * n
        t_start = time.perf_counter()
        passes = 0
        while passes < p.max_passes and not all(done):
            row = [0.0] * (n + 1)
            for j in range(n):
                i = (j + passes) % n
                if done[i]:
                    continue
                self.comm.barrier()
                with timed_phase("specmodel.timing", self.device, record=False) as sw:
                    for _ in range(burst):
                        fns[i]()
                per = sw.elapsed_s / burst
                mine[i].append(per)
                row[i] = per
            passes += 1
            if self.rank == 0:
                row[n] = float(time.perf_counter() - t_start > p.time_budget_s)
            t = torch.tensor(row, dtype=torch.float64, device=self.device if self.cuda else "cpu")
            self.comm.all_reduce(t)
            got = [float(x) for x in t.cpu()]
            for i in range(n):
                if not done[i]:
                    means[i].append(got[i] / self.world)
            if passes >= p.min_passes:
                for i in range(n):
                    rel = median_ci95_rel(means[i])
                    done[i] = done[i] or (rel is not None and rel <= p.ci_target_rel)
                if got[n] > 0:
                    break
        return mine, passes

    def measure_points(self, trace_dir: Path) -> list[dict[str, Any]]:
        """Per point: warm-up (or capture) and the profiled pass; then the interleaved timing
        passes over all points; the all-reduce seconds read under the profiler are carried over
        to the unprofiled times (:func:`comm_scale`)."""
        recs, fns = [], []
        for pt in self.plan.points:
            self.next_unit(pt.unit)
            fn = self.point_callable(pt)
            fns.append(fn)
            recs.append(self.profiled_pass(pt, fn, trace_dir))
        if not recs:
            return []
        self.next_unit("interleaved timing passes")
        order = timing_order(self.plan.points)
        timed, passes = self.timing_passes([fns[i] for i in order])
        bare: list[list[float]] = [[] for _ in fns]
        for j, i in enumerate(order):
            bare[i] = timed[j]
        for rec, b in zip(recs, bare, strict=True):
            scale = comm_scale(b, rec["profiled_totals"], device_timed=self.cuda)
            rec.update(totals=b, passes=passes, profiler_scale=scale,
                       comms=[c * scale for c in rec.pop("comms_raw")],
                       calls=[[(c, d * scale) for c, d in rep] for rep in rec.pop("calls_raw")])
        self.graph_pool = None
        return recs

    # ------------------------------------------------------------ pure all-reduce sweep
    def allreduce_sweep(self) -> list[dict[str, Any]]:
        """Per size: ``allreduce_repeats`` samples, each ``allreduce_calls`` back-to-back calls
        between two timestamps, divided by the count (nccl-tests style): one call between two
        events would time the host's enqueue of it, not the transfer."""
        p = self.plan
        elem = torch.tensor([], dtype=self.dtype).element_size()
        calls = max(1, p.allreduce_calls)
        out = []
        for size in p.allreduce_sizes:
            self.next_unit(f"all-reduce {size} B")
            n = max(1, size // elem)
            x = torch.zeros(n, dtype=self.dtype, device=self.device)
            for _ in range(p.allreduce_warmup):
                self.comm.all_reduce(x)
            durs = []
            for _ in range(p.allreduce_repeats):
                self.comm.barrier()
                sw = Stopwatch.for_device(self.device)
                sw.start()
                for _ in range(calls):
                    self.comm.all_reduce(x)
                sw.stop()
                durs.append(sw.elapsed_s / calls)
            out.append({"msg_bytes": n * elem, "durs": durs, "calls_per_sample": calls})
        return out

    # ------------------------------------------------------------ the whole run
    def run(self, out_dir: Path) -> RankResult:
        p = self.plan
        self.build()
        points = self.measure_points(out_dir)
        over = None
        if p.measures_overhead():
            over = measure_overhead(self, batch=p.overhead_batch(), cycles=p.overhead_cycles)
        ar = self.allreduce_sweep() if self.world > 1 else []
        loop = None
        if p.spec_loop is not None:
            assert self.target is not None and self.drafter is not None
            loop = run_loop(self)
        hw = hardware.collect(p.device, self.local_world) if self.local_rank == 0 else None
        return RankResult(rank=self.rank, host=os.uname().nodename, points=tuple(points), allreduce=tuple(ar),
                          spec_loop=loop, cycle_overhead=over, hardware=hw)


#: the forward an engine runs before each kind: a cycle is draft-extend → draft … → verify, and
#: the next step (decode or draft-extend) follows a target forward
_ENGINE_ORDER = {"draft_extend": 0, "draft": 1, "verify": 2, "decode": 3}


def timing_order(points: tuple[Point, ...]) -> list[int]:
    """The order the timing passes visit the points: per (context, batch), draft-extend, draft,
    verify, decode, so each forward runs right after the one a serving engine runs before it
    (draft after draft-extend, verify after draft, decode and the next draft-extend after a
    target forward). On a CPU the weights of the model that ran last are still in cache: in the
    sweep's own order decode followed the drafter's forwards and timed dearer than in a decode
    loop (the spec-loop benchmark's baseline error was -2..-9 % in four of five runs; after this
    order, -7..+6 % around 0)."""
    return sorted(range(len(points)), key=lambda i: (points[i].context, points[i].batch,
                                                      _ENGINE_ORDER.get(points[i].kind, 9), points[i].per_request))


def comm_scale(bare_totals: list[float], profiled_totals: list[float], *, device_timed: bool) -> float:
    """Factor applied to the all-reduce seconds read under the profiler.

    On the CPU the profiler's per-op bookkeeping stretches the host-run forward and the gloo
    waits inside it alike, so the profiled all-reduce share is applied to the unprofiled time
    (``analysis.profiler_scale``). On a GPU collective time is NCCL kernel time on the device,
    which host-side profiler overhead does not stretch: 1."""
    return 1.0 if device_timed else analysis.profiler_scale(bare_totals, profiled_totals)


def kernel_busy_s(events: list[dict[str, Any]], t0_us: float, t1_us: float) -> float:
    """Seconds the device was busy (union of kernel intervals, clipped) inside [t0, t1] µs of a
    trace: the forward's GPU-busy time, beside its wall time (the gap is launch / idle time)."""
    ivs = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        a = float(e.get("ts", 0.0))
        b = a + float(e.get("dur", 0.0))
        a, b = max(a, t0_us), min(b, t1_us)
        if b > a:
            ivs.append((a, b))
    ivs.sort()
    busy, end = 0.0, float("-inf")
    for a, b in ivs:
        if a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    return from_us(busy)


def gather(rank: Rank, mine: RankResult) -> list[RankResult] | None:
    rank.fault.check("gather")
    objs: list[Any] = [None] * rank.world if rank.rank == 0 else []
    try:
        dist.gather_object(mine, objs if rank.rank == 0 else None, dst=0)
    except Exception as exc:
        raise CollectiveFailed(f"gather of the results failed on rank {rank.rank}: {exc}") from exc
    return objs if rank.rank == 0 else None


def combine(plan: RunPlan, per_rank: list[RankResult], trace_dir: Path) -> RunResult:
    """Rank 0: aggregate every rank's numbers into the run's result; write per-rank traces."""
    W = len(per_rank)
    rows = []
    for i, pt in enumerate(plan.points):
        recs = [per_rank[w].points[i] for w in range(W)]
        # the split (all-reduce, skew, collective counts) from the profiled repetitions, their
        # totals carried to the unprofiled scale; the row's seconds from the timing passes
        stats = analysis.aggregate_point(
            [[t * r["profiler_scale"] for t in r["profiled_totals"]] for r in recs], [r["comms"] for r in recs],
            [[[analysis.Call(c, d) for c, d in rep] for rep in r["calls"]] for r in recs])
        R = min(len(r["totals"]) for r in recs)
        rep_means = [sum(r["totals"][j] for r in recs) / W for j in range(R)]
        total = median(rep_means)
        share = stats.allreduce_s / stats.total_s if stats.total_s > 0 else 0.0
        ar = total * min(share, 1.0)
        skew = min(stats.skew_s / stats.allreduce_s, 1.0) * ar if stats.allreduce_s > 0 else 0.0
        by_rank = []
        for w, pr in enumerate(stats.per_rank):
            t_w = median(recs[w]["totals"][:R])
            f = t_w / pr["total_s"] if pr["total_s"] > 0 else 1.0
            a_w, s_w = min(pr["allreduce_s"] * f, t_w), min(pr["skew_s"] * f, t_w)
            by_rank.append(RankRow(rank=w, total_s=t_w, allreduce_s=a_w, skew_s=s_w, transfer_s=a_w - s_w))
        busy = None
        if all(r.get("busy") for r in recs):  # GPU: kernel-busy seconds, rank mean per repetition
            busy = median([sum(r["busy"][j] for r in recs) / W for j in range(min(len(r["busy"]) for r in recs))])
        rows.append(RowResult(kind=pt.kind, batch=pt.batch, tokens=pt.tokens, label=pt.label,
                              context_tokens=pt.context, ci95_rel=median_ci95_rel(rep_means),
                              passes=recs[0].get("passes", R), busy_s=busy,
                              total_s=total, allreduce_s=ar, compute_s=total - ar,
                              skew_s=skew, spread_s=iqr(rep_means), samples=R,
                              n_allreduce=stats.n_allreduce, n_allgather=stats.n_allgather,
                              calls_matched=stats.calls_matched, per_rank=tuple(by_rank)))
    ar_points = []
    if W > 1 and per_rank[0].allreduce:
        for j, a in enumerate(per_rank[0].allreduce):
            lat, spread = analysis.allreduce_latency([per_rank[w].allreduce[j]["durs"] for w in range(W)])
            ar_points.append(AllReduceResult(msg_bytes=a["msg_bytes"], latency_s=lat, spread_s=spread))
    trace_dir.mkdir(parents=True, exist_ok=True)
    for w in range(W):
        events: list[Any] = []
        seen_meta: set[tuple[Any, ...]] = set()
        meta: dict[str, Any] = {}
        for rec in per_rank[w].points:
            meta = meta or dict(rec.get("trace_meta") or {})
            for e in rec["trace"]:
                if e.get("ph") == "M":
                    key = (e.get("name"), e.get("pid"), e.get("tid"), json.dumps(e.get("args"), sort_keys=True))
                    if key in seen_meta:
                        continue
                    seen_meta.add(key)
                events.append(e)
        other = dict(meta.pop("otherData", None) or {})
        other["specmodel"] = {"rank": w, "tp": plan.tp, "backend": plan.backend, "name": plan.name,
                              "note": "every profiled repetition of each measured forward",
                              "profiler_scale": {r["label"]: r["profiler_scale"] for r in per_rank[w].points},
                              "bare_totals_s": {r["label"]: r["totals"] for r in per_rank[w].points},
                              "profiled_totals_s": {r["label"]: r["profiled_totals"] for r in per_rank[w].points}}
        doc = {**meta, "traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
        atomic_write_bytes(trace_dir / f"rank{w}.trace.json.gz", gzip_bytes(json.dumps(doc).encode()))
    hosts = sorted({r.host for r in per_rank})
    first_hw = next((r.hardware for r in per_rank if r.hardware), None)
    hw: dict[str, Any] = dict(first_hw or {})
    hw["hosts"] = hosts
    hw["nodes"] = len(hosts)
    nodes = [r.hardware for r in per_rank if r.hardware]
    if len(nodes) > 1:
        hw["per_node"] = nodes
    return RunResult(plan=plan, rows=tuple(rows), allreduce_points=tuple(ar_points), spec_loop=per_rank[0].spec_loop,
                     cycle_overhead=per_rank[0].cycle_overhead, hardware=hw, finished_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def agree_plan(plan: RunPlan, rank: int) -> RunPlan:
    """Rank 0's plan, on every rank. Under torchrun each process sizes the model itself (on a GPU
    from the free memory it sees at that moment): ranks that built different layer counts would
    issue different collectives and hang, so one decision is broadcast."""
    obj: list[Any] = [plan.to_dict() if rank == 0 else None]
    try:
        dist.broadcast_object_list(obj, src=0)
    except Exception as exc:
        raise CollectiveFailed(f"broadcast of the plan failed on rank {rank}: {exc}") from exc
    return plan if rank == 0 else RunPlan.from_dict(obj[0])


def _plan_diff(mine: RunPlan, agreed: RunPlan) -> str:
    a, b = mine.to_dict(), agreed.to_dict()
    keys = [k for k in a if a[k] != b.get(k)]
    if "target" in keys and a["target"]["num_layers"] != b["target"]["num_layers"]:
        return f"target layers {a['target']['num_layers']} here, {b['target']['num_layers']} on rank 0"
    return "differs in " + ", ".join(keys[:5])


def setup_process(plan: RunPlan) -> None:
    torch.set_num_threads(1 if plan.device == "cpu" else max(1, torch.get_num_threads()))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.set_flush_denormal(True)


def run_rank(plan: RunPlan, *, run_dir: Path | None, board_path: Path | None,
             write_result: Any = None) -> int:
    """Run this process's rank (env: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_*).

    ``run_dir``: where rank 0 writes ``result.json`` + ``traces/`` (the supervising parent reads
    them). Under torchrun ``write_result(result, trace_dir)`` is called on rank 0 instead.
    """
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    board = status.Writer(board_path, rank) if board_path is not None else None
    setup_process(plan)
    r = Rank(plan, rank=rank, world=world, local_rank=local_rank, local_world=local_world, board=board)
    try:
        r.fault.check("start")
        kw: dict[str, Any] = {}
        if r.cuda:
            kw["device_id"] = r.device
        grace = 30.0 if os.environ.get(CHILD_ENV) else 0.0  # the supervisor should act first
        dist.init_process_group(plan.backend, timeout=_dt.timedelta(seconds=plan.timeout_s + grace), **kw)
        if board is not None:
            board.set(stage=status.JOINED)
        agreed = agree_plan(plan, rank)
        if json.dumps(agreed.to_dict(), sort_keys=True) != json.dumps(plan.to_dict(), sort_keys=True):
            # under torchrun each rank built its own plan: run rank 0's
            sys.stderr.write(f"specmodel profile: rank {rank}: running rank 0's plan ({_plan_diff(plan, agreed)})\n")
            plan = agreed
            r = Rank(plan, rank=rank, world=world, local_rank=local_rank, local_world=local_world, board=board)
        tmp_root = Path(tempfile.mkdtemp(prefix=f"specmodel-rank{rank}-"))
        try:
            mine = r.run(tmp_root)
            objs = gather(r, mine)
            if rank == 0:
                assert objs is not None
                trace_dir = (run_dir / "traces") if run_dir is not None else tmp_root / "traces"
                result = combine(plan, objs, trace_dir)
                if write_result is not None:
                    write_result(result, trace_dir)
                if run_dir is not None:
                    tmp = run_dir / ".result.json.tmp"
                    tmp.write_text(json.dumps(result.to_dict()))
                    os.replace(tmp, run_dir / "result.json")
            r.comm.barrier()
        finally:
            import shutil

            shutil.rmtree(tmp_root, ignore_errors=True)
        if board is not None:
            board.set(stage=status.DONE)
        try:
            dist.destroy_process_group()
        except Exception:
            pass
        return EXIT_OK
    except CollectiveFailed as exc:
        if board is not None:
            board.set(stage=status.PEER_FAILED)
        sys.stderr.write(f"specmodel profile: rank {rank}: a collective failed (another rank died or hung): "
                         f"{str(exc).splitlines()[0][:300]}\n")
        return EXIT_PEER
    except KeyboardInterrupt:
        return 130
    except BaseException:
        if board is not None:
            board.set(stage=status.FAILED)
        traceback.print_exc()
        return EXIT_FAILED


def _rank_main(plan_path: str, run_dir: Path) -> int:
    plan = RunPlan.load(plan_path)
    board = run_dir / "status.bin"
    return run_rank(plan, run_dir=run_dir, board_path=board if board.exists() else None)


def _name_process(rank: int) -> None:
    """``ps``/``top`` (and the tests) tell the ranks apart by name: a forked rank's command line
    and environment are its parent's (Linux ``PR_SET_NAME``, at most 15 bytes)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    name = (f"specmodel-rank{rank}" if rank < 10 else f"specmodel-r{rank}")[:15].encode()
    try:
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def warm_imports() -> None:
    """What every rank would import on its own, once, before the ranks are forked: on 2 cores
    8 ranks each importing torch (~3 s) and torch.profiler's first start importing
    torch._inductor (~2.5 s, its ``hasattr(torch, "_inductor")`` check) was ~20 s of the
    default run's wall time. Importing starts no thread and touches no device."""
    import torch.profiler  # noqa: F401

    hasattr(torch, "_inductor")


def fork_ranks(plan_path: str, run_dir: Path, n: int) -> int:
    """The launcher's one process: import once, fork ``n`` ranks (``RANK`` = 0..n−1, each in its
    own process group (``os.setsid``), output to ``run_dir/rank<r>.log``), write ``run_dir/pids.json``, then reap
    them: each rank's exit status goes to ``run_dir/exit<r>`` (``waitstatus_to_exitcode``: a
    negative number is the signal that killed it), which the launcher reads as a Popen would."""
    warm_imports()
    me = os.getpid()
    pids: dict[int, int] = {}
    for r in range(n):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = EXIT_FAILED
            try:
                os.setsid()
                fd = os.open(run_dir / f"rank{r}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                os.environ.update({"RANK": str(r), "LOCAL_RANK": str(r)})
                _name_process(r)
                die_with_parent(me, watch=True, exit_code=EXIT_ORPHAN)
                code = _rank_main(plan_path, run_dir)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids[pid] = r
    atomic_write_bytes(run_dir / "pids.json", json.dumps({str(r): pid for pid, r in pids.items()}).encode())
    while pids:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        r = pids.pop(pid, -1)
        if r >= 0:
            atomic_write_bytes(run_dir / f"exit{r}", str(os.waitstatus_to_exitcode(st)).encode())
    return EXIT_OK


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specmodel.profile.worker")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--fork", type=int, default=0, help="fork this many ranks from one import (the launcher's way)")
    a = ap.parse_args(argv)
    parent = os.getppid()
    run_dir = Path(a.run_dir)
    if a.fork:
        die_with_parent(parent, exit_code=EXIT_ORPHAN)  # (no watch thread before forking)
        code = fork_ranks(a.plan, run_dir, a.fork)
    else:
        die_with_parent(parent, watch=True, exit_code=EXIT_ORPHAN)  # never linger as an orphan
        code = _rank_main(a.plan, run_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never block on gloo/NCCL teardown threads after a failure


if __name__ == "__main__":
    main()
