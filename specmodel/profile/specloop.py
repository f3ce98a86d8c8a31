"""The end-to-end check: a real speculative loop on the same TP stack, measured in tok/s.

Per cycle, as SGLang's EAGLE worker runs it: one draft-extend forward of the drafter over the
last verified tokens (target aux hidden states through ``fc``), ``steps − 1`` draft forwards
(``batch × topk`` tokens each, top-k selection between them), one target verify forward over
``batch × num_draft_tokens`` tokens, a greedy comparison of the target's tokens with the drafts.
Weights are random, so acceptance is injected: each request's emitted tokens per cycle
(bonus included) are drawn from the given distribution with one seed on every rank.

The baseline is the same stack decoding one token per request per step. The two are measured in
rounds of one chunk each (:func:`measure_rounds`), as pyperf compares two things: the chunks
alternate, the one that goes first swapping every round, so drift on the box lands on both
sides alike; each round gives one paired ratio (a cycle over a step), the speedup is read off
their median (a burst of other work on the box stretches a chunk or two, not the median), and
rounds are added until the 95 % interval of that median is within the target or the time budget
is spent. Each chunk is timed wall-clock from a barrier to the slowest rank's finish; each
forward is also timed (annotation seam) so the cycle splits into forwards and the overhead
outside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from specmodel.engines.hook.annotate import Stopwatch, phase, timed_phase
from specmodel.limits import MAX_CYCLES
from specmodel.profile.device import Replay
from specmodel.profile.models import Drafter, TargetModel
from specmodel.profile.plan import RunPlan
from specmodel.profile.result import CycleOverhead, LoopBaseline, LoopSpec, SpecLoopResult
from specmodel.profile.tp import Comm
from specmodel.schema.phases import forward_tokens, phase_label
from specmodel.stats import median, median_ci95_rel


class Rank(Protocol):
    """What the loop and the overhead pass use of a rank (:class:`specmodel.profile.worker.Rank`):
    its plan, models, process group, progress board and graph capture."""

    plan: RunPlan
    rank: int
    world: int
    device: torch.device
    cuda: bool
    comm: Comm
    target: TargetModel | None
    drafter: Drafter | None
    capture: Callable[..., tuple[Any, Any]]  # the CUDA-graph seam (profile/device.py:capture_graph)
    loop_pool: Any

    def next_unit(self, label: str) -> None: ...

    def sync(self) -> None: ...


def _mean(watches: list[Stopwatch]) -> float:
    return sum(w.elapsed_s for w in watches) / len(watches) if watches else 0.0


@dataclass(frozen=True, kw_only=True)
class Rounds:
    """What :func:`measure_rounds` measured: per round one baseline step's and one cycle's
    seconds (each its chunk over its length), ``per_round`` of each per chunk, and why it stopped
    (``interval``: within the target; ``budget``: time spent; ``cycles``: no budget to extend;
    ``max``: the cycle cap)."""

    step_s: tuple[float, ...]
    cycle_s: tuple[float, ...]
    per_round: int
    stopped: str

    def __post_init__(self) -> None:
        if not self.step_s or len(self.step_s) != len(self.cycle_s):
            raise ValueError(f"rounds: {len(self.step_s)} baseline and {len(self.cycle_s)} speculative chunks")

    @property
    def ratios(self) -> tuple[float, ...]:
        """Per round: the cycle over the step (the speedup at one token per cycle, inverted)."""
        return tuple(c / s for s, c in zip(self.step_s, self.cycle_s, strict=True))

    @property
    def cycle_over_step(self) -> float:
        return median(self.ratios)

    @property
    def ci95_rel(self) -> float | None:
        return median_ci95_rel(self.ratios)


def measure_rounds(time_chunk: Callable[[str, int], float], *, per_round: int, min_rounds: int,
                   ci_target_rel: float, out_of_time: Callable[[], bool], extend: bool,
                   max_rounds: int) -> Rounds:
    """Rounds of a ``"baseline"`` chunk and a ``"spec"`` chunk, ``per_round`` steps / cycles each
    (``time_chunk(which, n)``: seconds for ``n``), the one that goes first alternating (ABBA:
    a slowdown growing through a round lands on the second chunk, each side's every other round).
    After ``min_rounds``, with ``extend``, rounds are added until the 95 % interval of the median
    per-round ratio is within ``ci_target_rel`` or ``out_of_time()`` (asked once per added round;
    on a TP stack a collective, so every rank stops at the same round), at most ``max_rounds``."""
    steps: list[float] = []
    cycles: list[float] = []
    stopped = "cycles"
    while True:
        order = ("baseline", "spec") if len(steps) % 2 == 0 else ("spec", "baseline")
        got = {which: time_chunk(which, per_round) / per_round for which in order}
        steps.append(got["baseline"])
        cycles.append(got["spec"])
        if len(steps) < min_rounds:
            continue
        if not extend:
            break
        rel = median_ci95_rel([c / s for s, c in zip(steps, cycles, strict=True)])
        if rel is not None and rel <= ci_target_rel:
            stopped = "interval"
            break
        if len(steps) >= max_rounds:
            stopped = "max"
            break
        if out_of_time():
            stopped = "budget"
            break
    return Rounds(step_s=tuple(steps), cycle_s=tuple(cycles), per_round=per_round, stopped=stopped)


def cycle_overhead_s(cycle_s: float, draft_extend_s: float, draft_step_s: float, verify_s: float,
                     steps: int) -> float:
    """The part of a cycle no forward shows: cycle − (draft-extend + (steps − 1) × draft + verify),
    floored at 0 (the one definition the loop and the profile's overhead pass share)."""
    return max(cycle_s - (draft_extend_s + (steps - 1) * draft_step_s + verify_s), 0.0)


class _Cycle:
    """One speculative cycle at ``batch`` requests, as a loop runs it, forwards timed one by one.

    Every forward reads and writes static buffers (the tokens, the drafter's hidden state, the
    target's aux states), as the engines' CUDA-graph runners do; with ``plan.graphs`` each forward
    is captured once and replayed (draft-extend, each draft step, verify), so the loop runs what
    the profile's rows time and what SGLang and vLLM run on a GPU. The greedy check and the
    acceptance draw stay on the host, between replays, as in an engine."""

    def __init__(self, r: Rank, batch: int, probs: np.ndarray, rng: np.random.Generator,
                 g: torch.Generator) -> None:
        p = r.plan
        assert r.target is not None and r.drafter is not None
        self.r, self.b, self.probs, self.rng = r, batch, probs, rng
        self.labels = {k: phase_label(k, batch, forward_tokens(k, batch, p)) for k in ("draft_extend", "draft", "verify")}
        steps, topk, ndt = p.steps, p.topk, p.num_draft_tokens
        self.ver_ids = torch.randint(0, p.target.vocab_size, (batch, ndt), generator=g).to(r.device)
        with torch.inference_mode():
            _, aux = r.target(self.ver_ids)
        self.aux = aux.clone()
        self.tok = torch.zeros(batch, topk, dtype=self.ver_ids.dtype, device=r.device)
        self.hidden = torch.zeros(batch, topk, p.drafter.hidden_size, dtype=aux.dtype, device=r.device)
        self.drafted = torch.zeros(steps, batch, topk, dtype=self.ver_ids.dtype, device=r.device)
        self.pred = torch.zeros_like(self.ver_ids)
        fwd = _Forwards(r, self)
        self.draft_extend = graphed(r, fwd.draft_extend)
        self.drafts = [graphed(r, fwd.draft(j)) for j in range(1, steps)]
        self.verify = graphed(r, fwd.verify)
        self.watches: dict[str, list[Stopwatch]] = {"draft_extend": [], "draft": [], "verify": []}
        self.hist = np.zeros(steps + 1, dtype=np.int64)

    def __call__(self, record: bool) -> None:
        dev, steps = self.r.device, self.r.plan.steps
        with timed_phase(self.labels["draft_extend"], dev) as sw:
            self.draft_extend()
        ws = [("draft_extend", sw)]
        for step in self.drafts:
            with timed_phase(self.labels["draft"], dev) as sw:
                step()
            ws.append(("draft", sw))
        with timed_phase(self.labels["verify"], dev) as sw:
            self.verify()
        ws.append(("verify", sw))
        _ = int((self.pred[:, :-1] == self.ver_ids[:, 1:]).sum())  # the greedy check a real verify does
        emitted = self.rng.choice(np.arange(1, steps + 2), size=self.b, p=self.probs)
        if record:
            for k, w in ws:
                self.watches[k].append(w)
            np.add.at(self.hist, emitted - 1, 1)

    def forward_means(self) -> tuple[float, float, float]:
        """(draft-extend, one draft, verify) seconds: means over the recorded cycles and the ranks."""
        r = self.r
        parts = torch.tensor([_mean(self.watches["draft_extend"]), _mean(self.watches["draft"]),
                              _mean(self.watches["verify"])], dtype=torch.float64, device=r.device if r.cuda else "cpu")
        r.comm.all_reduce(parts)
        de, dr, ve = (float(x) / r.world for x in parts.cpu())
        return de, dr, ve

    def reset(self) -> None:
        for w in self.watches.values():
            w.clear()


class _Forwards:
    """The cycle's forwards over its static buffers (``c``): each reads its inputs from them and
    writes its outputs into them, so a captured graph of it stays valid replay after replay."""

    def __init__(self, r: Rank, c: _Cycle) -> None:
        self.r, self.c = r, c
        p = r.plan
        self.V, self.topk, self.ndt = p.target.vocab_size, p.topk, p.num_draft_tokens

    @torch.inference_mode()
    def draft_extend(self) -> None:
        c, b = self.c, self.c.b
        assert self.r.drafter is not None
        logits, h = self.r.drafter(c.ver_ids, c.aux, "causal", last_only=True)
        c.tok.copy_(logits[:, -1].topk(self.topk, dim=-1).indices % self.V)  # (b, topk)
        c.hidden.copy_(h[:, -1:].expand(b, self.topk, c.hidden.shape[-1]))
        c.drafted[0].copy_(c.tok)

    def draft(self, j: int) -> Callable[[], None]:
        @torch.inference_mode()
        def step() -> None:
            c = self.c
            assert self.r.drafter is not None
            logits, hidden = self.r.drafter(c.tok, c.hidden, "diag" if self.topk > 1 else "causal")
            c.tok.copy_(logits.argmax(dim=-1) % self.V)
            c.hidden.copy_(hidden)
            c.drafted[j].copy_(c.tok)
        return step

    @torch.inference_mode()
    def verify(self) -> None:
        c = self.c
        assert self.r.target is not None
        tree = torch.cat([c.ver_ids[:, -1:], *c.drafted.unbind(0)], dim=1)[:, : self.ndt]
        logits, aux = self.r.target(tree, "causal")
        c.pred.copy_(logits.argmax(dim=-1))
        c.aux.copy_(aux)
        c.ver_ids.copy_(tree)


def graphed(r: Rank, fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` as the loop runs it: with ``plan.graphs`` captured once (after the plan's warm-ups)
    and replayed, the replay holding ``fn`` and so the buffers it reads; otherwise ``fn`` itself.
    The loop's graphs share one memory pool (they run one at a time)."""
    if not r.plan.graphs:
        return fn
    r.comm.barrier()
    replay, r.loop_pool = r.capture(fn, warmup=r.plan.warmup, pool=r.loop_pool)
    return Replay(replay, fn)


def _timed(r: Rank, fn: Any, n: int) -> float:
    """``n`` calls of ``fn`` from a barrier to the slowest rank's finish (every rank gets the max)."""
    r.comm.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    r.sync()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=r.device if r.cuda else "cpu")
    r.comm.all_reduce(t, op="max")
    return float(t.item())


def measure_overhead(r: Rank, *, batch: int, cycles: int, chunks: int = 3) -> CycleOverhead:
    """The host work between a cycle's forwards (top-k of the draft logits, the tree, the verify
    argmax and greedy check, the acceptance bookkeeping): ``cycles`` real cycles at ``batch``
    after the timing passes, in ``chunks`` timed like the spec loop's, each chunk's cycle wall
    minus its forwards. The profile's rows time forwards only; without this a profile's tok/s is
    the forwards' upper bound (``overhead_s`` 0) and the spec loop out of sample came out faster
    than it ran. Acceptance does not matter to the host work: draws are uniform."""
    p = r.plan
    r.next_unit("cycle overhead")
    g = torch.Generator(device="cpu").manual_seed(p.seed + 11)
    probs = np.full(p.steps + 1, 1.0 / (p.steps + 1))
    cyc = _Cycle(r, batch, probs, np.random.default_rng(p.seed), g)
    for _ in range(max(1, p.warmup)):
        cyc(False)
    chunks = max(1, min(chunks, cycles))
    per = [cycles // chunks + (1 if i < cycles % chunks else 0) for i in range(chunks)]
    over, walls = [], []
    for n in per:
        cyc.reset()
        wall = _timed(r, lambda: cyc(True), n) / n
        de, dr, ve = cyc.forward_means()
        walls.append(wall)
        over.append(cycle_overhead_s(wall, de, dr, ve, p.steps))
    return CycleOverhead(batch=batch, cycles=sum(per), chunks=chunks, overhead_s=float(np.median(over)),
                         spread_s=max(over) - min(over), cycle_s=float(np.median(walls)))


def run_loop(r: Rank) -> SpecLoopResult:
    p = r.plan
    sl = p.spec_loop
    assert sl is not None and r.target is not None and r.drafter is not None
    target = r.target
    b, steps, topk, ndt = sl.batch, p.steps, p.topk, p.num_draft_tokens
    V = p.target.vocab_size
    g = torch.Generator(device="cpu").manual_seed(p.seed + 7)
    rng = np.random.default_rng(sl.seed)  # the same draws on every rank
    probs = np.asarray(sl.accept_probs, dtype=float)
    probs = probs / probs.sum()
    dev = r.device

    # ---------------------------------------------------------------- baseline decode loop
    r.next_unit("spec loop: baseline")
    ids = torch.randint(0, V, (b, 1), generator=g).to(dev)  # the step's static input and output
    dec_label = phase_label("decode", b, b)

    @torch.inference_mode()
    def decode_step() -> None:
        logits, _ = target(ids)
        ids.copy_(logits[:, -1:].argmax(dim=-1) % V)

    decode = graphed(r, decode_step)
    for _ in range(sl.warmup):
        decode()

    # ---------------------------------------------------------------- speculative loop
    r.next_unit("spec loop: speculative")
    cycle = _Cycle(r, b, probs, rng, g)
    for _ in range(sl.warmup):
        cycle(False)

    # interleaved, as pyperf compares two things (measure_rounds): drift on the box lands on
    # both; each chunk starts after a barrier and ends on the slowest rank
    def base_step() -> None:
        with phase(dec_label):
            decode()

    def time_chunk(which: str, n: int) -> float:
        return _timed(r, base_step, n) if which == "baseline" else _timed(r, lambda: cycle(True), n)

    t_start = time.perf_counter()

    def out_of_time() -> bool:
        # rank 0's clock decides for every rank (their clocks may straddle the budget)
        flag = torch.tensor([float(r.rank == 0 and time.perf_counter() - t_start > sl.budget_s)],
                            dtype=torch.float64, device=dev if r.cuda else "cpu")
        r.comm.all_reduce(flag, op="max")
        return float(flag.item()) > 0

    if sl.cycles_per_round > 0:
        per = min(sl.cycles_per_round, sl.cycles)
        rounds = max(1, sl.cycles // per)
    else:
        rounds = max(1, min(sl.rounds, sl.cycles))
        per = max(1, sl.cycles // rounds)
    got = measure_rounds(time_chunk, per_round=per, min_rounds=rounds, ci_target_rel=sl.ci_target_rel,
                         out_of_time=out_of_time, extend=sl.budget_s > 0, max_rounds=max(rounds, MAX_CYCLES // per))
    n_cycles = per * len(got.step_s)
    base_elapsed, spec_elapsed = sum(got.step_s) * per, sum(got.cycle_s) * per
    de, dr, ve = cycle.forward_means()
    hist = cycle.hist
    tokens = int(sum((j + 1) * int(c) for j, c in enumerate(hist)))
    accept_mean = tokens / (b * n_cycles)
    # the rates from the medians over rounds (a stall in one chunk moves neither); the speedup
    # from the median paired ratio; the overhead from means, as the forwards' are
    step_s = median(got.step_s)
    cycle_s = step_s * got.cycle_over_step
    return SpecLoopResult(
        batch=b, cycles=n_cycles, steps=steps, topk=topk, num_draft_tokens=ndt, accept_len_requested=sl.accept_len,
        rounds=len(got.step_s), cycles_per_round=per, round_step_s=got.step_s, stopped=got.stopped, ci95_rel=got.ci95_rel,
        ci_target_rel=sl.ci_target_rel,
        # per round: speculative cycles per baseline step time, i.e. speedup at 1 token per cycle
        round_cycle_over_step=got.ratios,
        baseline=LoopBaseline(elapsed_s=base_elapsed, tokens=b * n_cycles, tokens_per_s=b / step_s, step_s=step_s),
        spec=LoopSpec(elapsed_s=spec_elapsed, tokens=tokens, tokens_per_s=b * accept_mean / cycle_s, cycle_s=cycle_s,
                      draft_extend_s=de, draft_step_s=dr, verify_s=ve,
                      overhead_s=cycle_overhead_s(spec_elapsed / n_cycles, de, dr, ve, steps),
                      accept_hist={str(j + 1): int(c) for j, c in enumerate(hist)},
                      accept_mean=accept_mean),
    )
