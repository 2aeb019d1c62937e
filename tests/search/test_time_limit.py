"""Every search method honours ``time_limit_s`` and says when it stopped early."""

import math
import re

import pytest

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.search import SearchError, search
from explorer.search.solvers.deadline import Deadline

MESH = ex.Mesh({"tp": 4}, hardware="a100-80g")
GONE = 1e-9  # seconds: passed at the first check, on any machine


def mlp(layers=3, batch=8, d=16):
    b = GraphBuilder("mlp")
    h = b.input("x", (batch, d))
    for k in range(layers):
        h = b.op("matmul", h, b.param(f"w{k}", (d, d)), name=f"fc{k}")
        h = b.op("relu", h, name=f"act{k}")
    return b.build([h])


@pytest.mark.parametrize("method", ["exhaustive", "recursive_programming",
                                    "sharding_propagation"])  # fmt: skip
def test_a_search_out_of_time_returns_its_best_plan_marked_time_limited(method):
    g = mlp()
    plan = search(g, MESH, method, time_limit_s=GONE, reuse_layers=False)
    assert plan.status == "time-limited"
    assert plan.status_text == "time-limited (gap unknown)"
    said = plan.diagnostics["stopped_early"]
    assert said.startswith(f"time_limit_s={GONE:g} ran out ") and "raise time_limit_s" in said
    # a whole, valid plan: every node has a strategy and the cost is finite
    assert set(plan.assignment) == {n.name for n in g.nodes}
    assert math.isfinite(plan.cost.total)
    assert ex.sharding.verify(g, plan, MESH).ok


@pytest.mark.parametrize("method", ["exhaustive", "recursive_programming",
                                    "sharding_propagation", "ilp", "dynamic_programming"])  # fmt: skip
def test_a_search_with_time_to_spare_finishes(method):
    plan = search(mlp(), MESH, method, time_limit_s=600, reuse_layers=False)
    assert plan.status != "time-limited"
    assert "stopped_early" not in plan.diagnostics


def test_exhaustive_out_of_time_keeps_the_best_of_what_it_visited():
    full = search(mlp(), MESH, "exhaustive", reuse_layers=False)
    early = search(mlp(), MESH, "exhaustive", time_limit_s=GONE, reuse_layers=False)
    said = early.diagnostics["stopped_early"]
    visited, total = re.search(r"after ([\d,]+) of ([\d,]+) assignments", said).groups()
    assert visited == "1,024" and int(total.replace(",", "")) > 1024
    assert early.cost.total >= full.cost.total * (1 - 1e-12)


def test_deadline_remembers_where_it_first_ran_out():
    d = Deadline(GONE)
    assert d.passed("here") and d.passed("there")
    assert d.stopped_at == "here" and "ran out here" in d.report()
    assert Deadline(600).report() is None


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "10", True])
def test_a_bad_time_limit_is_a_named_error(bad):
    with pytest.raises(SearchError, match="time_limit_s="):
        search(mlp(), MESH, "recursive_programming", time_limit_s=bad)
