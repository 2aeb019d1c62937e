"""Repeated layers: tables for two copies, cost and optimum of the whole graph.

The tiled search must report the cost of the plan it returns on the full graph (the
layer-to-layer edges priced), and its optimum must equal the full graph's optimum where an
exact method proves one: the run of layers is solved as a chain, so layers may differ.
"""

import pytest

import explorer as ex
from explorer.search import CostParams, Planner

A100 = "a100-80g"
PARAMS = CostParams(device_memory_cap_bytes=float("inf"))
MESHES = {
    "dp8xtp8": ex.Mesh({"dp": 8, "tp": 8}, hardware=A100),
    "2x2x2": ex.Mesh({"x": 2, "y": 2, "z": 2}, hardware=A100),
}


def gpt2(batch: int):
    return ex.models.build(ex.models.load("gpt2"), batch=batch, seq=1024)


def full_cost(plan) -> float:
    """The plan's objective evaluated on tables built for the whole graph (no tiling)."""
    m = Planner(plan.graph, plan.mesh, reuse_layers=False).model
    choice = [[s.name for s in m.nodes[i].strategies].index(plan.assignment[n].name)
              for i, n in enumerate(m.names)]  # fmt: skip
    return m.total(m.weigh(plan.params), choice)


@pytest.mark.parametrize("method", ["dynamic_programming", "ilp", "recursive_programming"])
def test_tiled_cost_is_the_cost_of_the_expanded_plan(method):
    # before the fix the reported cost was 0.841 of this (gpt2, batch 8, dp8 x tp8)
    plan = ex.search(gpt2(8), MESHES["dp8xtp8"], method, PARAMS)
    assert "layers 1..11 identical" in plan.diagnostics["repeated_layers"]
    assert plan.cost.total == pytest.approx(full_cost(plan), rel=1e-9)


@pytest.mark.parametrize("batch", [8, 64])
@pytest.mark.parametrize("mesh", list(MESHES), ids=str)
def test_tiled_optimum_is_the_full_graph_optimum(batch, mesh):
    g, mesh = gpt2(batch), MESHES[mesh]
    full = Planner(g, mesh, reuse_layers=False).search("dynamic_programming", PARAMS)
    assert full.status == "optimal" and full.diagnostics["reduced_fully"]
    tiled = Planner(g, mesh).search("dynamic_programming", PARAMS)
    assert tiled.status == "optimal"
    assert "solved as a chain" in tiled.diagnostics["repeated_layers"]
    assert tiled.cost.total == pytest.approx(full.cost.total, rel=1e-9)
    assert tiled.cost.total == pytest.approx(full_cost(tiled), rel=1e-9)


@pytest.mark.parametrize("batch", [8, 64])
def test_tiled_ilp_optimum_is_the_full_graph_optimum(batch):
    # the full-graph ILP is slow (88 s on gpt2); the full-graph DP proves the optimum
    g, mesh = gpt2(batch), MESHES["dp8xtp8"]
    full = Planner(g, mesh, reuse_layers=False).search("dynamic_programming", PARAMS)
    tiled = ex.search(g, mesh, "ilp", PARAMS)
    assert tiled.status == "optimal"
    assert tiled.cost.total == pytest.approx(full.cost.total, rel=1e-9)


def test_layers_of_the_chain_may_take_different_strategies():
    # gpt2 batch 8 on dp8 x tp8: the optimum is not the same strategy in every layer (the
    # best plan with every layer alike costs 1.0017x the optimum), so a tiled search that
    # copies one layer's strategies cannot reach it
    plan = ex.search(gpt2(8), MESHES["dp8xtp8"], "dynamic_programming", PARAMS)
    names = {tuple(s.name for n, s in plan.assignment.items() if n.startswith(f"layers.{k}."))
             for k in range(1, 12)}  # fmt: skip
    assert len(names) > 1


def shared_input_layers(layers=5):
    """Identical layers that each also read one outside value (``bias``): the layers do not
    meet through one value only, so the chain does not apply."""
    b = ex.ir.GraphBuilder("shared")
    h = b.input("x", (8, 32))
    bias = b.input("bias", (8, 32))
    for k in range(layers):
        with b.scope(f"layers.{k}"):
            h = b.op("matmul", h, b.param("w", (32, 32)), name="fc")
            h = b.op("add", h, bias, name="res")
    return b.build([h])


@pytest.mark.parametrize("method", ["ilp", "dynamic_programming", "sharding_propagation"])
def test_without_a_chain_every_layer_alike_is_priced_exactly(method):
    g = shared_input_layers()
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=A100)
    kw = {"annotations": {"layers.0.fc": "a=dp"}} if method == "sharding_propagation" else {}
    plan = ex.search(g, mesh, method, PARAMS, **kw)
    assert "every layer alike" in plan.diagnostics["repeated_layers"]
    # the best plan with every layer alike is not proved optimal for the whole graph
    assert plan.status == "heuristic" and plan.gap is None
    assert plan.cost.total == pytest.approx(full_cost(plan), rel=1e-9)
    names = {plan.assignment[f"layers.{k}.fc"].name for k in range(2, 5)}
    assert len(names) == 1  # the copies repeat the tile
    if method != "sharding_propagation":
        best = Planner(g, mesh, reuse_layers=False).search("ilp", PARAMS)
        assert best.cost.total <= plan.cost.total * (1 + 1e-9)
    assert ex.sharding.verify(g, plan, mesh).ok


def test_a_chain_plan_over_the_memory_cap_falls_back_to_alike_layers_under_it():
    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=128)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=A100)
    free = ex.search(g, mesh, "ilp", PARAMS)
    assert "solved as a chain" in free.diagnostics["repeated_layers"]
    need = free.diagnostics["memory_bytes"]
    capped = ex.search(g, mesh, "ilp", PARAMS.replace(device_memory_cap_bytes=need * 0.98))
    assert capped.diagnostics["memory_bytes"] <= need * 0.98
    assert "over the memory cap" in capped.diagnostics["repeated_layers"]
    assert capped.status == "heuristic"
    assert capped.cost.total >= free.cost.total * (1 - 1e-9)
    assert capped.cost.total == pytest.approx(full_cost(capped), rel=1e-9)
