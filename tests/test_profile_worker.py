"""The rank's measurement logic on the CPU, with stand-ins where a GPU would act: which time the
profiler correction applies to, the CUDA-graph path, the interleaved passes and their stopping
rule, the all-reduce sweep's per-call time, kernel-busy time from a trace."""

from __future__ import annotations

import gc
import time
import types
import weakref

import pytest

from specmodel.profile import configs as C
from specmodel.profile.plan import RunPlan, sweep_points

pytestmark = pytest.mark.torch  # the rank runs torch forwards


@pytest.fixture(autouse=True)
def _worker():
    """The worker module imports torch: imported per test (collection needs no torch)."""
    global Rank, comm_scale, kernel_busy_s
    from specmodel.profile.worker import Rank, comm_scale, kernel_busy_s


def tiny_plan(**kw):
    s, _ = C.load_shape(None, "llama-3.1-8b")
    t, d, sc = C.scale(s, C.drafter_for(s), 1, layers=1, hidden=64, reason="test")
    base = dict(name="t", tp=1, backend="gloo", device="cpu", dtype="float32", target=t, drafter=d, scaling=sc,
                model_source="test", points=sweep_points(kinds=("decode", "verify"), batches=(1,), verify_tokens=(4,),
                                                         topk=1, num_draft_tokens=4, contexts=(0, 32)),
                warmup=1, repeats=2, min_passes=3, time_budget_s=5.0, context_len=0, contexts=(0, 32))
    base.update(kw)
    return RunPlan(**base)


def test_profiler_correction_is_for_cpu_time_only():
    """Defect 2: under the profiler a CPU forward (and the gloo waits in it) stretches, so the
    all-reduce share is carried to the unprofiled time; NCCL kernel time on a GPU does not."""
    bare, profiled = [0.010, 0.011, 0.012], [0.015, 0.016, 0.017]
    assert comm_scale(bare, profiled, device_timed=False) == pytest.approx(0.011 / 0.016)
    assert comm_scale(bare, profiled, device_timed=True) == 1.0



