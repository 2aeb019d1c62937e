"""Figure builders as pure functions: a core object in, a go.Figure out."""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.ir import TensorType
from explorer.search import CostBreakdown
from explorer.sharding import Layout
from widgets.colors import group_color
from widgets.figures import (
    cost_figure,
    graph_figure,
    graph_layout,
    layer_scopes,
    mesh_figure,
    ring_figure,
    ring_steps,
    sharding_figure,
)
from widgets.figures.graph import STRATEGY_PALETTE
from widgets.figures.layout import LARGE_GRAPH


def test_layer_scopes_and_collapsed_layout(tiny_gpt):
    scopes = layer_scopes(tiny_gpt)
    assert scopes == ("layers.0", "layers.1", "layers.2")
    full = graph_layout(tiny_gpt)
    assert len(full.units) == len(tiny_gpt) and not full.is_box.any()
    lay = graph_layout(tiny_gpt, scopes)
    assert lay.is_box.sum() == 3 and lay.num_nodes == len(tiny_gpt)
    boxes = [lay.x[lay.index(f"scope:{s}")] for s in scopes]
    assert boxes == sorted(boxes) and len(set(boxes)) == 3  # left to right in layer order
    for i, j in lay.edges:  # every edge points right
        assert lay.x[i] < lay.x[j]


def test_expanding_one_layer_keeps_the_others_collapsed(tiny_gpt):
    lay = graph_layout(tiny_gpt, ("layers.0", "layers.2"))
    assert lay.is_box.sum() == 2
    assert len(lay.members["scope:layers.0"]) == len(tiny_gpt.in_scope("layers.0"))
    assert lay.unit_of("layers.1.attn.norm") == "layers.1.attn.norm"


def test_graph_figure_traces_and_colours(mlp, mlp_plan):
    fig = graph_figure(mlp, mlp_plan, color_by="strategy", highlight=["layers.0.fc1"],
                       selected="layers.1.fc2")  # fmt: skip
    d = fig.to_dict()
    names = ["edges", "nodes", "changed", "selected", "groups", "frames", "boxes"]
    assert [t["name"] for t in d["data"]] == names
    nodes = d["data"][1]
    assert list(nodes["customdata"]) == [n.name for n in mlp.nodes]
    i = list(nodes["customdata"]).index("layers.0.fc1")
    strategy = mlp_plan.assignment["layers.0.fc1"].name
    assert nodes["marker"]["color"][i] in STRATEGY_PALETTE
    assert strategy in d["layout"]["annotations"][0]["text"]  # the legend names it
    assert "strategy <b>" in nodes["hovertext"][i] and "cost" in nodes["hovertext"][i]
    assert len(fig.data[2].x) == 1 and len(fig.data[3].x) == 1  # to_dict packs arrays
    assert d["data"][1]["type"] == "scatter"
    by_group = graph_figure(mlp).to_dict()["data"][1]["marker"]["color"]
    assert by_group[i] == group_color("contraction")


def test_graph_figure_cost_colouring_is_numeric(mlp, mlp_plan):
    fig = graph_figure(mlp, mlp_plan, color_by="cost")
    marker = fig.to_dict()["data"][1]["marker"]
    assert marker["showscale"] is True
    assert np.issubdtype(np.asarray(fig.data[1].marker.color).dtype, np.floating)
    with pytest.raises(ValueError, match="stages"):
        graph_figure(mlp, mlp_plan, color_by="stage")


def test_large_graph_uses_webgl(tiny_gpt):
    assert graph_figure(tiny_gpt, webgl=True).data[1].type == "scattergl"
    assert LARGE_GRAPH == 2000


def test_mesh_figure_blocks_and_replicas(mesh):
    t = TensorType((8, 16, 64), "bf16")
    fig = mesh_figure(mesh, Layout(((), (), ("tp",))), t, tensor="x", groups_axes=("dp",))
    z = np.asarray(fig.data[0].z)
    assert z.shape == (2, 4)
    assert (z[0] == z[1]).all() and len(set(z[0])) == 4  # dp replicas share a block
    assert "x2 replica" in fig.data[0].hovertext[0][0]
    gx = [v for v in fig.data[1].x if v is not None]
    assert len(gx) == 4 * 3  # four dp groups, each a closed ring of 2 devices
    partial = mesh_figure(mesh, Layout(((), (), ("tp",)), partial=("dp",)), t)
    assert "Σ dp" in partial.data[0].text[0][0]


