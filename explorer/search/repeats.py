"""Repeated structure: identical consecutive layers are planned as one tile.

Layers are the ``layers.N`` scopes. Two layers are identical when their nodes match one
for one (op, type, attributes, and inputs: inside the layer, from the previous layer, or
the same outside value). For the longest run ``a..b`` of identical layers the planner keeps
layers ``a`` and ``a+1`` (the tile, standing for ``a+1..b``), drops the rest, and prices
the expanded plan exactly:

- the tile's nodes and the edges inside it (or from outside values) count ``b - a`` times;
- the edges from layer ``a`` into the tile count once (layer ``a`` -> ``a+1``);
- the layer-to-layer edges between two copies of the tile (``k -> k+1`` for
  ``a+1 <= k < b``) are *wrap edges*: an edge from the tile's producer to the tile's
  consumer, priced ``b - a - 1`` times.

So the cost of a tiled plan is the cost of the expanded plan (every dropped layer takes the
tile's strategies), and the tile is solved with its boundary in view.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..ir import Graph
from ..sharding import Strategy

__all__ = ["Repeats", "WrapEdge", "find_repeats"]

_LAYER = re.compile(r"^layers\.(\d+)(\.|$)")


@dataclass(frozen=True)
class WrapEdge:
    """A layer-to-layer edge between two copies of the tile, in the reduced graph's names:
    ``src`` (in the tile, standing for layer k) feeds ``dst`` (in the tile, layer k+1) at
    input ``pos``, ``count`` times."""

    src: str
    dst: str
    pos: int
    count: int


@dataclass(frozen=True)
class Repeats:
    """The tiled graph of a run of identical layers and how to expand its plans.

    Attributes:
        reduced: the graph with layers ``first`` and ``rep_layer`` (= first + 1) kept.
        multiplicity: tile node -> how many layers it stands for (``last - first``).
        edge_multiplicity: (producer, consumer) -> count, where it differs from the
            consumer's multiplicity (edges from layer ``first`` into the tile: once).
        wrap_edges: the layer-to-layer edges between copies of the tile.
    """

    reduced: Graph
    multiplicity: dict[str, int]
    edge_multiplicity: dict[tuple[str, str], int]
    wrap_edges: tuple[WrapEdge, ...]
    first: int
    last: int
    rep_layer: int
    _reps: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    _names: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    def rep(self, name: str) -> str:
        """The node of the reduced graph that stands for ``name``."""
        return _rep_name(name, self.rep_layer, self.last)

    def expand(self, assignment: dict[str, Strategy]) -> tuple[dict[str, Strategy], dict[str, str]]:
        """The strategy of every node of the full graph (dropped layers repeat the tile's),
        and the map dropped node -> its tile node."""
        full: dict[str, Strategy] = {}
        for name in self._names:
            src = self._reps.get(name)
            full[name] = assignment[name] if src is None else assignment[src]._renamed(name)
        return full, dict(self._reps)

    def describe(self) -> str:
        n = self.last - self.first + 1
        return (f"layers {self.first}..{self.last} identical: {n} layers planned as 2 "
                f"(layer {self.rep_layer} counted {self.last - self.first} times, "
                f"{len(self.wrap_edges)} layer-to-layer edge(s) priced "
                f"{self.last - self.first - 1} times)")  # fmt: skip


def _rep_name(name: str, rep_layer: int, last: int) -> str:
    m = _LAYER.match(name)
    if m and rep_layer < int(m.group(1)) <= last:
        return f"layers.{rep_layer}." + name[m.end() :]
    return name


def _layer_of(name: str) -> int | None:
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


def _signature(layers: dict[int, list], k: int) -> tuple:
    prefix, prev = f"layers.{k}.", f"layers.{k - 1}."
    out = []
    for n in layers[k]:
        refs = []
        for a in n.inputs:
            if a.startswith(prefix):
                refs.append(("L", a[len(prefix) :]))
            elif a.startswith(prev):
                refs.append(("P", a[len(prev) :]))
            else:
                refs.append(("X", a))
        out.append((n.name[len(prefix) :], n.op, n.type, n.attrs, tuple(refs)))
    return tuple(out)


def _longest_run(layers: dict[int, list]) -> tuple[int, int]:
    ks = sorted(layers)
    sigs = {k: _signature(layers, k) for k in ks}
    best = (0, 0)
    start = ks[0]
    for i in range(1, len(ks) + 1):
        if i == len(ks) or ks[i] != ks[i - 1] + 1 or sigs[ks[i]] != sigs[ks[i - 1]]:
            if ks[i - 1] - start > best[1] - best[0]:
                best = (start, ks[i - 1])
            if i < len(ks):
                start = ks[i]
    return best


def find_repeats(graph: Graph, min_run: int = 3) -> Repeats | None:
    """The longest run of at least ``min_run`` identical consecutive layers, tiled; None if
    the graph has none."""
    layers: dict[int, list] = {}
    for n in graph.nodes:
        k = _layer_of(n.name)
        if k is not None:
            layers.setdefault(k, []).append(n)
    if len(layers) < min_run:
        return None
    a, b = _longest_run(layers)
    if b - a + 1 < min_run:
        return None
    rep = a + 1
    dropped = {n.name for k in range(a + 2, b + 1) for n in layers[k]}

    def remap(name: str) -> str:
        m = _LAYER.match(name)
        if m and int(m.group(1)) == b:
            return f"layers.{rep}." + name[m.end() :]
        return name

    nodes = []
    for n in graph.nodes:
        if n.name in dropped:
            continue
        k = _layer_of(n.name)
        if k is None or k > b:
            n = dataclasses.replace(n, inputs=tuple(remap(x) for x in n.inputs))
        nodes.append(n)
    reduced = Graph(tuple(nodes), tuple(remap(o) for o in graph.outputs), graph.name)
    mult = {n.name: b - a for n in layers[rep]}
    prev, here = f"layers.{a}.", f"layers.{rep}."
    emult: dict[tuple[str, str], int] = {}
    wraps: list[WrapEdge] = []
    for n in layers[rep]:
        for pos, x in enumerate(n.inputs):
            if x.startswith(prev):  # layer a -> a+1 once; a+1 -> a+2 ... b-1 -> b: wraps
                emult[x, n.name] = 1
                wraps.append(WrapEdge(here + x[len(prev) :], n.name, pos, b - a - 1))
    names = tuple(n.name for n in graph.nodes)
    reps = {name: _rep_name(name, rep, b) for name in names}
    reps = {k: v for k, v in reps.items() if k != v}
    return Repeats(reduced, mult, emult, tuple(wraps), a, b, rep, reps, names)
