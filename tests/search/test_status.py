"""Plan status (optimal / time-limited with its gap / heuristic), the time limit reaching
every solver, and bad arguments raising SearchError."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

import explorer as ex
from explorer.errors import ExplorerError
from explorer.ir import GraphBuilder
from explorer.search import SearchError, search
from explorer.search import planner as planner_module
from explorer.search.problem import Problem
from explorer.search.solvers import dynamic
from explorer.search.solvers.ilp import ILPSolution, solve_ilp

MESH = ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g")


def two_matmuls():
    b = GraphBuilder("mlp2")
    x = b.input("x", (8, 16))
    h = b.op("relu", b.op("matmul", x, b.param("w1", (16, 64)), name="fc1"), name="act")
    return b.build([b.op("matmul", h, b.param("w2", (64, 16)), name="fc2")])


def clique_problem(n=4, k=25, seed=0) -> Problem:
    """``n`` ops all joined to each other, ``k`` strategies each: no elimination applies,
    and the remainder (k**n > 200,000 assignments) goes to the ILP."""
    rng = np.random.default_rng(seed)
    model = SimpleNamespace(names=[f"n{i}" for i in range(n)])
    weighted = SimpleNamespace(params=SimpleNamespace(prefer_data_parallel_on_ties=False))
    cost = [rng.random(k) for _ in range(n)]
    edges = [(i, j, rng.random((k, k))) for i in range(n) for j in range(i + 1, n)]
    zero = [np.zeros(k) for _ in range(n)]
    return Problem(model, weighted, cost, zero, zero, edges, list(range(n)), {})


def stopped_ilp(calls):
    def fake(p, cap, k=1, time_limit_s=60.0):
        calls.append(time_limit_s)
        sol = solve_ilp(p, cap, k, time_limit_s)
        return [ILPSolution(s.objective, s.choice, False, 0.031, "Time limit reached") for s in sol]

    return fake


def test_dynamic_programming_is_not_optimal_when_its_ilp_stopped(monkeypatch):
    calls = []
    monkeypatch.setattr(dynamic, "solve_ilp", stopped_ilp(calls))
    choice, diag = dynamic.solve_dynamic(clique_problem(), time_limit_s=7.5)
    assert calls == [7.5]
    assert diag["remainder_solver"] == "ilp"
    assert diag["optimal"] is False and diag["gap"] == pytest.approx(0.031)


def test_dynamic_programming_with_a_solved_ilp_is_optimal():
    choice, diag = dynamic.solve_dynamic(clique_problem())
    assert diag["remainder_solver"] == "ilp" and diag["optimal"] is True
    assert sorted(choice) == [0, 1, 2, 3]


def test_time_limited_status_and_gap_are_shown_everywhere(monkeypatch):
    calls = []
    monkeypatch.setattr(planner_module, "solve_ilp", stopped_ilp(calls))
    plan = search(two_matmuls(), MESH, "ilp", time_limit_s=3.0)
    assert calls == [3.0]
    assert plan.status == "time-limited" and plan.gap == pytest.approx(0.031)
    assert plan.status_text == "time-limited (MIP gap 3.1%)"
    assert "time-limited (MIP gap 3.1%)" in str(plan)
    assert "time-limited (MIP gap 3.1%)" in str(plan.explain("fc1"))


@pytest.mark.parametrize(
    "method, status",
    [("exhaustive", "optimal"), ("ilp", "optimal"), ("dynamic_programming", "optimal"),
     ("recursive_programming", "heuristic")],
)  # fmt: skip
def test_status_of_each_method(method, status):
    plan = search(two_matmuls(), MESH, method)
    assert plan.status == status
    assert plan.status_text == status and status in str(plan)
    assert f"plan {status}" in str(plan.explain("fc2"))
    assert plan.gap in ((0.0,) if status == "optimal" else (None,))


def test_time_limit_reaches_the_dynamic_programming_remainder(monkeypatch):
    seen = []
    real = planner_module.solve_dynamic

    def spy(p, time_limit_s=60.0):
        seen.append(time_limit_s)
        return real(p, time_limit_s)

    monkeypatch.setattr(planner_module, "solve_dynamic", spy)
    search(two_matmuls(), MESH, "dynamic_programming", time_limit_s=12.0)
    assert seen == [12.0]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "greedy"}, "valid methods: exhaustive, ilp"),
        ({"top_k": 0}, r"top_k=0: expected an int >= 1"),
        ({"top_k": 2.5}, r"top_k=2.5: expected an int >= 1"),
        ({"top_k": 3, "method": "recursive_programming"}, "only method='ilp' or 'exhaustive'"),
        ({"time_limit_s": 0}, r"time_limit_s=0: expected a finite number of seconds > 0"),
        ({"time_limit_s": -1.0}, r"time_limit_s=-1.0"),
        ({"time_limit_s": math.nan}, r"time_limit_s=nan"),
        ({"time_limit_s": math.inf}, r"time_limit_s=inf"),
        ({"params": {"beta_communication": 2}}, "not CostParams"),
        ({"annotations": ["fc1"]}, "expected a dict"),
    ],
)  # fmt: skip
def test_bad_arguments_raise_search_error(kwargs, match):
    with pytest.raises(SearchError, match=match) as err:
        search(two_matmuls(), MESH, **kwargs)
    assert isinstance(err.value, ExplorerError)


def test_bad_graph_mesh_node_and_top_k_raise_explorer_errors():
    with pytest.raises(SearchError, match="not an explorer.ir.Graph"):
        search("gpt2", MESH)
    with pytest.raises(SearchError, match="not an explorer Mesh"):
        search(two_matmuls(), {"dp": 2})
    plan = search(two_matmuls(), MESH, "ilp", top_k=2)
    for bad in (0, -1, True):
        with pytest.raises(SearchError, match="expected an int >= 1"):
            plan.top_k(bad)
    with pytest.raises(SearchError, match="plan has no node %nope"):
        plan.explain("nope")
    with pytest.raises(SearchError, match="plan has no node %nope"):
        plan.node_cost("nope")
    assert issubclass(SearchError, ExplorerError)


@pytest.mark.parametrize(
    "field, value, match",
    [("alpha_compute", math.nan, "expected a number"), ("beta_communication", "1", "expected a number"),
     ("gamma_param_comm", -1.0, "expected a value >= 0"), ("compute_efficiency", 0.0, "0 < value <= 1"),
     ("unit", "flops", "expected 'seconds' or 'bytes'")],
)  # fmt: skip
def test_bad_cost_params_raise_search_error(field, value, match):
    with pytest.raises(SearchError, match=match):
        ex.CostParams(**{field: value})
    assert ex.CostParams(alpha_compute=np.float64(2.0)).alpha_compute == 2.0


def test_planner_and_explain_check_their_arguments():
    with pytest.raises(SearchError, match="not an explorer.ir.Graph"):
        ex.search.Planner(None, MESH)
    plan = search(two_matmuls(), MESH, "ilp")
    with pytest.raises(SearchError, match=r"explain\(k=-1\): expected an int >= 0"):
        plan.explain("fc1", k=-1)
    no_hw = ex.Mesh({"tp": 2})
    with pytest.raises(SearchError, match="no hardware"):
        search(two_matmuls(), no_hw, "ilp", ex.CostParams())
