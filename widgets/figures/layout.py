"""Layered DAG layout (left to right by topological depth) with collapsible layer scopes.

Pure data (numpy only): the figure builders and the views share it, and tests check it
without plotly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from explorer.ir import Graph

__all__ = ["GraphLayout", "graph_layout", "layer_scopes", "box_id", "LARGE_GRAPH"]

LARGE_GRAPH = 2000  # nodes: from here on draw with WebGL and start collapsed (issue 7)
_REPEATED = re.compile(r"^(.*\.)?\d+$")  # a scope ending in an index: "layers.3", "h.11"
BOX_PREFIX = "scope:"


def box_id(scope: str) -> str:
    """The unit id of a collapsed scope (never a node name: node names have no colon)."""
    return BOX_PREFIX + scope


def layer_scopes(graph: Graph) -> tuple[str, ...]:
    """The repeated layer scopes (``layers.0`` ... ``layers.47``), in graph order.

    The shortest scope prefix that ends in an index: ``layers.3`` for ``layers.3.attn``.
    """
    seen: dict[str, None] = {}
    for scope in graph.scopes():
        parts = scope.split(".")
        for k in range(1, len(parts) + 1):
            if parts[k - 1].isdigit():
                seen.setdefault(".".join(parts[:k]), None)
                break
    return tuple(seen)


@dataclass(frozen=True)
class GraphLayout:
    """Units (node names or collapsed scope boxes) with positions and unit-level edges.

    Attributes:
        units: unit ids in topological order; a box's id is ``box_id(scope)``.
        members: unit -> the node names it stands for (one for a plain node).
        x, y: positions (x = topological depth of the unit).
        edges: (i, j) unit index pairs, producer to consumer, deduplicated.
        is_box: per unit, True for a collapsed scope.
    """

    units: tuple[str, ...]
    members: dict[str, tuple[str, ...]]
    x: np.ndarray
    y: np.ndarray
    edges: tuple[tuple[int, int], ...]
    is_box: np.ndarray

    def index(self, unit: str) -> int:
        return self.units.index(unit)

    def unit_of(self, node: str) -> str | None:
        for u, m in self.members.items():
            if node in m:
                return u
        return None

    @property
    def num_nodes(self) -> int:
        return sum(len(m) for m in self.members.values())


def graph_layout(graph: Graph, collapsed: Iterable[str] = ()) -> GraphLayout:
    """Lay out ``graph`` with the scopes in ``collapsed`` drawn as one box each.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> lay = graph_layout(g, collapsed=layer_scopes(g))
    >>> lay.units[1:], lay.edges
    (('scope:layers.0', 'scope:layers.1'), ((0, 1), (1, 2)))
    """
    boxes = tuple(collapsed)
    box_set = set(boxes)
    unit_of: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for n in graph.nodes:
        u = n.name
        if box_set and n.scope:
            parts = n.scope.split(".")
            for k in range(1, len(parts) + 1):
                prefix = ".".join(parts[:k])
                if prefix in box_set:
                    u = box_id(prefix)
                    break
        unit_of[n.name] = u
        members.setdefault(u, []).append(n.name)
    order = list(members)  # first appearance
    pos = {u: i for i, u in enumerate(order)}
    preds: list[set[int]] = [set() for _ in order]
    for a, b, _ in graph.edges():
        ua, ub = pos[unit_of[a]], pos[unit_of[b]]
        if ua != ub:
            preds[ub].add(ua)
    # Kahn's algorithm (iterative: 2,000-node graphs must not recurse), stable by first use.
    succs: list[list[int]] = [[] for _ in order]
    indeg = [len(p) for p in preds]
    for j, ps in enumerate(preds):
        for i in sorted(ps):
            succs[i].append(j)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    topo: list[int] = []
    while ready:
        ready.sort(reverse=True)
        i = ready.pop()
        topo.append(i)
        for j in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if len(topo) != len(order):
        raise ValueError(
            f"collapsing {sorted(box_set)[:3]} makes graph {graph.name!r} cyclic; collapse "
            "whole layer scopes (see layer_scopes)"
        )
    depth = np.zeros(len(order), dtype=np.int64)
    for i in topo:
        for j in succs[i]:
            depth[j] = max(depth[j], depth[i] + 1)
    # Sources (inputs, weights) sit just left of their first consumer, not all in column 0.
    for i in reversed(topo):
        if not preds[i] and succs[i]:
            depth[i] = max(min(int(depth[j]) for j in succs[i]) - 1, 0)
    # Within a column, order by the mean height of the predecessors (one barycentre pass).
    y = np.zeros(len(order))
    columns: dict[int, list[int]] = {}
    for i in topo:
        columns.setdefault(int(depth[i]), []).append(i)
    for d in sorted(columns):
        col = columns[d]
        key = [float(np.mean([y[p] for p in preds[i]])) if preds[i] else 0.0 for i in col]
        ranked = [i for _, _, i in sorted(zip(key, range(len(col)), col, strict=True))]
        for r, i in enumerate(ranked):
            y[i] = r - (len(col) - 1) / 2
    new = {old: k for k, old in enumerate(topo)}
    units = tuple(order[i] for i in topo)
    edges = tuple(sorted((new[p], new[j]) for j in topo for p in preds[j]))
    return GraphLayout(
        units=units,
        members={u: tuple(members[u]) for u in units},
        x=depth[topo].astype(float),
        y=y[topo],
        edges=edges,
        is_box=np.array([u.startswith(BOX_PREFIX) for u in units], dtype=bool),
    )
