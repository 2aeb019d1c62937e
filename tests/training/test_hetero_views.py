"""The pools of a heterogeneous job drawn: pool map, Gantt rows on their pool's colour, PoolsView."""

from __future__ import annotations

import pytest

import explorer as ex
from widgets import PoolsView
from widgets.figures.errors import ViewError
from widgets.figures.pools import pool_color, pools_map_figure, pools_pipeline_figure

POOLS = [ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8)]


@pytest.fixture(scope="module")
def pipe():
    return ex.plan_hetero("gpt3-1.3b", POOLS, 32, 1024, modes=("pipeline",))


@pytest.fixture(scope="module")
def data():
    return ex.plan_hetero("gpt2", POOLS, 64, 512, modes=("data",))


def test_map_has_a_row_per_pool_cut_into_its_stages(pipe):
    fig = pools_map_figure(pipe).to_dict()
    assert [t["name"] for t in fig["data"]] == ["8 x h100-sxm", "8 x a100-80g"]
    for i, (t, a) in enumerate(zip(fig["data"], pipe.assignments, strict=True)):
        assert t["marker"]["color"] == pool_color(i)
        assert sum(t["x"]) == a.pool.chips  # the blocks cover the pool's chips
        assert [int(s.split(":")[0][1:]) for s in t["text"]] == list(a.stages)
        assert [int(s.split(": ")[1][:-1]) for s in t["text"]] == list(a.layers)


def test_map_in_data_mode_shows_replicas_and_batch_shares(data):
    fig = pools_map_figure(data).to_dict()
    for t, a in zip(fig["data"], data.assignments, strict=True):
        assert t["name"].endswith(f"{a.sequences} sequences")
        assert len(t["x"]) == a.config.dp


def test_gantt_rows_name_their_pool_and_sit_on_its_colour(pipe):
    fig = pools_pipeline_figure(pipe).to_dict()
    ticks = fig["layout"]["yaxis"]["ticktext"]
    assert len(ticks) == pipe.partition.stages
    for g, text in enumerate(ticks):
        assert pipe.pool_of_stage(g).label in text and f"stage {g}" in text
    bands = [s for s in fig["layout"]["shapes"] if s.get("layer") == "below"]
    assert [b["fillcolor"] for b in bands] == [pool_color(p) for p in pipe.stage_pool]
    legend = [t["name"] for t in fig["data"] if t["name"].startswith("pool: ")]
    assert sorted(legend) == sorted(f"pool: {p}" for p in POOLS)


def test_data_mode_gantt_draws_the_chosen_pool(data):
    fig = pools_pipeline_figure(data, pool=1).to_dict()
    assert all("a100-80g" in t for t in fig["layout"]["yaxis"]["ticktext"])
    with pytest.raises(ViewError, match="pool=5"):
        pools_pipeline_figure(data, pool=5)


def test_pools_view_pipeline_click_outlines_a_stage(pipe):
    view = PoolsView(pipe)
    assert "h100-sxm" in view.info.value
    view.select_stage(1)
    sel = [t for t in view.figure.data if t.name == "selected"][0]
    assert len(sel.x) > 0  # the stage's steps are outlined
    with pytest.raises(ViewError, match="select_pool is for a data-parallel plan"):
        view.select_pool(1)
    with pytest.raises(ViewError, match="stage=99"):
        view.select_stage(99)


def test_pools_view_data_mode_switches_pool(data):
    view = PoolsView(data)
    view.controls["pool"].value = 1
    assert view.pool == 1
    assert "a100-80g" in view.figure.layout.yaxis.ticktext[0]


def test_pools_view_refuses_a_homogeneous_plan():
    plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    with pytest.raises(ViewError, match="needs a HeteroPlan"):
        PoolsView(plan)
