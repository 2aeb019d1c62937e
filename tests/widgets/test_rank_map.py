"""The rank map view, headless: the grid labels every GPU with its rank and group (meaning
not carried by colour alone), the groups drawn follow the axis menu, a refused layout is shown
beside its control with the last map kept and marked stale."""

from __future__ import annotations

from explorer.teach import RankLayout, rank_map
from widgets.figures.rank_map import rank_map_caption, rank_map_figure
from widgets.rank_map_view import RankMapView


def test_figure_labels_every_gpu_with_rank_and_group():
    m = rank_map(RankLayout(dp=2, tp=4, pp=2), gpus_per_node=8)
    fig = rank_map_figure(m, "pp", rank=5)
    (trace,) = fig.data
    assert len(trace.x) == m.world_size
    for r, label in enumerate(trace.text):
        k = m.index_of(r, "pp")
        assert label == f"r{r}<br>pp {k}"
        assert (trace.x[r], trace.y[r]) == (r % 8, r // 8)
    outlined = [r for r, w in enumerate(trace.marker.line.width) if w > 1]
    assert outlined == list(m.group_of(5, "pp"))
    # ranks of one group share a colour, and the colour repeats what the label says
    for g in m.groups["pp"]:
        assert len({trace.marker.color[r] for r in g}) == 1
    # the title is the caption (wrapped: a line break may replace ", ")
    title = fig.layout.title.text.replace(",<br>", ", ").replace("<br>", ", ")
    assert rank_map_caption(m, "pp") in title


def test_large_machines_draw_their_first_nodes_and_say_so():
    m = rank_map(RankLayout(dp=64, tp=8, pp=4), gpus_per_node=8)
    fig = rank_map_figure(m, "tp", max_nodes=4)
    assert len(fig.data[0].x) == 32
    assert "first 4 of 256 nodes" in fig.layout.title.text


def test_view_follows_axis_rank_and_layout():
    v = RankMapView(dp=2, tp=4, pp=2)
    v.controls["axis"].value = "dp"
    assert "dp groups" in v.figure.layout.title.text
    assert str(v.map.new_group_ranks("dp")) in v.summary.value.replace("&#x27;", "'")
    v.controls["rank"].value = 6
    widths = v.figure.data[0].marker.line.width
    assert [r for r, w in enumerate(widths) if w > 1] == list(v.map.group_of(6, "dp"))
    v.controls["launcher"].value = "megatron-pp-before-dp"
    assert v.map.order == "tp-cp-ep-pp-dp"
    assert v.map.groups["dp"][0] == (0, 8)  # dp is now the slowest axis


def test_refused_layout_shown_beside_its_control_and_marked_stale():
    v = RankMapView(dp=2, tp=4, pp=2)
    before = v.figure.layout.title.text
    v.controls["ep"].value = 3
    err = v.field_errors["ep"]
    assert err.visible and "does not divide" in err.text
    assert v.stale and v.figure.layout.title.text == before
    err.restore()
    assert v.controls["ep"].value == 1 and not v.stale and not err.visible
    v.controls["tp"].value = 8
    assert v.map.layout.tp == 8 and v.controls["rank"].max == v.map.world_size - 1


def test_view_draws_hsdp_groups():
    v = RankMapView(dp=4, tp=2, pp=1, dp_replicate=2, launcher="torchtitan", axis="fsdp")
    assert v.map.layout.dp_replicate == 2
    assert "fsdp groups" in v.figure.layout.title.text
    assert "dp_replicate" in v.summary.value and "dp_shard" in v.summary.value
    v.controls["dp_replicate"].value = 3
    assert v.field_errors["dp_replicate"].visible and v.stale
