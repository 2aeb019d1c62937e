"""Dead-code elimination: drop nodes no output depends on (inputs and parameters stay:
they are the compiled function's signature)."""

from __future__ import annotations

from ...ir import Graph
from .rewrite import RewriteStep

__all__ = ["dce"]


def dce(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    live = set(graph.outputs)
    for n in reversed(graph.nodes):  # reverse topological order: users before producers
        if n.name in live:
            live.update(n.inputs)
    dead = tuple(
        n.name for n in graph.nodes if n.name not in live and n.op not in ("input", "param")
    )
    if not dead:
        return graph, []
    new = Graph(tuple(n for n in graph.nodes if n.name not in dead), graph.outputs, graph.name)
    return new, [RewriteStep("dce", "unused_value", dead, graph, new)]
