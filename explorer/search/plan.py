"""``ShardingPlan``: the strategy of every node, the redistributions, the cost and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..checks import is_int
from ..hardware import Mesh
from ..ir import Graph
from ..sharding import RedistributePlan, Strategy, redistribute
from .breakdown import CostBreakdown, edge_breakdown, node_breakdown
from .costmodel import CostModel
from .errors import SearchError
from .params import CostParams

__all__ = ["ShardingPlan", "Alternative", "Explanation", "Status", "status_text"]

Status = Literal["optimal", "time-limited", "heuristic"]


def status_text(status: Status, gap: float | None) -> str:
    """``optimal``, ``heuristic``, or ``time-limited (MIP gap 3.2%)``."""
    if status == "time-limited":
        known = gap is not None and gap == gap  # HiGHS may not report one (NaN)
        return f"time-limited (MIP gap {100 * gap:.2g}%)" if known else "time-limited (gap unknown)"
    return status


@dataclass(frozen=True)
class Alternative:
    """One strategy of a node with its local cost (the node plus its edges, neighbours
    fixed, single-use weights re-laid out to match) and the difference to the chosen one."""

    strategy: Strategy
    cost: CostBreakdown
    delta: CostBreakdown
    forbidden_by: str = ""  # the constraint that rules it out (its neighbours as chosen)

    def __str__(self) -> str:
        d = self.delta
        return (
            f"{self.strategy.name:24s} total {self.cost.total:.4g}  "
            f"Δ {d.total:+.4g} (compute {d.compute:+.4g}, comm {d.communication_total:+.4g}, "
            f"grad {d.gradient:+.4g}, memory {d.memory_bytes:+.4g} B)"
            + (f"  forbidden by {self.forbidden_by}" if self.forbidden_by else "")
        )


@dataclass(frozen=True)
class Explanation:
    """Why ``node`` got its strategy: the chosen one against the next best."""

    node: str
    chosen: Alternative
    runners_up: tuple[Alternative, ...]
    status: str = "heuristic"  # the plan's status, with its gap (``status_text``)
    method: str = ""  # the search method that made the plan
    tied: bool = False  # the search gave repeated layers one strategy (the plan's note)

    def why_not(self, alt: Alternative) -> str:
        """Why a runner-up that is cheaper here (Δ < 0, its neighbours as they are) lost;
        empty for a dearer one (its Δ says why)."""
        if alt.forbidden_by:
            return f"forbidden by {alt.forbidden_by}"
        if alt.delta.total >= 0:
            return ""
        saving = f"{-alt.delta.total:.4g} cheaper for this op alone"
        if self.status.startswith("heuristic"):
            return (f"{saving}: {self.method or 'this method'} is a heuristic and did not "
                    "find it; method='ilp' (or 'dynamic_programming' on a chain) searches "
                    "exactly")  # fmt: skip
        if self.tied:
            return (f"{saving}, but repeated layers share one strategy: switching it in every "
                    "layer costs more at their other edges")  # fmt: skip
        if self.status.startswith("time-limited"):
            return f"{saving}: the solver stopped at its time limit before finding it"
        return (f"{saving} with its neighbours fixed; switching it changes their best "
                "strategies too, and the whole plan costs more")  # fmt: skip

    def __str__(self) -> str:
        lines = [f"%{self.node}: chose {self.chosen.strategy.name} "
                 f"({self.chosen.cost.total:.4g}; plan {self.status})"]  # fmt: skip
        for a in self.runners_up:
            lines.append(f"  vs {a}")
            why = self.why_not(a)
            if why and not a.forbidden_by:
                lines.append(f"     lost although {why}")
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class ShardingPlan:
    """The result of ``explorer.search``.

    Attributes:
        assignment: strategy per node (every node of the graph).
        redistributions: ``(producer, consumer, input position) -> RedistributePlan`` for
            every edge that needs communication.
        cost: the whole plan's CostBreakdown; ``node_costs`` per node.
        status: ``"optimal"`` (an exact method proved it), ``"time-limited"`` (the ILP
            stopped at ``time_limit_s``; ``gap`` is its relative MIP gap) or
            ``"heuristic"`` (recursive programming, propagation); ``status_text`` both.
        gap: the relative MIP gap of a time-limited plan (0.0 when optimal, None for a
            heuristic).
        solve_time_s, diagnostics: how the search went (eliminations, repeated layers, the
            solver's objective, ...).
        constraints: the `Pin` / `Forbid` constraints the plan honours (``explain`` marks
            the runners-up they rule out: ``Alternative.forbidden_by``).
    """

    graph: Graph
    mesh: Mesh
    method: str
    params: CostParams
    assignment: dict[str, Strategy]
    cost: CostBreakdown
    status: Status
    solve_time_s: float
    diagnostics: dict[str, Any] = field(default_factory=dict)
    gap: float | None = None
    _model: CostModel | None = field(default=None, repr=False)
    _choice: tuple[int, ...] = field(default=(), repr=False)
    _others: tuple[ShardingPlan, ...] = field(default=(), repr=False)
    constraints: tuple = ()
    _resolved: Any = field(default=None, repr=False)

    # --- reading ----------------------------------------------------------------------
    def strategy(self, node: str) -> Strategy:
        return self.assignment[node]

    @property
    def redistributions(self) -> dict[tuple[str, str, int], RedistributePlan]:
        out = {}
        for u, v, pos in self.graph.edges():
            src = self.assignment[u].out_layout
            dst = self.assignment[v].in_layouts[pos]
            if src != dst:
                plan = redistribute(src, dst, self.graph.node(u).type, self.mesh)
                if plan.steps:
                    out[u, v, pos] = plan
        return out

    @property
    def status_text(self) -> str:
        """The status as shown: ``optimal``, ``heuristic`` or ``time-limited (MIP gap x%)``."""
        return status_text(self.status, self.gap)

    @property
    def cost_tables(self) -> tuple[CostModel, tuple[int, ...]]:
        """The raw cost tables the plan was weighed on and the chosen strategy index of
        every node (in ``tables.names`` order): what re-costs these decisions under other
        `CostParams` without searching again (``breakdown.plan_breakdown``)."""
        return self._model, self._choice

    def node_cost(self, node: str) -> CostBreakdown:
        """One node's own cost."""
        m = self._model
        if node not in m.index:
            raise SearchError(f"plan has no node %{node}; its nodes are the graph's")
        i = m.index[node]
        return node_breakdown(m, self.params, i, self._choice[i])

    def changed(self, other: ShardingPlan) -> tuple[str, ...]:
        """Nodes whose strategy differs from ``other`` (the cost tuner highlights them)."""
        return tuple(
            n for n, s in self.assignment.items() if other.assignment.get(n, s).name != s.name
        )

    def summary(self) -> str:
        ops = [n for n in self.graph.ops]
        counts: dict[str, int] = {}
        for n in ops:
            counts[self.assignment[n.name].name] = counts.get(self.assignment[n.name].name, 0) + 1
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
        return (
            f"{self.method} on {self.mesh}: {self.status_text}, {self.solve_time_s * 1e3:.0f} ms\n"
            f"  {self.cost}\n  strategies: " + ", ".join(f"{k} x{v}" for k, v in top)
        )

    def __str__(self) -> str:
        return self.summary()

    # --- explaining -------------------------------------------------------------------
    def explain(self, node: str, k: int = 3) -> Explanation:
        """The chosen strategy of ``node`` against its ``k`` next best, each broken down
        into compute, communication and memory."""
        m = self._model
        if node not in self.assignment:
            raise SearchError(f"plan has no node %{node}; its nodes are the graph's")
        if not is_int(k, minimum=0):
            raise SearchError(f"explain(k={k!r}): expected an int >= 0 (runners-up to show)")
        name = node
        i = m.index[name]
        p = self.params
        alts = []
        for kk, s in enumerate(m.nodes[i].strategies):
            bd = node_breakdown(m, p, i, kk)
            for e in m.adj[i]:
                et = m.edges[e]
                j = m.index[et.dst if et.src == name else et.src]
                out_i = et.src == name

                def pair(kj, e=e, out_i=out_i, kk=kk):
                    return (
                        edge_breakdown(m, p, e, kk, kj)
                        if out_i
                        else edge_breakdown(m, p, e, kj, kk)
                    )

                if m.graph.node(m.names[j]).is_source and len(m.adj[j]) == 1:
                    ok = et.allowed  # a weight that follows its op: matching layouts only
                    opts = [node_breakdown(m, p, j, kj) + pair(kj)
                            for kj in range(len(m.nodes[j].strategies))
                            if ok is None or ok[kj, kk]]  # fmt: skip
                    bd = bd + min(opts, key=lambda b: b.total)
                else:
                    bd = bd + pair(self._choice[j])
            alts.append((kk, s, bd))
        chosen_k = self._choice[i]
        chosen = next(a for a in alts if a[0] == chosen_k)
        rest = sorted((a for a in alts if a[0] != chosen_k), key=lambda a: a[2].total)[:k]
        cons = self._resolved

        def mk(a):
            why = cons.forbidden_by(m, i, a[0], self._choice, p) if cons is not None else ""
            return Alternative(a[1], a[2], a[2] - chosen[2], why)

        tied = bool(self.diagnostics.get("repeated_layers"))
        return Explanation(node, mk(chosen), tuple(mk(a) for a in rest), self.status_text,
                           self.method, tied)  # fmt: skip

    def top_k(self, k: int) -> tuple[ShardingPlan, ...]:
        """The ``k`` best whole plans found (exhaustive and ILP searches keep them)."""
        if not is_int(k, minimum=1):
            raise SearchError(f"top_k({k!r}): expected an int >= 1")
        plans = (self,) + self._others
        if k > 1 and not self._others:
            raise SearchError(
                f"method {self.method!r} keeps one plan; search with top_k={k} and "
                "method='ilp' or 'exhaustive' to rank whole plans"
            )
        return plans[:k]
