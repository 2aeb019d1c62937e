"""Recursive programming's local moves, on hand-made problems."""

from types import SimpleNamespace

import numpy as np

from explorer.search.problem import Problem
from explorer.search.solvers.recursive import _Local


def chain_problem() -> Problem:
    """Three ops in a row, a - b - c, two strategies each. Every op prefers strategy 1
    (3 cheaper) but a mismatch with a neighbour costs 10: from all-0, no single op and no
    pair gains (6 < 10), only the three together (9)."""
    model = SimpleNamespace(names=["a", "b", "c"])
    weighted = SimpleNamespace(params=SimpleNamespace(prefer_data_parallel_on_ties=False))
    cost = [np.array([3.0, 0.0]) for _ in range(3)]
    mismatch = np.array([[0.0, 10.0], [10.0, 0.0]])
    edges = [(0, 1, mismatch), (1, 2, mismatch)]
    zero = [np.zeros(2) for _ in range(3)]
    return Problem(model, weighted, cost, zero, zero, edges, [0, 1, 2], {})


def test_chain_move_re_picks_three_ops_that_pairs_cannot():
    p = chain_problem()
    local = _Local(p)
    start = np.zeros((1, 3), dtype=np.intp)
    by_pairs = local.descend(start, [0, 1, 2], chains=False)
    assert by_pairs.tolist() == [[0, 0, 0]]  # stuck: a local optimum of single and pair moves
    by_chains = local.descend(by_pairs, [0, 1, 2], chains=True, settled=True)
    assert by_chains.tolist() == [[1, 1, 1]]
    assert local.objective(by_chains)[0] == 0.0 < local.objective(by_pairs)[0] == 9.0


def test_descend_never_increases_the_total_and_is_deterministic():
    rng = np.random.default_rng(0)
    n, k = 8, 4
    model = SimpleNamespace(names=[f"n{i}" for i in range(n)])
    weighted = SimpleNamespace(params=SimpleNamespace(prefer_data_parallel_on_ties=False))
    cost = [rng.random(k) for _ in range(n)]
    edges = [(i, i + 1, rng.random((k, k))) for i in range(n - 1)] + [(0, 4, rng.random((k, k)))]
    zero = [np.zeros(k) for _ in range(n)]
    p = Problem(model, weighted, cost, zero, zero, edges, list(range(n)), {})
    local = _Local(p)
    starts = rng.integers(0, k, size=(6, n))
    before = local.objective(starts).min()
    out = [local.descend(starts, list(range(n)), chains=c) for c in (False, True)]
    for x in out:
        assert local.objective(x).min() <= before + 1e-12
    again = local.descend(starts, list(range(n)), chains=True)
    assert np.array_equal(again, out[1])
