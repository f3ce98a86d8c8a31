"""Summary statistics shared by the profiler and trace ingest (one definition of spread_s)."""

from __future__ import annotations

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