class FakeClock:
    """The timers' clock, advanced only by the stand-in forwards' ``sleep``: what a timing test asserts
    is the worker's arithmetic (a sample of N calls over N, a budget ending the passes), never how
    fast this box sleeps (a 2 ms sleep reads 6-10 ms on a loaded box)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def perf_counter(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    from specmodel.engines.hook import annotate
    from specmodel.profile import worker

    c = FakeClock()
    fake = types.SimpleNamespace(perf_counter=c.perf_counter, sleep=c.sleep, time=time.time, monotonic=c.perf_counter)
    monkeypatch.setattr(annotate, "time", fake)
    monkeypatch.setattr(worker, "time", fake)
    return c

class CountingComm:
    world, rank = 2, 0

    def __init__(self, call_s: float, clock: FakeClock) -> None:
        self.call_s, self.clock = call_s, clock
        self.calls = 0

    def all_reduce(self, t, op="sum"):
        self.calls += 1
        self.clock.sleep(self.call_s)
        return t

    def barrier(self):
        pass


def test_allreduce_sweep_times_back_to_back_calls_per_call(clock: FakeClock):
    """Defect 8: each sample is N calls between two timestamps, reported per call."""
    r = Rank(tiny_plan(allreduce_sizes=(4, 1024), allreduce_warmup=1, allreduce_repeats=3, allreduce_calls=5),
             rank=0, world=1, local_rank=0, local_world=1, board=None)
    r.comm = CountingComm(0.002, clock)
    out = r.allreduce_sweep()
    assert r.comm.calls == 2 * (1 + 3 * 5)
    for a in out:
        assert a["calls_per_sample"] == 5 and len(a["durs"]) == 3
        # one call's time (2 ms), not five (10 ms)
        assert a["durs"] == pytest.approx([0.002] * 3), a["durs"]


def test_graph_mode_times_replays_of_a_captured_forward(tmp_path):
    """Defect 3: with plan.graphs the forward is captured once after warm-up and every timed
    repetition (profiled and interleaved) is a replay; the pool is passed from one capture to
    the next. The capture itself is the GPU seam, here a stand-in."""
    plan = tiny_plan(graphs=True)
    r = Rank(plan, rank=0, world=1, local_rank=0, local_world=1, board=None)
    captured, replays, pools = [], [0], []

    def fake_capture(fn, *, warmup, pool=None):
        for _ in range(warmup):
            fn()
        fn()  # the captured call
        # a real graph holds the input tensors' device addresses, not the tensors: here only a
        # weak reference, so a replay after the forward (and its inputs) were freed fails
        ref = weakref.ref(fn)
        captured.append(fn.__name__)
        pools.append(pool)

        def replay():
            live = ref()
            assert live is not None, "replayed a graph whose captured inputs were freed"
            replays[0] += 1
            live()
        return replay, f"pool{len(captured)}"

    r.capture = fake_capture
    r.build()
    assert all(layer.mlp.static for layer in r.target.layers if hasattr(layer.mlp, "static"))
    fns = [r.point_callable(pt) for pt in plan.points[:1]]
    gc.collect()  # the forward of that point is referenced by its replay alone
    fns[0]()
    captured.clear(), pools.clear()
    replays[0], r.graph_pool = 0, None
    recs = r.measure_points(tmp_path)
    assert len(captured) == len(plan.points) and pools == [None] + [f"pool{i}" for i in range(1, len(plan.points))]
    passes = recs[0]["passes"]
    assert passes >= plan.min_passes
    assert replays[0] == len(plan.points) * plan.repeats + sum(len(x["totals"]) for x in recs)
    assert all(x["profiler_scale"] > 0 and len(x["totals"]) >= plan.min_passes for x in recs)
    assert {x["context"] for x in recs} == {0, 32}


def test_eager_mode_captures_nothing(tmp_path):
    r = Rank(tiny_plan(), rank=0, world=1, local_rank=0, local_world=1, board=None)
    r.capture = lambda *a, **k: pytest.fail("captured in eager mode")
    r.build()
    assert len(r.measure_points(tmp_path)) == len(r.plan.points)


def test_passes_interleave_and_stop_at_the_target(clock: FakeClock):
    """A steady point stops once its interval is within the target; a noisy one runs on until
    the budget; within a pass every point runs once, the start rotating."""
    r = Rank(tiny_plan(min_passes=6, max_passes=40, ci_target_rel=0.2, time_budget_s=30.0),
             rank=0, world=1, local_rank=0, local_world=1, board=None)
    order: list[str] = []
    rng = iter([0.0005, 0.004] * 100)

    def steady():
        order.append("s")
        clock.sleep(0.002)

    def noisy():
        order.append("n")
        clock.sleep(next(rng))

    samples, passes = r.timing_passes([steady, noisy])
    assert passes == 40  # the noisy point never gets within 20 %
    assert 6 <= len(samples[0]) < 40 and len(samples[1]) == 40
    assert order[:4] == ["s", "n", "n", "s"]  # pass 2 starts with the other point
    r2 = Rank(tiny_plan(min_passes=6, max_passes=1000, ci_target_rel=1e-9, time_budget_s=0.3),
              rank=0, world=1, local_rank=0, local_world=1, board=None)
    wobble = iter([0.0005, 0.004] * 1000)  # never within the target: only the budget can end the passes
    t0 = clock.t
    _, passes2 = r2.timing_passes([lambda: clock.sleep(next(wobble))])
    # the budget ends it: 0.3 s of 0.5-4 ms forwards (one pass's forward past the budget at most)
    assert passes2 < 1000 and 0.3 <= clock.t - t0 < 0.305, (passes2, clock.t - t0)


def test_kernel_busy_time_is_the_union_inside_the_window():
    ev = [{"ph": "X", "cat": "kernel", "ts": 0, "dur": 10}, {"ph": "X", "cat": "kernel", "ts": 5, "dur": 10},
          {"ph": "X", "cat": "kernel", "ts": 30, "dur": 10}, {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 100},
          {"ph": "X", "cat": "kernel", "ts": 95, "dur": 20}]
    assert kernel_busy_s(ev, 0, 100) == pytest.approx((15 + 10 + 5) * 1e-6)


@pytest.mark.slow  # starts TP ranks
def test_torchrun_ranks_that_sized_the_model_differently_run_rank_0s_plan(tmp_path):
    """Defect 7: under torchrun every process builds its own plan (on a GPU from the free memory
    it sees); here rank 1 is told another layer count. Both must run rank 0's plan (else their
    collectives differ and the run hangs until the timeout)."""
    import json
    import os
    import subprocess

    from specmodel.profile.launcher import free_port
    from specmodel.schema.profile import load_profile
    from tests.conftest import specmodel_exe

    port = str(free_port())
    common = ["profile", "--tp", "2", "--name", "tr", "--out-dir", str(tmp_path), "--batches", "1",
              "--phases", "decode", "--warmup", "1", "--repeats", "2", "--allreduce-sizes", "none",
              "--context-len", "16", "--time-budget", "1", "--min-passes", "2", "--timeout", "40", "--quiet", "--json"]
    procs = []
    for rank, layers in ((0, "1"), (1, "2")):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1")
        env.pop("SPECMODEL_PROFILE_CHILD", None)
        procs.append(subprocess.Popen(specmodel_exe() + common + ["--layers", layers], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "running rank 0's plan (target layers 2 here, 1 on rank 0)" in outs[1][1]
    assert json.loads(outs[0][0])["rows"][0]["kind"] == "decode"
    assert load_profile(tmp_path / "tr").model["num_hidden_layers"] == 1


def test_burst_times_back_to_back_forwards_per_forward(clock: FakeClock):
    r = Rank(tiny_plan(min_passes=6, max_passes=6, burst=3), rank=0, world=1, local_rank=0, local_world=1, board=None)
    calls = [0]

    def fwd():
        calls[0] += 1
        clock.sleep(0.002)

    samples, passes = r.timing_passes([fwd])
    assert passes == 6 and calls[0] == 18 and len(samples[0]) == 6
    # one forward's time (2 ms), not three (6 ms)
    assert samples[0] == pytest.approx([0.002] * 6), samples


def test_the_timing_passes_visit_points_in_the_order_an_engine_runs_them():
    """Per (context, batch): draft-extend, draft, verify, decode — each forward after the one a
    serving loop runs before it; the sweep's own order (decode first) is not the timing order."""
    from specmodel.profile.plan import sweep_points
    from specmodel.profile.worker import timing_order

    pts = sweep_points(kinds=("decode", "verify", "draft", "draft_extend"), batches=(1, 8), verify_tokens=(2, 4),
                       topk=1, num_draft_tokens=4, contexts=(0, 1024))
    order = [pts[i] for i in timing_order(pts)]
    assert sorted(timing_order(pts)) == list(range(len(pts)))  # every point once
    got = [(p.context, p.batch, p.kind, p.per_request) for p in order]
    assert got[:6] == [(0, 1, "draft_extend", 4), (0, 1, "draft", 1), (0, 1, "verify", 2), (0, 1, "verify", 4),
                       (0, 1, "decode", 1), (0, 8, "draft_extend", 4)]
    assert [p.kind for p in pts[:2]] == ["decode", "decode"]  # the sweep's order differs
    for a, b in zip(order, order[1:], strict=False):
        if b.kind == "verify" and (a.context, a.batch) == (b.context, b.batch):
            assert a.kind in ("draft", "verify")
        if b.kind == "decode":
            assert a.kind == "verify"  # a target forward before decode, never the drafter
