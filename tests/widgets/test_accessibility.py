"""Views for every reader (issue 26, item 7): each plot in words for screen readers
(generated from the figure on screen, refreshed after each update, hidden from sight but in
the page), and a menu for what each click on a plot does."""

from __future__ import annotations

import plotly.graph_objects as go

import explorer as ex
from widgets import CostTuner, MemoryView, Selection
from widgets.figures.summary import MAX_TRACES, figure_summary


def test_summary_names_title_axes_traces_and_ranges():
    fig = go.Figure(
        [go.Bar(x=["a", "b", "c"], y=[1.0, 2.5, 4.0], name="compute"),
         go.Scatter(x=[1, 2], y=[3, 3], mode="markers", name="hidden", visible=False),
         go.Bar(y=["s0"], x=[7.0], orientation="h", name="forward")],
        layout={"title": {"text": "<b>step</b> time"}, "yaxis": {"title": {"text": "ms"}},
                "xaxis": {"title": {"text": "op"}}},
    )  # fmt: skip
    text = figure_summary(fig)
    assert text.startswith("Figure: step time. Axes: x op, y ms.")
    assert "compute: 3 bars; ms from 1 to 4." in text
    assert "hidden" not in text  # invisible traces are not read out
    assert "forward: 1 bar; op 7." in text  # a horizontal bar's value is on x


def test_summary_counts_what_it_does_not_name_and_says_when_empty():
    many = go.Figure([go.Scatter(x=[0, 1], y=[k, k], name=f"s{k}") for k in range(12)])
    text = figure_summary(many)
    assert f"{12 - MAX_TRACES} more series." in text and "s0: 2 points" in text
    assert figure_summary(go.Figure()).endswith("Nothing drawn yet.")


def test_views_carry_their_summary_hidden_and_follow_updates():
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    tuner = CostTuner(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"), selection=Selection())
    html = tuner.figure_text.value
    assert "clip:rect(0,0,0,0)" in html and "role='note'" in html
    assert "Figure: total" in html and tuner.figure_text in tuner.children
    before = html
    tuner.controls["beta_communication"].value = 100.0
    tuner.flush()
    after = tuner.figure_text.value
    assert after != before and tuner.figure.layout.title.text.split(",")[0] in after


def test_memory_view_summary_reads_its_bars():
    view = MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    text = view.describe_figures()
    assert "Parameters:" in text and "memory per device (GiB)" in text


# --- keyboard: every click of a plot has a menu twin (issue 26, item 7) ------------------


def test_memory_view_stage_menu_does_what_a_click_does():
    view = MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    menu = view.stage_menu
    assert [v for _, v in menu.options] == [-1, 0, 1]
    menu.value = 1
    assert view.stage == 1 and view.selection.stage == 1
    assert view.figure.layout.shapes[1].visible  # the frame around the bar, as a click
    view.click(0)  # a click moves the menu
    assert menu.value == 0
    menu.value = -1
    assert view.stage is None and not view.figure.layout.shapes[1].visible
    view.controls["microbatch_size"].value = view.controls["microbatch_size"].options[-1]
    assert [v for _, v in menu.options] == [-1, 0, 1]


def test_pipeline_view_menus_select_a_stage_and_a_microbatch():
    from widgets import PipelineView

    view = PipelineView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=64, seq=512)
    stage, mb = view.pick["stage"], view.pick["microbatch"]
    assert [v for _, v in stage.options] == [-1, 0, 1, 2, 3]
    assert len(mb.options) == 1 + view.sim.config.num_microbatches
    stage.value, mb.value = 2, 3
    assert (view.stage, view.microbatch) == (2, 3)
    assert (view.selection.stage, view.selection.microbatch) == (2, 3)
    view.click(1, 0)
    assert (stage.value, mb.value) == (1, 0)


def test_mesh_view_device_menu_selects_a_device():
    from widgets import MeshView

    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    view = MeshView(mesh)
    menu = view.controls["device"]
    assert [v for _, v in menu.options] == [-1, *range(8)]
    menu.value = 5
    assert view.device == 5 and view.selection.device == 5
    view.click_device(2)
    assert menu.value == 2
