"""Constraints on the sharding search: pin a strategy, forbid a mesh axis or a collective.

A constraint narrows the strategy tables before any solver runs, so every method honours
it and the exact ones (``exhaustive``, ``ilp``, ``dynamic_programming``) stay exact:

- ``Pin(pattern, strategy)``: every node matching ``pattern`` takes ``strategy``;
- ``Forbid(pattern, axis=...)``: the matching nodes split no dimension over ``axis``;
- ``Forbid(pattern, collective=...)``: no collective of that kind inside the matching
  nodes, nor in the redistributions into or out of them (``pattern="*"``: anywhere); an
  ``all-reduce`` forbid also forbids a weight's gradient all-reduce when training.

A strategy a constraint removes gets an infinite cost (a strategy pair, on an edge, an
infinite redistribution): the solvers see a smaller problem, never a post-filtered result.
A pattern is a node name, an ``fnmatch`` glob over node names (``"layers.*.attn.*"``), or a
scope (``"layers.3.attn"`` matches every node inside it).

>>> import explorer as ex
>>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
>>> mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
>>> plan = ex.search(g, mesh, "ilp", constraints=[ex.Forbid(axis="tp")])
>>> any("tp" in s.name for s in plan.assignment.values())
False
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..hardware import CollectiveKind, Mesh
from ..ir import Graph
from ..sharding import Strategy
from .costmodel import KINDS, CostModel, Weighted
from .errors import SearchError
from .params import CostParams

__all__ = [
    "Pin", "Forbid", "Constraint", "ConstraintError", "Resolved", "resolve", "deletion_filter",
    "collective_kind", "Matcher",
]  # fmt: skip


class ConstraintError(SearchError):
    """A set of constraints no plan satisfies, or a constraint that cannot apply.

    ``conflict`` holds the smallest conflicting subset found (every constraint in it is
    needed for the conflict: removing any one makes the rest satisfiable), ``reason`` why
    they conflict. For a malformed constraint ``conflict`` is that constraint alone."""

    def __init__(self, message: str, conflict: tuple = (), reason: str = "") -> None:
        super().__init__(message)
        self.conflict = tuple(conflict)
        self.reason = reason or message


def collective_kind(kind: object) -> str:
    """``"all_to_all"``, ``"all-to-all"`` or a `CollectiveKind` -> ``"all-to-all"``."""
    if isinstance(kind, CollectiveKind):
        return kind.value
    if isinstance(kind, str):
        text = kind.strip().lower().replace("_", "-")
        text = "send/recv" if text in ("send-recv", "sendrecv", "p2p") else text
        if text in {k.value for k in CollectiveKind}:
            return text
    valid = ", ".join(repr(k.value.replace("-", "_")) for k in CollectiveKind)
    raise ConstraintError(
        f"collective={kind!r} is not a collective kind; expected one of {valid} "
        "(hyphens or underscores)"
    )


def _check_pattern(pattern: object, what: str) -> None:
    if not isinstance(pattern, str) or not pattern.strip():
        raise ConstraintError(
            f"{what}: pattern={pattern!r}; expected a node name, a glob over node names such "
            "as 'layers.*.attn.*', or a scope such as 'layers.3.mlp'"
        )


@dataclass(frozen=True)
class Pin:
    """Every node matching ``pattern`` takes ``strategy`` (a `Strategy` or its name, such as
    ``"b=dp,n=tp"`` or ``"replicated"``).

    >>> str(Pin("layers.0.mlp.up", "b=dp,f=tp"))
    "Pin('layers.0.mlp.up', 'b=dp,f=tp')"
    """

    pattern: str
    strategy: Strategy | str

    def __post_init__(self) -> None:
        _check_pattern(self.pattern, "Pin")
        if not isinstance(self.strategy, (Strategy, str)) or not self.strategy_name:
            raise ConstraintError(
                f"Pin({self.pattern!r}, {self.strategy!r}): the strategy must be a Strategy or "
                "its name, e.g. 'b=dp,n=tp' (ex.sharding.strategies(graph, mesh) lists them)"
            )

    @property
    def strategy_name(self) -> str:
        return self.strategy.name if isinstance(self.strategy, Strategy) else self.strategy

    def __str__(self) -> str:
        return f"Pin({self.pattern!r}, {self.strategy_name!r})"


@dataclass(frozen=True)
class Forbid:
    """Forbid a mesh ``axis`` to the nodes matching ``pattern``, or a ``collective`` kind in
    them and in the redistributions into and out of them (``pattern="*"``: everywhere).

    >>> str(Forbid(collective="all_to_all"))
    "Forbid(collective='all-to-all')"
    """

    pattern: str = "*"
    axis: str | None = None
    collective: str | None = None

    def __post_init__(self) -> None:
        _check_pattern(self.pattern, "Forbid")
        if self.axis is None and self.collective is None:
            raise ConstraintError(
                f"Forbid({self.pattern!r}) forbids nothing; pass axis='tp' (a mesh axis) or "
                "collective='all_to_all' (a collective kind)"
            )
        if self.axis is not None and (not isinstance(self.axis, str) or not self.axis):
            raise ConstraintError(f"Forbid(axis={self.axis!r}); expected a mesh axis name")
        if self.collective is not None:
            object.__setattr__(self, "collective", collective_kind(self.collective))

    def __str__(self) -> str:
        parts = [] if self.pattern == "*" else [repr(self.pattern)]
        if self.axis is not None:
            parts.append(f"axis={self.axis!r}")
        if self.collective is not None:
            parts.append(f"collective={self.collective!r}")
        return f"Forbid({', '.join(parts)})"


Constraint = Pin | Forbid


class _Lines:
    """Strings joined one per line, searched by one regex pass (a pattern over thousands
    of node names is one C-level scan, not a Python call per name)."""

    def __init__(self, items: list[str]) -> None:
        self.text = "\n".join(items)
        self.starts = np.cumsum([0] + [len(x) + 1 for x in items[:-1]])

    def hits(self, rx: re.Pattern) -> np.ndarray:
        found = [m.start() for m in rx.finditer(self.text)]
        return np.searchsorted(self.starts, found, side="right") - 1


def _regex(pattern: str) -> re.Pattern:
    """``pattern`` as fnmatch reads it, or the pattern followed by ``.anything`` (a scope
    prefix), matched against whole lines (wildcards never cross a line)."""
    body = fnmatch.translate(pattern)
    if body.startswith("(?s:") and body.endswith(")\\Z"):
        body = body[4:-3].replace("[^", "[^\\n")  # '.' without DOTALL stops at a newline
    else:  # another Python's spelling: match the literal text (no wildcard)
        body = re.escape(pattern)
    return re.compile(rf"^(?:{body})(?:\.[^\n]*)?$", re.MULTILINE)


def _axes(s: Strategy) -> frozenset[str]:
    return frozenset(a for _, axes in s.dim_axes for a in axes)


@dataclass
class Resolved:
    """Checked constraints and, per node of the graph, which of them hit it."""

    constraints: tuple[Constraint, ...]
    graph: Graph
    keys: dict[str, tuple[int, ...]]  # node name -> indexes of the constraints hitting it
    _masks: dict = field(default_factory=dict, repr=False)

    def uniform(self, rep: Callable[[str], str]) -> str | None:
        """None when every node hit alike as the node standing for it in the tiled graph;
        else the first constraint that hits only some copies (repeated layers)."""
        for n in self.graph.nodes:
            key, other = self.keys.get(n.name, ()), self.keys.get(rep(n.name), ())
            if key != other:
                diff = (set(key) ^ set(other)).pop()
                return str(self.constraints[diff])
        return None

    def _key(self, name: str) -> tuple[int, ...]:
        return self.keys.get(name, ())

    def node_allowed(self, model: CostModel, i: int) -> np.ndarray | None:
        """Strategies of node ``i`` of ``model`` the constraints leave (None: all)."""
        name = model.names[i]
        key = self._key(name)
        if not key:
            return None
        nt = model.nodes[i]
        cache_key = (tuple(s.name for s in nt.strategies), key)
        ok = self._masks.get(cache_key)
        if ok is None:
            ok = np.ones(len(nt.strategies), dtype=bool)
            for c in key:
                ok &= self._allows(self.constraints[c], nt.strategies, nt.coll_kind)
            self._masks[cache_key] = ok
        return ok

    @staticmethod
    def _allows(c: Constraint, strategies, coll_kind: np.ndarray) -> np.ndarray:
        if isinstance(c, Pin):
            return np.array([s.name == c.strategy_name for s in strategies], dtype=bool)
        ok = np.ones(len(strategies), dtype=bool)
        if c.axis is not None:
            ok &= np.array([c.axis not in _axes(s) for s in strategies], dtype=bool)
        if c.collective is not None and coll_kind.size:
            k = KINDS.index(CollectiveKind(c.collective))
            ok &= ~(coll_kind == k).any(axis=1)
        return ok

    def edge_kinds(self, model: CostModel, e: int) -> tuple[int, ...]:
        """Indexes (into ``KINDS``) of the collectives forbidden on edge ``e`` of ``model``."""
        et = model.edges[e]
        kinds = set()
        for c in set(self._key(et.src)) | set(self._key(et.dst)):
            con = self.constraints[c]
            if isinstance(con, Forbid) and con.collective is not None:
                kinds.add(KINDS.index(CollectiveKind(con.collective)))
        return tuple(sorted(kinds))

    def edge_forbidden(self, model: CostModel, e: int, params: CostParams) -> np.ndarray | None:
        """[ku, kv] True where the pair's redistribution (or gradient all-reduce, when
        training) uses a forbidden collective; None when nothing is forbidden there."""
        kinds = self.edge_kinds(model, e)
        if not kinds:
            return None
        et = model.edges[e]
        bad = np.isin(et.kind, kinds).any(axis=-1) if et.kind.size else None
        if bad is None:
            bad = np.zeros(et.grad_bytes.shape, dtype=bool)
        if params.training and KINDS.index(CollectiveKind.ALL_REDUCE) in kinds:
            bad = bad | (et.grad_bytes > 0)
        return bad

    def mask(self, model: CostModel, w: Weighted) -> Weighted:
        """``w`` with every forbidden strategy (and strategy pair) at infinite cost."""
        node_cost = list(w.node_cost)
        for i in range(len(model.names)):
            ok = self.node_allowed(model, i)
            if ok is not None and not ok.all():
                node_cost[i] = np.where(ok, node_cost[i], np.inf)
        edge_cost = list(w.edge_cost)
        for e in range(len(model.edges)):
            bad = self.edge_forbidden(model, e, w.params)
            if bad is not None and bad.any():
                edge_cost[e] = np.where(bad, np.inf, edge_cost[e])
        return Weighted(w.params, node_cost, edge_cost, w.mem, w.cap_bytes, w.tie)

    def forbidden_by(
        self, model: CostModel, i: int, k: int, choice: Sequence[int], params: CostParams
    ) -> str:
        """The constraint that forbids strategy ``k`` of node ``i`` (its neighbours as in
        ``choice``), or ``""``."""
        nt = model.nodes[i]
        for c in self._key(model.names[i]):
            con = self.constraints[c]
            if not self._allows(con, nt.strategies[k : k + 1], nt.coll_kind[k : k + 1])[0]:
                return str(con)
        for e in model.adj[i]:
            bad = self.edge_forbidden(model, e, params)
            if bad is None:
                continue
            et = model.edges[e]
            src, dst = model.index[et.src], model.index[et.dst]
            ku = k if src == i else choice[src]
            kv = k if dst == i else choice[dst]
            if bad[ku, kv]:
                kinds = {KINDS[x].value for x in self.edge_kinds(model, e)}
                for c in set(self._key(et.src)) | set(self._key(et.dst)):
                    con = self.constraints[c]
                    if isinstance(con, Forbid) and con.collective in kinds:
                        return str(con)
        return ""


class Matcher:
    """Which nodes of a graph a pattern matches (its name, or its scope, matches the glob,
    or lies inside it), each pattern scanned once: a planner keeps one, so the subsets the
    deletion filter tries and live re-solves match nothing twice."""

    def __init__(self, graph: Graph) -> None:
        self.nodes = graph.nodes
        self.names = _Lines([n.name for n in self.nodes])
        scopes = sorted({n.scope for n in self.nodes if n.scope})
        self.scopes = _Lines(scopes)
        where: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            if n.scope:
                where.setdefault(n.scope, []).append(i)
        self.in_scope = [where[sc] for sc in scopes]
        self.cache: dict[str, tuple[str, ...]] = {}

    def __call__(self, pattern: str) -> tuple[str, ...]:
        hit = self.cache.get(pattern)
        if hit is None:
            rx = _regex(pattern)
            at = set(self.names.hits(rx).tolist())
            for k in self.scopes.hits(rx).tolist():
                at.update(self.in_scope[k])
            hit = self.cache[pattern] = tuple(self.nodes[i].name for i in sorted(at))
        return hit


def resolve(
    constraints: object, graph: Graph, mesh: Mesh, strategies: Callable[[str], tuple],
    matcher: Matcher | None = None,
) -> Resolved | None:  # fmt: skip
    """Check ``constraints`` against ``graph`` and ``mesh`` (``strategies(name)``: a node's
    strategies; ``matcher``: the graph's `Matcher`, kept by the caller); None when there
    are none. Raises `ConstraintError` naming a constraint that is not one, a pattern that
    matches no node, an axis not in the mesh, or a pinned strategy a matching node does not
    have."""
    if constraints is None:
        return None
    if isinstance(constraints, (Pin, Forbid)):
        constraints = [constraints]
    if not isinstance(constraints, (list, tuple)):
        raise ConstraintError(
            f"constraints={constraints!r}; expected a list of ex.Pin(...) / ex.Forbid(...)"
        )
    cons = tuple(constraints)
    if not cons:
        return None
    keys: dict[str, list[int]] = {}
    nodes = graph.nodes
    match = matcher or Matcher(graph)
    for c_i, c in enumerate(cons):
        if not isinstance(c, (Pin, Forbid)):
            raise ConstraintError(
                f"constraints[{c_i}]={c!r} is not a sharding constraint; use ex.Pin(pattern, "
                "strategy) or ex.Forbid(pattern, axis=..., collective=...) (ex.Bound, ex.Fix, "
                "ex.Within and ex.StageLayers steer plan_training)",
                (c,),
            )
        if isinstance(c, Forbid) and c.axis is not None and c.axis not in mesh.axis_names:
            raise ConstraintError(
                f"{c}: axis {c.axis!r} is not an axis of {mesh}; its axes are "
                f"{', '.join(mesh.axis_names)}",
                (c,),
            )
        hit = match(c.pattern)
        if not hit:
            close = fnmatch.filter([n.name for n in nodes], f"*{c.pattern.strip('*')}*")[:3]
            hint = f" (names like it: {', '.join(close)})" if close else ""
            raise ConstraintError(
                f"{c}: pattern {c.pattern!r} matches no node of {graph.name!r}{hint}; use a node "
                "name, a glob such as 'layers.*.attn.*', or a scope such as 'layers.0.mlp'",
                (c,),
            )
        if isinstance(c, Pin):
            for name in hit:
                names = [s.name for s in strategies(name)]
                if c.strategy_name not in names:
                    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
                    raise ConstraintError(
                        f"{c}: strategy {c.strategy_name!r} is not one of %{name}'s strategies on "
                        f"{mesh} ({shown}); pin one of these, or narrow the pattern to the "
                        f"nodes that have it ({len(hit)} node(s) match)",
                        (c,),
                    )
        for name in hit:
            keys.setdefault(name, []).append(c_i)
    return Resolved(cons, graph, {k: tuple(v) for k, v in keys.items()})


def deletion_filter(
    constraints: tuple, satisfiable: Callable[[tuple], str | None]
) -> tuple[tuple, str]:
    """The smallest conflicting subset by deletion: each constraint is dropped when the rest
    still conflict, kept when the rest become satisfiable. ``satisfiable(subset)`` returns
    None when a plan exists, else the reason. Returns ``(subset, reason)``."""
    keep = list(constraints)
    for c in list(constraints):
        rest = [x for x in keep if x is not c]
        if satisfiable(tuple(rest)) is not None:
            keep = rest
    reason = satisfiable(tuple(keep)) or "no plan satisfies them together"
    return tuple(keep), reason


def conflict_message(conflict: tuple, reason: str, what: str) -> str:
    """The `ConstraintError` message: the subset, the reason and the fix."""
    names = " and ".join(str(c) for c in conflict)
    return f"no {what} satisfies {names}: {reason}; drop or loosen one of them" + (
        " (each is needed for the conflict)" if len(conflict) > 1 else ""
    )
