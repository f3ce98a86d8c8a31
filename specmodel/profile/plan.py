"""What the ranks run: the sweep (one :class:`Point` per measured forward kind × batch × tokens),
the pure all-reduce sweep, the optional speculative loop. Pure Python, JSON round-trip, so the
parent builds and validates it before spawning and every rank reads the same file
(:mod:`specmodel.commands.profile_plan` builds one from the command's options).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specmodel.errors import FieldError
from specmodel.io import atomic_write_text
from specmodel.profile import configs as cfgs
from specmodel.schema.phases import (
    CYCLE_KINDS,
    KIND,
    collectives_per_forward,
    phase_label,
    tokens_per_request,
)
from specmodel.schema.shapes import DrafterShape, ModelShape

#: Forward kinds the sweep measures, in the order they run (every kind the cycle model uses).
SWEEP_KINDS = CYCLE_KINDS

VERIFY_TOKENS = (2, 4, 8)
PROFILED_COST = 3.0  # a profiled forward ≈ this many bare ones on the CPU (progress estimate only)


@dataclass(frozen=True, kw_only=True)
class RunDefaults:
    """What ``specmodel profile`` runs when a flag is not given, on one kind of device.

    The one home of these numbers: ``commands/profile_plan.build_plan`` reads them and ``specmodel profile --help``
    is written from them (:func:`default_help`), so the help cannot drift from the code.
    """

    device: str  # "CPU" | "GPU", as the help names it
    batches: tuple[int, ...]
    #: KV lengths per request swept (tokens): on the CPU a short and a long one on the scaled
    #: model, so the default sweep stays about as long as a single-context one was
    contexts: tuple[int, ...]
    allreduce_sizes: tuple[int, ...]
    layers: int | None  # target layers built; None: as many as fit (GPU)
    hidden: int | None  # hidden size built; None: the model's own
    dtype: str
    warmup: int  # unmeasured forwards per point
    repeats: int  # profiled forwards per point (the all-reduce share, the trace)
    time_budget_s: float  # seconds of interleaved timing passes
    cycles: int  # spec loop: measured cycles
    loop_warmup: int  # spec loop: unmeasured cycles
    allreduce_warmup: int
    allreduce_repeats: int
    allreduce_calls: int  # back-to-back calls per timed sample
    min_passes: int = 6
    ci_target_rel: float = 0.02
    burst: int = 1
    steps: int = 3
    topk: int = 1
    loop_batch: int = 1
    loop_accept_len: float = 3.0  # capped at steps + 1
    #: spec loop: seconds it may add interleaved rounds after ``cycles`` until the 95 % interval of
    #: its median speedup is within ``ci_target_rel`` (a 120-cycle loop on 2 loaded cores read
    #: speedups 1.07-1.51x from run to run against one profile; its rounds 0.5-2x)
    loop_budget_s: float = 30.0
    #: spec loop: cycles (and baseline steps) per interleaved chunk. Short chunks, many rounds: on
    #: the loaded 2-core box 12-cycle chunks left the median's interval at ±14 % after 30 s (42
    #: rounds), 2-cycle chunks at ±5-7 % (about 200 rounds)
    loop_cycles_per_round: int = 2


# The CPU run is the demo's (`make demo`: about 90 s at TP 8 on 2 cores). Batches 1 and 8: every
# lookup between them is interpolated linearly in tokens, and at TP 8 on gloo a forward is ~90 %
# all-reduce, flat in batch within its noise, so batches 2 and 4 added ~40 % to the run and no
# resolution. Two profiled repetitions per point (the all-reduce share, the trace): the share is
# stable across them and every rank adds its own, where each one costs ~3 bare forwards.
# All-reduce sizes x16: the α-β fit has 6 points over the same 4 B .. 4 MiB.
CPU_DEFAULTS = RunDefaults(
    device="CPU", batches=(1, 8), contexts=(256, 4096),
    allreduce_sizes=tuple(4 * 16**i for i in range(6)),  # 4 B .. 4 MiB, x16 (nccl-tests style)
    layers=cfgs.CPU_LAYERS, hidden=cfgs.CPU_HIDDEN, dtype="float32", warmup=1, repeats=2, time_budget_s=15.0,
    cycles=120, loop_warmup=3, allreduce_warmup=2, allreduce_repeats=8, allreduce_calls=4)
GPU_DEFAULTS = RunDefaults(
    device="GPU", batches=(1, 2, 4, 8, 16, 32, 64), contexts=(1024, 8192, 32768),
    allreduce_sizes=tuple(8 * 2**i for i in range(25)),  # 8 B .. 128 MiB, x2
    layers=None, hidden=None, dtype="bfloat16", warmup=5, repeats=10, time_budget_s=120.0,
    cycles=200, loop_warmup=10, allreduce_warmup=5, allreduce_repeats=20, allreduce_calls=20, loop_budget_s=60.0,
    loop_cycles_per_round=10)


def defaults_for(cpu: bool) -> RunDefaults:
    return CPU_DEFAULTS if cpu else GPU_DEFAULTS


def _tokens_text(n: int) -> str:
    return f"{n >> 10}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _default_text(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(_tokens_text(x) if isinstance(x, int) else str(x) for x in v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def default_help(attr: str, *, none: str = "", fmt: Any = _default_text) -> str:
    """``"default 1 CPU, 5 GPU"`` (``"default 6"`` when both agree) for a :class:`RunDefaults` field;
    ``none`` says what a None default means (``"as many as fit"``)."""
    def one(d: RunDefaults) -> str:
        v = getattr(d, attr)
        return none if v is None else fmt(v)

    c, g = one(CPU_DEFAULTS), one(GPU_DEFAULTS)
    return f"default {c}" if c == g else f"default {c} CPU, {g} GPU"


@dataclass(frozen=True, kw_only=True)
class Point:
    """One measured forward: ``kind`` over ``batch`` requests × ``per_request`` tokens each,
    every request attending over ``context`` cached tokens."""

    kind: str
    batch: int
    per_request: int
    context: int = 0

    @property
    def tokens(self) -> int:
        return self.batch * self.per_request

    @property
    def label(self) -> str:
        return phase_label(self.kind, self.batch, self.tokens)

    @property
    def model(self) -> str:
        return KIND[self.kind].model

    @property
    def unit(self) -> str:
        """The progress line: the phase label and the context it runs at."""
        return f"{self.label} ctx={self.context}"

    @property
    def kv_tokens(self) -> int:
        """KV-cache token slots this forward reads: batch × (context + new tokens)."""
        return self.batch * (self.context + self.per_request)


#: the overhead pass's cycles (``--overhead-cycles``): three chunks of 4; ~5 s of the CPU demo's TP 8 profile
OVERHEAD_CYCLES = 12


@dataclass(frozen=True, kw_only=True)
class SpecLoopPlan:
    """The end-to-end speculative loop: ``cycles`` measured cycles at ``batch`` requests, accepted
    tokens per request drawn from ``accept_probs`` (P(emit j tokens), j = 1..steps+1)."""

    batch: int = 1
    cycles: int = 40
    warmup: int = 3
    rounds: int = 10  # baseline and speculative chunks alternate at least this many times (``cycles`` over them)
    cycles_per_round: int = 0  # cycles (and baseline steps) per chunk; 0: ``cycles`` // ``rounds``
    #: then more rounds of the same size until the 95 % interval of the median per-round speedup is
    #: within ``ci_target_rel`` or ``budget_s`` has passed since the first measured round (0: none)
    ci_target_rel: float = CPU_DEFAULTS.ci_target_rel
    budget_s: float = 0.0
    accept_probs: tuple[float, ...] = ()
    accept_len: float = 0.0
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    name: str
    tp: int
    backend: str
    device: str  # cpu | cuda
    dtype: str
    target: ModelShape
    drafter: DrafterShape
    scaling: dict[str, Any]
    model_source: str
    steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4
    points: tuple[Point, ...] = ()
    # (defaults: the CPU run's, RunDefaults; build_plan fills every one for the device it runs on)
    warmup: int = CPU_DEFAULTS.warmup
    repeats: int = CPU_DEFAULTS.repeats  # profiled repetitions per point (all-reduce share, trace)
    min_passes: int = CPU_DEFAULTS.min_passes  # interleaved timing passes before the interval is judged
    max_passes: int = 200
    ci_target_rel: float = CPU_DEFAULTS.ci_target_rel  # stop timing a point once its 95 % interval is within this
    time_budget_s: float = CPU_DEFAULTS.time_budget_s  # … or when the timing passes have run this long
    graphs: bool = False  # time CUDA-graph replays (GPU); False: eager forwards
    burst: int = CPU_DEFAULTS.burst  # forwards back to back per timed sample (per-forward time = elapsed / burst)
    allreduce_sizes: tuple[int, ...] = ()
    allreduce_warmup: int = CPU_DEFAULTS.allreduce_warmup
    allreduce_repeats: int = CPU_DEFAULTS.allreduce_repeats
    allreduce_calls: int = CPU_DEFAULTS.allreduce_calls  # back-to-back calls per timed sample (per-call time = elapsed / calls)
    context_len: int = 256  # the smallest swept context (the spec loop's)
    contexts: tuple[int, ...] = ()
    seed: int = 0
    timeout_s: float = 300.0
    trace: bool = True
    spec_loop: SpecLoopPlan | None = None
    # real cycles timed after the timing passes for the per-cycle host work no forward shows
    # (profile/specloop.py:measure_overhead); 0: none. Not run beside a spec loop (it measures its own).
    overhead_cycles: int = OVERHEAD_CYCLES
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ------------------------------------------------------------ units (progress bar)
    def units(self) -> list[str]:
        """Work units in the order rank 0 reports them (the progress bar's steps)."""
        out = [p.unit for p in self.points]
        if self.points:
            out.append("interleaved timing passes")
        if self.measures_overhead():
            out.append("cycle overhead")
        out += [f"all-reduce {n} B" for n in self.allreduce_sizes]
        if self.spec_loop is not None:
            out += ["spec loop: baseline", "spec loop: speculative"]
        return out

    def unit_weights(self) -> list[float]:
        """Each unit's expected cost relative to the others, for the progress line's estimate of
        the time left: on gloo a forward costs about its collectives (``2·layers + 1``
        all-reduces + 1 all-gather), a profiled one about 3 bare ones (the profiler's bookkeeping
        and reading its trace back); the timing passes ≈ ``min_passes`` bare forwards of every
        point; an all-reduce size its back-to-back calls. Only ratios matter."""
        def fwd(pt: Point) -> float:
            return collectives_per_forward(pt.kind, self.target.num_layers) + 1.0

        out = [fwd(pt) * (self.warmup + PROFILED_COST * self.repeats) for pt in self.points]
        if self.points:
            out.append(sum(fwd(pt) for pt in self.points) * self.min_passes * max(1, self.burst))
        if self.measures_overhead():
            out.append((self.overhead_cycles + max(1, self.warmup))
                       * (self.steps * collectives_per_forward("draft", self.target.num_layers)
                          + collectives_per_forward("verify", self.target.num_layers) + 1.0))
        out += [float(self.allreduce_warmup + self.allreduce_repeats * self.allreduce_calls)
                for _ in self.allreduce_sizes]
        if self.spec_loop is not None:
            n = self.spec_loop.cycles + self.spec_loop.warmup
            out += [n * collectives_per_forward("decode", self.target.num_layers) + 1.0,
                    n * (self.steps * collectives_per_forward("draft", self.target.num_layers)
                         + collectives_per_forward("verify", self.target.num_layers)) + 1.0]
        return out

    def overhead_batch(self) -> int:
        """The batch the overhead pass runs at: the smallest swept one (the spec loop's default)."""
        return min((pt.batch for pt in self.points), default=1)

    def measures_overhead(self) -> bool:
        """The overhead pass runs a whole cycle: only when every phase of one is swept (``--phases``)."""
        kinds = {pt.kind for pt in self.points}
        return (self.overhead_cycles > 0 and self.spec_loop is None
                and {"draft_extend", "draft", "verify", "decode"} <= kinds)

    def kv_need(self, model: str) -> tuple[int, int]:
        """(KV pool token slots, largest position) any forward of ``model`` needs."""
        loop = None
        if self.spec_loop is not None:
            loop = (self.spec_loop.batch, self.context_len, max(self.num_draft_tokens, self.topk, 1))
        elif self.measures_overhead():
            loop = (self.overhead_batch(), self.context_len, max(self.num_draft_tokens, self.topk, 1))
        return kv_need(self.points, model, loop)

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target"] = self.target.to_dict()
        d["drafter"] = self.drafter.to_dict()
        d["points"] = [asdict(p) for p in self.points]
        d["allreduce_sizes"] = list(self.allreduce_sizes)
        d["contexts"] = list(self.contexts)
        d["notes"] = list(self.notes)
        if self.spec_loop is not None:
            d["spec_loop"] = {**asdict(self.spec_loop), "accept_probs": list(self.spec_loop.accept_probs)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunPlan:
        kw = dict(d)
        kw["target"] = ModelShape.from_dict(d["target"])
        kw["drafter"] = DrafterShape.from_dict(d["drafter"])
        kw["points"] = tuple(Point(**p) for p in d.get("points", ()))
        kw["allreduce_sizes"] = tuple(int(x) for x in d.get("allreduce_sizes", ()))
        kw["contexts"] = tuple(int(x) for x in d.get("contexts", ()))
        kw["notes"] = tuple(d.get("notes", ()))
        sl = d.get("spec_loop")
        kw["spec_loop"] = None if sl is None else SpecLoopPlan(**{**sl, "accept_probs": tuple(sl["accept_probs"])})
        return cls(**kw)

    def save(self, path: str | Path) -> None:
        # atomic: a rank starting while the parent writes must never read half a plan
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> RunPlan:
        return cls.from_dict(json.loads(Path(path).read_text()))


def check_kinds(kinds: tuple[str, ...]) -> None:
    for k in kinds:
        if k not in SWEEP_KINDS:
            raise FieldError("phases", f"unknown {k!r} (expected {', '.join(SWEEP_KINDS)})")
    if "decode" not in kinds:
        raise FieldError("phases", "'decode' is required (the baseline step every prediction needs)")


@dataclass(frozen=True, kw_only=True)
class _Spec:
    num_draft_tokens: int
    topk: int


def sweep_points(*, kinds: tuple[str, ...], batches: tuple[int, ...], verify_tokens: tuple[int, ...],
                 topk: int, num_draft_tokens: int, contexts: tuple[int, ...] = (0,)) -> tuple[Point, ...]:
    """decode (batch × 1), verify (batch × num_draft_tokens, and batch × k for every k of
    ``verify_tokens`` at the smallest batch), draft (batch × topk), draft_extend
    (batch × num_draft_tokens), in that order, over ``batches``, at every context of ``contexts``."""
    check_kinds(kinds)
    spec = _Spec(num_draft_tokens=num_draft_tokens, topk=topk)
    pts: list[Point] = []
    for ctx in contexts:
        for kind in SWEEP_KINDS:
            if kind not in kinds:
                continue
            for b in batches:
                per = tokens_per_request(kind, spec)  # (the forward-kind table)
                # verify: every k of verify_tokens at the smallest batch; num_draft_tokens at every batch
                ks = sorted(set(verify_tokens)) if kind == "verify" and b == min(batches) else [per]
                for k in ks:
                    pts.append(Point(kind=kind, batch=b, per_request=k, context=ctx))
    return tuple(pts)


def kv_need(points: tuple[Point, ...], model: str, loop: tuple[int, int, int] | None = None) -> tuple[int, int]:
    """(KV pool token slots, largest position) the forwards of ``model`` need: the pool holds the
    largest batch × (context + new tokens) of one forward, not max batch × max context.
    ``loop``: the spec loop's (batch, context, new tokens), if it runs."""
    pts = [p for p in points if p.model == model]
    slots = max([p.kv_tokens for p in pts] + [1])
    pos = max([p.context + p.per_request for p in pts] + [1])
    if loop is not None:
        b, ctx, new = loop
        slots, pos = max(slots, b * (ctx + new)), max(pos, ctx + new)
    return slots, pos


#: set in every rank `specmodel profile` starts itself (not under torchrun); the launcher sets it,
#: the worker and :func:`is_torchrun` read it -- here, below both, so neither imports the other
CHILD_ENV = "SPECMODEL_PROFILE_CHILD"


def is_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and CHILD_ENV not in os.environ
