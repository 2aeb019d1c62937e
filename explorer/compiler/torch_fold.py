"""Weight-only subgraphs of an imported model, computed once at compile time.

A traced PyTorch model recomputes at every call what depends on its weights and buffers
alone: the rotary tables (``cos``/``sin`` of the inverse frequencies times the constant
positions), GPT-2's position embeddings looked up at constant positions, casts and
transposes of weights. `fold_weights` evaluates every op whose inputs are all weights,
buffers, constants or fills (the registry's numpy impls, as the eager run), and turns
each such value that a per-call op reads into a ``param`` node fed once: the static
program computes only what depends on the call's inputs. A value that would grow past
its largest input (a broadcast) is not materialised; it stays an op.

The compiler's ``fold`` pass does the same for ``constant`` nodes but hashes each
constant's bytes (CSE compares them by content): weights stay graph sources here.

>>> import numpy as np
>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("g"); x = b.input("x", (2, 3)); w = b.param("w", (2, 3))
>>> g = b.build([b.op("matmul", x, b.op("transpose", w, perm=(1, 0), name="wt"), name="y")])
>>> g2, values = fold_weights(g, {"w": np.ones((2, 3), np.float32)})
>>> [n.op for n in g2.nodes], sorted(values)
(['input', 'param', 'matmul'], ['wt'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from ..ir import Graph, opdef

__all__ = ["fold_weights", "GROWTH_LIMIT"]

#: A folded value may hold at most this many times the elements of its largest input
#: (or 64K elements): a broadcast of a weight to the batch stays an op.
GROWTH_LIMIT = 2
_SMALL = 1 << 16
_NEVER = frozenset({"cond", "loop", "opaque", "dropout"})


def fold_weights(graph: Graph, weights: Mapping[str, np.ndarray]
                 ) -> tuple[Graph, dict[str, np.ndarray]]:  # fmt: skip
    """(the graph with weight-only values as ``param`` sources, every source's value by
    name): ``weights`` holds the parameters and buffers by node name; the call's own
    inputs are the ``input`` nodes not in it."""
    values: dict[str, np.ndarray] = {}
    static: set[str] = set()
    outputs = set(graph.outputs)  # computed at every call: the caller owns what it gets
    numel: dict[str, int] = {}
    for n in graph.nodes:
        numel[n.name] = n.type.numel
        if n.op in ("param", "input"):
            if n.name in weights:
                static.add(n.name)
                values[n.name] = weights[n.name]
            continue
        if n.op in _NEVER or n.name in outputs or not all(a in static for a in n.inputs):
            continue
        biggest = max((numel[a] for a in n.inputs), default=0)
        if n.type.numel > max(GROWTH_LIMIT * biggest, _SMALL):
            continue
        if n.op == "constant":
            values[n.name] = n.attr("value").array
        else:
            op = opdef.get(n.op)
            out = op.impl(*[values[a] for a in n.inputs], **op.full_attrs(dict(n.attrs)))
            values[n.name] = np.ascontiguousarray(np.asarray(out).astype(n.type.dtype.numpy))
        static.add(n.name)
    needed = set(graph.outputs) | {a for n in graph.nodes if n.name not in static
                                   for a in n.inputs}  # fmt: skip
    nodes = []
    for n in graph.nodes:
        if n.name not in static:
            nodes.append(n)
        elif n.name in needed:
            keep = n.op in ("constant", "param")
            nodes.append(n if keep else dataclasses.replace(n, op="param", inputs=(), attrs=()))
    kept = {n.name for n in nodes}
    fed = {k: v for k, v in values.items() if k in kept and k in static}
    fed = {k: v for k, v in fed.items() if graph.node(k).op != "constant"}
    return Graph(tuple(nodes), graph.outputs, graph.name), fed
