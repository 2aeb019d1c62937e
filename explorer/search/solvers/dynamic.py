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
by the ILP, and the eliminations are replayed backwards to recover every decision. Every
elimination is exact: for any choice of the nodes left, the replay gives the best choice
of the eliminated ones.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..problem import Problem
from .exhaustive import EXHAUSTIVE_LIMIT
from .ilp import DEFAULT_TIME_LIMIT_S, solve_ilp

__all__ = ["solve_dynamic", "Elimination"]


class Elimination:
    """Graph elimination over node cost vectors and edge matrices.

    Args:
        cost: node -> cost vector (copied; eliminated nodes' costs move into neighbours).
        edges: ``(i, j, matrix [ki, kj])``; parallel edges merge, self-loops are ignored.
        keep: nodes never eliminated (the ends of a repeated layer).
    """

    def __init__(self, cost: dict[int, np.ndarray], edges, keep: frozenset[int] = frozenset()):
        self.cost = dict(cost)
        self.edges: dict[tuple[int, int], np.ndarray] = {}
        self.adj: dict[int, set[int]] = {i: set() for i in cost}
        self.keep = keep
        self.log: list[tuple] = []
        n_edges = 0
        for i, j, m in edges:
            if i != j:
                self._add(i, j, m)
                n_edges += 1
        self.counts = {"merge": n_edges - len(self.edges), "contract": 0, "operator": 0,
                       "star": 0}  # fmt: skip

    def _add(self, i: int, j: int, m: np.ndarray) -> None:
        if i > j:
            i, j, m = j, i, m.T
        self.edges[i, j] = self.edges[i, j] + m if (i, j) in self.edges else m
        self.adj[i].add(j)
        self.adj[j].add(i)

    def edge(self, i: int, j: int) -> np.ndarray:
        return self.edges[i, j] if i < j else self.edges[j, i].T

    def _drop(self, i: int, j: int) -> None:
        self.edges.pop((min(i, j), max(i, j)))
        self.adj[i].discard(j)
        self.adj[j].discard(i)

    def run(self) -> Elimination:
        """Eliminate until no rule fits (lowest degree first)."""
        while self._step():
            pass
        return self

    def _step(self) -> bool:
        cost, adj = self.cost, self.adj
        for v in sorted(adj, key=lambda x: len(adj[x])):
            deg = len(adj[v])
            if deg == 0 or v in self.keep:
                continue
            if deg == 1:
                (u,) = adj[v]
                t = self.edge(u, v) + cost[v][None, :]
                self.log.append(("contract", v, u, np.argmin(t, axis=1)))
                cost[u] = cost[u] + t.min(axis=1)
                self._drop(u, v)
                del adj[v]
                self.counts["contract"] += 1
                return True
            if deg == 2:
                u, w = sorted(adj[v])
                t = self.edge(u, v)[:, :, None] + cost[v][None, :, None] + self.edge(v, w)[None]
                self.log.append(("operator", v, (u, w), np.argmin(t, axis=1)))
                self._drop(u, v)
                self._drop(v, w)
                del adj[v]
                if (min(u, w), max(u, w)) in self.edges:
                    self.counts["merge"] += 1
                self._add(u, w, t.min(axis=1))
                self.counts["operator"] += 1
                return True
            if all(len(cost[u]) == 1 for u in adj[v]):
                t = cost[v] + sum(self.edge(u, v)[0] for u in adj[v])
                self.log.append(("star", v, None, int(np.argmin(t))))
                for u in list(adj[v]):
                    self._drop(u, v)
                del adj[v]
                self.counts["star"] += 1
                return True
        return False

    @property
    def left(self) -> list[int]:
        """The nodes not eliminated, in order."""
        return sorted(self.adj)

    def replay(self, choice: dict[int, int]) -> dict[int, int]:
        """``choice`` (of the nodes left) completed with every eliminated node's best."""
        choice = dict(choice)
        for kind, v, other, arg in reversed(self.log):
            if kind == "contract":
                choice[v] = int(arg[choice[other]])
            elif kind == "operator":
                u, w = other
                choice[v] = int(arg[choice[u], choice[w]])
            else:
                choice[v] = int(arg)
        return choice


def solve_dynamic(
    p: Problem, time_limit_s: float = DEFAULT_TIME_LIMIT_S
) -> tuple[dict[int, int], dict[str, object]]:
    """The choice per active node and diagnostics: eliminations, the remainder, its solver,
    and whether the result is proved optimal (``optimal``; the ILP's ``gap`` if not)."""
    el = Elimination({i: p.cost[i] + p.eps * p.tie[i] for i in p.active}, p.edges).run()
    cost = el.cost
    remainder = [i for i in el.left if el.adj[i]]
    choice = {i: int(np.argmin(cost[i])) for i in el.left if not el.adj[i]}
    optimal, gap = True, 0.0
    if remainder:
        sub = Problem(p.model, p.weighted, [None] * len(p.model.names), p.mem, p.tie,
                      [(i, j, m) for (i, j), m in el.edges.items()], remainder, {})  # fmt: skip
        for i in remainder:
            sub.cost[i] = cost[i]
        if math.prod(len(cost[i]) for i in remainder) <= EXHAUSTIVE_LIMIT:
            best = None
            for combo in itertools.product(*(range(len(cost[i])) for i in remainder)):
                ch = dict(zip(remainder, combo, strict=True))
                obj = sub.objective(ch)
                if best is None or obj < best[0]:
                    best = (obj, ch)
            choice.update(best[1])
            how = "exhaustive"
        else:
            sol = solve_ilp(sub, None, time_limit_s=time_limit_s)[0]
            choice.update(sol.choice)
            optimal, gap = sol.optimal, sol.gap
            how = "ilp"
    else:
        how = "none"
    choice = el.replay(choice)
    diag = {"eliminations": el.counts, "remainder_nodes": len(remainder),
            "remainder_solver": how, "reduced_fully": not remainder, "optimal": optimal,
            "gap": gap}  # fmt: skip
    return choice, diag
