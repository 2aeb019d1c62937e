"""Common-subexpression elimination: one node per distinct (op, inputs, attributes)."""

from __future__ import annotations

import dataclasses

from ...ir import Graph, Node
from .rewrite import Context, Rewrite, RewriteStep, Rule, run_rules

__all__ = ["cse", "RULES"]


def _key(n: Node) -> tuple:
    return (n.op, n.inputs, n.attrs, n.type)


def _cse(n: Node, ctx: Context) -> Rewrite | None:
    try:
        key = _key(n)
        hash(key)
    except TypeError:
        return None
    prev = ctx.memo.get(key)
    if prev is not None:
        return Rewrite((), prev)
    ctx.memo[key] = n.name
    return None


RULES = (Rule("merge_duplicates", _cse),)


def cse(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    """Merge nodes computing the same op on the same inputs (constants by value)."""
    return run_rules(_dedupe_constants(graph), RULES, "cse")


def _dedupe_constants(graph: Graph) -> Graph:
    # constants are sources (rules skip sources): merge equal ones here, first one wins
    first: dict[tuple, str] = {}
    alias: dict[str, str] = {}
    nodes = []
    for n in graph.nodes:
        if n.op == "constant":
            key = (n.attrs, n.type)
            if key in first:
                alias[n.name] = first[key]
                continue
            first[key] = n.name
        if any(a in alias for a in n.inputs):
            n = dataclasses.replace(n, inputs=tuple(alias.get(a, a) for a in n.inputs))
        nodes.append(n)
    if not alias:
        return graph
    return Graph(tuple(nodes), tuple(alias.get(o, o) for o in graph.outputs), graph.name)
