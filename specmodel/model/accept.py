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
