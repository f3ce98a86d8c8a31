"""Accept-length distributions: tokens emitted per verify step, bonus token included.

Convention. SGLang's ``accept len:`` and vLLM's ``Mean acceptance length`` both count the
tokens a request gains per verify step *including* the bonus token the target always adds
(range 1..steps+1). Some people quote *accepted drafts* only (range 0..steps); 0.58 drafts is
1.58 tokens/step. Internally everything is ``tokens``; :func:`to_tokens` /
:func:`from_tokens` convert and name the convention.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specmodel.errors import FieldError, SpecmodelError
from specmodel.units import tokens_text

CONVENTIONS = ("tokens", "drafts")


def to_tokens(value: float, convention: str) -> float:
    """tokens/step = drafts/step + 1 (the bonus token); identity for ``tokens``."""
    if convention not in CONVENTIONS:
        raise FieldError("convention", f"unknown {convention!r} (expected tokens or drafts)")
    return value + 1.0 if convention == "drafts" else value


def from_tokens(value: float, convention: str) -> float:
    """Inverse of :func:`to_tokens`."""
    if convention not in CONVENTIONS:
        raise FieldError("convention", f"unknown {convention!r} (expected tokens or drafts)")
    return value - 1.0 if convention == "drafts" else value


@dataclass(frozen=True, kw_only=True)
class AcceptDist:
    """P(emit j tokens in a verify step) for j = 1..len(probs).

    ``probs[j-1]`` is P(A = j). ``source`` says where it came from (``mean``,
    ``histogram``, ``per-position``, ``chain``, a log path); ``samples`` is the number of
    observed verify steps when built from data (0 when from a formula), used for the
    sampling uncertainty of the mean. ``samples_unknown``: built from data whose sample size
    is not known (a histogram given as fractions) — no P(speedup > 1) can be computed.
    """

    probs: tuple[float, ...]
    source: str
    convention: str = "tokens"
    samples: int = 0
    samples_unknown: bool = False

    def __post_init__(self) -> None:
        if len(self.probs) < 1:
            raise SpecmodelError("accept distribution: needs at least one probability")
        if not all(math.isfinite(p) and p >= -1e-12 for p in self.probs):
            raise SpecmodelError("accept distribution: probabilities must be finite and >= 0")
        total = math.fsum(self.probs)
        if abs(total - 1.0) > 1e-6:
            raise SpecmodelError(f"accept distribution: probabilities sum to {total:.6g}, expected 1")
        if self.convention not in CONVENTIONS:
            raise SpecmodelError(f"accept distribution: convention must be tokens or drafts, got {self.convention!r}")
        if self.samples < 0:
            raise SpecmodelError("accept distribution: samples must be >= 0")

    @property
    def max_tokens(self) -> int:
        return len(self.probs)

    @property
    def support(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.probs) + 1))

    @property
    def mean_tokens(self) -> float:
        """E[A] = Σ j·P(A=j)."""
        return math.fsum(j * p for j, p in zip(self.support, self.probs, strict=True))

    @property
    def var_tokens(self) -> float:
        m = self.mean_tokens
        return math.fsum((j - m) ** 2 * p for j, p in zip(self.support, self.probs, strict=True))

    @property
    def std_tokens(self) -> float:
        return math.sqrt(max(self.var_tokens, 0.0))

    def mean_in(self, convention: str) -> float:
        return from_tokens(self.mean_tokens, convention)

    def per_position_rates(self) -> tuple[float, ...]:
        """Unconditional P(draft i accepted) = P(A >= i+1), i = 1..K-1 (vLLM's per-position rates)."""
        tail = [math.fsum(self.probs[j:]) for j in range(len(self.probs))]  # tail[j-1] = P(A >= j)
        return tuple(tail[1:])


def _check_max_tokens(max_tokens: int) -> None:
    if max_tokens < 1:
        raise FieldError("steps", f"max tokens per step must be >= 1 (steps + 1), got {max_tokens}")


def chain_mean(alpha: float, k: int) -> float:
    """Expected tokens per step for a chain of ``k`` drafts each accepted with prob. α.

    Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
    Decoding", Eq. (1): E[#tokens] = (1 − α^(γ+1)) / (1 − α), γ = k. Limit α→1: k+1.
    """
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise FieldError("alpha", f"acceptance rate must be in [0, 1], got {alpha}")
    if k < 0:
        raise FieldError("steps", f"number of drafts must be >= 0, got {k}")
    if alpha >= 1.0 - 1e-12:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def from_chain(alpha: float, k: int, source: str = "chain") -> AcceptDist:
    """Truncated geometric: P(A=j) = α^(j−1)(1−α) for j ≤ k, P(A=k+1) = α^k.

    The i.i.d. acceptance assumption of Leviathan et al. 2023 (§3.1), whose mean is Eq. (1).
    """
    chain_mean(alpha, k)  # validates
    probs = [alpha ** (j - 1) * (1.0 - alpha) for j in range(1, k + 1)] + [alpha**k]
    return AcceptDist(probs=tuple(probs), source=source)


def alpha_for_mean(mean_tokens: float, k: int) -> float:
    """Invert Eq. (1): the α whose chain of ``k`` drafts emits ``mean_tokens`` per step."""
    if not 1.0 <= mean_tokens <= k + 1:
        raise SpecmodelError(f"accept length {mean_tokens:g} outside [1, {k + 1}]")
    if mean_tokens >= k + 1 - 1e-12:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):  # chain_mean is increasing in α; bisection is exact enough
        mid = 0.5 * (lo + hi)
        if chain_mean(mid, k) < mean_tokens:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def from_mean(mean: float, max_tokens: int, *, convention: str = "tokens",
              shape: str = "geometric", source: str = "mean") -> AcceptDist:
    """Build a distribution with a given mean (in ``convention``) on 1..max_tokens.

    Default shape ``geometric``: the Leviathan chain (constant per-draft acceptance α,
    solved from the mean) — the documented default because it is what i.i.d. token
    acceptance gives. ``point``: all mass on the two integers around the mean (the
    least-variance distribution with that mean).
    """
    _check_max_tokens(max_tokens)
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean):
        raise FieldError("accept_len", f"must be a finite number, got {mean!r}")
    m = to_tokens(float(mean), convention)
    lo_name = "0" if convention == "drafts" else "1"
    hi = max_tokens - 1 if convention == "drafts" else max_tokens
    if not 1.0 - 1e-9 <= m <= max_tokens + 1e-9:
        # below 1 token/step is impossible in the tokens convention (the bonus token): the user
        # most likely quoted accepted drafts only
        hint = ("; if that figure counts accepted drafts only, pass {convention} drafts"
                if convention == "tokens" and 0.0 <= mean < 1.0 else "")
        raise FieldError("accept_len", f"{mean:g} ({convention} convention) outside [{lo_name}, {hi}] "
            f"for steps = {max_tokens - 1} (at most steps + 1 = {max_tokens} tokens per verify step){hint}"
        )
    m = min(max(m, 1.0), float(max_tokens))
    if shape == "geometric":
        d = from_chain(alpha_for_mean(m, max_tokens - 1), max_tokens - 1, source=source)
        return AcceptDist(probs=d.probs, source=source, convention=convention)
    if shape == "point":
        lo = int(math.floor(m))
        frac = m - lo
        probs = [0.0] * max_tokens
        probs[lo - 1] += 1.0 - frac
        if frac > 0:
            probs[lo] += frac
        return AcceptDist(probs=tuple(probs), source=source, convention=convention)
    raise FieldError("shape", f"unknown {shape!r} (expected geometric or point)")