def test_mesh_figure_draws_node_boundaries():
    big = ex.Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    fig = mesh_figure(big)
    assert len(fig.layout.shapes) == big.size // big.hardware.chips_per_node


def test_sharding_figure_labels_blocks_with_devices(mesh):
    fig = sharding_figure(TensorType((8, 64), "fp32"), Layout((("dp",), ())), mesh, "w")
    assert list(fig.data[0].text) == ["0,1,2,3", "4,5,6,7"]
    assert len(fig.layout.shapes) == 2


@pytest.mark.parametrize("kind,steps", [("all-reduce", 7), ("all-gather", 4),
                                        ("reduce-scatter", 4)])  # fmt: skip
def test_ring_steps_end_states(kind, steps):
    states = ring_steps(kind, 4)
    assert len(states) == steps
    last = states[-1].counts
    if kind == "reduce-scatter":
        assert sorted(int(last[r].max()) for r in range(4)) == [4] * 4
        assert [int(np.argmax(last[r])) for r in range(4)] == [1, 2, 3, 0]
    else:
        assert (last == 4).all()
    fig = ring_figure(states[1], kind, [0, 1, 2, 3], len(states))
    assert len(fig.layout.annotations) == 4


def test_cost_figure_before_after():
    before = CostBreakdown(compute=1.0, communication=(("all-reduce", 0.5),))
    after = CostBreakdown(compute=1.0, communication=(("all-gather", 0.25),))
    d = cost_figure(after, before, changed=2).to_dict()
    cats = d["data"][1]["x"]
    assert d["data"][0]["y"][cats.index("All-reduce")] == 0.5
    assert d["data"][1]["y"][cats.index("All-gather")] == 0.25
    assert d["data"][1]["hovertext"][cats.index("All-gather")] == "All-gather: 250 ms"
    title = d["layout"]["title"]["text"]
    assert "2 ops changed" in title and "baseline 1.50 s" in title and "−16.7%" in title
    assert d["layout"]["yaxis"]["type"] == "log" and d["layout"]["barmode"] == "group"
    other_unit = cost_figure(after, CostBreakdown(compute=3.0, unit="bytes"))
    assert all(v is None for v in other_unit.data[0].y)


def test_cost_figure_stacked_has_one_bar_per_plan():
    before = CostBreakdown(compute=1.0, communication=(("all-reduce", 0.5),))
    after = CostBreakdown(compute=2.0, communication=(("all-reduce", 0.01),), unit="seconds")
    fig = cost_figure(after, before, scale="stacked")
    d = fig.to_dict()
    assert d["layout"]["barmode"] == "stack" and d["layout"]["yaxis"]["type"] == "linear"
    stacked = {t["name"]: t for t in d["data"][2:]}
    assert stacked["Compute"]["y"] == [1.0, 2.0] and stacked["Compute"]["visible"] is True
    assert stacked["All-reduce"]["y"] == [0.5, 0.01]
    assert d["data"][0]["visible"] is False
    sums = [sum(t["y"][i] for t in d["data"][2:]) for i in (0, 1)]
    assert sums == pytest.approx([before.total, after.total])  # the stack is the total
    with pytest.raises(ValueError, match="scale"):
        cost_figure(after, before, scale="loglog")


def test_cost_figure_bytes_unit_reads_in_binary_units():
    after = CostBreakdown(compute=3 * 2**30, unit="bytes", memory_bytes=1000)
    fig = cost_figure(after)
    assert fig.layout.title.text == "total 3.00 GiB"
    assert fig.layout.annotations[0].text == "memory per device 1000 B"
    assert fig.layout.yaxis.ticksuffix == "B"
