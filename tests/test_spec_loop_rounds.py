"""The spec loop's measurement on a box that is not idle: baseline and speculative chunks in
rounds whose first chunk alternates, the speedup read off the median per-round ratio, rounds
added until that median's 95 % interval is tight or the budget is spent. A simulated box (its
own clock, a drift, bursts of other work landing on one side) is the oracle: the true cycle and
step times are set by the test, never measured."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from specmodel.profile.specloop import measure_rounds

STEP_S, CYCLE_S = 0.020, 0.050  # the simulated box's true baseline step and cycle
TRUE_RATIO = CYCLE_S / STEP_S


class SimBox:
    """A simulated clock: a chunk of n steps/cycles takes n × its true time × the box's slowdown
    at that moment (1 + drift × t) × log-normal noise, plus ``stall`` of its length on every
    ``stall_every``-th chunk of ``stall_on`` (another process's burst landing on that side)."""

    def __init__(self, *, drift_per_s: float = 0.0, sigma: float = 0.0, stall: float = 0.0,
                 stall_every: int = 0, stall_on: str = "spec", seed: int = 1) -> None:
        self.t = 0.0
        self.drift, self.sigma, self.stall, self.every, self.on = drift_per_s, sigma, stall, stall_every, stall_on
        self.rng = random.Random(seed)
        self.chunks = {"baseline": 0, "spec": 0}

    def time_chunk(self, which: str, n: int) -> float:
        true = n * (STEP_S if which == "baseline" else CYCLE_S)
        # the slowdown integrated over the chunk: (1 + drift × midpoint)
        dt = true * (1.0 + self.drift * (self.t + true / 2)) * math.exp(self.rng.gauss(0.0, self.sigma))
        self.chunks[which] += 1
        if self.every and which == self.on and self.chunks[which] % self.every == 0:
            dt *= 1.0 + self.stall
        self.t += dt
        return dt

    def out_of_time(self, budget_s: float):
        return lambda: self.t > budget_s


def fixed_order_ratio_of_sums(box: SimBox, *, rounds: int, per_round: int) -> float:
    """How the loop measured before: baseline then speculative every round, a fixed number of
    rounds, the ratio of the summed chunk times (a cycle over a step)."""
    base = spec = 0.0
    for _ in range(rounds):
        base += box.time_chunk("baseline", per_round)
        spec += box.time_chunk("spec", per_round)
    return spec / base


def test_a_burst_landing_on_one_side_leaves_the_median_ratio_within_bounds():
    """Every fifth speculative chunk runs 80 % longer (other work on the box) and the box slows
    3 % a second: the summed chunks read the cycle ~16 % dearer than it is; the median of the
    interleaved rounds stays within 5 % of the truth and says how tight it is."""
    kw = dict(drift_per_s=0.03, sigma=0.05, stall=0.8, stall_every=5)
    old = fixed_order_ratio_of_sums(SimBox(**kw), rounds=10, per_round=12)
    assert abs(old / TRUE_RATIO - 1) > 0.10, old
    box = SimBox(**kw)
    got = measure_rounds(box.time_chunk, per_round=2, min_rounds=10, ci_target_rel=0.02,
                         out_of_time=box.out_of_time(60.0), extend=True, max_rounds=10_000)
    assert abs(got.cycle_over_step / TRUE_RATIO - 1) <= 0.05, got.cycle_over_step
    assert got.ci95_rel is not None and got.ci95_rel <= 0.05
    assert len(got.step_s) == len(got.cycle_s) == len(got.ratios) >= 10


def test_alternating_which_chunk_goes_first_cancels_a_drift_within_the_round():
    """A box slowing 10 % a second, no noise: run second, the speculative chunk always reads the
    slower box (+4 % on 12-cycle chunks); swapping the first chunk every round puts the drift on
    each side in turn and the median ratio lands on the truth."""
    old = fixed_order_ratio_of_sums(SimBox(drift_per_s=0.10), rounds=10, per_round=12)
    assert old / TRUE_RATIO - 1 > 0.02, old
    box = SimBox(drift_per_s=0.10)
    got = measure_rounds(box.time_chunk, per_round=12, min_rounds=10, ci_target_rel=0.02,
                         out_of_time=box.out_of_time(60.0), extend=False, max_rounds=10)
    assert abs(got.cycle_over_step / TRUE_RATIO - 1) < 0.01, got.cycle_over_step
    firsts = []
    box2 = SimBox()

    def record(which: str, n: int) -> float:
        firsts.append(which)
        return box2.time_chunk(which, n)

    measure_rounds(record, per_round=1, min_rounds=4, ci_target_rel=0.02, out_of_time=lambda: False,
                   extend=False, max_rounds=4)
    assert firsts == ["baseline", "spec", "spec", "baseline", "baseline", "spec", "spec", "baseline"]


def test_rounds_are_added_until_the_interval_is_tight_or_the_budget_is_spent():
    noisy = dict(sigma=0.15, seed=3)
    box = SimBox(**noisy)
    got = measure_rounds(box.time_chunk, per_round=2, min_rounds=10, ci_target_rel=0.03,
                         out_of_time=box.out_of_time(1e9), extend=True, max_rounds=100_000)
    # 10 rounds of this noise are far from 3 %: it ran on, and stopped once within it
    assert got.stopped == "interval" and len(got.step_s) > 10
    assert got.ci95_rel is not None and got.ci95_rel <= 0.03
    assert abs(got.cycle_over_step / TRUE_RATIO - 1) <= 0.03
    box = SimBox(**noisy)
    got = measure_rounds(box.time_chunk, per_round=2, min_rounds=10, ci_target_rel=0.001,
                         out_of_time=box.out_of_time(3.0), extend=True, max_rounds=100_000)
    assert got.stopped == "budget" and box.t < 3.0 + 2 * 2 * CYCLE_S * 2  # at most one round past it
    got = measure_rounds(SimBox(**noisy).time_chunk, per_round=2, min_rounds=10, ci_target_rel=0.001,
                         out_of_time=lambda: False, extend=True, max_rounds=25)
    assert got.stopped == "max" and len(got.step_s) == 25
    got = measure_rounds(SimBox(**noisy).time_chunk, per_round=2, min_rounds=10, ci_target_rel=0.001,
                         out_of_time=lambda: pytest.fail("asked for time without a budget"), extend=False,
                         max_rounds=25)
    assert got.stopped == "cycles" and len(got.step_s) == 10


@pytest.mark.torch
def test_the_loop_reads_its_speedup_off_the_median_of_its_rounds():
    """A real loop on a one-rank stack: the rounds it ran are in the result, and the speedup its
    rates give is the mean acceptance over the median per-round ratio."""
    from statistics import median

    from specmodel.profile import configs as C
    from specmodel.profile.plan import RunPlan, SpecLoopPlan
    from specmodel.profile.specloop import run_loop
    from specmodel.profile.worker import Rank

    s, _ = C.load_shape(None, "llama-3.1-8b")
    t, d, sc = C.scale(s, C.drafter_for(s), 1, layers=1, hidden=64, reason="test")
    loop = SpecLoopPlan(batch=1, cycles=6, warmup=1, cycles_per_round=1, accept_probs=(0.25, 0.25, 0.25, 0.25),
                        accept_len=2.5, ci_target_rel=1e-6, budget_s=0.3)
    plan = RunPlan(name="t", tp=1, backend="gloo", device="cpu", dtype="float32", target=t, drafter=d, scaling=sc,
                   model_source="test", context_len=0, contexts=(0,), spec_loop=loop)
    r = Rank(plan, rank=0, world=1, local_rank=0, local_world=1, board=None)
    r.build()
    res = run_loop(r)
    assert res.stopped == "budget" and res.rounds >= 6 and res.cycles == res.rounds
    assert len(res.round_cycle_over_step) == len(res.round_step_s) == res.rounds
    speedup = res.spec.tokens_per_s / res.baseline.tokens_per_s
    assert speedup == pytest.approx(res.spec.accept_mean / median(res.round_cycle_over_step))
    assert sum(res.spec.accept_hist.values()) == res.cycles
    assert res.ci95_rel is not None


@pytest.mark.torch
def test_in_graph_mode_the_loop_replays_each_forward_it_captured():
    """With ``plan.graphs`` the loop runs as the engines do on a GPU: the baseline decode step,
    the draft-extend, each draft step and the verify are each captured once and then replayed,
    reading their inputs from buffers that outlive the capture. The stand-in graph keeps only a
    weak reference to what it captured (a real one keeps device addresses), so a replay whose
    inputs were freed fails here as it read garbage on an H200."""
    import gc
    import weakref

    from specmodel.profile import configs as C
    from specmodel.profile.plan import RunPlan, SpecLoopPlan
    from specmodel.profile.specloop import run_loop
    from specmodel.profile.worker import Rank

    s, _ = C.load_shape(None, "llama-3.1-8b")
    t, d, sc = C.scale(s, C.drafter_for(s), 1, layers=1, hidden=64, reason="test")
    loop = SpecLoopPlan(batch=2, cycles=4, warmup=1, cycles_per_round=2, accept_probs=(0.25, 0.25, 0.25, 0.25),
                        accept_len=2.5, ci_target_rel=1.0, budget_s=0.0)
    plan = RunPlan(name="t", tp=1, backend="gloo", device="cpu", dtype="float32", target=t, drafter=d, scaling=sc,
                   model_source="test", context_len=0, contexts=(0,), spec_loop=loop, graphs=True, warmup=2)
    r = Rank(plan, rank=0, world=1, local_rank=0, local_world=1, board=None)
    captured: list[int] = []
    replays = [0]

    def fake_capture(fn, *, warmup, pool=None):
        for _ in range(warmup + 1):  # the warm-ups and the captured call
            fn()
        captured.append(warmup)
        ref = weakref.ref(fn)
        del fn
        gc.collect()

        def replay():
            live = ref()
            assert live is not None, "replayed a graph whose captured inputs were freed"
            replays[0] += 1
            live()
        return replay, "loop-pool"

    r.capture = fake_capture
    r.build()
    res = run_loop(r)
    assert captured == [2] * (1 + 1 + (plan.steps - 1) + 1), captured  # decode, draft-extend, drafts, verify
    assert r.loop_pool == "loop-pool"
    # every forward after the captures is a replay: warm-ups, then per round one chunk of each side
    per_cycle = 1 + (plan.steps - 1) + 1
    assert replays[0] == loop.warmup * (1 + per_cycle) + res.rounds * res.cycles_per_round * (1 + per_cycle)
    assert res.spec.verify_s > 0 and res.spec.draft_extend_s > 0 and sum(res.spec.accept_hist.values()) == 2 * res.cycles


@pytest.mark.parametrize("args, says", [
    (["--loop-budget", "5"], "--loop-budget: only with --spec-loop"),
    (["--spec-loop", "--loop-budget", "-1"], "--loop-budget"),
    (["--spec-loop", "--loop-budget", "nan"], "--loop-budget"),
])
def test_a_bad_loop_budget_is_one_line_and_exit_2(tmp_path, args, says):
    r = subprocess.run([sys.executable, "-m", "specmodel", "profile", "--tp", "2", "--out-dir", str(tmp_path), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