def from_histogram(counts: Mapping[int, float], *, convention: str = "tokens",
                   max_tokens: int | None = None, source: str = "histogram") -> AcceptDist:
    """Empirical distribution from per-step counts ``{value: count}`` in ``convention``."""
    if not counts:
        raise FieldError("accept_hist", "empty histogram")
    shifted: dict[int, float] = {}
    for v, c in counts.items():
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
            raise FieldError("accept_hist", f"count for {v} must be a finite number >= 0, got {c!r}")
        t = int(round(to_tokens(float(v), convention)))
        if t < 1:
            raise FieldError("accept_hist", f"value {v} is below the minimum ({'0' if convention == 'drafts' else '1'}) "
                f"for the {convention} convention"
            )
        shifted[t] = shifted.get(t, 0.0) + float(c)
    top = max(shifted)
    k = max_tokens if max_tokens is not None else top
    if top > k:
        raise FieldError("accept_hist", f"value {from_tokens(top, convention):g} exceeds the maximum "
                             f"{from_tokens(k, convention):g} for steps = {k - 1}")
    total = sum(shifted.values())
    if total <= 0:
        raise FieldError("accept_hist", "all counts are zero")
    if not math.isfinite(total):  # each count finite, their sum past the largest float (1e308 + 1e308)
        raise FieldError("accept_hist", "the counts add up past the largest float: not step counts")
    probs = tuple(shifted.get(j, 0.0) / total for j in range(1, k + 1))
    if not histogram_has_counts(counts.values()):
        return AcceptDist(probs=probs, source=f"{source} (fractions: sample size unknown)", convention=convention,
                          samples=0, samples_unknown=True)
    return AcceptDist(probs=probs, source=source, convention=convention, samples=int(round(total)))


