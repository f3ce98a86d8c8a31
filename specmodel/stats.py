"""Summary statistics shared by the profiler and trace ingest (one definition of spread_s).

The median and quartiles are CPython 3.11's ``statistics.median`` and
``statistics.quantiles(method="inclusive")``, written out: the same floats (tests/test_stats.py
compares them), without importing ``statistics`` (fractions, decimal: ~4 ms of every cold start).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def median(xs: Sequence[float]) -> float:
    """Median (the mean of the middle two of an even count); 0 for no samples."""
    n = len(xs)
    if not n:
        return 0.0
    s = sorted(xs)
    i = n // 2
    return float(s[i] if n % 2 else (s[i - 1] + s[i]) / 2)


def iqr(xs: Sequence[float]) -> float:
    """Interquartile range (the profile's ``spread_s``), the quartiles interpolated between order
    statistics with the minimum and maximum as the 0th and 100th percentiles; 0 for fewer than
    two values."""
    n = len(xs)
    if n < 2:
        return 0.0
    s = sorted(xs)
    q1, q3 = ((s[j] * (4 - d) + s[j + 1] * d) / 4 for j, d in (divmod(k * (n - 1), 4) for k in (1, 3)))
    return float(q3 - q1)


def median_ci95(xs: Sequence[float]) -> tuple[float, float] | None:
    """Distribution-free 95 % interval of the median: order statistics [x₍ₖ₎, x₍ₙ₋ₖ₊₁₎] with the
    largest k such that P(Binomial(n, ½) ≤ k − 1) ≤ 0.025 (coverage ≥ 95 %; no normality assumed,
    so a gloo wake-up outlier widens nothing). None for fewer than 6 values (no such k)."""
    n = len(xs)
    k, cdf = 0, 0.0
    ln_half_n = n * math.log(2.0)
    for j in range(n + 1):
        # in logs: 2.0**n overflows a float beyond n = 1023 (a hook log holds thousands of steps)
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - ln_half_n)
        if cdf > 0.025:
            break
        k = j + 1
    if k < 1:
        return None
    s = sorted(xs)
    return float(s[k - 1]), float(s[n - k])


def median_ci95_rel(xs: Sequence[float]) -> float | None:
    """Half-width of :func:`median_ci95` relative to the median (the larger side); None when
    there are too few values or the median is not > 0."""
    ci = median_ci95(xs)
    m = median(xs)
    if ci is None or m <= 0:
        return None
    return max(m - ci[0], ci[1] - m) / m


#: two-sided 95 % Student t quantiles by degrees of freedom (1..9); 1.96 beyond
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


def series_median_ci95_rel(xs: Sequence[float], *, min_block: int = 5, max_blocks: int = 10) -> float | None:
    """Relative 95 % half-width of the median of a *time-ordered* series whose neighbours are
    correlated (an engine's step times: the box's load drifts over seconds, so a thousand steps
    are far fewer independent ones). The larger of :func:`median_ci95_rel` (independent samples)
    and the batch-means interval (Law & Kelton, *Simulation Modeling and Analysis*, §9.5.3):
    the series cut into m ≤ ``max_blocks`` consecutive blocks of ≥ ``min_block`` values, the
    blocks' medians taken as m independent estimates, t_{m−1}·sd/√m. With fewer than five
    blocks only the first: the spread of two to four block medians is itself too uncertain (a
    16-step cell read ±40 % through t₂ = 4.3); None as :func:`median_ci95_rel`."""
    iid = median_ci95_rel(xs)
    n = len(xs)
    m = min(max_blocks, n // max(min_block, 1))
    med = median(xs)
    if iid is None or m < 5 or med <= 0:
        return iid
    size = n / m
    blocks = [median(xs[round(i * size):round((i + 1) * size)]) for i in range(m)]
    mean = sum(blocks) / m
    sd = math.sqrt(sum((b - mean) ** 2 for b in blocks) / (m - 1))
    t = _T95[m - 2] if m - 2 < len(_T95) else 1.96
    return max(iid, t * sd / math.sqrt(m) / med)


def median_se(iqr_value: float, samples: int) -> float:
    """Standard error of a sample median from its IQR and size: σ ≈ IQR / 1.349 (normal), and
    SE(median) ≈ 1.253·σ/√n (the median's asymptotic variance πσ²/2n; Kendall & Stuart). 0 without
    a spread."""
    return 1.253 * (iqr_value / 1.349) / max(samples, 1) ** 0.5 if iqr_value > 0 else 0.0
