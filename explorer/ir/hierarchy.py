"""The group tree of a graph: model > layer > block (attn, mlp) > op, from node scopes.

Big graphs are read as nested groups (Google's Model Explorer): a 126-layer model opens as
one box per layer; a layer opens into its attention and MLP blocks; a block into its ops.
The tree comes from the dotted ``Node.scope``: every scope prefix is a group, except a
prefix whose children are numbered (``layers`` in ``layers.3``), which would only hold the
list of layers. Each group carries its totals (nodes, ops, FLOPs, parameters) and a
structural fingerprint, equal for repeated layers, so that a view can draw them alike.

>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("two")
>>> x = b.input("x", (2, 4))
>>> for i in range(2):
...     with b.scope(f"layers.{i}.mlp"):
...         x = b.op("gelu", x)
>>> h = hierarchy(b.build([x]))
>>> h.group("").children, h.group("layers.0").kind, h.group("layers.0").children
(('layers.0', 'layers.1'), 'layer', ('layers.0.mlp',))
>>> h.group("layers.0").fingerprint == h.group("layers.1").fingerprint
True
>>> [m.path for m in h.search("1.mlp")]
['layers.1.mlp', 'layers.1.mlp.gelu']
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..memo import Memo
from .errors import IRError
from .graph import Graph

__all__ = [
    "Group", "GroupKind", "Hierarchy", "Match", "hierarchy", "HierarchyError", "ROOT",
    "CHANGE_THRESHOLD", "changed_materially",
]  # fmt: skip

GroupKind = Literal["model", "layer", "block"]
ROOT = ""  # the path of the model group
# An op's cost "changed" when it moved by at least this fraction of its former cost: the
# graph view rings only those ops (a tuner step that rescales every cost by 0.1% marks none).
CHANGE_THRESHOLD = 0.01


class HierarchyError(IRError):
    """A group path, a search text or a change threshold is not usable; the message says
    which value and what to pass instead."""


@dataclass(frozen=True)
class Group:
    """One group of the tree.

    Attributes:
        path: the scope prefix (``"layers.3.attn"``); ``ROOT`` (``""``) for the model.
        label: the name to show (the path; the graph's name for the model).
        kind: ``model``, ``layer`` (a path ending in an index) or ``block``.
        parent: the parent's path (None for the model).
        children: child group paths in graph order.
        nodes: node names directly in this group (not in a child), in graph order.
        num_nodes, num_ops: all nodes / computing nodes below the group.
        flops: forward FLOPs below the group.
        params: parameter elements below the group.
        fingerprint: a hash of the structure (ops, types, nesting) without the names'
            indices: equal for repeated layers.
    """

    path: str
    label: str
    kind: GroupKind
    parent: str | None
    children: tuple[str, ...]
    nodes: tuple[str, ...]
    num_nodes: int
    num_ops: int
    flops: int
    params: int
    fingerprint: str

    @property
    def depth(self) -> int:
        return 0 if self.path == ROOT else self.path.count(".") + 1

    def __str__(self) -> str:
        return f"{self.kind} {self.label}: {self.num_nodes} nodes, {len(self.children)} groups"


@dataclass(frozen=True)
class Match:
    """One search result: a group (``is_group``) or a node, with the groups to open so that
    it shows (``ancestors``, outermost first, the model excluded)."""

    path: str
    is_group: bool
    ancestors: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """The group tree of one graph (see the module docstring).

    Attributes:
        graph_name: the graph it was derived from.
        groups: path -> Group, parents before children, siblings in graph order.
        node_group: node name -> the path of the innermost group holding it.
    """

    graph_name: str
    groups: Mapping[str, Group]
    node_group: Mapping[str, str]
    _members: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def group(self, path: str) -> Group:
        try:
            return self.groups[path]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(path, list(self.groups), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise HierarchyError(
                f"graph {self.graph_name!r} has no group {path!r}{hint} (groups are scope "
                "prefixes such as 'layers.0' or 'layers.0.attn'; '' is the model)"
            ) from None

    def __contains__(self, path: str) -> bool:
        return path in self.groups

    def group_of(self, node: str) -> str:
        """The innermost group holding ``node``."""
        try:
            return self.node_group[node]
        except KeyError:
            raise HierarchyError(f"graph {self.graph_name!r} has no node %{node}") from None

    def ancestors(self, path: str) -> tuple[str, ...]:
        """Groups enclosing ``path`` (a group), outermost first, the model excluded; the
        group itself is not included."""
        out: list[str] = []
        p = self.group(path).parent
        while p is not None and p != ROOT:
            out.append(p)
            p = self.groups[p].parent
        return tuple(reversed(out))

    def members(self, path: str) -> tuple[str, ...]:
        """Every node below the group, in graph order."""
        self.group(path)
        return self._members[path]

    def layers(self) -> tuple[str, ...]:
        """The ``layer`` groups, in graph order."""
        return tuple(p for p, g in self.groups.items() if g.kind == "layer")

    def search(self, text: str, limit: int = 50) -> tuple[Match, ...]:
        """Groups, then nodes, whose name contains ``text`` (case-insensitive); an exact
        name comes first. Each match says which groups to open to show it.

        Raises HierarchyError for an empty text (it would match everything).
        """
        q = text.strip().lower()
        if not q:
            raise HierarchyError(
                "search text is empty; type part of a name, e.g. 'layers.3.mlp' or 'q_w'"
            )
        if limit < 1:
            raise HierarchyError(f"search limit={limit!r}; pass a positive number of results")
        found: list[Match] = []
        for p in self.groups:
            if p != ROOT and q in p.lower():
                found.append(Match(p, True, self.ancestors(p)))
        for n, g in self.node_group.items():
            if q in n.lower():
                anc = () if g == ROOT else (*self.ancestors(g), g)
                found.append(Match(n, False, anc))
        found.sort(key=lambda m: m.path.lower() != q)  # stable: exact names first
        return tuple(found[:limit])


def _group_path(scope: str) -> tuple[str, ...]:
    """The group paths a scope lies in, outermost first: ``layers.3.attn`` ->
    ``("layers.3", "layers.3.attn")`` (``layers`` alone only lists the layers)."""
    if not scope:
        return ()
    parts = scope.split(".")
    out = []
    for k in range(1, len(parts) + 1):
        if k < len(parts) and parts[k].isdigit():
            continue
        out.append(".".join(parts[:k]))
    return tuple(out)


def _kind(path: str) -> GroupKind:
    if path == ROOT:
        return "model"
    return "layer" if path.rsplit(".", 1)[-1].isdigit() else "block"


def _build(graph: Graph) -> Hierarchy:
    parent: dict[str, str | None] = {ROOT: None}
    children: dict[str, list[str]] = {ROOT: []}
    direct: dict[str, list[str]] = {ROOT: []}
    node_group: dict[str, str] = {}
    path_cache: dict[str, tuple[str, ...]] = {}
    for n in graph.nodes:
        chain = path_cache.get(n.scope)
        if chain is None:
            chain = path_cache[n.scope] = _group_path(n.scope)
            up = ROOT
            for p in chain:
                if p not in parent:
                    parent[p] = up
                    children[up].append(p)
                    children[p], direct[p] = [], []
                up = p
        g = chain[-1] if chain else ROOT
        node_group[n.name] = g
        direct[g].append(n.name)
    # Totals and fingerprints bottom-up: children were created after their parents, so the
    # reversed creation order visits every child before its parent.
    num_nodes: dict[str, int] = {}
    num_ops: dict[str, int] = {}
    flops: dict[str, int] = {}
    params: dict[str, int] = {}
    prints: dict[str, str] = {}
    members: dict[str, tuple[str, ...]] = {}
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    for p in reversed(list(parent)):
        kids = children[p]
        nodes = [graph.node(m) for m in direct[p]]
        num_nodes[p] = len(nodes) + sum(num_nodes[c] for c in kids)
        num_ops[p] = sum(not m.is_source for m in nodes) + sum(num_ops[c] for c in kids)
        flops[p] = graph.flops(direct[p]) + sum(flops[c] for c in kids)
        params[p] = sum(m.type.numel for m in nodes if m.op == "param") + sum(
            params[c] for c in kids
        )
        h = hashlib.md5()
        for m in nodes:
            local = m.name[len(p) + 1 :] if p and m.name.startswith(p + ".") else m.name
            h.update(f"{local}|{m.op}|{m.type}|{len(m.inputs)};".encode())
        for c in kids:
            h.update(f"<{c.rsplit('.', 1)[-1] if not _kind(c) == 'layer' else '#'}:"
                     f"{prints[c]}>".encode())  # fmt: skip
        prints[p] = h.hexdigest()[:12]
        below = list(direct[p])
        for c in kids:
            below.extend(members[c])
        members[p] = tuple(sorted(below, key=position.__getitem__)) if kids else tuple(below)
    groups = {
        p: Group(
            path=p,
            label=p or graph.name,
            kind=_kind(p),
            parent=parent[p],
            children=tuple(children[p]),
            nodes=tuple(direct[p]),
            num_nodes=num_nodes[p],
            num_ops=num_ops[p],
            flops=flops[p],
            params=params[p],
            fingerprint=prints[p],
        )  # fmt: skip
        for p in parent
    }
    return Hierarchy(graph.name, groups, node_group, members)


_MEMO: Memo[Hierarchy] = Memo("ir.hierarchy", maxsize=8)


def hierarchy(graph: Graph) -> Hierarchy:
    """The group tree of ``graph`` (computed once per graph object)."""
    if not isinstance(graph, Graph):
        raise HierarchyError(f"hierarchy(graph={type(graph).__name__}); pass an explorer Graph")
    return _MEMO.get(graph, lambda: _build(graph))


def changed_materially(
    before: Mapping[str, float], after: Mapping[str, float], nodes: Iterable[str] | None = None,
    threshold: float = CHANGE_THRESHOLD,
) -> tuple[str, ...]:  # fmt: skip
    """The nodes (of ``nodes``, default all of ``after``) whose cost moved by at least
    ``threshold`` of its former value: ``|after - before| >= threshold * |before|``.

    A node missing from ``before`` counts as changed (it is new). Order follows ``nodes``.

    >>> changed_materially({"a": 100.0, "b": 100.0}, {"a": 100.5, "b": 130.0})
    ('b',)
    """
    if not (threshold >= 0.0):
        raise HierarchyError(
            f"change threshold={threshold!r}; pass a fraction >= 0 (0.01 = 1% of the cost)"
        )
    out = []
    for n in after if nodes is None else nodes:
        if n not in after:
            continue
        if n not in before:
            out.append(n)
            continue
        b, a = before[n], after[n]
        if abs(a - b) >= threshold * abs(b) and a != b:
            out.append(n)
    return tuple(out)
