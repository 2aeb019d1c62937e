"""Exact solvers over a ``Problem``: exhaustive enumeration and the ILP (scipy HiGHS)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from ...errors import ExplorerError
from ..problem import Problem

__all__ = ["solve_exhaustive", "solve_ilp", "SearchError", "EXHAUSTIVE_LIMIT"]

EXHAUSTIVE_LIMIT = 200_000


class SearchError(ExplorerError, ValueError):
    """A search cannot run or has no solution; the message says why and what to do."""


def _tie_eps(p: Problem) -> float:
    return p.eps


def solve_exhaustive(p: Problem, cap: float | None, k: int = 1) -> list[tuple[float, dict]]:
    """Every assignment of the active nodes; the ``k`` best (ground truth for tiny graphs)."""
    sizes = [len(p.cost[i]) for i in p.active]
    count = math.prod(sizes)
    if count > EXHAUSTIVE_LIMIT:
        raise SearchError(
            f"exhaustive search would visit {count:,} assignments (limit {EXHAUSTIVE_LIMIT:,}); "
            "use method='ilp' or 'dynamic_programming' for graphs this size"
        )
    eps = _tie_eps(p)
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


def solve_ilp(p: Problem, cap: float | None, k: int = 1, time_limit_s: float = 60.0):
    """The exact optimum by integer programming (scipy.optimize.milp, HiGHS).

    Formulation (variables named as in the code):
        choose[i][a] in {0, 1}       node i takes strategy a;  sum_a choose[i][a] = 1
        pair[e][a, b] in [0, 1]      edge e=(i, j) takes (a, b);
            sum_b pair[e][a, b] = choose[i][a],  sum_a pair[e][a, b] = choose[j][b]
            (with one-hot choose these marginals force pair = choose[i] * choose[j])
        memory: sum_{i,a} mem[i][a] * choose[i][a] <= cap
        minimise sum cost[i][a] choose[i][a] + sum M_e[a, b] pair[e][a, b]
    Returns up to ``k`` solutions, each further one excluded by a no-good cut.
    """
    eps = _tie_eps(p)
    off: dict[int, int] = {}
    n = 0
    for i in p.active:
        off[i] = n
        n += len(p.cost[i])
    c = np.zeros(n)
    for i in p.active:
        c[off[i] : off[i] + len(p.cost[i])] = p.cost[i] + eps * p.tie[i]
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add_row(entries, lb, ub):
        nonlocal r
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lo.append(lb)
        hi.append(ub)
        r += 1

    for i in p.active:
        add_row([(off[i] + a, 1.0) for a in range(len(p.cost[i]))], 1.0, 1.0)
    pair_c = []
    # Edges between the same two nodes are merged first (parallel edges: one matrix).
    merged: dict[tuple[int, int], np.ndarray] = {}
    for i, j, m in p.edges:
        key, mat = ((i, j), m) if i < j else ((j, i), m.T)
        merged[key] = merged.get(key, 0) + mat
    for (i, j), m in merged.items():
        if not np.any(m):
            continue
        ku, kv = m.shape
        base = n + len(pair_c)
        pair_c.extend(np.ravel(m))
        for a in range(ku):
            add_row([(base + a * kv + b, 1.0) for b in range(kv)] + [(off[i] + a, -1.0)], 0, 0)
        for b in range(kv):
            add_row([(base + a * kv + b, 1.0) for a in range(ku)] + [(off[j] + b, -1.0)], 0, 0)
    total = n + len(pair_c)
    cvec = np.concatenate([c, np.array(pair_c)]) if pair_c else c
    # HiGHS's tolerances are absolute (~1e-7): costs in seconds can be far smaller, so the
    # objective is scaled to a largest coefficient of one, and the memory row to a cap of one.
    scale = float(np.abs(cvec).max()) or 1.0
    cvec = cvec / scale
    if cap is not None:
        add_row([(off[i] + a, float(p.mem[i][a]) / cap) for i in p.active
                 for a in range(len(p.cost[i]))], -np.inf, 1.0)  # fmt: skip
    integrality = np.concatenate([np.ones(n), np.zeros(total - n)])
    results = []
    cuts: list[list[int]] = []
    for _ in range(k):
        R, C, V, LO, HI = list(rows), list(cols), list(vals), list(lo), list(hi)
        for q, cut in enumerate(cuts):
            for col in cut:
                R.append(r + q)
                C.append(col)
                V.append(1.0)
            LO.append(-np.inf)
            HI.append(len(cut) - 1)
        A = sp.csr_array((V, (R, C)), shape=(len(LO), total))
        res = milp(cvec, constraints=LinearConstraint(A, LO, HI), integrality=integrality,
                   bounds=Bounds(0, 1),
                   options={"time_limit": time_limit_s, "mip_rel_gap": 1e-9})  # fmt: skip
        if res.x is None:
            if not results:
                raise SearchError(f"the ILP found no solution: {res.message}")
            break
        choice = {}
        for i in p.active:
            seg = res.x[off[i] : off[i] + len(p.cost[i])]
            choice[i] = int(np.argmax(seg))
        results.append((p.objective(choice), choice, res.status == 0, res.message))
        cuts.append([off[i] + a for i, a in choice.items()])
    return results