def histogram_has_counts(values: Iterable[float]) -> bool:
    """True when histogram entries are counts (whole numbers), False for fractions/percentages.

    Fractions (0.1, 0.3, …) or any non-integer entry carry no sample size: treating their sum
    as a count of observed steps would claim n = 1 (or 100 for percentages).
    """
    vals = [float(v) for v in values]
    if any(abs(v - round(v)) > 1e-9 for v in vals):
        return False
    return sum(vals) > 1.0 + 1e-9


def from_per_position(rates: Sequence[float], *, max_tokens: int | None = None,
                      source: str = "per-position") -> AcceptDist:
    """From vLLM-style per-position acceptance rates r_i = P(draft i accepted), i = 1..k.

    vLLM (``vllm/v1/spec_decode/metrics.py``) reports r_i = accepted_at_pos_i / num_drafts,
    so E[A] = 1 + Σ r_i. Since draft i can only be accepted if 1..i−1 were, P(A ≥ i+1) = r_i
    and the rates must be non-increasing; P(A = j) = r_{j−1} − r_j (r_0 = 1, r_{k+1} = 0).
    """
    rs = [float(r) for r in rates]
    if not rs:
        raise FieldError("per_position", "needs at least one rate")
    for i, r in enumerate(rs):
        if not math.isfinite(r) or not 0.0 <= r <= 1.0:
            raise FieldError("per_position", f"rate {i + 1} must be in [0, 1], got {r}")
    for i in range(1, len(rs)):
        if rs[i] > rs[i - 1] + 1e-9:
            raise FieldError("per_position", f"rates must not increase (position {i + 1}: {rs[i]} > position {i}: {rs[i - 1]}); "
                "draft i+1 can only be accepted after draft i"
            )
    k = len(rs)
    kk = max_tokens if max_tokens is not None else k + 1
    if kk < k + 1:
        raise FieldError("per_position", f"{k} rates given but steps = {kk - 1} allows at most {kk - 1}")
    tail = [1.0] + rs + [0.0] * (kk - k)
    probs = tuple(max(tail[j - 1] - tail[j], 0.0) for j in range(1, kk + 1))
    s = sum(probs)
    return AcceptDist(probs=tuple(p / s for p in probs), source=source)


