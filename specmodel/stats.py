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
    for j in range(n + 1):
        cdf += math.comb(n, j) / 2.0**n
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


def median_se(iqr_value: float, samples: int) -> float:
    """Standard error of a sample median from its IQR and size: σ ≈ IQR / 1.349 (normal), and
    SE(median) ≈ 1.253·σ/√n (the median's asymptotic variance πσ²/2n; Kendall & Stuart). 0 without
    a spread."""
    return 1.253 * (iqr_value / 1.349) / max(samples, 1) ** 0.5 if iqr_value > 0 else 0.0
