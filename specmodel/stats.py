"""Summary statistics shared by the profiler and trace ingest (one definition of spread_s)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def median(xs: Sequence[float]) -> float:
    """Median; 0 for no samples."""
    return float(statistics.median(xs)) if xs else 0.0


def iqr(xs: Sequence[float]) -> float:
    """Interquartile range (the profile's ``spread_s``); 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return float(q[2] - q[0])


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
