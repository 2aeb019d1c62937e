"""MindSpore-style dynamic programming by graph elimination.

Eliminations, applied until none fits:
- merge: parallel edges between two nodes become one (their matrices add);
- contract (leaf): a node with one neighbour folds into it,
  ``cost_u[a] += min_b (M[a, b] + cost_v[b])``;
- operator (chain): a node with two neighbours becomes an edge between them,
  ``N[a, c] = min_b (M_uv[a, b] + cost_v[b] + M_vw[b, c])`` (a triangle, whose two
  neighbours are already joined, then merges into their edge);
- star: a node whose neighbours all have one strategy folds like a leaf.
The remainder is solved exhaustively when small (exact: the graph "reduced fully"), else
by the ILP, and the eliminations are replayed backwards to recover every decision.
"""

from __future__ import annotations

import math

import numpy as np

from ..problem import Problem
from .exact import EXHAUSTIVE_LIMIT, solve_ilp

__all__ = ["solve_dynamic"]


def solve_dynamic(p: Problem) -> tuple[dict[int, int], dict[str, object]]:
    cost = {i: p.cost[i] + p.eps * p.tie[i] for i in p.active}
    edges: dict[tuple[int, int], np.ndarray] = {}
    adj: dict[int, set[int]] = {i: set() for i in p.active}

    def add_edge(i: int, j: int, m: np.ndarray) -> None:
        if i > j:
            i, j, m = j, i, m.T
        edges[i, j] = edges[i, j] + m if (i, j) in edges else m
        adj[i].add(j)
        adj[j].add(i)

    def edge(i: int, j: int) -> np.ndarray:
        return edges[i, j] if i < j else edges[j, i].T

    def drop(i: int, j: int) -> None:
        edges.pop((min(i, j), max(i, j)))
        adj[i].discard(j)
        adj[j].discard(i)

    for i, j, m in p.edges:
        if i != j:
            add_edge(i, j, m)
    log: list[tuple] = []
    counts = {"merge": len(p.edges) - len(edges), "contract": 0, "operator": 0, "star": 0}
    changed = True
    while changed:
        changed = False
        for v in sorted(adj, key=lambda x: len(adj[x])):
            deg = len(adj[v])
            if deg == 0:
                continue
            if deg == 1:
                (u,) = adj[v]
                t = edge(u, v) + cost[v][None, :]
                log.append(("contract", v, u, np.argmin(t, axis=1)))
                cost[u] = cost[u] + t.min(axis=1)
                drop(u, v)
                del adj[v]
                counts["contract"] += 1
                changed = True
                break
            if deg == 2:
                u, w = sorted(adj[v])
                t = edge(u, v)[:, :, None] + cost[v][None, :, None] + edge(v, w)[None, :, :]
                log.append(("operator", v, (u, w), np.argmin(t, axis=1)))
                drop(u, v)
                drop(v, w)
                del adj[v]
                if (min(u, w), max(u, w)) in edges:
                    counts["merge"] += 1
                add_edge(u, w, t.min(axis=1))
                counts["operator"] += 1
                changed = True
                break
            if all(len(cost[u]) == 1 for u in adj[v]):
                t = cost[v] + sum(edge(u, v)[0] for u in adj[v])
                log.append(("star", v, None, int(np.argmin(t))))
                for u in list(adj[v]):
                    drop(u, v)
                del adj[v]
                counts["star"] += 1
                changed = True
                break
    rest = sorted(adj)
    size = math.prod(len(cost[i]) for i in rest) if rest else 1
    choice: dict[int, int] = {}
    eliminated = {entry[1] for entry in log}
    isolated = [i for i in p.active if i not in eliminated and i not in rest]
    remainder = [i for i in rest if adj[i]]
    for i in isolated + [i for i in rest if not adj[i]]:
        choice[i] = int(np.argmin(cost[i]))
    if remainder:
        sub = Problem(p.model, p.weighted, [None] * len(p.model.names), p.mem, p.tie,
                      [(i, j, m) for (i, j), m in edges.items()], remainder, {})  # fmt: skip
        for i in remainder:
            sub.cost[i] = cost[i]
        size = math.prod(len(cost[i]) for i in remainder)
        if size <= EXHAUSTIVE_LIMIT:
            import itertools

            best = None
            for combo in itertools.product(*(range(len(cost[i])) for i in remainder)):
                ch = dict(zip(remainder, combo, strict=True))
                obj = sub.objective(ch)
                if best is None or obj < best[0]:
                    best = (obj, ch)
            choice.update(best[1])
            how = "exhaustive"
        else:
            choice.update(solve_ilp(sub, None)[0][1])
            how = "ilp"
    else:
        how = "none"
    for kind, v, other, arg in reversed(log):
        if kind == "contract":
            choice[v] = int(arg[choice[other]])
        elif kind == "operator":
            u, w = other
            choice[v] = int(arg[choice[u], choice[w]])
        else:
            choice[v] = int(arg)
    diag = {"eliminations": counts, "remainder_nodes": len(remainder), "remainder_solver": how,
            "reduced_fully": len(remainder) == 0}  # fmt: skip
    return choice, diag
