"""``diff(a, b)`` of two sharding plans of one graph on one mesh: per op the two strategies,
the collectives each needs, their cost terms and memory, and the whole difference split
into its terms (compute, communication by kind, gradient, memory), largest first.

Each op's row holds its own cost (``node_breakdown``) and the redistributions into it (the
edges it consumes, ``edge_breakdown``): every node and every edge is counted in exactly one
row, so the rows of a plan sum to ``plan.cost`` and the rows' differences to the total
difference. Copies of a repeated layer (``layers.N.x``) whose two strategies are the same
in every copy form one row with a count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..ir import format_bytes
from ..sharding import redistribute
from .breakdown import CostBreakdown, edge_breakdown, node_breakdown
from .errors import SearchError
from .plan import ShardingPlan

__all__ = ["OpDiff", "PlanDiff", "diff_plans", "term_deltas"]

_LAYER = re.compile(r"^layers\.\d+\.")


@dataclass(frozen=True)
class OpDiff:
    """One op (or ``count`` copies of it in repeated layers) in both plans.

    Attributes:
        label: the op's name, ``layers.*.x`` for a group of layer copies.
        ops: the node names the row stands for.
        strategy_a, strategy_b: the strategy names.
        collectives_a, collectives_b: the collectives each needs (in the op, then the
            redistributions of its inputs), as ``kind(axes) size`` per copy.
        cost_a, cost_b: the row's cost in each plan (summed over its copies).
    """

    label: str
    ops: tuple[str, ...]
    strategy_a: str
    strategy_b: str
    collectives_a: tuple[str, ...]
    collectives_b: tuple[str, ...]
    cost_a: CostBreakdown
    cost_b: CostBreakdown

    @property
    def count(self) -> int:
        return len(self.ops)

    @property
    def changed(self) -> bool:
        return self.strategy_a != self.strategy_b

    @property
    def delta(self) -> float:
        """``b - a`` of the row's total cost."""
        return self.cost_b.total - self.cost_a.total

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label, "ops": list(self.ops), "count": self.count,
            "strategy_a": self.strategy_a, "strategy_b": self.strategy_b,
            "collectives_a": list(self.collectives_a), "collectives_b": list(self.collectives_b),
            "cost_a": self.cost_a.as_dict(), "cost_b": self.cost_b.as_dict(),
            "memory_a_bytes": self.cost_a.memory_bytes,
            "memory_b_bytes": self.cost_b.memory_bytes, "delta": self.delta,
        }  # fmt: skip


