"""What one compiler ``RewriteStep`` changed: nodes removed, added, rewritten, and the small
neighbourhood worth drawing around them (the trace view shows it before and after).

A pass rebuilds the graph, so "changed" is decided by name and content: a node only in
``before`` was removed, one only in ``after`` was added, one in both whose op, inputs or
attributes differ was rewritten; the rule's matched nodes that survive unchanged (the
memory plan assigns buffers without touching the graph) are listed as ``matched``.

>>> import explorer as ex, numpy as np
>>> def f(x):
...     return ex.F.gelu(x + 1.0) * 2.0
>>> x = ex.tensor(np.ones((2, 3)))
>>> step = ex.jit(f).steps(x)[0]
>>> d = rewrite_diff(step)
>>> d.rule, len(d.removed) > 0, len(d.rewritten) > 0
('elementwise_chain', True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..ir import Graph
from .errors import CompilerError

__all__ = ["RewriteDiff", "rewrite_diff", "NodeStatus"]

NodeStatus = Literal["removed", "added", "rewritten", "matched", "context"]


@dataclass(frozen=True)
class RewriteDiff:
    """The changes of one RewriteStep and the nodes to draw on each side.

    ``before_focus`` / ``after_focus`` hold the changed nodes of that side plus their
    producers and consumers ``context`` hops away (in graph order), at most ``limit`` each;
    ``truncated`` says whether some were left out.
    """

    pass_name: str
    rule: str
    detail: str
    removed: tuple[str, ...]
    added: tuple[str, ...]
    rewritten: tuple[str, ...]
    matched: tuple[str, ...]
    before_focus: tuple[str, ...]
    after_focus: tuple[str, ...]
    truncated: bool = False
    source: str = ""  # the step's generated code (codegen), shown by the compiler view

    def status(self, name: str, side: Literal["before", "after"]) -> NodeStatus:
        """How node ``name`` is marked on ``side``."""
        if side == "before" and name in self.removed:
            return "removed"
        if side == "after" and name in self.added:
            return "added"
        if name in self.rewritten:
            return "rewritten"
        if name in self.matched:
            return "matched"
        return "context"

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.added or self.rewritten)

    def __str__(self) -> str:
        return (f"{self.pass_name}/{self.rule}: {len(self.removed)} removed, {len(self.added)} "
                f"added, {len(self.rewritten)} rewritten")  # fmt: skip


def _content(graph: Graph, name: str) -> tuple:
    n = graph.node(name)
    return n.op, n.inputs, repr(n.attrs), str(n.type)


def _around(graph: Graph, seeds: list[str], hops: int, limit: int) -> tuple[tuple[str, ...], bool]:
    keep = {s for s in seeds if s in graph}
    frontier = set(keep)
    for _ in range(hops):
        nxt = set()
        for name in frontier:
            nxt.update(graph.node(name).inputs)
            nxt.update(graph.consumers(name))
        frontier = nxt - keep
        keep |= nxt
    ordered = [n.name for n in graph.nodes if n.name in keep]
    if len(ordered) <= limit:
        return tuple(ordered), False
    # the changed nodes first, then the context nearest in graph order
    seeds_in = [n for n in ordered if n in set(seeds)][:limit]
    rest = [n for n in ordered if n not in set(seeds_in)][: limit - len(seeds_in)]
    chosen = set(seeds_in) | set(rest)
    return tuple(n for n in ordered if n in chosen), True


def rewrite_diff(step, context: int = 1, limit: int = 60) -> RewriteDiff:
    """The diff of ``step`` (an ``explorer.compiler.RewriteStep``).

    Args:
        step: the step; its ``before`` and ``after`` graphs are compared by node name.
        context: hops of producers/consumers drawn around the changed nodes.
        limit: most nodes drawn per side.
    """
    if context < 0 or limit < 1:
        raise CompilerError(f"context={context}, limit={limit}: need context >= 0 and "
                            "limit >= 1 (e.g. context=1, limit=60)")  # fmt: skip
    before, after = step.before, step.after
    b_names = [n.name for n in before.nodes]
    a_names = [n.name for n in after.nodes]
    b_set, a_set = set(b_names), set(a_names)
    removed = tuple(n for n in b_names if n not in a_set)
    added = tuple(n for n in a_names if n not in b_set)
    rewritten = tuple(
        n for n in b_names if n in a_set and _content(before, n) != _content(after, n)
    )
    changed = set(removed) | set(added) | set(rewritten)
    matched = tuple(n for n in step.nodes if n not in changed and (n in b_set or n in a_set))
    seeds = [*removed, *rewritten, *matched, *added]
    bf, t1 = _around(before, seeds, context, limit)
    af, t2 = _around(after, seeds, context, limit)
    return RewriteDiff(step.pass_name, step.rule, step.detail, removed, added, rewritten,
                       matched, bf, af, t1 or t2, getattr(step, "source", ""))  # fmt: skip
