"""specmodel.stats writes out CPython's median and inclusive quartiles (to keep ``statistics`` out
of every cold start): the same floats as the standard library, on any sample."""

from __future__ import annotations

import statistics

from hypothesis import given
from hypothesis import strategies as st

from specmodel.stats import iqr, median

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
samples = st.lists(finite | st.integers(min_value=-10**6, max_value=10**6), min_size=1, max_size=60)


@given(samples)
def test_median_is_the_standard_librarys(xs: list[float]) -> None:
    got = median(xs)
    assert type(got) is float
    assert got == float(statistics.median(xs))


@given(samples)
def test_iqr_is_the_standard_librarys_inclusive_quartiles(xs: list[float]) -> None:
    if len(xs) < 2:
        assert iqr(xs) == 0.0
        return
    q = statistics.quantiles(xs, n=4, method="inclusive")
    assert iqr(xs) == float(q[2] - q[0])


def test_small_cases_by_hand() -> None:
    assert median([]) == 0.0
    assert median([3.0, 1.0]) == 2.0
    assert median([5, 1, 3]) == 3.0
    # quartiles of 1..5 (inclusive): 2 and 4
    assert iqr([5.0, 1.0, 4.0, 2.0, 3.0]) == 2.0
    # of [0, 10]: 2.5 and 7.5
    assert iqr([10.0, 0.0]) == 5.0
