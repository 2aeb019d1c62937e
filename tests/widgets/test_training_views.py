"""PipelineView, MemoryView, ScalingView and the StrategyExplorer dashboard, headless, and
their figure builders as pure functions."""

from __future__ import annotations

import base64

import numpy as np
import pytest

import explorer as ex
from widgets import (
    MemoryView,
    PipelineView,
    ScalingView,
    Series,
    StrategyExplorer,
    link,
)
from widgets.figures import memory_figure, pipeline_figure, scaling_figure
from widgets.figures.memory import ROWS, TRACE_TOTAL
from widgets.figures.pipeline import EVENT_KINDS, TRACE_SELECTED_MB

FWD, BWD, IDLE = (EVENT_KINDS.index(k) for k in ("compute-forward", "compute-backward", "idle"))


def arr(v):
    """A to_dict() array: plotly 6+ writes numpy arrays as {"dtype", "bdata"} (base64)."""
    if isinstance(v, dict) and "bdata" in v:
        out = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return out.reshape(v["shape"]) if "shape" in v and isinstance(v["shape"], list) else out
    return np.asarray(v)


@pytest.fixture(scope="module")
def sim():
    return ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4, microbatch_size=2),
                       global_batch=32, seq=512)  # fmt: skip


@pytest.fixture(scope="module")
def curve():
    return ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512)


# --- figure builders ---------------------------------------------------------------------


def test_pipeline_figure_has_a_bar_per_step_and_the_bubble(sim):
    fig = pipeline_figure(sim, selected_microbatch=1)
    d = fig.to_dict()
    pp, m = 4, sim.config.num_microbatches
    assert [t["name"] for t in d["data"][: len(EVENT_KINDS)]] == list(EVENT_KINDS)
    assert len(arr(d["data"][FWD]["x"])) == pp * m and len(arr(d["data"][BWD]["x"])) == pp * m
    assert len(arr(d["data"][IDLE]["x"])) > 0  # the bubble is drawn
    assert d["data"][FWD]["texttemplate"] == "F%{customdata[1]}"
    assert len(arr(d["data"][TRACE_SELECTED_MB]["x"])) == 2 * pp  # F and B of mb 1 per stage
    assert d["layout"]["yaxis"]["ticktext"] == ["stage 0", "stage 1", "stage 2", "stage 3"]
    assert "bubble" in d["layout"]["title"]["text"]
    with pytest.raises(ValueError, match="timeline"):
        pipeline_figure(ex.training.estimate("gpt2", sim.config, global_batch=32, seq=512))


def test_pipeline_figure_interleaved_rows(sim):
    s = ex.simulate("gpt2", sim.config.replace(schedule="interleaved_1f1b", virtual_stages=3,
                                                num_microbatches=None), global_batch=32, seq=512)  # fmt: skip
    d = pipeline_figure(s).to_dict()
    assert d["layout"]["yaxis"]["ticktext"][0] == "dev 0: st 0,4,8"
    assert len(arr(d["data"][FWD]["x"])) == 4 * 3 * s.config.num_microbatches


def test_memory_figure_stacks_every_row_against_capacity(sim):
    d = memory_figure(sim, selected_stage=2).to_dict()
    assert [t["name"] for t in d["data"][: len(ROWS)]] == list(ROWS)
    gib = 2**30
    for dev, m in enumerate(sim.memory_per_device):
        stacked = sum(arr(d["data"][k]["y"])[dev] for k in range(len(ROWS)))
        assert stacked == pytest.approx(m.total / gib)
    assert d["layout"]["shapes"][0]["y0"] == pytest.approx(sim.memory_cap_bytes / gib)
    assert d["layout"]["shapes"][1]["visible"] is True and d["layout"]["shapes"][1]["x0"] == 1.55
    small = memory_figure(sim.memory_per_device, cap_bytes=1 * gib).to_dict()
    assert small["data"][TRACE_TOTAL]["textfont"]["color"][0] == "#E4002B"  # over capacity
    with pytest.raises(ValueError, match="cap_bytes"):
        memory_figure(sim.memory_per_device)


