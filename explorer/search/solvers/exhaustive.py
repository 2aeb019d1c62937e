"""Exhaustive enumeration: every assignment of a small Problem (ground truth)."""

from __future__ import annotations

import itertools
import math

from ..errors import SearchError
from ..problem import Problem

__all__ = ["solve_exhaustive", "EXHAUSTIVE_LIMIT"]

EXHAUSTIVE_LIMIT = 200_000


def solve_exhaustive(p: Problem, cap: float | None, k: int = 1) -> list[tuple[float, dict]]:
    """Every assignment of the active nodes; the ``k`` best as ``(objective, choice)``."""
    sizes = [len(p.cost[i]) for i in p.active]
    count = math.prod(sizes)
    if count > EXHAUSTIVE_LIMIT:
        raise SearchError(
            f"exhaustive search would visit {count:,} assignments (limit {EXHAUSTIVE_LIMIT:,}); "
            "use method='ilp' or 'dynamic_programming' for graphs this size"
        )
    eps = p.eps
    found: list[tuple[float, dict]] = []
    for combo in itertools.product(*(range(s) for s in sizes)):
        choice = dict(zip(p.active, combo, strict=True))
        if cap is not None and sum(p.mem[i][c] for i, c in choice.items()) > cap:
            continue
        obj = p.objective(choice) + eps * sum(p.tie[i][c] for i, c in choice.items())
        found.append((obj, choice))
        if len(found) > 4 * k + 64:
            found.sort(key=lambda t: t[0])
            del found[k:]
    found.sort(key=lambda t: t[0])
    return found[:k]
