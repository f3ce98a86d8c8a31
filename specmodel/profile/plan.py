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
CPU_AR_SIZES = tuple(4 * 4**i for i in range(11))  # 4 B .. 4 MiB, x4 (nccl-tests style)
GPU_AR_SIZES = tuple(8 * 2**i for i in range(25))  # 8 B .. 128 MiB, x2


@dataclass(frozen=True, kw_only=True)
class Point:
    """One measured forward: ``kind`` over ``batch`` requests × ``per_request`` tokens each."""

    kind: str
    batch: int
    per_request: int

    @property
    def tokens(self) -> int:
        return self.batch * self.per_request

    @property
    def label(self) -> str:
        return phase_label(self.kind, self.batch, self.tokens)

    @property
    def model(self) -> str:
        return "target" if self.kind in TARGET_KINDS else "drafter"


@dataclass(frozen=True, kw_only=True)
class SpecLoopPlan:
    """The end-to-end speculative loop: ``cycles`` measured cycles at ``batch`` requests, accepted
    tokens per request drawn from ``accept_probs`` (P(emit j tokens), j = 1..steps+1)."""

    batch: int = 1
    cycles: int = 40
    warmup: int = 3
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
    repeats: int = 8
    allreduce_sizes: tuple[int, ...] = ()
    allreduce_warmup: int = 2
    allreduce_repeats: int = 8
    context_len: int = 256
    seed: int = 0
    timeout_s: float = 300.0
    trace: bool = True
    spec_loop: SpecLoopPlan | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ------------------------------------------------------------ units (progress bar)
    def units(self) -> list[str]:
        """Work units in the order rank 0 reports them (the progress bar's steps)."""
        out = [p.label for p in self.points]
        out += [f"all-reduce {n} B" for n in self.allreduce_sizes]
        if self.spec_loop is not None:
            out += ["spec loop: baseline", "spec loop: speculative"]
        return out

    def max_tokens(self, model: str) -> tuple[int, int]:
        """(max batch rows, max tokens per request) any forward of ``model`` needs (KV cache sizing)."""
        pts = [p for p in self.points if p.model == model]
        b = max([p.batch for p in pts] + [1])
        t = max([p.per_request for p in pts] + [1])
        if self.spec_loop is not None:
            b = max(b, self.spec_loop.batch)
            t = max(t, self.num_draft_tokens, self.topk)
        return b, t

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target"] = self.target.to_dict()
        d["drafter"] = self.drafter.to_dict()
        d["points"] = [asdict(p) for p in self.points]
        d["allreduce_sizes"] = list(self.allreduce_sizes)
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
                 topk: int, num_draft_tokens: int) -> tuple[Point, ...]:
    """decode (batch × 1), verify (batch × num_draft_tokens, and batch × k for every k of
    ``verify_tokens`` at the smallest batch), draft (batch × topk), draft_extend
    (batch × num_draft_tokens), in that order, over ``batches``."""
    check_kinds(kinds)
    pts: list[Point] = []
    for kind in SWEEP_KINDS:
        if kind not in kinds:
            continue
        for b in batches:
            if kind == "decode":
                pts.append(Point(kind=kind, batch=b, per_request=1))
            elif kind == "verify":  # every k at the smallest batch; num_draft_tokens at every batch
                ks = sorted(set(verify_tokens)) if b == min(batches) else [num_draft_tokens]
                for k in ks:
                    pts.append(Point(kind=kind, batch=b, per_request=k))
            elif kind == "draft":
                pts.append(Point(kind=kind, batch=b, per_request=topk))
            else:
                pts.append(Point(kind=kind, batch=b, per_request=num_draft_tokens))
    return tuple(pts)
