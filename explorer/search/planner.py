"""``search(graph, mesh, method=...)``: the automatic strategy search."""

from __future__ import annotations

import dataclasses
import time
from typing import Literal, get_args

from ..hardware import Mesh
from ..ir import Graph
from ..sharding import Strategy
from .breakdown import plan_breakdown
from .costmodel import CostModel
from .params import CostParams
from .plan import ShardingPlan
from .problem import Problem
from .repeats import Repeats, find_repeats
from .solvers.dynamic import solve_dynamic
from .solvers.exact import SearchError, solve_exhaustive, solve_ilp
from .solvers.heuristics import solve_propagation, solve_recursive

__all__ = ["search", "Planner", "Method", "METHODS"]

Method = Literal[
    "exhaustive", "ilp", "dynamic_programming", "recursive_programming", "sharding_propagation"
]
METHODS: tuple[str, ...] = get_args(Method)


class Planner:
    """Cost tables of one graph on one mesh, enumerated once and re-weighed per search.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> planner = Planner(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    >>> planner.search("ilp").status
    'optimal'
    """

    def __init__(self, graph: Graph, mesh: Mesh, reuse_layers: bool = True) -> None:
        self.graph, self.mesh = graph, mesh
        self.repeats: Repeats | None = find_repeats(graph) if reuse_layers else None
        g = self.repeats.reduced if self.repeats else graph
        mult = self.repeats.multiplicity if self.repeats else None
        self.model = CostModel(g, mesh, mult)

    def default_params(self) -> CostParams:
        return CostParams() if self.mesh.hardware is not None else CostParams.mindspore()

    def search(
        self, method: Method = "recursive_programming", params: CostParams | None = None,
        annotations: dict[str, Strategy | str] | None = None, top_k: int = 1,
    ) -> ShardingPlan:  # fmt: skip
        if method not in METHODS:
            raise SearchError(
                f"unknown search method {method!r}; valid methods: {', '.join(METHODS)}"
            )
        if method != "sharding_propagation" and annotations:
            raise SearchError(
                f"annotations are used by method='sharding_propagation'; {method!r} ignores "
                "them, so pass method='sharding_propagation'"
            )
        params = params or self.default_params()
        t0 = time.perf_counter()
        m = self.model
        w = m.weigh(params)
        p = Problem.build(m, w, fold=method != "sharding_propagation")
        cap = m.device_memory_cap(params)
        if cap is not None and p.min_memory() > cap:
            raise SearchError(
                f"no plan fits: the smallest memory per device any plan of {self.graph.name!r} "
                f"on {self.mesh} needs is {p.min_memory() / 2**30:.2f} GiB, above the cap of "
                f"{cap / 2**30:.2f} GiB; use more devices, a smaller batch, or raise "
                "device_memory_cap_bytes"
            )
        diag: dict[str, object] = {}
        others: list[dict[int, int]] = []
        status = "heuristic"
        if method == "exhaustive":
            found = solve_exhaustive(p, cap, top_k)
            if not found:
                raise SearchError("no assignment satisfies the memory cap")
            choice, others = found[0][1], [c for _, c in found[1:]]
            status = "optimal"
        elif method == "ilp":
            found = solve_ilp(p, cap, top_k)
            choice, others = found[0][1], [c for _, c, _, _ in found[1:]]
            status = "optimal" if found[0][2] else found[0][3]
        elif method == "dynamic_programming":
            choice, d = solve_dynamic(p)
            diag.update(d)
            status = "optimal" if d["reduced_fully"] or d["remainder_solver"] else "heuristic"
        elif method == "recursive_programming":
            choice = solve_recursive(p)
        else:
            choice = solve_propagation(p, self._fixed(annotations or {}))
        elapsed = time.perf_counter() - t0
        full = p.expand(choice)
        memory = m.memory(w, full)
        if cap is not None and memory > cap * (1 + 1e-9):
            raise SearchError(
                f"the {method} plan needs {memory / 2**30:.2f} GiB per device, above the cap of "
                f"{cap / 2**30:.2f} GiB; use method='ilp', which keeps the cap as a constraint"
            )
        diag["memory_bytes"] = memory
        if self.repeats:
            diag["repeated_layers"] = self.repeats.describe()
        plans = [self._plan(method, params, full, status, elapsed, diag)]
        for c in others:
            plans.append(self._plan(method, params, p.expand(c), status, elapsed, diag))
        if len(plans) > 1:
            return dataclasses.replace(plans[0], _others=tuple(plans[1:]))
        return plans[0]

    def _fixed(self, annotations: dict[str, Strategy | str]) -> dict[int, int]:
        m = self.model
        fixed: dict[int, int] = {}
        for name, want in annotations.items():
            rep = self.repeats.rep(name) if self.repeats else name
            if rep not in m.index:
                raise SearchError(f"annotation names %{name}, which is not a node of the graph")
            strats = m.nodes[m.index[rep]].strategies
            wanted = want.name if isinstance(want, Strategy) else str(want)
            ks = [k for k, s in enumerate(strats) if s.name == wanted]
            if not ks:
                raise SearchError(
                    f"annotation for %{name}: strategy {wanted!r} is not one of its strategies "
                    f"({', '.join(s.name for s in strats)})"
                )
            fixed[m.index[rep]] = ks[0]
        # Two annotated ops that need one weight (or input) in two layouts contradict.
        for src in m.names:
            if not m.graph.node(src).is_source:
                continue
            needs = {}
            for e in m.adj[m.index[src]]:
                et = m.edges[e]
                j = m.index[et.dst]
                if j in fixed:
                    lay = m.nodes[j].strategies[fixed[j]].in_layouts[et.pos]
                    for other, olay in needs.items():
                        if olay != lay:
                            raise SearchError(
                                f"contradictory annotations: %{other} needs %{src} as "
                                f"{olay.format(m.graph.node(src).type)} but %{et.dst} needs it as "
                                f"{lay.format(m.graph.node(src).type)}"
                            )
                    needs[et.dst] = lay
        return fixed

    def _plan(self, method, params, full, status, elapsed, diag) -> ShardingPlan:
        m = self.model
        assignment = {n: m.nodes[i].strategies[full[i]] for i, n in enumerate(m.names)}
        rep: dict[str, str] = {}
        if self.repeats:
            assignment, rep = self.repeats.expand(assignment)
        cost = plan_breakdown(m, params, full)
        return ShardingPlan(
            graph=self.graph, mesh=self.mesh, method=method, params=params,
            assignment=assignment, cost=cost, status=status, solve_time_s=elapsed,
            diagnostics=dict(diag), _model=m, _choice=tuple(full), _rep=rep,
        )  # fmt: skip


