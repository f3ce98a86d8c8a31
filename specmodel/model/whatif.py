"""What-if transforms: the same profile with one thing changed, then the same prediction.

Each function is pure (Profile in, Profile out, or predictions out) and states its
assumptions in its docstring; :func:`standard_whatifs` bundles the report's set with the
assumptions as text, so the PDF prints exactly what the model assumed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specmodel.errors import FieldError, SpecmodelError, field_name
from specmodel.model.accept import AcceptDist
from specmodel.model.allreduce import fit_alpha_beta, oneshot_allreduce_s, tp_scale_factor
from specmodel.model.decision import SPECULATE, action_for
from specmodel.model.inputs import OperatingPoint
from specmodel.model.memory import per_rank_weight_bytes
from specmodel.model.predict import predict
from specmodel.model.prediction import Prediction
from specmodel.schema.costrows import AllReduceFit, CostRow, SpecConfig
from specmodel.schema.phases import DRAFT_KINDS
from specmodel.schema.profile import Profile
from specmodel.schema.shapes import ModelShape
from specmodel.units import alpha_beta, gb

#: Used only when a profile carries no all-reduce data at all (no fit, no points, no per-call
#: latencies in its rows): order-of-magnitude PCIe figures, a few µs per NCCL hop and
#: ~25 GB/s achievable over a PCIe Gen4/Gen5 x16 link. Marked as a default wherever used.
DEFAULT_ALPHA_S = 5e-6
DEFAULT_BETA_BYTES_PER_S = 25e9


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """One what-if: the changed profile and the assumptions it rests on."""

    key: str
    label: str
    profile: Profile
    assumptions: tuple[str, ...]
    unavailable: str = ""  # why the engines would not do this on the profiled box ("" = available)
    memory: str = ""  # for a TP change: "fits" / "does not fit" / "unknown" with the figures

    def __post_init__(self) -> None:
        if not self.key or not self.label:
            raise SpecmodelError("what-if: key and label must not be empty")


@dataclass(frozen=True, kw_only=True)
class FitChoice:
    """The α-β fit a what-if used and where it came from (profile fit, points, rows, default)."""

    fit: AllReduceFit
    origin: str


def _row(r: CostRow, *, allreduce_s: float, compute_s: float | None = None, skew_s: float | None = None) -> CostRow:
    """``r`` with new all-reduce/compute seconds; total = all-reduce + compute + other."""
    comp = r.compute_s if compute_s is None else compute_s
    skew = min(r.skew_s if skew_s is None else skew_s, allreduce_s)
    return dataclasses.replace(r, allreduce_s=allreduce_s, compute_s=comp, skew_s=skew,
                               total_s=max(allreduce_s + comp + r.other_s, 1e-12))


def costs_scaled(profile: Profile, factors: dict[str, float], *, overhead_s: float | None = None,
                 what: str) -> Profile:
    """The profile with every row of each kind in ``factors`` multiplied by its factor (all-reduce,
    compute and other alike), and the per-cycle overhead replaced where ``overhead_s`` is given.

    Assumes a drift seen at one point (a co-tenant, a warmer GPU, longer contexts than the knots
    near it) moves the kind's whole surface by the same factor: exact at the point it was seen,
    an approximation away from it."""
    for kind, f in factors.items():
        if not f > 0:
            raise SpecmodelError(f"what-if: {kind} cost factor must be > 0, got {f}")
    rows = tuple(dataclasses.replace(r, total_s=r.total_s * factors[r.kind], allreduce_s=r.allreduce_s * factors[r.kind],
                                     compute_s=r.compute_s * factors[r.kind], other_s=r.other_s * factors[r.kind],
                                     skew_s=r.skew_s * factors[r.kind], spread_s=r.spread_s * factors[r.kind])
                 if r.kind in factors else r for r in profile.costs)
    out = dataclasses.replace(profile, costs=rows, overhead_s=profile.overhead_s if overhead_s is None else overhead_s)
    return _relabel(out, what)


def _relabel(profile: Profile, what: str) -> Profile:
    return dataclasses.replace(profile, source=profile.source.with_description(f"{profile.label}; what-if: {what}"))


def allreduce_faster(profile: Profile, factor: float = 2.0) -> Profile:
    """Every row's all-reduce time divided by ``factor``: T'_ar = T_ar / f, total adjusted.

    Assumes the whole all-reduce share (transfer and waiting, skew included) shrinks
    uniformly — a faster interconnect or a better algorithm that also shortens the wait;
    compute and other are unchanged. Applies to the baseline decode step as well, so the
    speedup compares like with like.
    """
    if not factor > 0:
        raise SpecmodelError(f"what-if all-reduce speed-up factor must be > 0, got {factor}")
    rows = tuple(_row(r, allreduce_s=r.allreduce_s / factor, skew_s=r.skew_s / factor) for r in profile.costs)
    return _relabel(profile.with_costs(rows), f"all-reduce {factor:g}x faster")


def per_call_points(profile: Profile) -> tuple[tuple[float, float], ...]:
    """(message bytes, seconds per all-reduce call) from cost rows that record both counts.

    T_call = allreduce_s / n_allreduce: what the model's rows actually paid per call,
    waiting included (so it is an upper envelope of the bare collective).
    """
    return tuple((float(r.allreduce_msg_bytes), r.allreduce_s / r.n_allreduce) for r in profile.costs
                 if r.n_allreduce > 0 and r.allreduce_msg_bytes > 0 and r.allreduce_s > 0)


def choose_fit(profile: Profile) -> FitChoice:
    """The α-β model for what-ifs, in order of trust.

    1. the profile's own fit; 2. a fit of its measured all-reduce points at its TP degree;
    3. a fit of the per-call latencies in its cost rows (:func:`per_call_points`);
    4. :data:`DEFAULT_ALPHA_S` / :data:`DEFAULT_BETA_BYTES_PER_S` (PCIe order of magnitude).
    Fits use :func:`specmodel.model.allreduce.fit_alpha_beta` (ring model).
    """
    if profile.allreduce_fit is not None:
        return FitChoice(fit=profile.allreduce_fit, origin="the profile's alpha-beta fit")
    tp = max(profile.tp, 2)
    pts = [(p.msg_bytes, p.latency_s) for p in profile.allreduce_points if p.tp == profile.tp]
    if len({b for b, _ in pts}) >= 2 and profile.tp >= 2:
        return FitChoice(fit=fit_alpha_beta([b for b, _ in pts], [t for _, t in pts], tp),
                         origin="fitted to the profile's measured all-reduce points")
    calls = per_call_points(profile)
    if len({b for b, _ in calls}) >= 2 and profile.tp >= 2:
        return FitChoice(fit=fit_alpha_beta([b for b, _ in calls], [t for _, t in calls], tp),
                         origin="fitted to the per-call all-reduce time of the profile's cost rows")
    return FitChoice(fit=AllReduceFit(alpha_s=DEFAULT_ALPHA_S, beta_bytes_per_s=DEFAULT_BETA_BYTES_PER_S, tp=tp),
                     origin=(f"DEFAULT {alpha_beta(DEFAULT_ALPHA_S, DEFAULT_BETA_BYTES_PER_S)} "
                             "(the profile has no all-reduce data)"))


def custom_allreduce(profile: Profile, fit: AllReduceFit) -> tuple[Profile, int]:
    """Per-call all-reduce replaced by a one-shot (custom, peer-to-peer) kernel.

    T'_ar = n_allreduce × min(T_oneshot(msg), (T_ar − skew) / n_allreduce) + skew, with
    T_oneshot = (p−1)·(α + n/β) (:func:`~specmodel.model.allreduce.oneshot_allreduce_s`) under
    ``fit``'s α, β. The min: engines use the custom kernel only where it wins (SGLang/vLLM
    fall back to NCCL above a size threshold). Skew (waiting for the slowest rank) is kept:
    a faster kernel does not make ranks arrive together. Rows without a message size or
    call count are left as measured; the count of changed rows is returned.
    Caveat printed with it: SGLang disables its custom all-reduce on more than two
    PCIe-only GPUs, so on such a box this needs P2P support or another engine.
    """
    changed = 0
    rows: list[CostRow] = []
    for r in profile.costs:
        if r.n_allreduce > 0 and r.allreduce_msg_bytes > 0 and profile.tp > 1:
            skew = min(r.skew_s, r.allreduce_s)
            per_call = (r.allreduce_s - skew) / r.n_allreduce  # the collective itself, waiting excluded
            one = oneshot_allreduce_s(r.allreduce_msg_bytes, profile.tp, fit.alpha_s, fit.beta_bytes_per_s)
            rows.append(_row(r, allreduce_s=r.n_allreduce * min(one, per_call) + skew, skew_s=skew))
            changed += 1
        else:
            rows.append(r)
    return _relabel(profile.with_costs(rows), "custom one-shot all-reduce"), changed


def custom_allreduce_unavailable(profile: Profile) -> str:
    """Why SGLang and vLLM would not run their custom all-reduce on the profiled box ("" if they would).

    Both engines' ``CustomAllreduce.__init__`` (sglang/srt/distributed/device_communicators/
    custom_all_reduce.py, vllm/distributed/device_communicators/custom_all_reduce.py) return
    early — "Custom allreduce is disabled because it's not supported on more than two
    PCIe-only GPUs" — when ``world_size > 2 and not full_nvlink``. Unknown topology: "" (the
    caveat is printed with the what-if instead).
    """
    hw = profile.hardware
    nvlink = hw.get("nvlink")
    inter = str(hw.get("interconnect") or "")
    if profile.tp > 2 and (nvlink is False or (nvlink is None and inter and "nvlink" not in inter.lower())):
        return (f"not available: SGLang and vLLM disable custom all-reduce on more than two GPUs without full "
                f"NVLink (this box: TP {profile.tp}, {inter or 'no NVLink'})")
    return ""


def _config_weights_per_gpu(profile: Profile, tp_to: int) -> tuple[float, str] | None:
    """Weight bytes per GPU at ``tp_to`` from the profiled model's own config (full-size runs only).

    Uses :func:`specmodel.model.memory.per_rank_weight_bytes` (per-layer × layers + embeddings
    and LM head, sharded by TP) at the profiled dtype; a scaled-down CPU run says nothing about
    the real model, so it gives None.
    """
    m = profile.model
    tgt, width = m.get("target"), m.get("activation_bytes")
    if not isinstance(tgt, dict) or (m.get("scaling") or {}).get("scaled") or not isinstance(width, int):
        return None
    from dataclasses import fields

    names = {f.name for f in fields(ModelShape)}
    try:
        kwargs: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in tgt.items() if k in names}
        shape = ModelShape(**kwargs)
        per_layer, outside = per_rank_weight_bytes(shape, tp_to, width)
    except (TypeError, ValueError, SpecmodelError):
        return None
    return float(per_layer * shape.num_layers + outside), f"model config at {m.get('dtype', f'{width} B')} weights"


def memory_fit(profile: Profile, tp_to: int) -> str:
    """Do the weights fit on ``tp_to`` GPUs? From the model's weight bytes and the GPU memory, when known.

    Weight bytes per GPU: ``model.weight_bytes`` (all ranks together, split evenly) if the profile
    records it, else the profiled model's config (:func:`_config_weights_per_gpu`). GPU memory:
    ``hardware.gpu_memory_bytes``. The weights must leave KV-cache room (10 % of the GPU here,
    a lower bound: real KV needs depend on context and batch). Returns a sentence starting
    with "fits", "does not fit" or "unknown".
    """
    wb = profile.model.get("weight_bytes")
    mem = profile.hardware.get("gpu_memory_bytes")
    per_gpu: float | None = None
    origin = ""
    if isinstance(wb, (int, float)) and wb > 0:
        per_gpu, origin = float(wb) / tp_to, "model.weight_bytes"
    else:
        from_cfg = _config_weights_per_gpu(profile, tp_to)
        if from_cfg is not None:
            per_gpu, origin = from_cfg
    if per_gpu is None or not isinstance(mem, (int, float)) or mem <= 0:
        missing = [n for n, v in (("model weight size", per_gpu), ("GPU memory", mem if isinstance(mem, (int, float))
                                                                    else None)) if v is None]
        return f"unknown: {' and '.join(missing)} not recorded in the profile, so this gain assumes the model fits"
    room = float(mem) * 0.9 - per_gpu
    if room <= 0:
        return (f"does not fit: weights {gb(per_gpu)} per GPU on TP {tp_to} vs {gb(float(mem))} "
                f"(90 % usable; {origin})")
    return (f"fits: weights {gb(per_gpu)} per GPU on TP {tp_to}, {gb(room)} left for KV cache "
            f"(KV need not modelled; {origin})")


def retp(profile: Profile, tp_to: int, fit: AllReduceFit) -> Profile:
    """The profile moved from TP ``tp_from`` = profile.tp to ``tp_to``.

    * all-reduce per row × T_ar(n, tp_to)/T_ar(n, tp_from) at the row's message size n
      (:func:`~specmodel.model.allreduce.tp_scale_factor`; the activation message does not
      shrink with TP: it is tokens × hidden × bytes on every rank);
    * compute × tp_from / tp_to — ideal sharding (weights and FLOPs split evenly; real
      kernels at small batch scale worse, so fewer GPUs look slightly better than this);
    * other unchanged; whether the model fits on tp_to GPUs is :func:`memory_fit`, stated
      with the what-if (not checked here).
    """
    tp_from = profile.tp
    if tp_to < 1:
        raise SpecmodelError(f"what-if TP: tp must be >= 1, got {tp_to}")
    if tp_from < 2:
        raise SpecmodelError(f"what-if TP: profile {profile.name} is TP {tp_from}; no all-reduce to scale from")
    rows = []
    for r in profile.costs:
        # a row without a recorded size scales like a 1-byte (latency-bound) message
        f = tp_scale_factor(float(max(r.allreduce_msg_bytes, 1)), tp_from, tp_to, fit) if r.allreduce_s > 0 else 1.0
        rows.append(_row(r, allreduce_s=r.allreduce_s * f, compute_s=r.compute_s * tp_from / tp_to,
                         skew_s=r.skew_s * f))
    return _relabel(dataclasses.replace(profile.with_costs(rows), tp=tp_to), f"TP {tp_from} -> {tp_to}")


def drafter_without_tp(profile: Profile) -> Profile:
    """The drafter on one GPU: draft rows lose their all-reduce, compute × tp.

    The drafter (one or a few layers) is replicated instead of sharded, so it does no
    all-reduce; its compute grows by the TP degree (ideal sharding undone). Weights are
    small, so memory is not a concern; other (launch) time is unchanged.
    """
    rows = tuple(_row(r, allreduce_s=0.0, compute_s=r.compute_s * profile.tp, skew_s=0.0)
                 if r.kind in DRAFT_KINDS else r for r in profile.costs)
    return _relabel(profile.with_costs(rows), "drafter without TP")


def no_allreduce_split(profile: Profile) -> str:
    """Why an all-reduce what-if cannot apply ("" when it can): no row records any all-reduce time
    (a baseline sweep or plain numbers: the step is one total), so halving or re-scaling it changes nothing
    and the result would only repeat the as-is figures under another label."""
    if profile.has_allreduce_split:
        return ""
    unseen = profile.allreduce_unseen
    if unseen and any(r.allreduce_s > 0 for r in profile.costs):
        kinds = ", ".join(dict.fromkeys(r.kind for r in unseen))
        return (f"not available: {len(unseen)} {kinds} row(s) at TP {profile.tp} timed no all-reduce (a CUDA-graph "
                "replay runs it without the hook seeing it): their all-reduce is unknown, hidden in their compute; "
                "ingest a trace of those forwards to split it")
    return ("not available: the profile records no all-reduce split (every row's all-reduce time is 0 / unknown: "
            f"{profile.label}); profile or ingest a trace to split it")


def tp_unknown(profile: Profile) -> str:
    """Why a TP what-if cannot apply ("" when it can): the profile does not say which TP it ran at."""
    if not profile.source.tp_known:
        return f"not available: the profile's TP degree is unknown (pass {field_name('tp')})"
    return ""


def standard_whatifs(profile: Profile, *, tps: Sequence[int] = (4, 8)) -> tuple[tuple[WhatIf, ...], FitChoice]:
    """The report's set: all-reduce 2× faster, custom all-reduce, TP 4/8, drafter without TP.

    A what-if that cannot apply to this profile is kept, marked ``unavailable`` with the reason (shown
    as N/A): all-reduce what-ifs without an all-reduce split, TP what-ifs at an unknown TP or where the
    weights do not fit (:func:`memory_fit`)."""
    choice = choose_fit(profile)
    split = no_allreduce_split(profile)
    out = [WhatIf(key="allreduce_2x", label="all-reduce 2x faster", profile=allreduce_faster(profile, 2.0),
                  assumptions=("every row's all-reduce time halved (waiting included); compute unchanged",),
                  unavailable=split)]
    if profile.tp > 1:
        custom, changed = custom_allreduce(profile, choice.fit)
        notes = [f"one-shot all-reduce T = (p-1)(alpha + n / beta), alpha-beta {choice.origin}",
                 "kept the measured per-call time where it is faster; skew kept"]
        off = custom_allreduce_unavailable(profile)
        if not off and not profile.hardware.get("interconnect"):
            notes.append("topology not recorded: SGLang/vLLM disable custom all-reduce on >2 GPUs without NVLink")
        if changed < len(profile.costs):
            notes.append(f"{len(profile.costs) - changed} rows without message size/count left as measured")
        out.append(WhatIf(key="custom_allreduce", label="custom all-reduce (one-shot)", profile=custom,
                          assumptions=tuple(notes), unavailable=split or off))
        for t in tps:
            if t != profile.tp:
                mem = memory_fit(profile, t)
                out.append(WhatIf(key=f"tp{t}", label=f"TP {t} instead of {profile.tp}",
                                  profile=retp(profile, t, choice.fit),
                                  assumptions=(f"all-reduce scaled by the alpha-beta ring model ({choice.origin})",
                                               f"compute x {profile.tp}/{t} (ideal sharding)", f"memory: {mem}"),
                                  unavailable=(tp_unknown(profile) or split
                                               or (f"not available: {mem}" if mem.startswith("does not fit") else "")),
                                  memory=mem))
        if any(r.kind in DRAFT_KINDS for r in profile.costs):
            out.append(WhatIf(key="drafter_no_tp", label="drafter without TP", profile=drafter_without_tp(profile),
                              assumptions=("draft all-reduce removed", f"draft compute x {profile.tp} (one GPU)"),
                              unavailable=tp_unknown(profile)
                              or ("" if any(r.allreduce_s > 0 for r in profile.costs if r.kind in DRAFT_KINDS)
                                  else split)))
    return tuple(out), choice


def batch_sweep(profile: Profile, dist: AcceptDist, *, spec: SpecConfig, batches: Sequence[int],
                generation_tokens: int, context_tokens: float | None = None,
                proposal_rate: float | None = None) -> tuple[Prediction, ...]:
    """The same prediction at each batch size (same accept distribution, same spec).

    Speedup(B) = E[A]·T_base(B)/T_cycle(B): as B grows the verify of B·ndt tokens stops
    being latency-bound and the extra tokens cost real compute, so the speedup falls.
    """
    if not batches:
        raise SpecmodelError("batch sweep: needs at least one batch size")
    return tuple(predict(profile, dist, OperatingPoint(batch=b, spec=spec, generation_tokens=generation_tokens,
                                                       context_tokens=context_tokens,
                                                       proposal_rate=proposal_rate)) for b in batches)


def stop_paying_batch(points: Sequence[Prediction]) -> int | None:
    """The first batch (in sweep order) where speculation stops paying, else None: where the one
    decision rule's speedup thresholds (:func:`specmodel.model.decision.action_for`) stop saying
    speculate (a MARGINAL batch runs nothing in the plan and the schedules either)."""
    for p in points:
        if action_for(p.figures.speedup) != SPECULATE:
            return p.point.batch
    return None


def powers_of_two(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, … ≤ ``max_batch`` (``max_batch`` itself appended when not a power of two)."""
    if max_batch < 1:
        raise FieldError("max_batch", f"must be >= 1, got {max_batch}")
    out = []
    b = 1
    while b <= max_batch:
        out.append(b)
        b *= 2
    if out[-1] != max_batch:
        out.append(max_batch)
    return tuple(out)
