"""What a profiling run returns, typed: each rank's :class:`RankResult` (gathered to rank 0) and
the run's :class:`RunResult` (rank 0's combination, ``result.json`` in the run directory), read by
the launcher, ``commands/profile.py`` and ``profile/output.py``. Pure Python: no torch.

All seconds are SI. The per-point records a rank measures (``RankResult.points``: its timings,
collective calls and trace slice) are the worker's working data, combined by ``worker.combine``
only; what leaves the worker is typed here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specmodel.profile.plan import RunPlan


@dataclass(frozen=True, kw_only=True)
class RankRow:
    """One rank's share of a measured point (medians over repetitions, seconds)."""

    rank: int
    total_s: float
    allreduce_s: float
    skew_s: float
    transfer_s: float


@dataclass(frozen=True, kw_only=True)
class RowResult:
    """One measured forward (a plan point) over all ranks: the row a profile's cost row comes from.

    ``total_s`` = median over repetitions of the rank mean (timing passes, no profiler); the
    all-reduce / skew split from the profiled repetitions carried to that scale; ``ci95_rel`` the
    half-width of the 95 % interval of that median relative to it; ``busy_s`` kernel-busy time
    (GPU only); ``calls_matched`` False when ranks issued different collective sequences (skew 0).
    """

    kind: str
    batch: int
    tokens: int
    label: str
    context_tokens: int
    total_s: float
    allreduce_s: float
    compute_s: float
    skew_s: float
    spread_s: float
    samples: int
    n_allreduce: int
    n_allgather: int
    calls_matched: bool
    passes: int
    ci95_rel: float | None = None
    busy_s: float | None = None
    per_rank: tuple[RankRow, ...] = ()

    def to_dict(self, *, per_rank: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if per_rank:
            d["per_rank"] = [asdict(r) for r in self.per_rank]
        else:
            d.pop("per_rank")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RowResult:
        return cls(**{**d, "per_rank": tuple(RankRow(**r) for r in d.get("per_rank", ()))})


@dataclass(frozen=True, kw_only=True)
class AllReduceResult:
    """One size of the pure all-reduce sweep: median latency over ranks x samples, and its spread."""

    msg_bytes: int
    latency_s: float
    spread_s: float


@dataclass(frozen=True, kw_only=True)
class LoopBaseline:
    """The spec loop's baseline decode chunks: ``tokens`` over ``elapsed_s`` (one per request per step)."""

    elapsed_s: float
    tokens: int
    tokens_per_s: float
    step_s: float


@dataclass(frozen=True, kw_only=True)
class LoopSpec:
    """The spec loop's speculative chunks, and each forward of its cycle (means over the cycles, ranks)."""

    elapsed_s: float
    tokens: int
    tokens_per_s: float
    cycle_s: float
    draft_extend_s: float
    draft_step_s: float
    verify_s: float
    overhead_s: float
    accept_hist: dict[str, int]  # emitted tokens per request-cycle ("1".."steps+1") -> count
    accept_mean: float


@dataclass(frozen=True, kw_only=True)
class SpecLoopResult:
    """What ``profile/specloop.py`` measured (``result.json``'s ``spec_loop``): baseline and
    speculative chunks of ``cycles_per_round`` interleaved ``rounds`` times; ``round_cycle_over_step``
    per round is the cycle over the baseline step (the speedup at one token per cycle, inverted).
    ``baseline.step_s`` is the median step over rounds, ``spec.cycle_s`` that times the median
    ratio, so the speedup they give is the mean acceptance over the median ratio; ``ci95_rel``
    that median's 95 % half-width relative to it (None: too few rounds), ``stopped`` why the
    rounds ended (``interval`` within ``ci_target_rel``, ``budget``, ``cycles``, ``max``)."""

    batch: int
    cycles: int
    steps: int
    topk: int
    num_draft_tokens: int
    accept_len_requested: float
    rounds: int
    round_cycle_over_step: tuple[float, ...]
    baseline: LoopBaseline
    spec: LoopSpec
    cycles_per_round: int = 0
    stopped: str = ""
    ci95_rel: float | None = None
    ci_target_rel: float | None = None
    round_step_s: tuple[float, ...] = ()  # per round: one baseline step, seconds

    def __post_init__(self) -> None:
        if self.stopped not in ("", "interval", "budget", "cycles", "max"):
            raise ValueError(f"spec_loop.stopped: unknown reason {self.stopped!r}")
        if self.ci95_rel is not None and not self.ci95_rel >= 0:
            raise ValueError(f"spec_loop.ci95_rel: must be >= 0, got {self.ci95_rel!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["round_cycle_over_step"] = list(self.round_cycle_over_step)
        d["round_step_s"] = list(self.round_step_s)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpecLoopResult:
        return cls(**{**d, "round_cycle_over_step": tuple(d.get("round_cycle_over_step") or ()),
                      "round_step_s": tuple(d.get("round_step_s") or ()),
                      "baseline": LoopBaseline(**d["baseline"]), "spec": LoopSpec(**d["spec"])})


@dataclass(frozen=True, kw_only=True)
class CycleOverhead:
    """The profile's overhead pass (``profile/specloop.py:measure_overhead``): ``cycles`` real
    speculative cycles at ``batch`` in ``chunks``; ``overhead_s`` the median over chunks of the
    cycle wall minus its forwards, ``spread_s`` max − min over chunks, ``cycle_s`` the median wall."""

    batch: int
    cycles: int
    chunks: int
    overhead_s: float
    spread_s: float
    cycle_s: float


@dataclass(frozen=True, kw_only=True)
class RankResult:
    """What one rank measured, gathered to rank 0: its per-point records (worker-internal), the
    all-reduce sweep samples, the spec loop's record (rank 0's is used) and, on each node's local
    rank 0, the hardware inventory."""

    rank: int
    host: str
    points: tuple[dict[str, Any], ...]
    allreduce: tuple[dict[str, Any], ...]
    spec_loop: SpecLoopResult | None = None
    cycle_overhead: CycleOverhead | None = None
    hardware: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """The whole run: the plan that ran, one :class:`RowResult` per point, the all-reduce sweep,
    the spec loop's record (``profile/specloop.py``), the hardware, when it finished (UTC)."""

    plan: RunPlan
    rows: tuple[RowResult, ...]
    allreduce_points: tuple[AllReduceResult, ...] = ()
    spec_loop: SpecLoopResult | None = None
    cycle_overhead: CycleOverhead | None = None
    hardware: dict[str, Any] | None = None
    finished_utc: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``result.json`` (the launcher reads it back with :meth:`from_dict`)."""
        return {"plan": self.plan.to_dict(), "rows": [r.to_dict() for r in self.rows],
                "allreduce_points": [asdict(a) for a in self.allreduce_points],
                "spec_loop": self.spec_loop.to_dict() if self.spec_loop is not None else None,
                "cycle_overhead": asdict(self.cycle_overhead) if self.cycle_overhead is not None else None,
                "hardware": self.hardware or {}, "finished_utc": self.finished_utc}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls(plan=RunPlan.from_dict(d["plan"]), rows=tuple(RowResult.from_dict(r) for r in d["rows"]),
                   allreduce_points=tuple(AllReduceResult(**a) for a in d.get("allreduce_points") or ()),
                   spec_loop=SpecLoopResult.from_dict(d["spec_loop"]) if d.get("spec_loop") else None,
                   cycle_overhead=CycleOverhead(**d["cycle_overhead"]) if d.get("cycle_overhead") else None,
                   hardware=d.get("hardware") or {},
                   finished_utc=d.get("finished_utc") or "")
