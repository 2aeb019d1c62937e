"""The exact optimum by integer programming (scipy.optimize.milp, HiGHS)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ..errors import SearchError
from ..problem import Problem

__all__ = ["solve_ilp", "ILPSolution", "DEFAULT_TIME_LIMIT_S", "ILP_TOP_K_LIMIT", "count_text"]

DEFAULT_TIME_LIMIT_S = 60.0
#: Most plans one ILP search ranks: each further plan is one more whole ILP solve (with a
#: no-good cut), about a second each on a mid-size model. Raise it by assigning
#: ``explorer.search.solvers.ilp.ILP_TOP_K_LIMIT``; ``time_limit_s`` bounds all solves together.
ILP_TOP_K_LIMIT = 20


@dataclass(frozen=True)
class ILPSolution:
    """One solution: its objective, the choice per active node, whether HiGHS proved it
    optimal, and the relative MIP gap it stopped at (0 when proved)."""

    objective: float
    choice: dict[int, int]
    optimal: bool
    gap: float
    message: str
    #: True on the last solution when ``time_limit_s`` ran out before ``k`` were found.
    stopped_early: bool = False


def solve_ilp(
    p: Problem, cap: float | None, k: int = 1, time_limit_s: float = DEFAULT_TIME_LIMIT_S
) -> list[ILPSolution]:
    """The exact optimum by integer programming.

    Formulation (variables named as in the code):
        choose[i][a] in {0, 1}       node i takes strategy a;  sum_a choose[i][a] = 1
        pair[e][a, b] in [0, 1]      edge e=(i, j) takes (a, b);
            sum_b pair[e][a, b] = choose[i][a],  sum_a pair[e][a, b] = choose[j][b]
            (with one-hot choose these marginals force pair = choose[i] * choose[j])
        memory: sum_{i,a} mem[i][a] * choose[i][a] <= cap
        minimise sum cost[i][a] choose[i][a] + sum M_e[a, b] pair[e][a, b]
    Returns up to ``k`` solutions, each further one excluded by a no-good cut; a solution
    found when HiGHS hit ``time_limit_s`` has ``optimal=False`` and its gap. ``time_limit_s``
    bounds the ``k`` solves together: when it runs out, fewer than ``k`` solutions return.
    ``k`` above ``ILP_TOP_K_LIMIT`` raises ``SearchError``.
    """
    check_top_k(k)
    # scipy.optimize takes longer to import than the rest of explorer (~1 s of CPU): it is
    # imported by the first ILP, not by every process that imports explorer (the torchrun
    # ranks and JAX checks of an export, the CLI) and never solves one
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    deadline = time.monotonic() + time_limit_s
    eps = p.eps
    off: dict[int, int] = {}
    n = 0
    for i in p.active:
        off[i] = n
        n += len(p.cost[i])
    c = np.zeros(n)
    for i in p.active:
        c[off[i] : off[i] + len(p.cost[i])] = p.cost[i] + eps * p.tie[i]
    # a forbidden choice (infinite cost: a constraint) is a variable bounded to 0, at cost 0
    upper = np.where(np.isfinite(c), 1.0, 0.0)
    c = np.where(np.isfinite(c), c, 0.0)
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
    pair_c = np.array(pair_c, dtype=float)
    upper = np.concatenate([upper, np.where(np.isfinite(pair_c), 1.0, 0.0)])
    cvec = np.concatenate([c, np.where(np.isfinite(pair_c), pair_c, 0.0)])
    # HiGHS's tolerances are absolute (~1e-7): costs in seconds can be far smaller, so the
    # objective is scaled to a largest coefficient of one, and the memory row to a cap of one.
    finite = np.abs(cvec[np.isfinite(cvec)])
    scale = float(finite.max()) if finite.size else 1.0
    cvec = cvec / (scale or 1.0)
    if cap is not None:
        add_row([(off[i] + a, float(p.mem[i][a]) / cap) for i in p.active
                 for a in range(len(p.cost[i]))], -np.inf, 1.0)  # fmt: skip
    integrality = np.concatenate([np.ones(n), np.zeros(total - n)])
    results: list[ILPSolution] = []
    cuts: list[list[int]] = []
    for _ in range(k):
        left = deadline - time.monotonic()
        if results and left <= 0:
            results[-1] = dataclasses.replace(results[-1], stopped_early=True)
            break
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
                   bounds=Bounds(0, upper),
                   options={"time_limit": max(left, 1e-3), "mip_rel_gap": 1e-9})  # fmt: skip
        if res.x is None:
            if not results:
                raise SearchError(
                    f"the ILP found no solution within time_limit_s={time_limit_s}: "
                    f"{res.message}; raise time_limit_s or use method='dynamic_programming'"
                )
            if res.status == 1:  # HiGHS hit the time limit before a further plan
                results[-1] = dataclasses.replace(results[-1], stopped_early=True)
            break
        choice = {}
        for i in p.active:
            seg = res.x[off[i] : off[i] + len(p.cost[i])]
            choice[i] = int(np.argmax(seg))
        optimal = res.status == 0
        gap = 0.0 if optimal else float(getattr(res, "mip_gap", None) or np.nan)
        results.append(ILPSolution(p.objective(choice), choice, optimal, gap, res.message))
        cuts.append([off[i] + a for i, a in choice.items()])
    return results


def check_top_k(k: int) -> None:
    """``k`` plans are within ``ILP_TOP_K_LIMIT``, or ``SearchError`` says how to raise it."""
    if k > ILP_TOP_K_LIMIT:
        raise SearchError(
            f"top_k={count_text(k)} plans: the ILP ranks at most ILP_TOP_K_LIMIT={ILP_TOP_K_LIMIT} "
            "(each plan is one more ILP solve); pass a smaller top_k, or raise "
            "explorer.search.solvers.ilp.ILP_TOP_K_LIMIT and time_limit_s"
        )


def count_text(k: int) -> str:
    """``k`` for a message: exact with separators, or its size when too long to print."""
    return f"{k:,}" if k.bit_length() < 64 else f"about 2^{k.bit_length() - 1}"
