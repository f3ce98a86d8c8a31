"""All-reduce cost: α-β (latency-bandwidth) models per message size and TP degree.

Used for what-ifs (TP 4 vs 8, a faster interconnect, a custom all-reduce) when no
measurement exists, and fitted from nccl-tests or ``specmodel profile`` sweeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_PROFILE_DURATION_S, MIN_FORWARD_S
from specmodel.schema.costrows import AllReduceFit, CostRow


def ring_allreduce_s(msg_bytes: float, tp: int, alpha_s: float, beta_bytes_per_s: float) -> float:
    """Ring all-reduce time: T = 2(p−1)·α + 2(p−1)/p · n/β.

    A reduce-scatter then an all-gather, each p−1 steps moving n/p bytes per step.
    Source: Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication
    Operations in MPICH", Table 1 (ring / Rabenseifner terms); NCCL docs (busbw factor 2(p−1)/p).
    For p = 1 there is nothing to reduce: T = 0.
    """
    if tp < 1:
        raise SpecmodelError(f"tp must be >= 1, got {tp}")
    if tp == 1:
        return 0.0
    return 2 * (tp - 1) * alpha_s + 2 * (tp - 1) / tp * msg_bytes / beta_bytes_per_s


def oneshot_allreduce_s(msg_bytes: float, tp: int, alpha_s: float, beta_bytes_per_s: float) -> float:
    """One-shot (custom, peer-to-peer) all-reduce: T = (p−1)·α + (p−1)·n/β.

    Every rank reads the other p−1 buffers directly and reduces locally (SGLang/vLLM
    ``cross_device_reduce_1stage``, TensorRT-LLM one-shot): one step instead of the ring's
    2(p−1), but p−1 peer transfers of the full message. Without NVLink those transfers share
    one PCIe link per GPU, so their latencies add up as well as their bytes (on an NVSwitch
    they overlap and the latency term is nearer α). Half the ring's latency term: wins for
    small messages, loses for large ones.
    """
    if tp <= 1:
        return 0.0
    return (tp - 1) * (alpha_s + msg_bytes / beta_bytes_per_s)


def twoshot_allreduce_s(msg_bytes: float, tp: int, alpha_s: float, beta_bytes_per_s: float) -> float:
    """Two-shot (reduce-scatter + all-gather, peer-to-peer): T = 2α + 2(p−1)/p · n/β."""
    if tp <= 1:
        return 0.0
    return 2 * alpha_s + 2 * (tp - 1) / tp * msg_bytes / beta_bytes_per_s


_ALGOS = {"ring": ring_allreduce_s, "oneshot": oneshot_allreduce_s, "twoshot": twoshot_allreduce_s}


def allreduce_s(msg_bytes: float, tp: int, fit: AllReduceFit, algorithm: str | None = None) -> float:
    """T_allreduce(bytes, p) under ``fit`` (α, β), by the fit's or the named algorithm."""
    algo = algorithm or fit.algorithm
    try:
        f = _ALGOS[algo]
    except KeyError:
        raise SpecmodelError(f"all-reduce algorithm: unknown {algo!r} (ring, oneshot, twoshot)") from None
    return f(msg_bytes, tp, fit.alpha_s, fit.beta_bytes_per_s)


def _robust_log_fit(x: np.ndarray, y: np.ndarray, a0: float, b0: float) -> tuple[float, float]:
    """argmin Σ ρ(log(a + b·x) − log y), ρ = soft-L1 (scale 0.1 = 10 %), over a, b > 0."""
    from scipy.optimize import least_squares  # only fits need scipy; predict never imports this

    ly = np.log(y)

    def resid(p: np.ndarray) -> np.ndarray:
        return np.asarray(np.log(np.exp(p[0]) + np.exp(p[1]) * x) - ly)

    res = least_squares(resid, x0=np.log([a0, b0]), loss="soft_l1", f_scale=0.1, xtol=1e-12, ftol=1e-12,
                        gtol=1e-12, max_nfev=2000)
    return float(np.exp(res.x[0])), float(np.exp(res.x[1]))


