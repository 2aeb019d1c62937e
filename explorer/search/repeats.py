"""Repeated structure: identical consecutive layers are planned once.

Layers are the ``layers.N`` scopes. Two layers are identical when their nodes match one
for one (op, type, attributes, and inputs: inside the layer, from the previous layer, or
the same outside value). For the longest run ``a..b`` of identical layers the planner keeps
layers ``a`` and ``a+1`` (so the layer-to-layer edge is inside the problem), drops the rest,
and counts layer ``a+1`` (its nodes and incoming edges) ``b - a`` times. The plan gives
every dropped layer the strategies of layer ``a+1``; the cost is exact for such plans.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..ir import Graph
from ..sharding import Strategy

__all__ = ["Repeats", "find_repeats"]

_LAYER = re.compile(r"^layers\.(\d+)(\.|$)")


@dataclass
class Repeats:
    reduced: Graph
    multiplicity: dict[str, int]
    first: int
    last: int
    rep_layer: int

    def rep(self, name: str) -> str:
        """The node of the reduced graph that stands for ``name``."""
        m = _LAYER.match(name)
        if m and self.rep_layer < int(m.group(1)) <= self.last:
            return f"layers.{self.rep_layer}." + name[m.end() :]
        return name

    def expand(self, assignment: dict[str, Strategy]) -> tuple[dict[str, Strategy], dict[str, str]]:
        raise NotImplementedError  # replaced in find_repeats (needs the full graph)

    def describe(self) -> str:
        n = self.last - self.first + 1
        return (f"layers {self.first}..{self.last} identical: {n} layers planned as 2 "
                f"(layer {self.rep_layer} counted {self.last - self.first} times)")  # fmt: skip


def _layer_of(name: str) -> int | None:
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


def find_repeats(graph: Graph, min_run: int = 3) -> Repeats | None:
    layers: dict[int, list] = {}
    for n in graph.nodes:
        k = _layer_of(n.name)
        if k is not None:
            layers.setdefault(k, []).append(n)
    if len(layers) < min_run:
        return None

    def sig(k: int):
        prefix = f"layers.{k}."
        prev = f"layers.{k - 1}."
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

    ks = sorted(layers)
    sigs = {k: sig(k) for k in ks}
    best = (0, 0)
    start = ks[0]
    for i in range(1, len(ks) + 1):
        if i == len(ks) or ks[i] != ks[i - 1] + 1 or sigs[ks[i]] != sigs[ks[i - 1]]:
            if ks[i - 1] - start > best[1] - best[0]:
                best = (start, ks[i - 1])
            if i < len(ks):
                start = ks[i]
    a, b = best
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
    r = Repeats(reduced, mult, a, b, rep)

    reps = {n.name: r.rep(n.name) for n in graph.nodes}
    reps = {k: v for k, v in reps.items() if k != v}
    names = [n.name for n in graph.nodes]

    def expand(assignment: dict[str, Strategy]):
        full: dict[str, Strategy] = {}
        for name in names:
            src = reps.get(name)
            full[name] = assignment[name] if src is None else assignment[src]._renamed(name)
        return full, dict(reps)

    r.expand = expand  # type: ignore[method-assign]
    return r
