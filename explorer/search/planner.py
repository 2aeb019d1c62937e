"""``search(graph, mesh, method=...)``: the automatic strategy search."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from ..checks import is_int, is_number
from ..hardware import Mesh
from ..ir import Graph, format_bytes
from ..memo import Memo
from ..sharding import Strategy
from .breakdown import plan_breakdown
from .chain import Chain, build_chain
from .constraints import (
    ConstraintError,
    Matcher,
    Resolved,
    conflict_message,
    deletion_filter,
    resolve,
)
from .costmodel import CostModel, Weighted
from .errors import SearchError
from .params import CostParams
from .plan import ShardingPlan, Status
from .problem import Problem
from .repeats import Repeats, find_repeats
from .solvers.deadline import Deadline
from .solvers.dynamic import solve_dynamic
from .solvers.exhaustive import solve_exhaustive
from .solvers.ilp import DEFAULT_TIME_LIMIT_S, check_top_k, count_text, solve_ilp
from .solvers.propagation import solve_propagation
from .solvers.recursive import solve_recursive

__all__ = ["search", "Planner", "Method", "METHODS"]

Method = Literal[
    "exhaustive", "ilp", "dynamic_programming", "recursive_programming", "sharding_propagation"
]
METHODS: tuple[str, ...] = get_args(Method)


@dataclass(frozen=True)
class _Solved:
    choices: list[dict[int, int]]
    status: Status
    gap: float | None
    diagnostics: dict[str, object]


def _check_inputs(graph, mesh) -> None:
    if not isinstance(graph, Graph):
        raise SearchError(f"graph={graph!r} is not an explorer.ir.Graph; build one with "
                          "ex.models.build(...) or GraphBuilder")  # fmt: skip
    if not isinstance(mesh, Mesh):
        raise SearchError(f"mesh={mesh!r} is not an explorer Mesh; pass ex.Mesh({{...}})")


def _check(method, params, annotations, top_k, time_limit_s) -> None:
    """Bad arguments fail here, each with the value, the reason and the fix."""
    if method not in METHODS:
        raise SearchError(f"unknown search method {method!r}; valid methods: {', '.join(METHODS)}")
    if params is not None and not isinstance(params, CostParams):
        raise SearchError(
            f"params={params!r} is a {type(params).__name__}, not CostParams; pass "
            "ex.CostParams(...) or None for the default"
        )
    if not is_int(top_k, minimum=1):
        raise SearchError(f"top_k={top_k!r}: expected an int >= 1 (the plans to keep)")
    if method == "ilp":
        check_top_k(top_k)
    if top_k > 1 and method not in ("ilp", "exhaustive"):
        raise SearchError(
            f"top_k={count_text(top_k)} ranks whole plans, which only method='ilp' or 'exhaustive' "
            f"keeps; {method!r} finds one plan: pass top_k=1 or one of those methods"
        )
    if not is_number(time_limit_s, above=0):
        raise SearchError(
            f"time_limit_s={time_limit_s!r}: expected a finite number of seconds > 0 "
            f"(default {DEFAULT_TIME_LIMIT_S})"
        )
    if annotations is not None and not isinstance(annotations, dict):
        raise SearchError(
            f"annotations={annotations!r}: expected a dict node name -> Strategy or its name"
        )
    if method != "sharding_propagation" and annotations:
        raise SearchError(
            f"annotations are used by method='sharding_propagation'; {method!r} ignores "
            "them, so pass method='sharding_propagation'"
        )


class Planner:
    """Cost tables of one graph on one mesh, enumerated once and re-weighed per search.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> planner = Planner(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    >>> planner.search("ilp").status
    'optimal'
    """

    def __init__(self, graph: Graph, mesh: Mesh, reuse_layers: bool = True) -> None:
        _check_inputs(graph, mesh)
        self.graph, self.mesh = graph, mesh
        self.repeats: Repeats | None = find_repeats(graph) if reuse_layers else None
        g = self.repeats.reduced if self.repeats else graph
        r = self.repeats
        self._full: CostModel | None = None
        self._matcher: Matcher | None = None  # node names per constraint pattern
        self.model = CostModel(
            g, mesh, r.multiplicity if r else None, r.edge_multiplicity if r else None,
            tuple((w.src, w.dst, w.pos, w.count) for w in r.wrap_edges) if r else (),
        )  # fmt: skip

    def default_params(self) -> CostParams:
        return CostParams() if self.mesh.hardware is not None else CostParams.mindspore()

    def assignments(self, params: CostParams | None = None) -> int:
        """How many strategy assignments exhaustive search would visit: the strategies per
        node of the folded problem, multiplied (it refuses more than ``EXHAUSTIVE_LIMIT``).
        With ``reuse_layers`` the search walks the repeated layers' smaller problem, so this
        is an upper bound there."""
        m = self.model
        p = Problem.build(m, m.weigh(params or self.default_params()))
        return math.prod(len(p.cost[i]) for i in p.active)

    def search(
        self, method: Method = "recursive_programming", params: CostParams | None = None,
        annotations: dict[str, Strategy | str] | None = None, top_k: int = 1,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S, constraints: Sequence | None = None,
    ) -> ShardingPlan:  # fmt: skip
        """One search; see :func:`search` for the arguments."""
        _check(method, params, annotations, top_k, time_limit_s)
        params = params or self.default_params()
        t0 = time.perf_counter()
        cons = self.resolve(constraints)
        # a constraint that hits only some of the repeated layers cannot be said of the
        # tile that stands for them all: the whole graph's tables are solved instead
        partial = cons.uniform(self.repeats.rep) if cons and self.repeats else None
        unfolded = partial is not None
        m = self.full_model if unfolded else self.model
        w = m.weigh(params)
        if cons is not None:
            w = cons.mask(m, w)
        p = Problem.build(m, w, fold=method != "sharding_propagation")
        cap = m.device_memory_cap(params)
        if cap is not None and p.min_memory() > cap:
            raise SearchError(
                f"no plan fits: the smallest memory per device any plan of {self.graph.name!r} "
                f"on {self.mesh} needs is {format_bytes(p.min_memory())}, above the cap of "
                f"{format_bytes(cap)}; use more devices, a smaller batch, or raise "
                "device_memory_cap_bytes"
            )
        fixed = (
            self._fixed(annotations or {}, m, None if unfolded else self.repeats)
            if method == "sharding_propagation"
            else {}
        )
        if cons is not None:
            self._check_fixed(p, fixed, cons)
        chain, alike = None, "sharding propagation repeats the tile"
        if self.repeats is not None and method != "sharding_propagation" and not unfolded:
            chain = build_chain(p, self.repeats)
            alike = "the layers do not meet through one value only"
        full = self.full_model
        try:
            solved = self._solve(method, chain.outer if chain else p, cap, top_k, time_limit_s,
                                 fixed)  # fmt: skip
        except SearchError:
            if cons is not None:  # an infeasible ILP, no assignment left to enumerate
                self._raise_conflict(cons, params, cap)
            raise
        cons_note = None
        if cons is not None and not math.isfinite(solved.diagnostics["objective"]):
            # no plan honours the constraints, or a heuristic missed every one that does
            self._raise_conflict(cons, params, cap)
            if fixed:  # dynamic programming would drop the annotations: say so instead
                raise SearchError(
                    "sharding propagation from these annotations reached a node whose every "
                    "strategy the constraints forbid; pass the annotations as ex.Pin(name, "
                    "strategy) constraints with method='dynamic_programming' (exact)"
                )
            cons_note = (f"{method}'s plan broke a constraint; re-solved by "
                         "dynamic_programming (exact), which honours them")  # fmt: skip
            method_run = "dynamic_programming"
            solved = self._solve(method_run, chain.outer if chain else p, cap, 1, time_limit_s,
                                 fixed)  # fmt: skip
        choices = [self._full_choice(p, chain, c, unfolded) for c in solved.choices]
        memory = self._memory(choices[0])
        if chain is not None and cap is not None and memory > cap * (1 + 1e-9):
            # the chain does not see the memory cap: every layer alike, under the cap
            solved = self._solve(method, p, cap, top_k, time_limit_s, fixed)
            if cons is not None and not math.isfinite(solved.diagnostics["objective"]):
                self._raise_conflict(cons, params, cap)
            choices = [self._full_choice(p, None, c, unfolded) for c in solved.choices]
            memory = self._memory(choices[0])
            chain, alike = None, "the chain's plan was over the memory cap"
        elapsed = time.perf_counter() - t0
        if cap is not None and memory > cap * (1 + 1e-9):
            raise SearchError(
                f"the {method} plan needs {format_bytes(memory)} per device, above the cap of "
                f"{format_bytes(cap)}; use method='ilp', which keeps the cap as a constraint"
            )
        diag = dict(solved.diagnostics)
        diag["memory_bytes"] = memory
        status = solved.status
        if cons is not None:
            diag["constraints"] = f"{len(cons.constraints)} constraint(s) honoured" + (
                f"; {cons_note}" if cons_note else ""
            )
        if self.repeats and unfolded:
            diag["repeated_layers"] = (
                f"{self.repeats.describe()}; planned unfolded (every layer its own tables): "
                f"{partial} hits only some of the repeated layers"
            )
        elif self.repeats:
            how = (
                "solved as a chain: layers may differ" if chain else f"every layer alike ({alike})"
            )
            diag["repeated_layers"] = f"{self.repeats.describe()}; {how}"
            if chain is None and status == "optimal":
                # best among plans whose repeated layers are alike, not proved for the graph
                diag["solver_status"] = status
                status = "heuristic"
        # a gap over alike layers is not the whole graph's gap
        alike_only = self.repeats is not None and chain is None and not unfolded
        gap = None if status == "heuristic" or alike_only else solved.gap
        plans = [
            ShardingPlan(
                graph=self.graph, mesh=self.mesh, method=method, params=params,
                assignment={n: full.nodes[i].strategies[c[i]] for i, n in enumerate(full.names)},
                cost=plan_breakdown(full, params, c), status=status, gap=gap,
                solve_time_s=elapsed, diagnostics=dict(diag), _model=full, _choice=tuple(c),
                constraints=cons.constraints if cons else (), _resolved=cons,
            )
            for c in choices
        ]  # fmt: skip
        if len(plans) > 1:
            return dataclasses.replace(plans[0], _others=tuple(plans[1:]))
        return plans[0]

    @property
    def full_model(self) -> CostModel:
        """The tables of the whole graph (copied from the tile's where layers repeat)."""
        if self._full is None:
            r = self.repeats
            self._full = CostModel.expanded(self.model, self.graph, r.rep) if r else self.model
        return self._full

    def _solve(self, method, p: Problem, cap, top_k, time_limit_s, fixed) -> _Solved:
        solved = self._run(method, p, cap, top_k, time_limit_s, fixed)
        # the solver's objective of its best plan (tie-breaks aside): plan.cost.total
        # must equal it, as both come from node_terms / edge_terms
        solved.diagnostics["objective"] = p.objective(solved.choices[0])
        return solved

    def _run(self, method, p: Problem, cap, top_k, time_limit_s, fixed) -> _Solved:
        deadline = Deadline(time_limit_s)
        if method == "exhaustive":
            found = solve_exhaustive(p, cap, top_k, deadline)
            if not found:
                ran_out = deadline.report()
                raise SearchError(
                    f"no assignment of {self.graph.name!r} satisfies the memory cap of "
                    f"{format_bytes(cap)}" + (f" before {ran_out}" if ran_out else "")
                    + "; use more devices or raise device_memory_cap_bytes"
                )  # fmt: skip
            return self._stopped([c for _, c in found], "optimal", 0.0, {}, deadline)
        if method == "ilp":
            sols = solve_ilp(p, cap, top_k, time_limit_s)
            best = sols[0]
            status = "optimal" if best.optimal else "time-limited"
            diagnostics = {"ilp": best.message}
            if sols[-1].stopped_early:
                diagnostics["top_k"] = (f"time_limit_s={time_limit_s} ran out after {len(sols)} "
                                        f"of top_k={top_k} plans; raise time_limit_s for more")  # fmt: skip
            if status == "time-limited":
                diagnostics["stopped_early"] = (
                    f"time_limit_s={time_limit_s:g} ran out before HiGHS proved the plan optimal "
                    "(see plan.gap); raise time_limit_s to let the search finish"
                )
            return _Solved([s.choice for s in sols], status, best.gap, diagnostics)
        if method == "dynamic_programming":
            choice, d = solve_dynamic(p, time_limit_s)
            status = "optimal" if d["optimal"] else "time-limited"
            if status == "time-limited":
                d["stopped_early"] = (
                    f"time_limit_s={time_limit_s:g} ran out in the ILP over the nodes left after "
                    "elimination; raise time_limit_s to let the search finish"
                )
            return _Solved([choice], status, float(d["gap"]), d)
        if method == "recursive_programming":
            choice = solve_recursive(p, deadline)
            return self._stopped([choice], "heuristic", None, {}, deadline)
        choice = solve_propagation(p, fixed, deadline)
        return self._stopped([choice], "heuristic", None, {}, deadline)

    @staticmethod
    def _stopped(choices, status, gap, diagnostics, deadline: Deadline) -> _Solved:
        """A solver's result, marked ``time-limited`` when its deadline stopped it early."""
        ran_out = deadline.report()
        if ran_out is None:
            return _Solved(choices, status, gap, diagnostics)
        return _Solved(choices, "time-limited", None, {**diagnostics, "stopped_early": ran_out})

    def _full_choice(
        self, p: Problem, chain: Chain | None, choice: dict[int, int], unfolded: bool = False
    ) -> list[int]:
        """Strategy index of every node of the full graph (``unfolded``: ``p`` was built on
        the full graph's tables)."""
        full = self.full_model
        if chain is not None:
            by_name = chain.expand(choice)
            return [by_name[n] for n in full.names]
        reduced = p.expand(choice)
        if self.repeats is None or unfolded:
            return reduced
        rep, index = self.repeats.rep, self.model.index
        return [reduced[index[rep(n)]] for n in full.names]

    def resolve(self, constraints: Sequence | None) -> Resolved | None:
        """``constraints`` checked against this graph and mesh (None when there are none)."""
        m, rep = self.model, (self.repeats.rep if self.repeats else (lambda n: n))
        if self._matcher is None and constraints:
            self._matcher = Matcher(self.graph)
        return resolve(constraints, self.graph, self.mesh, lambda n: m.strategies[rep(n)],
                       self._matcher)  # fmt: skip

    def satisfiable(
        self, cons: Resolved | None, params: CostParams, cap, w: Weighted | None = None
    ) -> str | None:
        """None when some plan honours ``cons`` (and the memory cap), else why not. Exact:
        a node with no strategy left answers at once; otherwise dynamic programming over
        the whole graph's tables (``w``: their weights, when the caller has them) with the
        forbidden choices at infinite cost (elimination, then the remainder exhaustively or
        by the ILP)."""
        m = self.full_model
        if cons is not None:  # cheap and exact: most conflicts empty one node
            for i in range(len(m.names)):
                ok = cons.node_allowed(m, i)
                if ok is not None and not ok.any():
                    return _no_strategy(m, i)
        w = m.weigh(params) if w is None else w
        if cons is not None:
            w = cons.mask(m, w)
        p = Problem.build(m, w)
        for i in p.active:
            if not np.isfinite(p.cost[i]).any():
                return _no_strategy(m, i)
        if cap is not None:
            least = sum(float(p.mem[i][np.isfinite(p.cost[i])].min()) for i in p.active)
            if least > cap * (1 + 1e-9):
                return (f"the strategies left need at least {format_bytes(least)} per device, "
                        f"above the cap of {format_bytes(cap)}")  # fmt: skip
        choice, _ = solve_dynamic(p)
        if not math.isfinite(p.objective(choice)):
            return ("every assignment left needs a forbidden collective on some edge (a "
                    "redistribution between two pinned or restricted nodes)")  # fmt: skip
        return None

    def _raise_conflict(self, cons: Resolved, params: CostParams, cap) -> None:
        """Raise `ConstraintError` with the smallest conflicting subset, when no plan
        honours ``cons``; return when one does (a heuristic missed it)."""
        w = self.full_model.weigh(params)
        if self.satisfiable(cons, params, cap, w) is None:
            return

        def test(subset: tuple) -> str | None:
            return self.satisfiable(self.resolve(list(subset)) if subset else None, params, cap,
                                    w)  # fmt: skip

        conflict, reason = deletion_filter(cons.constraints, test)
        raise ConstraintError(conflict_message(conflict, reason, "sharding plan"), conflict,
                              reason)  # fmt: skip

    @staticmethod
    def _check_fixed(p: Problem, fixed: dict[int, int], cons: Resolved) -> None:
        """An annotation (sharding propagation) that a constraint forbids."""
        m = p.model
        for i, k in fixed.items():
            ok = cons.node_allowed(m, i)
            if ok is not None and not ok[k]:
                by = cons.forbidden_by(m, i, k, [0] * len(m.names), p.weighted.params)
                raise ConstraintError(
                    f"annotation %{m.names[i]}={m.nodes[i].strategies[k].name} is forbidden by "
                    f"{by}; drop the annotation or the constraint",
                    tuple(c for c in cons.constraints if str(c) == by),
                    f"the annotation of %{m.names[i]} is forbidden by {by}",
                )

    def _memory(self, choice: list[int]) -> float:
        return float(sum(nt.mem_bytes[k] for nt, k in zip(self.full_model.nodes, choice,
                                                            strict=True)))  # fmt: skip

    def _fixed(
        self, annotations: dict[str, Strategy | str], m: CostModel, repeats: Repeats | None
    ) -> dict[int, int]:
        """Annotations as strategy indexes of ``m`` (the tiled tables, where ``repeats``
        maps a name to its tile node, or the whole graph's)."""
        fixed: dict[int, int] = {}
        for name, want in annotations.items():
            rep = repeats.rep(name) if repeats else name
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


def _no_strategy(m: CostModel, i: int) -> str:
    return (f"%{m.names[i]} has no strategy left (its {len(m.nodes[i].strategies)} strategies "
            "are each forbidden, or each needs a forbidden collective)")  # fmt: skip


# Graphs compare by identity, so the key holds every input of a Planner.
_PLANNERS: Memo[Planner] = Memo("search.planners", maxsize=16)


def search(
    graph: Graph, mesh: Mesh, method: Method = "recursive_programming",
    params: CostParams | None = None, annotations: dict[str, Strategy | str] | None = None,
    top_k: int = 1, reuse_layers: bool = True, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    constraints: Sequence | None = None,
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
        reuse_layers: build tables for two copies of identical transformer layers only; the
            run of layers is then solved exactly as a chain (layers may differ).
        time_limit_s: every method's time limit. ``ilp`` (and the remainder
            ``dynamic_programming`` hands to the ILP) returns the best plan HiGHS found, with
            its relative MIP gap in ``plan.gap``; ``exhaustive`` the best of the assignments
            visited; ``recursive_programming`` skips the starts not yet made and stops its
            descent; ``sharding_propagation`` gives the nodes not yet reached their cheapest
            own strategy. A plan stopped early has status ``"time-limited"`` and says where
            it stopped in ``plan.diagnostics["stopped_early"]``.
        constraints: ``ex.Pin(pattern, strategy)`` and ``ex.Forbid(pattern, axis=...,
            collective=...)`` (`explorer.search.constraints`); every method honours them
            (the tables are narrowed before solving, so exact methods stay exact). A
            constraint that hits only some repeated layers plans the graph unfolded
            (``plan.diagnostics["repeated_layers"]`` says so); ``plan.constraints`` keeps them.

    Raises:
        SearchError: an unknown method, ``top_k < 1``, ``time_limit_s`` not > 0, no plan
            under the memory cap.
        ConstraintError: a malformed constraint, or constraints no plan satisfies (its
            ``conflict`` is the smallest conflicting subset).

    Cost tables are cached per (graph, mesh), so a second search with other CostParams
    only re-weighs them.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> plan = search(g, ex.Mesh({"tp": 4}, hardware="a100-80g"), "dynamic_programming")
    >>> plan.status
    'optimal'
    """
    _check(method, params, annotations, top_k, time_limit_s)
    _check_inputs(graph, mesh)
    planner = _PLANNERS.get((graph, mesh, reuse_layers),
                            lambda: Planner(graph, mesh, reuse_layers))  # fmt: skip
    return planner.search(method, params, annotations, top_k, time_limit_s, constraints)