def resize(dist: AcceptDist, max_tokens: int, *, rates: Sequence[float] | None = None) -> AcceptDist:
    """Re-express ``dist`` for a different number of steps (``max_tokens`` = steps + 1).

    Shrinking truncates: mass above the new maximum collapses onto it (a shorter chain
    stops there). Growing extrapolates the per-draft conditional acceptance with the last
    observed conditional rate (a documented extrapolation: deeper drafts are rarely
    accepted *more* often than the last one measured). When ``rates`` are given they are
    used directly for the positions they cover.
    """
    _check_max_tokens(max_tokens)
    pos = list(rates) if rates is not None else list(dist.per_position_rates())
    if max_tokens - 1 <= len(pos):
        return from_per_position(pos[: max_tokens - 1], max_tokens=max_tokens, source=dist.source)
    # conditional rates c_i = r_i / r_{i-1}; extend with the last positive one
    prev = 1.0
    cond: list[float] = []
    for r in pos:
        cond.append(r / prev if prev > 0 else 0.0)
        prev = r
    last = cond[-1] if cond else 0.0
    ext = list(pos)
    cur = ext[-1] if ext else 1.0
    while len(ext) < max_tokens - 1:
        cur *= last
        ext.append(cur)
    return from_per_position(ext, max_tokens=max_tokens, source=dist.source)


def mixture_of_means(means: Iterable[tuple[float, float]], max_tokens: int, *, source: str,
                     samples: int = 0) -> AcceptDist:
    """Σ_w w·from_mean(m_w, K) / Σ w over windows that report only a mean ``m_w`` with weight ``w``.

    The distribution a log of window means supports: within a window, the geometric shape of
    :func:`from_mean` (constant per-draft acceptance, Leviathan et al. 2023 §3.1); across windows,
    their spread. Keeps the weighted mean exactly, E[A] = Σ w m_w / Σ w, and is at least as wide as
    a single geometric with that mean. Means are clamped into [1, K] (logs print 2 decimals, so a
    mean may exceed K by rounding; callers refuse larger excesses). Equal means are grouped
    (2-decimal logs have few distinct values).
    """
    _check_max_tokens(max_tokens)
    by_mean: dict[float, float] = {}
    for m, w in means:
        if not math.isfinite(m) or not math.isfinite(w) or w < 0:
            raise SpecmodelError(f"{source}: window mean {m!r} / weight {w!r} must be finite, weight >= 0")
        mm = min(max(float(m), 1.0), float(max_tokens))
        by_mean[mm] = by_mean.get(mm, 0.0) + float(w)
    total = math.fsum(by_mean.values())
    if total <= 0:
        raise SpecmodelError(f"{source}: no weight in any window")
    probs = [0.0] * max_tokens
    for m, w in by_mean.items():
        d = from_mean(m, max_tokens, source=source)
        for j, p in enumerate(d.probs):
            probs[j] += w / total * p
    s = math.fsum(probs)
    return AcceptDist(probs=tuple(p / s for p in probs), source=source, samples=samples)


def pooled_per_position(rates: Sequence[Sequence[float]], weights: Sequence[float]) -> tuple[float, ...]:
    """Per-position acceptance rates pooled over windows: r_i = Σ_w n_w r_{w,i} / Σ n_w.

    With ``n_w`` the window's number of drafts this is accepted_at_i / drafts over all windows —
    what vLLM itself computes over a longer window (``vllm/v1/spec_decode/metrics.py``). Printed
    rates carry 3 decimals: rounding must not make the pooled sequence increase, so each rate is
    capped by the one before (draft i+1 is accepted only after draft i).
    """
    if not rates or len(rates) != len(weights):
        raise SpecmodelError("per-position rates: need one weight per window and at least one window")
    k = len(rates[0])
    if any(len(r) != k for r in rates):
        raise SpecmodelError("per-position rates: windows have different numbers of positions")
    total = math.fsum(weights)
    if total <= 0:
        raise SpecmodelError("per-position rates: no drafts in any window")
    avg = [math.fsum(w * r[i] for w, r in zip(weights, rates, strict=True)) / total for i in range(k)]
    for i in range(1, k):
        avg[i] = min(avg[i], avg[i - 1])
    return tuple(avg)


# ---------------------------------------------------------------------------------------------
# acceptance by context


