"""Passes as data: ``Rule`` (a named match-and-rewrite function), the fixed-point driver
``run_rules`` and ``RewriteStep``, the record of what a pass changed (what the compiler
view shows: the pass, the rule, the nodes it matched, the graph before and after)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...ir import Graph, Node
from ..errors import CompilerError

__all__ = ["RewriteStep", "Rule", "Rewrite", "Context", "run_rules", "PassDidNotConverge"]

MAX_SWEEPS = 50


class PassDidNotConverge(CompilerError):
    """A rule set kept changing the graph; the rules fight each other."""


@dataclass(frozen=True, eq=False)
class RewriteStep:
    """One rule's effect in one sweep of a pass (or a whole pass like ``fuse``)."""

    pass_name: str
    rule: str
    nodes: tuple[str, ...]
    before: Graph
    after: Graph
    detail: str = ""
    source: str = ""  # generated code (the codegen pass's kernels), for the compiler view

    def __str__(self) -> str:
        more = f" ({self.detail})" if self.detail else ""
        names = ", ".join("%" + n for n in self.nodes[:4])
        extra = f" +{len(self.nodes) - 4}" if len(self.nodes) > 4 else ""
        return f"{self.pass_name}/{self.rule}: {names}{extra}{more}"

    def __repr__(self) -> str:
        return (f"RewriteStep(pass_name={self.pass_name!r}, rule={self.rule!r}, "
                f"nodes={self.nodes!r}, before={len(self.before)} nodes, "
                f"after={len(self.after)} nodes)")  # fmt: skip


@dataclass(frozen=True)
class Rewrite:
    """Replace the matched node: emit ``nodes`` in its place and let ``value`` stand for it
    (``value`` may be an existing node, then ``nodes`` is empty)."""

    nodes: tuple[Node, ...]
    value: str


class Context:
    """What a rule may ask about the graph being rebuilt."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[str, Node] = {}
        self.memo: dict[object, object] = {}  # per-sweep scratch space of a rule (CSE keys)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def const(self, name: str) -> np.ndarray | None:
        n = self.nodes.get(name)
        if n is not None and n.op == "constant":
            return n.attr("value").array
        return None

    def uses(self, name: str) -> int:
        """Uses in the original graph (an upper bound after rewriting)."""
        return len(self.graph.consumers(name)) + self.graph.outputs.count(name)


@dataclass(frozen=True)
class Rule:
    name: str
    fn: Callable[[Node, Context], Rewrite | None]


def run_rules(
    graph: Graph, rules: Sequence[Rule], pass_name: str
) -> tuple[Graph, list[RewriteStep]]:
    """Apply the first matching rule to each node, sweep after sweep, until nothing matches.

    Raises ``PassDidNotConverge`` after ``MAX_SWEEPS`` sweeps that all changed the graph.
    """
    steps: list[RewriteStep] = []
    for _ in range(MAX_SWEEPS):
        ctx = Context(graph)
        alias: dict[str, str] = {}
        out: list[Node] = []
        matched: dict[str, list[str]] = {}
        for n in graph.nodes:
            if alias and any(a in alias for a in n.inputs):
                n = dataclasses.replace(n, inputs=tuple(alias.get(a, a) for a in n.inputs))
            hit = None
            if not n.is_source:
                for rule in rules:
                    hit = rule.fn(n, ctx)
                    if hit is not None:
                        matched.setdefault(rule.name, []).append(n.name)
                        break
            new_nodes = (n,) if hit is None else hit.nodes
            for m in new_nodes:
                out.append(m)
                ctx.nodes[m.name] = m
            if hit is not None and hit.value != n.name:
                alias[n.name] = hit.value
        if not matched:
            return graph, steps
        outputs = tuple(alias.get(o, o) for o in graph.outputs)
        new = Graph(tuple(out), outputs, graph.name)
        for rule_name, names in matched.items():
            steps.append(RewriteStep(pass_name, rule_name, tuple(names), graph, new))
        graph = new
    raise PassDidNotConverge(
        f"pass {pass_name!r} still changed graph {graph.name!r} after {MAX_SWEEPS} sweeps; "
        f"last rules: {sorted(matched)}"
    )
