"""Interval arithmetic on [start, end) pairs: union length, overlap. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of ``intervals`` (empty ones dropped)."""
    out: list[Interval] = []
    cur_s = cur_e = 0.0
    started = False
    for s, e in sorted([iv for iv in intervals if iv[1] > iv[0]]):
        if started and s <= cur_e:
            if e > cur_e:
                cur_e = e
        else:
            if started:
                out.append((cur_s, cur_e))
            cur_s, cur_e, started = s, e, True
    if started:
        out.append((cur_s, cur_e))
    return out


def merge_sorted(intervals: Iterable[Interval]) -> list[Interval]:
    """:func:`merge` of non-empty intervals already in order of start (ties in any order): the
    same union, without the sort (a forward pass's kernels come in start order)."""
    out: list[Interval] = []
    it = iter(intervals)
    first = next(it, None)
    if first is None:
        return out
    cur_s, cur_e = first
    for s, e in it:
        if s <= cur_e:
            if e > cur_e:
                cur_e = e
        else:
            out.append((cur_s, cur_e))
            cur_s, cur_e = s, e
    out.append((cur_s, cur_e))
    return out


def length(merged: Iterable[Interval]) -> float:
    return sum(e - s for s, e in merged)


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of the intersection of two merged (sorted, disjoint) interval lists."""
    i = j = 0
    na, nb = len(a), len(b)
    total = 0.0
    while i < na and j < nb:
        a0, a1 = a[i]
        b0, b1 = b[j]
        s = b0 if b0 > a0 else a0  # max(a0, b0), min(a1, b1): the same values without the calls
        e = b1 if b1 < a1 else a1
        if e > s:
            total += e - s
        if a1 < b1:
            i += 1
        else:
            j += 1
    return total


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]
