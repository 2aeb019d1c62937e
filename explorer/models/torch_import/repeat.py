"""Copy traced layers: a model of L layers, alike or alike in a repeating pattern, traced
with a few of them.

torch.export spends most of a big model's import tracing layer after identical layer
(Llama-3-70B: 80 of them). `repeat_layer` takes a graph traced with the first ``K``
layers, checks that each of the last ``period`` traced layers is the same computation as
the layer ``period`` before it (ops, types, attributes and wiring, names aside), and
appends copies of those last ``period`` layers in turn (``period`` 1: the last layer;
Gemma 2's local/global alternation: 2), renamed ``layers.K`` ... ``layers.L-1`` with
their own parameters, before the head. Any doubt (a layer that reads another layer's
values, two values leaving a layer, unequal layers) gives None, and the caller traces the
whole model instead.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ...ir import Graph
from .report import TracedGraph

__all__ = ["repeat_layer"]


def _layer_of(scope: str, prefix: str) -> int | None:
    if not scope.startswith(prefix):
        return None
    m = re.match(r"(\d+)(\.|$)", scope[len(prefix) :])
    return int(m.group(1)) if m else None


def _rename(name: str, prefix: str, src: int, dst: int) -> str:
    old = f"{prefix}{src}"
    if name == old:
        return f"{prefix}{dst}"
    if name.startswith(old + "."):
        return f"{prefix}{dst}" + name[len(old) :]
    return name


def _wiring(graph: Graph, prefix: str, layer: int):
    """(nodes of the layer, its single input from the previous layer, its single output)."""
    nodes = [n for n in graph.nodes if _layer_of(n.scope, prefix) == layer]
    inside = {n.name for n in nodes}
    entering = {a for n in nodes for a in n.inputs if a not in inside}
    from_prev = [a for a in entering if _layer_of(graph.node(a).scope, prefix) is not None]
    leaving = [n.name for n in nodes if any(c not in inside for c in graph.consumers(n.name))]
    leaving += [o for o in graph.outputs if o in inside and o not in leaving]
    if len(from_prev) != 1 or len(leaving) != 1:
        return None
    return nodes, from_prev[0], leaving[0]


def _fingerprint(graph: Graph, prefix: str, layer: int, wiring) -> tuple[Any, ...]:
    nodes, entry, _ = wiring
    index = {n.name: i for i, n in enumerate(nodes)}
    out = []
    for n in nodes:
        ins = tuple(
            ("in", index[a]) if a in index else ("prev",) if a == entry else ("ext", a)
            for a in n.inputs
        )
        out.append((n.op, n.type, n.attrs, ins, _rename(n.scope, prefix, layer, -1)))
    return tuple(out)


def repeat_layer(
    graph: TracedGraph, prefix: str, total: int, period: int = 1
) -> TracedGraph | None:
    """``graph`` (traced with layers ``0..K-1`` under ``prefix``, e.g. ``"model.layers."``)
    with layers ``K..total-1`` appended, layer ``j`` a renamed copy of the traced layer
    ``K - period + (j - K) % period``; None when one of the last ``period`` traced layers
    differs from the layer ``period`` before it, or the layers are not wired as a chain."""
    layers = sorted({k for n in graph.nodes if (k := _layer_of(n.scope, prefix)) is not None})
    k = len(layers)
    if period < 1 or k < 2 * period or layers != list(range(k)) or total <= k:
        return None
    wiring = {j: _wiring(graph, prefix, j) for j in range(k - 2 * period, k)}
    if any(w is None for w in wiring.values()):
        return None
    last = range(k - period, k)
    for j in last:
        if _fingerprint(graph, prefix, j, wiring[j]) != _fingerprint(
            graph, prefix, j - period, wiring[j - period]
        ):
            return None
    for j in last:
        nodes_j = wiring[j][0]
        in_j = {n.name for n in nodes_j}
        if any(c not in in_j for p in nodes_j if p.is_source for c in graph.consumers(p.name)):
            return None  # a weight of the layer is shared with something else
    end = max(graph.position(n.name) for j in last for n in wiring[j][0])
    head = list(graph.nodes[: end + 1])
    tail = list(graph.nodes[end + 1 :])
    exit_ = prev_out = wiring[k - 1][2]
    for j in range(k, total):
        src = k - period + (j - k) % period
        nodes_s, entry, exit_s = wiring[src]
        names = {n.name: _rename(n.name, prefix, src, j) for n in nodes_s}
        names[entry] = prev_out
        for n in nodes_s:  # sources (weights, buffers) come first in graph order
            head.append(replace(n, name=names[n.name], scope=_rename(n.scope, prefix, src, j),
                                inputs=tuple(names.get(a, a) for a in n.inputs)))  # fmt: skip
        prev_out = names[exit_s]
    tail = [replace(n, inputs=tuple(prev_out if a == exit_ else a for a in n.inputs))
            for n in tail]  # fmt: skip
    outputs = tuple(prev_out if o == exit_ else o for o in graph.outputs)
    if period == 1:
        note = f"layers {k}..{total - 1} are copies of the traced layer {prefix}{k - 1}"
    else:
        note = (f"layers {k}..{total - 1} are copies of the traced layers "
                f"{prefix}{k - period}..{k - 1}, in turn")  # fmt: skip
    report = replace(graph.report, notes=graph.report.notes + (note,))
    return TracedGraph(tuple(head + tail), outputs, graph.name, report=report)