def test_scaling_figure_slots(curve):
    fig = scaling_figure([curve, None], slots=3, metric="mfu")
    d = fig.to_dict()
    assert len(d["data"]) == 7 and d["data"][0]["visible"] is True
    assert d["data"][2]["visible"] is False and d["data"][4]["visible"] is False
    assert d["data"][1]["y"][0] == 1.0 and d["data"][0]["y"][0] == pytest.approx(
        curve.points[0].mfu
    )
    assert d["layout"]["xaxis"]["type"] == "log"
    with pytest.raises(ValueError, match="metric"):
        scaling_figure([curve], metric="speed")


# --- PipelineView ------------------------------------------------------------------------


@pytest.fixture
def pipeline():
    return PipelineView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=32, seq=512)


def test_pipeline_view_microbatches_and_schedule(pipeline):
    v = pipeline
    assert v.controls["microbatches"].value == 16 and v.controls["pp"].value == 4
    v.controls["microbatches"].value = 4
    d = v.figure.to_dict()
    assert len(arr(d["data"][FWD]["x"])) == 4 * 4 and v.global_batch == 2 * 1 * 4
    assert "4 microbatches" in d["layout"]["title"]["text"]
    v.controls["schedule"].value = "interleaved_1f1b"
    assert v.config.virtual_stages == 3 and not v.controls["virtual_stages"].disabled
    assert v.figure.to_dict()["layout"]["yaxis"]["ticktext"][0] == "dev 0: st 0,4,8"
    v.controls["schedule"].value = "gpipe"
    assert v.config.virtual_stages == 1 and v.controls["virtual_stages"].disabled


def test_pipeline_view_pp_keeps_devices(pipeline):
    v = pipeline
    v.controls["pp"].value = 2
    assert v.config.dp == 4 and v.config.devices == 8
    assert len(v.figure.data[FWD].x) == 2 * v.controls["microbatches"].value
    assert v.figure.layout.yaxis.ticktext == ("stage 0", "stage 1")


def test_pipeline_view_invalid_choice_goes_to_error_pane(pipeline):
    v = pipeline
    v.controls["microbatches"].value = 5
    v.controls["schedule"].value = "interleaved_1f1b"  # needs m % pp == 0
    assert "multiple of pp=4" in v.errors.last and v.errors.layout.display == "flex"
    assert v.config.schedule == "1f1b" and v.controls["schedule"].value == "1f1b"


def test_pipeline_click_selects_stage_and_microbatch(pipeline):
    from plotly.callbacks import Points

    v = pipeline
    trace = v.figure.data[BWD]
    i = next(i for i, c in enumerate(trace.customdata) if list(c[:2]) == [2, 3])
    v._on_click(trace, Points([i], [0], [0], "compute-backward", BWD), None)
    assert (v.selection.stage, v.selection.microbatch) == (2, 3)
    assert len(v.figure.data[TRACE_SELECTED_MB].x) == 2 * 4


# --- MemoryView --------------------------------------------------------------------------


@pytest.fixture
def memory():
    return MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)


def _row(view, row):
    return list(arr(view.figure.to_dict()["data"][ROWS.index(row)]["y"]))


def test_memory_view_zero_recompute_microbatch(memory):
    v = memory
    opt = _row(v, "optimizer_states")
    v.controls["zero"].value = 1
    assert _row(v, "optimizer_states") == pytest.approx([x / 4 for x in opt])
    v.controls["zero"].value = 3
    assert _row(v, "zero_gather_buffer")[0] > 0
    act = _row(v, "activations")
    v.controls["recompute"].value = "full"
    assert all(a < b for a, b in zip(_row(v, "activations"), act, strict=True))
    assert _row(v, "recompute_working_set")[0] > 0
    before = _row(v, "activations")
    v.controls["microbatch_size"].value = 4
    assert _row(v, "activations")[0] > before[0] and v.config.microbatch_size == 4
    assert v.errors.last is None
    assert "zero3" in v.figure.layout.title.text


def test_memory_view_click_and_linked_pipeline(memory):
    pipe = PipelineView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    sel = link(pipe, memory)
    memory.click(1)
    assert sel.stage == 1 and pipe.stage == 1
    assert len(pipe.figure.data[TRACE_SELECTED_MB].x) == 2 * pipe.sim.config.num_microbatches
    pipe.click(0, 2)
    assert memory.stage == 0 and memory.figure.layout.shapes[1].x0 == -0.45


