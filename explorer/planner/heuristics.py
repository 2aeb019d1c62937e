"""Fast planners: MindSpore-style recursive programming and sharding propagation."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..sharding import Strategy
from .problem import Problem
from .solvers import SearchError

__all__ = ["solve_recursive", "solve_propagation"]


TOP_OPS, TOP_CUTS = 6, 8  # propagation starts of recursive programming: ops x their cuts
PAIR_ROUNDS = 3  # local descent: rounds of (single-op sweeps, then one sweep over edges)


def _neighbours(p: Problem) -> list[list[tuple[int, np.ndarray]]]:
    """For every node, (neighbour, matrix oriented [node k, neighbour k])."""
    nb: list[list[tuple[int, np.ndarray]]] = [[] for _ in p.model.names]
    for i, j, m in p.edges:
        nb[i].append((j, m))
        nb[j].append((i, m.T))
    return nb


def _axis_letters(s: Strategy, axes: tuple[str, ...]) -> tuple[str | None, ...]:
    owner = {a: c for c, ax in s.dim_axes for a in ax}
    return tuple(owner.get(a) for a in axes)


def solve_recursive(p: Problem) -> dict[int, int]:
    """Recursive programming (see ``_rounds``) from a few starts, each refined by local
    descent; the cheapest wins. Starts: rounds over the mesh axes outermost first and
    innermost first, ops by descending cost and in graph order, and the all-replicated plan
    (rounds are myopic where latency dominates, on tiny tensors)."""
    model = p.model
    axes = tuple(a for a in model.mesh.axis_names if model.mesh.axis_size(a) > 1)
    nb = _neighbours(p)
    by_cost = sorted(p.active, key=lambda i: (-float(np.max(p.cost[i])), i))
    by_graph = sorted(p.active)
    starts = [{i: 0 for i in p.active}]
    for ax in dict.fromkeys((axes, axes[::-1])):
        for order in (by_cost, by_graph):
            starts.append(_rounds(p, ax, order, nb))
    # Coherent chains (heads split through a whole attention block) come from propagating
    # each of the costliest op's cheapest cuts through the graph.
    tops, scopes = [], set()
    for i in by_cost:  # the costliest op of each scope (attention, MLP, experts, head)
        scope = model.graph.node(model.names[i]).scope
        if scope not in scopes:
            scopes.add(scope)
            tops.append(i)
    for top in tops[:TOP_OPS]:
        for k in np.argsort(p.cost[top], kind="stable")[:TOP_CUTS]:
            starts.append(solve_propagation(p, {top: int(k)}))
    best = None
    seen: set[tuple] = set()
    for start in starts:
        key = tuple(sorted(start.items()))
        if key in seen:  # propagation from different cuts often lands on the same plan
            continue
        seen.add(key)
        plan = _refine(p, dict(start), nb, by_cost)
        if best is None or p.objective(plan) < p.objective(best):
            best = plan
    return best


def _rounds(p: Problem, axes: tuple[str, ...], order: list[int], nb) -> dict[int, int]:
    """One pass of recursive programming: one round per mesh axis, in the order given.

    In each round every op, visited in ``order``, picks which of its dims the round's
    axis cuts (or none): the cut with the lowest op cost plus the redistribution cost to
    every neighbour under the neighbour's current cut. Earlier rounds' cuts are kept, so
    the final strategy is built axis by axis as MindSpore builds it halving by halving
    (a mesh written as binary axes, e.g. ``Mesh({"d0": 2, ..., "d9": 2})``, gets
    log2(devices) rounds).
    """
    model = p.model
    # Which strategy cuts which dim on each axis depends on the tables only: cached on them.
    cache = model.__dict__.setdefault("_rp_keys", {}).setdefault(axes, {})
    keys: dict[int, dict[tuple, int]] = {}
    for i in p.active:
        if i not in cache:
            found: dict[tuple, int] = {}
            for k, s in enumerate(model.nodes[i].strategies):
                found.setdefault(_axis_letters(s, axes), k)
            cache[i] = found
        keys[i] = cache[i]
    decided: dict[int, tuple] = {i: (None,) * len(axes) for i in p.active}
    current = {i: keys[i][decided[i]] for i in p.active}
    cand_cache = model.__dict__.setdefault("_rp_cands", {}).setdefault(axes, {})

    def round_cands(r: int, i: int) -> tuple[tuple[tuple, ...], np.ndarray]:
        """Candidates: earlier rounds' cuts kept, this round's axis free, later ones unset."""
        ck = (i, r, decided[i][:r])
        if ck not in cand_cache:
            cand = [(key, k) for key, k in keys[i].items()
                    if key[:r] == decided[i][:r] and all(x is None for x in key[r + 1:])]  # fmt: skip
            cand_cache[ck] = (tuple(key for key, _ in cand), np.array([k for _, k in cand]))
        return cand_cache[ck]

    cands: dict[int, dict[int, np.ndarray]] = {}
    for r in range(len(axes)):
        cands[r] = {i: round_cands(r, i)[1] for i in p.active}
        visited: set[int] = set()
        for i in order:
            cand_keys, ks = round_cands(r, i)
            c = p.cost[i][ks] + p.eps * p.tie[i][ks]
            for j, m in nb[i]:
                if j in visited:  # neighbours that already cut this round: their cut
                    c = c + m[ks, current[j]]
                else:  # the others: the cheapest cut they could still take (look-ahead)
                    kj = cands[r][j]
                    c = c + (m[np.ix_(ks, kj)] + p.cost[j][kj][None, :]).min(axis=1)
            best = int(np.argmin(c))
            decided[i] = cand_keys[best]
            current[i] = int(ks[best])
            visited.add(i)
    return current


def _refine(p: Problem, current: dict[int, int], nb, order, sweeps: int = 8) -> dict[int, int]:
    """Local improvement, a descent (the total never grows): each op takes its best
    strategy given its neighbours'; then each edge re-picks both its ends together; until a
    sweep changes nothing."""

    def unary(i: int, skip: int = -1) -> np.ndarray:
        c = p.cost[i] + p.eps * p.tie[i]
        for j, m in nb[i]:
            if j != skip:
                c = c + m[:, current[j]]
        return c

    def single_sweeps() -> None:
        for _ in range(sweeps):
            changed = False
            for i in order:
                c = unary(i)
                k = int(np.argmin(c))
                if c[k] < c[current[i]] - 1e-12 * abs(c[current[i]]):
                    current[i] = k
                    changed = True
            if not changed:
                return

    for _ in range(PAIR_ROUNDS):
        single_sweeps()
        changed = False
        for i, j, _m in p.edges:
            if i == j:
                continue
            # both ends re-picked together, every other neighbour fixed (frees two ops that
            # are locked to each other); parallel edges between them all count once
            both = sum(mm for jj, mm in nb[i] if jj == j)
            c = unary(i, skip=j)[:, None] + unary(j, skip=i)[None, :] + both
            a, b = np.unravel_index(int(np.argmin(c)), c.shape)
            if c[a, b] < c[current[i], current[j]] - 1e-12 * abs(c[current[i], current[j]]):
                current[i], current[j] = int(a), int(b)
                changed = True
        if not changed:
            break
    return current


def solve_propagation(p: Problem, fixed: dict[int, int]) -> dict[int, int]:
    """Sharding propagation: annotated nodes keep their strategy; breadth-first from them,
    each reached node takes the strategy with the cheapest own cost plus redistribution to
    its already fixed neighbours. Nodes no annotation reaches follow in graph order."""
    nb = _neighbours(p)
    choice = dict(fixed)
    queue = deque(sorted(fixed))

    graph, names = p.model.graph, p.model.names

    def settle(v: int) -> None:
        costs = p.cost[v] + p.eps * p.tie[v]
        for j, m in nb[v]:
            if j in choice:
                costs = costs + m[:, choice[j]]
            elif graph.node(names[j]).is_source and len(nb[j]) == 1:
                # a weight only this op reads will follow it: count its best layout now
                costs = costs + (m + p.cost[j][None, :]).min(axis=1)
        choice[v] = int(np.argmin(costs))

    while queue:
        u = queue.popleft()
        for v, _ in nb[u]:
            if v not in choice:
                settle(v)
                queue.append(v)
    for v in p.active:
        if v not in choice:
            settle(v)
            queue.append(v)
            while queue:
                u = queue.popleft()
                for w, _ in nb[u]:
                    if w not in choice:
                        settle(w)
                        queue.append(w)
    if set(choice) != set(p.active):
        raise SearchError("sharding propagation left nodes without a strategy")
    return choice
