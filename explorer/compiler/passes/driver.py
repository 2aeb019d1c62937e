"""Optimisation levels: O0 (none), O1 (fold, CSE, DCE, simplify), O2 (O1, grouped-query
attention without repeated keys and values, attention-score fusion, causal attention by
blocks of query rows (prefills), elementwise fusion, single-query attention against a cache
as one kernel (decoding steps), memory planning). Bodies of ``cond`` and ``loop`` nodes are optimised at the same level.

``backend="numba"`` adds the ``codegen`` pass at O2 (after fusion): regions the cost model
gives to numba become generated kernels (``codegen``, ``explorer.compiler.codegen``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from ...ir import Graph
from ...ir.ops_tensor import Subgraph
from ..errors import CompilerArgumentError
from .causal_attention import causal_attention
from .codegen import codegen
from .cse import cse
from .dce import dce
from .decode_attention import decode_attention
from .fold import fold
from .fuse import fuse
from .fuse_softmax import fuse_softmax
from .grouped_attention import grouped_attention
from .memory_plan import MemoryPlan, memory_plan
from .rewrite import RewriteStep
from .simplify import simplify

__all__ = ["Level", "LEVELS", "optimize", "PASSES", "Backend", "BACKENDS"]

Level = Literal["O0", "O1", "O2"]
Backend = Literal["numpy", "numba"]
BACKENDS: tuple[str, ...] = ("numpy", "numba")
PASSES: dict[str, Callable[[Graph], tuple[Graph, list[RewriteStep]]]] = {
    "fold": fold, "cse": cse, "simplify": simplify, "dce": dce, "fuse_softmax": fuse_softmax,
    "fuse": fuse, "grouped_attention": grouped_attention, "causal_attention": causal_attention,
    "decode_attention": decode_attention,
}  # fmt: skip
LEVELS: dict[str, tuple[str, ...]] = {
    "O0": (),
    "O1": ("fold", "simplify", "cse", "dce"),
    "O2": (
        "fold",
        "simplify",
        "grouped_attention",
        "cse",
        "dce",
        "fuse_softmax",
        "causal_attention",
        "fuse",
        "decode_attention",
    ),
}


def _bodies(graph: Graph, level: Level, steps: list[RewriteStep], backend: Backend) -> Graph:
    changed = False
    nodes = []
    done: dict[int, Subgraph] = {}
    for n in graph.nodes:
        if n.op in ("cond", "loop"):
            attrs = []
            for k, v in n.attrs:
                if isinstance(v, Subgraph):
                    if id(v) not in done:
                        g, s, _ = optimize(v.graph, level, backend)
                        steps.extend(s)
                        done[id(v)] = Subgraph(g)
                    v = done[id(v)]
                    changed = True
                attrs.append((k, v))
            n = dataclasses.replace(n, attrs=tuple(attrs))
        nodes.append(n)
    return Graph(tuple(nodes), graph.outputs, graph.name) if changed else graph


def optimize(
    graph: Graph, level: Level = "O2", backend: Backend = "numpy"
) -> tuple[Graph, list[RewriteStep], MemoryPlan | None]:
    """Run the passes of ``level``; returns the graph, the RewriteSteps and (O2) the plan."""
    if level not in LEVELS:
        raise CompilerArgumentError(f"level={level!r}; expected one of {', '.join(LEVELS)}")
    if backend not in BACKENDS:
        raise CompilerArgumentError(f"backend={backend!r}; expected one of {', '.join(BACKENDS)}")
    steps: list[RewriteStep] = []
    if level == "O0":
        return graph, steps, None
    graph = _bodies(graph, level, steps, backend)
    for name in LEVELS[level]:
        graph, s = PASSES[name](graph)
        steps.extend(s)
        if name == "fuse" and s:  # fusion can leave constants unused
            graph, s = dce(graph)
            steps.extend(s)
    if level == "O2" and backend == "numba":
        graph, s = codegen(graph)
        steps.extend(s)
    plan = None
    if level == "O2":
        graph, s, plan = memory_plan(graph)
        steps.extend(s)
    return graph, steps, plan