@dataclass(frozen=True, kw_only=True)
class WindowAccept:
    """What one logged window says about acceptance: its context (KV tokens per request), its
    weight (verify steps, or a quantity proportional to them), its mean tokens/step, and the
    per-position rates when the engine prints them (vLLM)."""

    context_tokens: float
    weight: float
    mean_tokens: float
    per_position: tuple[float, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class ContextBand:
    """Acceptance measured over windows whose context lies in [lo_tokens, hi_tokens)."""

    lo_tokens: int
    hi_tokens: int | None  # None: open above
    dist: AcceptDist
    windows: int
    context_min: float
    context_max: float

    @property
    def label(self) -> str:
        hi = "" if self.hi_tokens is None else _k(self.hi_tokens)
        return f"{_k(self.lo_tokens)}-{hi} tokens" if hi else f">= {_k(self.lo_tokens)} tokens"

    def contains(self, ctx: float) -> bool:
        return ctx >= self.lo_tokens and (self.hi_tokens is None or ctx < self.hi_tokens)


def _k(n: int) -> str:
    # a band's edge: exact (1536, not 1.5K) unless it is a whole number of K tokens
    return tokens_text(n) if n and n % 1024 == 0 else str(n)


#: band edges, KV tokens per request: 0, 1K, 2K, 4K, … (acceptance is reported to fall with
#: context roughly per doubling: vllm #47602); adjacent bands are merged until each holds
#: MIN_BAND_WINDOWS windows, so no band rests on one or two windows
BAND_EDGES = (0,) + tuple(1024 * 2**i for i in range(0, 14))
MIN_BAND_WINDOWS = 3


@dataclass(frozen=True, kw_only=True)
class AcceptByContext:
    """Accept-length distributions per context band, and the one over all windows.

    :meth:`at` is the seam predict / plan / report use: the distribution for a context and the
    label that says where it came from (or that acceptance was assumed constant).
    """

    bands: tuple[ContextBand, ...]
    overall: AcceptDist

    def band_for(self, context_tokens: float) -> ContextBand | None:
        for b in self.bands:
            if b.contains(context_tokens):
                return b
        return None

    def at(self, context_tokens: float | None) -> tuple[AcceptDist, str]:
        """(distribution, label) at ``context_tokens``: the band that covers it (bands tile the
        axis: the first starts at 0, the last is open above). Beyond the contexts the log measured,
        the nearest band's acceptance is used and the label says it is assumed constant from there."""
        if context_tokens is None:
            return self.overall, "all windows (no context asked: acceptance over every context the log covers)"
        b = self.band_for(context_tokens) or self.bands[-1]
        label = (f"context band {b.label} ({b.windows} windows, context {b.context_min:.0f}-"
                 f"{b.context_max:.0f}): mean {b.dist.mean_tokens:.2f} tokens/step")
        lo, hi = self.bands[0].context_min, self.bands[-1].context_max
        if context_tokens > hi or context_tokens < lo:
            label += (f"; context {context_tokens:.0f} is outside the measured {lo:.0f}-{hi:.0f}: "
                      "acceptance assumed constant from the nearest measured band")
        return b.dist, label


def pooled_windows(ws: Sequence[WindowAccept], max_tokens: int, source: str, steps_per_weight: float = 1.0) -> AcceptDist:
    """The distribution over a set of windows, built as a whole log's is: pooled per-position
    rates when every window has them (vLLM), else a mixture of the window means (SGLang)."""
    samples = int(round(math.fsum(w.weight for w in ws) * steps_per_weight))
    if all(w.per_position for w in ws) and len({len(w.per_position or ()) for w in ws}) == 1:
        rates = pooled_per_position([w.per_position or () for w in ws], [w.weight for w in ws])
        d = from_per_position(rates[: max_tokens - 1], max_tokens=max_tokens, source=source)
        return AcceptDist(probs=d.probs, source=source, samples=samples)
    return mixture_of_means(((w.mean_tokens, w.weight) for w in ws), max_tokens, source=source, samples=samples)


def by_context(windows: Sequence[WindowAccept], overall: AcceptDist, *, source: str, steps_per_weight: float = 1.0,
               min_windows: int = MIN_BAND_WINDOWS) -> AcceptByContext | None:
    """Group windows into context bands (:data:`BAND_EDGES`, merged upwards until each has
    ``min_windows``; a short last band joins the one below) and build each band's distribution
    the way the whole log's is built (pooled per-position rates when every window has them, else
    a mixture of window means). None when fewer than two bands result: one band is the overall
    distribution, and saying "by context" would claim a measurement that is not there.
    ``overall`` is the whole log's distribution (what is used outside the bands)."""
    ws = [w for w in windows if math.isfinite(w.context_tokens) and w.context_tokens >= 0 and w.weight > 0]
    if len(ws) < 2 * min_windows:
        return None
    max_tokens = overall.max_tokens
    edges = list(BAND_EDGES)
    raw: list[tuple[int, int | None, list[WindowAccept]]] = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        members = [w for w in ws if w.context_tokens >= lo and (hi is None or w.context_tokens < hi)]
        if members:
            raw.append((lo, hi, members))
    merged: list[tuple[int, int | None, list[WindowAccept]]] = []
    for lo, hi, members in raw:
        if merged and len(merged[-1][2]) < min_windows:
            plo, _, pm = merged.pop()
            merged.append((plo, hi, pm + members))
        else:
            merged.append((lo, hi, list(members)))
    if len(merged) > 1 and len(merged[-1][2]) < min_windows:
        _, hi, last = merged.pop()
        plo, _, pm = merged.pop()
        merged.append((plo, hi, pm + last))
    if len(merged) < 2:
        return None
    bands = []
    for n, (lo, _hi, members) in enumerate(merged):
        # bands tile the axis: the first starts at 0, the last is open above
        lo_t = 0 if n == 0 else lo
        hi_t = None if n == len(merged) - 1 else merged[n + 1][0]
        bands.append(ContextBand(lo_tokens=lo_t, hi_tokens=hi_t,
                                 dist=pooled_windows(members, max_tokens, f"{source} [context band]", steps_per_weight),
                                 windows=len(members), context_min=min(w.context_tokens for w in members),
                                 context_max=max(w.context_tokens for w in members)))
    return AcceptByContext(bands=tuple(bands), overall=overall)


def window_drift_rel(windows: Sequence[tuple[float, float]], step_std_tokens: float) -> float:
    """Relative spread of the tokens per request-step between a log's windows, beyond sampling.

    ``windows``: (E'_w, S_w) per window -- tokens per request-step and the request-steps behind it
    (vLLM: E'_w = G_w / (G_w − A_w), G_w the window's generated tokens, A_w its accepted drafts).
    With Ē the S-weighted mean and V = Σ S_w (E'_w − Ē)² / Σ S_w the weighted variance, a window's
    own mean has sampling variance σ²/S_w (σ = ``step_std_tokens``, one request-step's), so the
    variance between windows beyond sampling is

        V_b = max(0, V − m·σ² / Σ S_w),   m = number of windows,

    the method-of-moments estimate of a one-way random-effects model (Searle, Casella & McCulloch,
    *Variance Components*, 1992, §3.5). Returned as √V_b / Ē: the acceptance a new run sees moves
    by that much when the traffic does (a low-temperature ngram server's drafts per request-step
    moved 0.51-0.89 between batches on one server, vLLM /metrics). 0 with fewer than three windows."""
    ws = [(e, s) for e, s in windows if s > 0 and math.isfinite(e) and math.isfinite(s)]
    if len(ws) < 3:
        return 0.0
    total = math.fsum(s for _, s in ws)
    mean = math.fsum(e * s for e, s in ws) / total
    if mean <= 0:
        return 0.0
    var = math.fsum(s * (e - mean) ** 2 for e, s in ws) / total
    between = max(0.0, var - len(ws) * step_std_tokens**2 / total)
    return math.sqrt(between) / mean