# --- ScalingView -------------------------------------------------------------------------


def test_scaling_view_mode_metric_and_series():
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    assert v.computed and [s.mode for s in v.series] == ["weak", "strong"]
    d = v.figure.to_dict()
    assert d["data"][0]["visible"] is True and d["data"][4]["visible"] is False
    v.controls["metric"].value = "mfu"
    assert v.figure.data[0].y[0] == pytest.approx(v.curves[0].points[0].mfu)
    v.controls["mode"].value = "weak"  # the last series follows the controls
    assert [p.global_batch for p in v.curves[-1].points] == [64, 128]
    v.add_series(Series("gpt2", "h100-sxm", "weak", 64, 512, (8, 16)))
    d = v.figure.to_dict()
    assert d["data"][4]["visible"] is True and "h100-sxm" in d["data"][4]["name"]
    assert v.progress.updates > 0
    v.clear()
    assert len(v.series) == 1 and v.figure.data[2].visible is False


# --- StrategyExplorer --------------------------------------------------------------------


@pytest.fixture(scope="module")
def dash():
    return StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2)


def test_dashboard_plans_with_progress_and_links_views(dash):
    assert dash.errors.last is None and dash.plan.config.devices == 8
    assert dash.progress.shown and dash.progress.updates >= 2
    assert dash.selection.training is dash.plan and dash.selection.plan is dash.sharding
    graph, pipe, mem = dash.views["graph"], dash.views["pipeline"], dash.views["memory"]
    assert graph.color_by == "stage" and graph.plan is dash.sharding
    assert pipe.config == dash.plan.config.replace(num_microbatches=None)
    assert "2 of its 12 layers" in dash.note.value
    graph.click("layers.1.mlp.fc1")
    assert dash.selection.node == "layers.1.mlp.fc1"
    assert "chose" in dash.explain.value and "pipeline stage" in dash.explain.value
    stage = dash.stages["layers.1.mlp.fc1"]
    assert pipe.stage == stage and mem.stage == stage
    mesh = dash.open_tab("mesh")
    assert mesh.tensor == "layers.1.mlp.fc1" and mesh.plan is dash.sharding


def test_dashboard_control_replans_every_view(dash):
    old = dash.sharding
    dash.controls["devices"].value = 16
    assert dash.errors.last is None, dash.errors.last
    assert dash.plan.devices == 16 and dash.sharding is not old
    assert dash.views["pipeline"].config.devices == 16 and dash.views["memory"].devices == 16
    assert dash.views["graph"].graph is dash.sharding.graph
    assert dash.views["mesh"].mesh == dash.sharding.mesh
    assert str(dash.plan.config).split(",")[0] in dash.summary.value
    tuner = dash.open_tab("cost tuner")
    assert tuner.graph is dash.sharding.graph
    dash.controls["devices"].value = 8  # a new graph: the open tuner is rebuilt
    assert dash.views["cost tuner"] is not tuner
    assert dash.views["cost tuner"].graph is dash.sharding.graph


def test_dashboard_errors_show_beside_their_control(dash):
    dash.controls["model"].value = "mlp-small"  # plan_training refuses MLPs
    err = dash.field_errors["model"]
    assert "MLP" in err.text and err.visible and dash.stale
    dash.controls["model"].value = "gpt2"
    assert not err.visible and not dash.stale and dash.plan.model == "gpt2"


def test_dashboard_progress_callback_error_is_shown_not_fatal(dash, monkeypatch):
    def broken(name="", min_interval_s=0.0):
        def cb(done, total):
            raise RuntimeError("progress bar broke")

        return cb

    monkeypatch.setattr(dash.progress, "callback", broken)
    dash.replan()
    assert "progress bar broke" in dash.errors.last
    assert dash.plan.model == "gpt2"  # the plan still finished
    dash.errors.clear()


def test_dashboard_scaling_tab_follows_the_model(dash):
    scaling = dash.open_tab("scaling")
    assert scaling.computed and scaling.series[-1].model == dash.plan.model
    assert scaling.figure.data[0].visible is True
