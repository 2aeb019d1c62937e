"""Every plot of a view in words for screen readers (issue 26, item 7): generated from the
figure on screen, refreshed after each update, hidden from sight but in the page."""

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
