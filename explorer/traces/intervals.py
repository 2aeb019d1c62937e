"""Unions of time intervals: the measure of "busy" when kernels overlap.

>>> merge([(0, 2), (1, 3), (5, 6)])
((0, 3), (5, 6))
>>> length(merge([(0, 2), (1, 3)])), overlap(merge([(0, 4)]), merge([(1, 2), (3, 6)]))
(3, 2.0)
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["merge", "length", "overlap", "clip", "subtract"]

Intervals = tuple[tuple[float, float], ...]


def merge(spans: Iterable[tuple[float, float]]) -> Intervals:
    """The union of ``spans`` as sorted, disjoint intervals (empty spans dropped)."""
    out: list[list[float]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def length(spans: Intervals) -> float:
    """Total length of disjoint intervals."""
    return sum(b - a for a, b in spans)


def overlap(x: Intervals, y: Intervals) -> float:
    """Length of the intersection of two unions (each sorted and disjoint)."""
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if hi > lo:
            total += hi - lo
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def clip(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> Intervals:
    """``spans`` cut to ``[lo, hi]`` and merged."""
    return merge((max(a, lo), min(b, hi)) for a, b in spans)


def subtract(x: Intervals, y: Intervals) -> Intervals:
    """The parts of ``x`` outside ``y`` (both sorted and disjoint)."""
    out: list[tuple[float, float]] = []
    j = 0
    for a, b in x:
        cur = a
        while j < len(y) and y[j][1] <= cur:
            j += 1
        k = j
        while k < len(y) and y[k][0] < b:
            if y[k][0] > cur:
                out.append((cur, y[k][0]))
            cur = max(cur, y[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return tuple(out)