def fit_alpha_beta(msg_bytes: Sequence[float], latency_s: Sequence[float], tp: int,
                   algorithm: str = "ring") -> AllReduceFit:
    """Fit α, β from (bytes, latency) points at one TP degree.

    The models are affine in n: T = a + b·n. Ring: a = 2(p−1)α, b = 2(p−1)/(p·β).
    Fit (a, b) on log latency (relative error, symmetric for over- and under-estimates, so the
    latency-bound small messages that matter for decode are not drowned by the large ones)
    with a soft-L1 loss (so one odd point — a collective that hit a fast path or a scheduler
    hiccup — does not drag the line), starting from the 1/T-weighted least-squares line;
    a ≥ 0, b > 0 by construction; then mapped back to (α, β).
    """
    x = np.asarray(msg_bytes, dtype=float)
    y = np.asarray(latency_s, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise SpecmodelError("all-reduce fit: needs at least two (msg_bytes, latency_s) points")
    if tp < 2:
        raise SpecmodelError("all-reduce fit: tp must be >= 2 (a single rank does not communicate)")
    if np.any(~np.isfinite(y)) or np.any(y <= 0) or np.any(x < 0) or np.any(~np.isfinite(x)):
        raise SpecmodelError("all-reduce fit: latencies must be > 0 and sizes >= 0")
    # the fit weighs each point by 1/latency: a latency below a nanosecond (no collective is that fast)
    # or above an hour is no measurement, and its weight would overflow the least squares
    if np.any(y < MIN_FORWARD_S) or np.any(y > MAX_PROFILE_DURATION_S):
        raise SpecmodelError(f"all-reduce fit: a latency of {float(np.min(y) if np.any(y < MIN_FORWARD_S) else np.max(y)):g} s "
                             f"is outside [{MIN_FORWARD_S:g}, {MAX_PROFILE_DURATION_S:g}] s: not a measurement")
    if np.ptp(x) == 0:
        raise SpecmodelError("all-reduce fit: needs at least two distinct message sizes")
    X = np.stack([np.ones_like(x), x], axis=1)
    w = 1.0 / y
    (a, b), *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    a, b = _robust_log_fit(x, y, max(float(a), 1e-3 * float(np.min(y))),
                           max(float(b), 1e-6 * float(np.min(y)) / max(float(np.max(x)), 1.0)))
    if algorithm == "ring":
        alpha = a / (2 * (tp - 1))
        beta = 2 * (tp - 1) / (tp * b)
    elif algorithm == "oneshot":
        alpha = a / (tp - 1)
        beta = (tp - 1) / b
    elif algorithm == "twoshot":
        alpha = a / 2
        beta = 2 * (tp - 1) / (tp * b)
    else:
        raise SpecmodelError(f"all-reduce algorithm: unknown {algorithm!r} (ring, oneshot, twoshot)")
    return AllReduceFit(alpha_s=float(alpha), beta_bytes_per_s=float(beta), tp=tp, algorithm=algorithm)


def tp_scale_factor(msg_bytes: float, tp_from: int, tp_to: int, fit: AllReduceFit) -> float:
    """Ratio T_ar(n, tp_to) / T_ar(n, tp_from) under the same α, β (for TP what-ifs)."""
    t_from = allreduce_s(msg_bytes, tp_from, fit)
    if t_from <= 0:
        raise SpecmodelError(f"cannot scale all-reduce from tp {tp_from}: no communication there")
    return allreduce_s(msg_bytes, tp_to, fit) / t_from


def recost_rows(costs: Sequence[CostRow], tp: int, fit: AllReduceFit) -> tuple[tuple[CostRow, ...], int]:
    """Every cost row's all-reduce re-costed with a measured fit (e.g. from nccl-tests).

    T'_ar = n_allreduce × T_fit(msg_bytes, p) + skew: each call at the row's real message size
    under the fit; the time spent waiting for the slowest rank (``skew_s``, part of the row's
    measured all-reduce) is not a property of the collective and is kept as measured.
    Rows without a call count or message size are left as they are; the number changed is
    returned. Total = all-reduce + compute + other.
    """
    if fit.tp != tp:
        raise SpecmodelError(f"all-reduce fit: measured at TP {fit.tp}, the profile is TP {tp}; "
                             "re-costing needs a fit at the profile's TP degree")
    out: list[CostRow] = []
    changed = 0
    for r in costs:
        if r.n_allreduce > 0 and r.allreduce_msg_bytes > 0 and tp > 1:
            skew = min(r.skew_s, r.allreduce_s)
            ar = r.n_allreduce * allreduce_s(r.allreduce_msg_bytes, tp, fit) + skew
            # (the row's all-reduce is the fit's now, not what the hook's wrapper or a capture measured)
            out.append(dataclasses.replace(r, allreduce_s=ar, skew_s=skew, allreduce_source="",
                                           total_s=max(ar + r.compute_s + r.other_s, 1e-12)))
            changed += 1
        else:
            out.append(r)
    return tuple(out), changed