_PLANNERS: dict[tuple, tuple[Graph, Planner]] = {}


def search(
    graph: Graph, mesh: Mesh, method: Method = "recursive_programming",
    params: CostParams | None = None, annotations: dict[str, Strategy | str] | None = None,
    top_k: int = 1, reuse_layers: bool = True,
) -> ShardingPlan:  # fmt: skip
    """Find a strategy for every node of ``graph`` on ``mesh``.

    Args:
        method: ``exhaustive`` (tiny graphs; ground truth), ``ilp`` (exact, HiGHS),
            ``dynamic_programming`` (graph elimination), ``recursive_programming`` (fast),
            ``sharding_propagation`` (from ``annotations``).
        params: the cost model (default: roofline in seconds when the mesh has hardware,
            MindSpore's byte model otherwise).
        annotations: node name -> Strategy (or its name, e.g. ``"a=dp,n=tp"``) fixed by the
            user, as MindSpore's ``shard()``.
        top_k: keep this many whole plans (exhaustive and ILP).
        reuse_layers: solve identical transformer layers once (tables are built for two
            copies; the others repeat the second copy's strategies).

    Cost tables are cached per (graph, mesh), so a second search with other CostParams
    only re-weighs them.
    """
    key = (id(graph), mesh, reuse_layers)
    hit = _PLANNERS.get(key)
    if hit is None or hit[0] is not graph:
        if len(_PLANNERS) > 16:
            _PLANNERS.clear()
        hit = (graph, Planner(graph, mesh, reuse_layers))
        _PLANNERS[key] = hit
    return hit[1].search(method, params, annotations, top_k)
