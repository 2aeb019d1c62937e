"""Sharding propagation: from the user's annotations outwards (MindSpore's ``shard()``)."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import SearchError
from ..problem import Problem
from .deadline import Deadline

__all__ = ["solve_propagation", "neighbours"]


def neighbours(p: Problem) -> list[list[tuple[int, np.ndarray]]]:
    """For every node, (neighbour, matrix oriented [node k, neighbour k])."""
    nb: list[list[tuple[int, np.ndarray]]] = [[] for _ in p.model.names]
    for i, j, m in p.edges:
        nb[i].append((j, m))
        nb[j].append((i, m.T))
    return nb


def solve_propagation(
    p: Problem, fixed: dict[int, int], deadline: Deadline | None = None
) -> dict[int, int]:
    """Sharding propagation: annotated nodes keep their strategy; breadth-first from them,
    each reached node takes the strategy with the cheapest own cost plus redistribution to
    its already fixed neighbours. Nodes no annotation reaches follow in graph order.
    When ``deadline`` passes, the nodes not yet reached take their cheapest own strategy
    (their neighbours unseen)."""
    nb = neighbours(p)
    choice = dict(fixed)
    queue = deque(sorted(fixed))

    graph, names = p.model.graph, p.model.names

    def settle(v: int) -> None:
        costs = p.cost[v] + p.eps * p.tie[v]
        if deadline is not None and deadline.passed(
            f"after placing {len(choice) - len(fixed)} of {len(p.active) - len(fixed)} nodes "
            "by propagation (the rest took their cheapest own strategy)"
        ):
            choice[v] = int(np.argmin(costs))
            return
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