@dataclass(frozen=True)
class PlanDiff:
    """The difference ``b - a`` of two sharding plans.

    Attributes:
        rows: the ops whose strategy or cost differs, largest ``|delta|`` first.
        terms: ``(term, b - a)`` for compute, ``comm:<kind>``, gradient and memory, largest
            ``|value|`` first; they sum to ``total``.
        total: ``b.cost.total - a.cost.total`` in ``unit``.
        unchanged: ops with the same strategy and cost in both.
        memory_a_bytes, memory_b_bytes: memory per device each plan keeps.
    """

    a: ShardingPlan
    b: ShardingPlan
    rows: tuple[OpDiff, ...]
    terms: tuple[tuple[str, float], ...]
    total: float
    unit: str
    unchanged: int
    memory_a_bytes: float
    memory_b_bytes: float

    @property
    def changed_ops(self) -> tuple[str, ...]:
        """Every node whose strategy differs (the view highlights them)."""
        return tuple(n for r in self.rows if r.changed for n in r.ops)

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": "sharding", "graph": self.a.graph.name, "mesh": str(self.a.mesh),
            "total_a": self.a.cost.total, "total_b": self.b.cost.total, "total": self.total,
            "unit": self.unit, "terms": dict(self.terms), "unchanged": self.unchanged,
            "memory_a_bytes": self.memory_a_bytes, "memory_b_bytes": self.memory_b_bytes,
            "rows": [r.as_dict() for r in self.rows],
        }  # fmt: skip

    def text(self, max_rows: int = 20) -> str:
        """The diff as text (the CLI and the report print it)."""
        u = "s" if self.unit == "seconds" else "B"
        a, b = self.a.cost.total, self.b.cost.total
        rel = f" ({self.total / a:+.1%})" if a else ""
        lines = [
            f"plan diff on {self.a.graph.name!r}, {self.a.mesh}: "
            f"a {self.a.method} {a:.4g} {u}, b {self.b.method} {b:.4g} {u}, "
            f"b - a {self.total:+.4g} {u}{rel}",
            "  terms of b - a, largest first: "
            + (", ".join(f"{k} {v:+.4g}" for k, v in self.terms if v) or "none"),
            f"  memory per device: a {format_bytes(self.memory_a_bytes)}, "
            f"b {format_bytes(self.memory_b_bytes)}",
            f"  {len(self.changed_ops)} ops change strategy; {self.unchanged} ops unchanged",
        ]
        for r in self.rows[:max_rows]:
            n = f" (x{r.count})" if r.count > 1 else ""
            how = (f"{r.strategy_a} -> {r.strategy_b}" if r.changed
                   else f"{r.strategy_a} in both, its inputs arrive differently")  # fmt: skip
            ma, mb = format_bytes(r.cost_a.memory_bytes), format_bytes(r.cost_b.memory_bytes)
            mem = f", memory {ma} -> {mb}" if ma != mb else ""
            lines.append(f"  %{r.label}{n}: {how}   b - a {r.delta:+.4g} {u}{mem}")
            for side, colls in (("a", r.collectives_a), ("b", r.collectives_b)):
                if colls:
                    lines.append(f"      {side}: " + "; ".join(colls))
        if len(self.rows) > max_rows:
            lines.append(f"  ... {len(self.rows) - max_rows} more rows (diff.rows)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def term_deltas(a: CostBreakdown, b: CostBreakdown) -> tuple[tuple[str, float], ...]:
    """``b - a`` per term of the objective, largest ``|value|`` first (they sum to
    ``b.total - a.total``)."""
    d = (b - a).as_dict()
    keys = ["compute", *(k for k in d if k.startswith("comm:")), "gradient", "memory"]
    return tuple(sorted(((k, d[k]) for k in keys), key=lambda kv: (-abs(kv[1]), kv[0])))


def _check_pair(a: object, b: object) -> None:
    for name, p in (("a", a), ("b", b)):
        if not isinstance(p, ShardingPlan):
            raise SearchError(
                f"diff: {name}={p!r} is a {type(p).__name__}, not a ShardingPlan; pass two "
                "plans from ex.search on the same graph and mesh"
            )
    if a.graph is not b.graph and [n.name for n in a.graph.nodes] != [
        n.name for n in b.graph.nodes
    ]:
        raise SearchError(
            f"diff: plan a is on graph {a.graph.name!r} ({len(a.graph.nodes)} nodes) and plan "
            f"b on {b.graph.name!r} ({len(b.graph.nodes)} nodes); a diff compares ops one for "
            "one, so search both plans on the same graph"
        )
    if a.mesh != b.mesh:
        raise SearchError(
            f"diff: plan a is on {a.mesh} and plan b on {b.mesh}; strategies name mesh axes, "
            "so search both plans on the same mesh"
        )
    if a.params.unit != b.params.unit:
        raise SearchError(
            f"diff: plan a is costed in {a.params.unit} and plan b in {b.params.unit}; search "
            "both with CostParams of one unit"
        )


def _row_costs(plan: ShardingPlan) -> list[CostBreakdown]:
    """Per node: its own cost and the redistributions into it (every edge counted once,
    at its consumer), so the list sums to ``plan.cost``."""
    m, choice, p = plan._model, plan._choice, plan.params
    costs = [node_breakdown(m, p, i, k) for i, k in enumerate(choice)]
    for e, et in enumerate(m.edges):
        i, j = m.index[et.src], m.index[et.dst]
        costs[j] = costs[j] + edge_breakdown(m, p, e, choice[i], choice[j])
    return costs


def _collectives(plan: ShardingPlan, node: str) -> tuple[str, ...]:
    g, s = plan.graph, plan.assignment[node]
    out = [str(c) for c in s.collectives]
    for pos, u in enumerate(g.node(node).inputs):
        src = plan.assignment[u].out_layout
        dst = s.in_layouts[pos]
        if src != dst:
            steps = redistribute(src, dst, g.node(u).type, plan.mesh).steps
            out += [f"{c} (%{u} in)" for c in steps]
    return tuple(out)


def diff_plans(a: ShardingPlan, b: ShardingPlan) -> PlanDiff:
    """``b - a`` op by op, and its terms; see the module docstring.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g")
    >>> a, b = ex.search(g, mesh, "ilp", top_k=2).top_k(2)
    >>> d = ex.diff(a, b)
    >>> abs(sum(v for _, v in d.terms) - d.total) < 1e-12
    True
    """
    _check_pair(a, b)
    ca, cb = _row_costs(a), _row_costs(b)
    scale = max(abs(a.cost.total), abs(b.cost.total), 1e-300)
    groups: dict[tuple[str, str, str], list[int]] = {}
    unchanged = 0
    names = a._model.names
    for i, n in enumerate(names):
        sa, sb = a.assignment[n].name, b.assignment[n].name
        if sa == sb and abs(cb[i].total - ca[i].total) <= 1e-12 * scale:
            unchanged += 1
            continue
        groups.setdefault((_LAYER.sub("layers.*.", n), sa, sb), []).append(i)
    rows = []
    for (label, sa, sb), idx in groups.items():
        first = names[idx[0]]
        if len(idx) == 1:
            label = first
        rows.append(OpDiff(
            label=label, ops=tuple(names[i] for i in idx), strategy_a=sa, strategy_b=sb,
            collectives_a=_collectives(a, first), collectives_b=_collectives(b, first),
            cost_a=_sum(ca[i] for i in idx), cost_b=_sum(cb[i] for i in idx),
        ))  # fmt: skip
    rows.sort(key=lambda r: (-abs(r.delta), r.label))
    return PlanDiff(
        a=a, b=b, rows=tuple(rows), terms=term_deltas(a.cost, b.cost),
        total=b.cost.total - a.cost.total, unit=a.params.unit, unchanged=unchanged,
        memory_a_bytes=a.cost.memory_bytes, memory_b_bytes=b.cost.memory_bytes,
    )  # fmt: skip


def _sum(parts) -> CostBreakdown:
    parts = list(parts)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out
