"""Repeated layers solved exactly as a chain (dynamic programming over the layers).

A run of ``L`` identical layers that meet only through one value (the residual stream of
a transformer: layer ``k+1`` reads layer ``k``'s output ``R``) is a chain. One layer is
eliminated (``solvers.dynamic.Elimination``) down to its two ends, which gives

    T[s, t] = the cheapest cost of one layer whose input R was laid out by strategy s and
              whose own R takes strategy t (the layer-to-layer redistribution included).

``C = T ⊗ T ⊗ ... ⊗ T`` (``L`` min-plus products) is then the exact cost of the whole run
between layer ``a``'s R and layer ``b``'s R. The *outer* problem keeps every node outside
the run, layer ``b``'s R, and the edge ``C`` between the two R; any solver solves it, and
the layers' strategies are recovered backwards. Layers may take different strategies, so
the chain's optimum is the optimum of the expanded graph (no "every layer alike"
restriction), for tables built for two layers only.

>>> import explorer as ex
>>> g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=128)
>>> plan = ex.search(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"), "dynamic_programming")
>>> plan.status, "solved as a chain" in plan.diagnostics["repeated_layers"]
('optimal', True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .problem import Problem
from .repeats import Repeats
from .solvers.dynamic import Elimination

__all__ = ["Chain", "build_chain"]


@dataclass
class Chain:
    """The outer problem of a tiled Problem and how to expand its solutions."""

    outer: Problem
    tiled: Problem
    repeats: Repeats
    tile: list[int]  # active tile nodes (reduced indices)
    r_in: int  # layer a's R (the chain's input)
    r_out: int  # the tile's R (in the outer problem: layer b's R)
    elimination: Elimination
    isolated: dict[int, int]  # tile nodes without edges: their own best
    args: list[np.ndarray]  # min-plus argmins, one per product

    def expand(self, choice: dict[int, int]) -> dict[str, int]:
        """Full-graph node name -> strategy index, from a choice of the outer problem."""
        p, r = self.tiled, self.repeats
        names = p.model.names
        base = dict(choice)
        for i in self.tile:  # the tile's own entries are per layer, set below
            base.pop(i, None)
        full = p.expand({**{i: 0 for i in self.tile}, **base})
        out: dict[str, int] = {}
        tile_set = set(self.tile) | {s for s, (j, _) in p.folded.items() if j in self.tile}
        for i, k in enumerate(full):
            if i not in tile_set:
                out[names[i]] = k
        count = r.last - r.first
        res = [0] * count
        res[-1] = choice[self.r_out]
        s_a = choice[self.r_in]
        for t in range(count - 1, 0, -1):
            res[t - 1] = int(self.args[t - 1][s_a, res[t]])
        prefix = f"layers.{r.rep_layer}."
        for t in range(count):
            prev = s_a if t == 0 else res[t - 1]
            inside = self.elimination.replay({self.r_in: prev, self.r_out: res[t],
                                              **self.isolated})  # fmt: skip
            layer = f"layers.{r.rep_layer + t}."
            for i in tile_set:
                if i in p.folded:
                    j, best = p.folded[i]
                    k = int(best[inside[j]])
                else:
                    k = inside[i]
                out[layer + names[i][len(prefix) :]] = k
        return out


def build_chain(p: Problem, repeats: Repeats) -> Chain | None:
    """The chain of a tiled problem, or None where its layers meet through more than one
    value (or an outside value feeds every layer, or a layer does not reduce to its ends):
    then the tiled problem (every layer alike, priced exactly) is solved instead."""
    m = p.model
    names = m.names
    r = repeats
    count = r.last - r.first
    prefix, first = f"layers.{r.rep_layer}.", f"layers.{r.first}."
    tile = [i for i in p.active if names[i].startswith(prefix)]
    tile_set = set(tile)
    wraps = {(w.src, w.dst) for w in r.wrap_edges}
    sources = {w.src for w in r.wrap_edges}
    if len(sources) != 1 or any(w.src == w.dst for w in r.wrap_edges):
        return None
    (r_out_name,) = sources
    r_in_name = first + r_out_name[len(prefix) :]
    r_out, r_in = m.index[r_out_name], m.index[r_in_name]
    if r_out not in tile_set or r_in in tile_set or r_in not in p.active:
        return None
    if [s.name for s in m.nodes[r_out].strategies] != [s.name for s in m.nodes[r_in].strategies]:
        return None
    if any(j in tile_set and not names[i].startswith(prefix) for i, (j, _) in p.folded.items()):
        return None  # an outside value read by the tile alone: it would need a copy per layer
    eps = p.eps
    unit_cost = {i: p.cost[i] / count + eps * p.tie[i] for i in tile}
    unit_cost[r_in] = np.zeros(len(p.cost[r_in]))
    unit_edges, outer_edges, outer_ids = [], [], []
    for (i, j, mat), e in zip(p.edges, p.edge_ids, strict=True):
        et = m.edges[e]
        in_i, in_j = i in tile_set, j in tile_set
        if (et.src, et.dst) in wraps and e >= m.n_graph_edges:
            continue  # the chain prices layer -> layer
        if in_i and in_j:
            unit_edges.append((i, j, mat / count))
        elif in_j and i == r_in:
            unit_edges.append((i, j, mat))  # priced once per layer: its multiplicity is one
        elif in_j or (in_i and i != r_out):
            return None  # an outside value feeds every layer, or a layer feeds outside
        else:
            outer_edges.append((i, j, mat))
            outer_ids.append(e)
    el = Elimination(unit_cost, unit_edges, keep=frozenset({r_in, r_out})).run()
    isolated = {}
    const = 0.0
    for i in el.left:
        if i in (r_in, r_out):
            continue
        if el.adj[i]:
            return None  # the layer does not reduce to its two ends
        isolated[i] = int(np.argmin(el.cost[i]))
        const += float(el.cost[i][isolated[i]])
    link = el.edge(r_in, r_out) if r_out in el.adj[r_in] else 0.0
    T = el.cost[r_in][:, None] + link + el.cost[r_out][None, :] + const
    C, args = T, []
    for _ in range(count - 1):
        tot = C[:, :, None] + T[None, :, :]
        args.append(tot.argmin(axis=1))
        C = tot.min(axis=1)
    outer_edges.append((r_in, r_out, C))
    outer_ids.append(-1)
    cost, mem, tie = list(p.cost), list(p.mem), list(p.tie)
    cost[r_out] = np.zeros(len(C))
    tie[r_out] = np.zeros(len(C))  # the chain carries the layers' tie-breaks
    active = [i for i in p.active if i not in tile_set or i == r_out]
    folded = {i: f for i, f in p.folded.items() if f[0] in active}
    outer = Problem(m, p.weighted, cost, mem, tie, outer_edges, active, folded, outer_ids)
    return Chain(outer, p, r, tile, r_in, r_out, el, isolated, args)
