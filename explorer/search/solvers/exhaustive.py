"""Exhaustive enumeration: every assignment of a small Problem (ground truth)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import SearchError
from ..problem import Problem
from .deadline import Deadline

__all__ = ["solve_exhaustive", "check_size", "EXHAUSTIVE_LIMIT"]

EXHAUSTIVE_LIMIT = 200_000


def solve_exhaustive(
    p: Problem, cap: float | None, k: int = 1, deadline: Deadline | None = None
) -> list[tuple[float, dict]]:
    """Every assignment of the active nodes; the ``k`` best as ``(objective, choice)``.
    When ``deadline`` passes, the best of the assignments visited so far. Strategies at
    infinite cost (forbidden by a constraint) are not enumerated, nor are assignments whose
    objective is infinite (a forbidden strategy pair)."""
    ranges = [np.flatnonzero(np.isfinite(p.cost[i])) for i in p.active]
    sizes = [len(r) for r in ranges]
    check_size(sizes)
    total = math.prod(sizes)
    eps = p.eps
    found: list[tuple[float, dict]] = []
    for n, combo in enumerate(itertools.product(*(r.tolist() for r in ranges))):
        if (
            deadline is not None
            and n % 1024 == 1023
            and deadline.passed(f"after {n + 1:,} of {total:,} assignments")
        ):
            break
        choice = dict(zip(p.active, combo, strict=True))
        if cap is not None and sum(p.mem[i][c] for i, c in choice.items()) > cap:
            continue
        obj = p.objective(choice) + eps * sum(p.tie[i][c] for i, c in choice.items())
        if not math.isfinite(obj):
            continue
        found.append((obj, choice))
        if len(found) > 4 * k + 64:
            found.sort(key=lambda t: t[0])
            del found[k:]
    found.sort(key=lambda t: t[0])
    return found[:k]


def check_size(sizes: list[int]) -> None:
    """Refuse more than ``EXHAUSTIVE_LIMIT`` assignments, counted as a sum of logarithms:
    the exact product of thousands of choices is an integer too long to print."""
    log10 = sum(math.log10(s) for s in sizes if s > 0)
    if 0 in sizes or log10 <= math.log10(EXHAUSTIVE_LIMIT):
        return
    count = f"{math.prod(sizes):,}" if log10 < 15 else f"about 10^{log10:.0f}"
    raise SearchError(
        f"exhaustive search would visit {count} assignments of {len(sizes)} nodes (limit "
        f"{EXHAUSTIVE_LIMIT:,}); use method='ilp' or 'dynamic_programming' for graphs this "
        "size, or raise explorer.search.solvers.exhaustive.EXHAUSTIVE_LIMIT"
    )
