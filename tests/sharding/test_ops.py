"""Every op x every strategy, on a 1-D and a 2-D mesh: sharded == unsharded, bytes match."""

from __future__ import annotations

import pytest

from explorer.ir import GraphBuilder, names
from explorer.sharding import assign, node_strategies, verify
from explorer.sharding.rules import REPLICATED_ONLY

from .helpers import MESH_1D, MESH_2D, OPS, op_graph


def test_every_registered_op_is_covered():
    assert set(names()) - {"input", "param", "constant"} - REPLICATED_ONLY == set(OPS)


@pytest.mark.parametrize("mesh", [MESH_1D, MESH_2D], ids=["4", "2x4"])
@pytest.mark.parametrize("op", OPS)
def test_every_strategy_matches_unsharded(op, mesh):
    graph, target = op_graph(op)
    options = node_strategies(graph, target, mesh)
    assert options[0].name == "replicated"
    assert len(options) > 1, f"{op} has no split strategy on {mesh}"
    for s in options:
        report = verify(graph, assign(graph, mesh, {target: s.name}), mesh, seed=3)
        assert report.ok, f"{op} {s.name}: {report}"


@pytest.mark.parametrize("op", ["matmul", "layernorm", "cross_entropy", "embedding"])
def test_replicated_sources_are_sliced_and_gathered(op):
    # sources replicated: every input is redistributed (sliced) to what the op needs
    graph, target = op_graph(op)
    mesh = MESH_2D
    srcs = {n.name: "replicated" for n in graph.nodes if n.is_source}
    for s in node_strategies(graph, target, mesh):
        report = verify(graph, assign(graph, mesh, {**srcs, target: s.name}), mesh)
        assert report.ok, f"{op} {s.name}: {report}"


def test_sum_and_mean_over_all_axes_give_partial_then_reduce():
    b = GraphBuilder("r")
    x = b.input("x", (8, 8))
    g = b.build([b.op("mean", x, name="m"), b.op("sum", x, name="s")])
    for s in node_strategies(g, "m", MESH_2D):
        rep = verify(g, assign(g, MESH_2D, {"m": s.name, "s": s.name}), MESH_2D)
        assert rep.ok, (s.name, str(rep))
