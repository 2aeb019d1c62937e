"""The weighted search problem: cost vectors on nodes, cost matrices on edges.

Sources (inputs, parameters) used by exactly one op are folded into that op: for each of
the op's strategies the best source layout is known in closed form (``argmin`` of the edge
column plus the source's own cost), which removes most variables without losing optimality
(the memory of the folded choice is carried along).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .costmodel import CostModel, Weighted

__all__ = ["Problem"]


@dataclass
class Problem:
    """Node cost vectors ``cost[i]``, memory ``mem[i]`` and edges ``(i, j, matrix)``."""

    model: CostModel
    weighted: Weighted
    cost: list[np.ndarray]
    mem: list[np.ndarray]
    tie: list[np.ndarray]
    edges: list[tuple[int, int, np.ndarray]]
    active: list[int]
    folded: dict[int, tuple[int, np.ndarray]]  # source -> (consumer, best source k per consumer k)
    edge_ids: list[int] = field(default_factory=list)  # the CostModel edge of each edge

    @classmethod
    def build(cls, model: CostModel, w: Weighted, fold: bool = True) -> Problem:
        n = len(model.names)
        cost = [c.copy() for c in w.node_cost]
        mem = [m.copy() for m in w.mem]
        tie = [t.copy() for t in w.tie]
        folded: dict[int, tuple[int, np.ndarray]] = {}
        if fold:
            for i, name in enumerate(model.names):
                es = model.adj[i]
                if model.graph.node(name).is_source and len(es) == 1:
                    e = es[0]
                    j = model.index[model.edges[e].dst]
                    total = w.edge_cost[e] + cost[i][:, None]  # [ku, kv]
                    best = np.argmin(total, axis=0)  # first index on ties: replicated/DP first
                    cols = np.arange(total.shape[1])
                    cost[j] = cost[j] + total[best, cols]
                    mem[j] = mem[j] + mem[i][best]
                    folded[i] = (j, best)
        skip_edges = {model.adj[i][0] for i in folded}
        edges, edge_ids = [], []
        for e, et in enumerate(model.edges):
            i, j = model.index[et.src], model.index[et.dst]
            if e in skip_edges:
                continue
            if i == j:  # a node reading its own previous copy: both ends take one strategy
                cost[i] = cost[i] + np.diagonal(w.edge_cost[e])
            else:
                edges.append((i, j, w.edge_cost[e]))
                edge_ids.append(e)
        active = [i for i in range(n) if i not in folded]
        return cls(model, w, cost, mem, tie, edges, active, folded, edge_ids)

    def expand(self, choice: dict[int, int]) -> list[int]:
        """Strategy index of every node, folded sources included."""
        full = [0] * len(self.model.names)
        for i, k in choice.items():
            full[i] = int(k)
        for i, (j, best) in self.folded.items():
            full[i] = int(best[full[j]])
        return full

    def objective(self, choice: dict[int, int]) -> float:
        c = sum(float(self.cost[i][k]) for i, k in choice.items())
        return c + sum(float(m[choice[i], choice[j]]) for i, j, m in self.edges)

    @cached_property
    def eps(self) -> float:
        """Tie-break weight: a billionth of the largest cost, so that ties prefer data
        parallelism without ever outweighing a real difference."""
        if not self.weighted.params.prefer_data_parallel_on_ties:
            return 0.0
        # forbidden choices (constraints, followers) cost inf: the scale is the finite ones'
        scale = max((float(np.abs(c[np.isfinite(c)]).max(initial=0.0)) for c in self.cost
                     if c is not None and c.size), default=1.0)  # fmt: skip
        return 1e-9 * (scale or 1.0)

    def min_memory(self) -> float:
        """The smallest memory any assignment needs (each node at its own minimum)."""
        return float(sum(self.mem[i].min() for i in self.active))
