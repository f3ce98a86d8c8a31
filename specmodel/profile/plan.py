"""What the ranks run: the sweep (one :class:`Point` per measured forward kind × batch × tokens),
the pure all-reduce sweep, the optional speculative loop. Pure Python, JSON round-trip, so the
parent builds and validates it before spawning and every rank reads the same file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.profile.annotate import phase_label
from specmodel.profile.configs import DrafterShape, ModelShape

#: Forward kinds the sweep measures, in the order they run.
SWEEP_KINDS = ("decode", "verify", "draft", "draft_extend")
#: The target model runs decode and verify; the drafter runs draft and draft_extend.
TARGET_KINDS = ("decode", "verify")

CPU_BATCHES = (1, 2, 4, 8)
GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64)
VERIFY_TOKENS = (2, 4, 8)
#: KV lengths per request swept by default (tokens): on the CPU a short and a long one on the
#: scaled model, so the default sweep stays about as long as a single-context one was.
CPU_CONTEXTS = (256, 4096)
GPU_CONTEXTS = (1024, 8192, 32768)
MAX_CONTEXT_TOKENS = 1 << 20  # 1M tokens per request: beyond any served model today
CPU_AR_SIZES = tuple(4 * 4**i for i in range(11))  # 4 B .. 4 MiB, x4 (nccl-tests style)
GPU_AR_SIZES = tuple(8 * 2**i for i in range(25))  # 8 B .. 128 MiB, x2


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
        return "target" if self.kind in TARGET_KINDS else "drafter"

    @property
    def unit(self) -> str:
        """The progress line: the phase label and the context it runs at."""
        return f"{self.label} ctx={self.context}"

    @property
    def kv_tokens(self) -> int:
        """KV-cache token slots this forward reads: batch × (context + new tokens)."""
        return self.batch * (self.context + self.per_request)


@dataclass(frozen=True, kw_only=True)
class SpecLoopPlan:
    """The end-to-end speculative loop: ``cycles`` measured cycles at ``batch`` requests, accepted
    tokens per request drawn from ``accept_probs`` (P(emit j tokens), j = 1..steps+1)."""

    batch: int = 1
    cycles: int = 40
    warmup: int = 3
    rounds: int = 10  # baseline and speculative chunks alternate this many times
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
    warmup: int = 2
    repeats: int = 8  # profiled repetitions per point (all-reduce share, trace)
    min_passes: int = 6  # interleaved timing passes before the interval is judged
    max_passes: int = 200
    ci_target_rel: float = 0.02  # stop timing a point once its 95 % interval is within this
    time_budget_s: float = 60.0  # … or when the timing passes have run this long
    graphs: bool = False  # time CUDA-graph replays (GPU); False: eager forwards
    burst: int = 1  # forwards back to back per timed sample (per-forward time = elapsed / burst)
    allreduce_sizes: tuple[int, ...] = ()
    allreduce_warmup: int = 2
    allreduce_repeats: int = 8
    allreduce_calls: int = 10  # back-to-back calls per timed sample (per-call time = elapsed / calls)
    context_len: int = 256  # the smallest swept context (the spec loop's)
    contexts: tuple[int, ...] = ()
    seed: int = 0
    timeout_s: float = 300.0
    trace: bool = True
    spec_loop: SpecLoopPlan | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ------------------------------------------------------------ units (progress bar)
    def units(self) -> list[str]:
        """Work units in the order rank 0 reports them (the progress bar's steps)."""
        out = [p.unit for p in self.points]
        if self.points:
            out.append("interleaved timing passes")
        out += [f"all-reduce {n} B" for n in self.allreduce_sizes]
        if self.spec_loop is not None:
            out += ["spec loop: baseline", "spec loop: speculative"]
        return out

    def kv_need(self, model: str) -> tuple[int, int]:
        """(KV pool token slots, largest position) any forward of ``model`` needs."""
        loop = None
        if self.spec_loop is not None:
            loop = (self.spec_loop.batch, self.context_len, max(self.num_draft_tokens, self.topk, 1))
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
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> RunPlan:
        return cls.from_dict(json.loads(Path(path).read_text()))


def check_kinds(kinds: tuple[str, ...]) -> None:
    for k in kinds:
        if k not in SWEEP_KINDS:
            raise SpecmodelError(f"--phases: unknown {k!r} (expected {', '.join(SWEEP_KINDS)})")
    if "decode" not in kinds:
        raise SpecmodelError("--phases: 'decode' is required (the baseline step every prediction needs)")


def sweep_points(*, kinds: tuple[str, ...], batches: tuple[int, ...], verify_tokens: tuple[int, ...],
                 topk: int, num_draft_tokens: int, contexts: tuple[int, ...] = (0,)) -> tuple[Point, ...]:
    """decode (batch × 1), verify (batch × num_draft_tokens, and batch × k for every k of
    ``verify_tokens`` at the smallest batch), draft (batch × topk), draft_extend
    (batch × num_draft_tokens), in that order, over ``batches``, at every context of ``contexts``."""
    check_kinds(kinds)
    pts: list[Point] = []
    for ctx in contexts:
        for kind in SWEEP_KINDS:
            if kind not in kinds:
                continue
            for b in batches:
                if kind == "decode":
                    pts.append(Point(kind=kind, batch=b, per_request=1, context=ctx))
                elif kind == "verify":  # every k at the smallest batch; num_draft_tokens at every batch
                    ks = sorted(set(verify_tokens)) if b == min(batches) else [num_draft_tokens]
                    for k in ks:
                        pts.append(Point(kind=kind, batch=b, per_request=k, context=ctx))
                elif kind == "draft":
                    pts.append(Point(kind=kind, batch=b, per_request=topk, context=ctx))
                else:
                    pts.append(Point(kind=kind, batch=b, per_request=num_draft_tokens, context=ctx))
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
