"""ParallelismLesson headless: steps, blocks, the ring with its arrows, the final check, and
every trace complete after any sequence of control changes."""

from __future__ import annotations

import pytest
from plotly.callbacks import Points

import explorer as ex
from explorer.sharding.lesson import LESSON_KINDS
from widgets import ParallelismLesson
from widgets.figures.mesh import TRACE_BLOCKS, TRACE_TENSORS
from widgets.figures.ring import TRACE_CHUNKS, TRACE_DEVICES, TRACE_SENDS


@pytest.fixture(scope="module")
def view():
    return ParallelismLesson(ex.Mesh({"dp": 2, "tp": 4}))


def _complete(fig) -> None:
    for tr in fig.to_dict()["data"]:
        if tr.get("visible", True):
            assert len(tr["x"]) > 0 and len(tr["x"]) == len(tr["y"]), tr["name"]


def test_tensor_lesson_walks_the_megatron_mlp(view):
    view.controls["kind"].value = "tensor"
    c = view.controls
    assert c["step"].value == 0 and c["prev"].disabled
    ops = []
    while True:
        step = view.current
        ops.append(step.op)
        d = view.figure.to_dict()
        assert d["layout"]["title"]["text"].startswith(f"step {step.index} of 0–")
        # the same number as the slider (it said "step 10 of 10" over a slider at 9)
        assert f"step {step.index} of 0–{len(view.steps) - 1}" in view.text.value
        assert view.controls["step"].value == step.index
        captions = d["data"][TRACE_TENSORS]["text"]
        assert [t.split(":")[0] for t in captions] == [t.name for t in step.tensors]
        _complete(view.figure)
        _complete(view.ring_figure)
        if c["next"].disabled:
            break
        c["next"].click()
    assert ops[:3] == ["x · W1 (column split)", "GELU (local)", "h · W2 (row split)"]
    assert ops[-1] == "result" and len(ops) == len(view.steps)
    assert "max |error| = " in view.check_line.value and "&#10003;" in view.check_line.value
    assert f"{view.steps[-1].check.max_abs_error:.2g}" in view.check_line.value
    c["prev"].click()
    assert c["step"].value == len(view.steps) - 2
    assert "last step compares" in view.check_line.value


def test_partial_sums_are_marked_on_their_blocks(view):
    view.show("tensor")
    i = next(s.index for s in view.steps if s.op == "h · W2 (row split)")
    view.controls["step"].value = i
    d = view.figure.to_dict()
    labels = d["data"][TRACE_BLOCKS]["text"]
    y_labels = [t for t in labels if t.startswith("Σ")]
    assert len(y_labels) == 2  # y's two dp blocks, each a sum of 4 tp addends
    assert "0-3" in y_labels[0] and "4-7" in y_labels[1]
    dashed = [s for s in d["layout"]["shapes"] if s["line"].get("dash") == "dash"]
    assert len(dashed) == 2
    assert "{U_tp}" in d["data"][TRACE_TENSORS]["text"][-1]
    assert "partial sum" in view.numbers.value


def test_ring_round_draws_one_arrow_per_chunk_sent(view):
    view.show("tensor")
    rounds = [s for s in view.steps if s.collective is not None]
    for s in rounds:
        view.controls["step"].value = s.index
        d = view.ring_figure.to_dict()
        moves = s.collective.rounds[s.round - 1].moves
        assert len(d["layout"]["annotations"]) == len(moves) == 8
        assert len(d["data"][TRACE_SENDS]["text"]) == 8
        assert f"round {s.round} of 6" in d["layout"]["title"]["text"]
        # every chunk square shows the contributions the core computed
        counts = [int(t) for t in d["data"][TRACE_CHUNKS]["text"] if t]
        assert sum(counts) == sum(sum(c) for c in s.collective.rounds[s.round - 1].counts)
    view.controls["step"].value = 0  # no communication yet: rings drawn, no arrows
    d = view.ring_figure.to_dict()
    assert not [a for a in d["layout"]["annotations"] if a.get("visible", True)]
    assert d["data"][TRACE_SENDS]["visible"] is False
    assert "do not communicate" in d["layout"]["title"]["text"]


@pytest.mark.parametrize("kind", LESSON_KINDS)
def test_every_kind_every_step_draws(view, kind):
    view.controls["kind"].value = kind
    assert view.controls["step"].max == len(view.steps) - 1
    assert view.controls["step"].value == 0
    kinds = set()
    for i in range(len(view.steps)):
        view.controls["step"].value = i
        _complete(view.figure)
        _complete(view.ring_figure)
        if view.current.collective is not None:
            kinds.add(view.current.collective.kind)
    expected = {"tensor": {"all-reduce"}, "data": {"all-reduce"},
                "sequence": {"all-gather", "reduce-scatter"},
                "zero": {"all-gather", "reduce-scatter"}, "context": {"all-gather"},
                "experts": {"all-to-all"}}  # fmt: skip
    assert kinds == expected[kind]
    assert "equal to the unsharded result" in view.check_line.value
    assert view.errors.last is None, view.errors.last  # an error in a draw is caught: read it


def test_device_numbers_follow_the_pick_and_clicks(view):
    view.show("tensor")
    view.controls["step"].value = 0
    view.controls["device"].value = 6
    assert "W1</b>[0:8, 4:6]" in view.numbers.value  # device 6 = (dp=1, tp=2)
    assert view.selection.device == 6
    blocks = view.figure.data[TRACE_BLOCKS]
    i = list(blocks.customdata).index(3)
    view._on_click(blocks, Points([i], [0], [0], "blocks", TRACE_BLOCKS), None)
    assert view.controls["device"].value == 3
    devs = view.ring_figure.data[TRACE_DEVICES]
    view._on_click(devs, Points([5], [0], [0], "devices", TRACE_DEVICES), None)
    assert view.controls["device"].value == int(devs.text[5])


def test_ring_axes_error_beside_the_menu_keeps_the_last_lesson():
    view = ParallelismLesson(ex.Mesh({"dp": 1, "tp": 4}))
    view.controls["step"].value = 2
    shown = view.figure.to_dict()["layout"]["title"]["text"]
    view.controls["axes"].value = "dp"
    assert view.axes_error.visible and "ring needs 2 or more" in view.axes_error.text
    assert view.stale
    assert view.figure.to_dict()["layout"]["title"]["text"] == shown
    view.axes_error.restore()
    assert not view.axes_error.visible and not view.stale
    view.controls["kind"].value = "data"
    view.controls["axes"].value = "tp"
    assert view.steps[-1].check.ok and view.current.index == 0


def test_controls_fit_a_laptop_column(view):
    slider = view.controls["step"]
    assert slider.layout.min_width == "260px" and slider.readout_format == "d"
    for key in ("prev", "next"):
        assert view.controls[key].layout.width == "auto"
    assert view.figure.layout.width is None and view.ring_figure.layout.width is None


def test_any_order_of_control_changes_keeps_traces_complete():
    view = ParallelismLesson(ex.Mesh({"dp": 2, "tp": 2}))
    moves = [("kind", "zero"), ("step", 5), ("axes", "tp"), ("next", None), ("kind", "sequence"),
             ("step", 3), ("device", 3), ("axes", "dp,tp"), ("prev", None), ("kind", "data"),
             ("step", 4), ("axes", "default"), ("kind", "tensor"), ("next", None)]  # fmt: skip
    for key, value in moves:
        ctl = view.controls[key]
        if value is None:
            ctl.click()
        else:
            ctl.value = min(value, ctl.max) if key == "step" else value
        _complete(view.figure)
        _complete(view.ring_figure)
        assert not view.errors.last, view.errors.last


def _page_state(fw):
    """What a front-end that draws the figure now receives (plotly's synced widget state)."""
    return fw._widget_data, fw._widget_layout


def test_a_view_drawn_after_updates_gets_the_current_figure():
    # A FigureWidget inside a VBox is drawn from its synced state; updates made before the
    # page draws it were lost in Chromium (a trace without x, plotly's "Cannot use 'in'
    # operator" on first draw) until the views re-sync the whole state after each update.
    view = ParallelismLesson(ex.Mesh({"dp": 2, "tp": 4}))
    view.controls["step"].value = 4
    for fw in (view.figure, view.ring_figure):
        data, layout = _page_state(fw)
        now = fw.to_dict()
        assert [list(t["x"]) for t in data] == [list(t["x"]) for t in now["data"]]
        assert layout["title"]["text"] == now["layout"]["title"]["text"]
    assert "round 2 of 6" in _page_state(view.ring_figure)[1]["title"]["text"]


def test_mesh_view_drawn_after_updates_gets_the_current_figure():
    from widgets import MeshView

    mesh = ex.Mesh({"dp": 2, "tp": 4})
    view = MeshView(mesh)
    view.show_layout(ex.TensorType((2, 4, 8, 16), "bf16"),
                     ex.sharding.Layout((("dp",), (), (), ("tp",))), "q")  # fmt: skip
    view.controls["dims"].value = (1, 3)
    view.click_device(6)
    for fw in (view.figure, view.tensor_figure, view.ring_figure):
        data, layout = _page_state(fw)
        assert layout["title"]["text"] == fw.layout.title.text
        assert len(data) == len(fw.data)
    assert "dim 1" in _page_state(view.tensor_figure)[1]["yaxis"]["title"]["text"]
    shapes = _page_state(view.figure)[1]["shapes"]
    assert any(s.get("line", {}).get("width") == 4 for s in shapes)  # the selected device


def test_a_64_device_grid_folds_to_laptop_height_and_shows_every_device():
    import numpy as np

    from widgets.figures.mesh import mesh_figure

    mesh = ex.Mesh({"dp": 32, "tp": 2}, hardware="a100-80g")
    fig = mesh_figure(mesh)
    devs = np.asarray(fig.data[0].customdata)
    assert devs.shape == (8, 8)  # not a 32-row strip
    assert sorted(devs.ravel().tolist()) == list(range(64))
    assert "rows folded: 4 groups of 8 rows" in fig.layout.xaxis.title.text
    ragged = mesh_figure(ex.Mesh({"dp": 9, "tp": 2}))  # 9 rows fold into 2 x 5, one slot empty
    cells = np.asarray(ragged.data[0].customdata)
    assert sorted(d for d in cells.ravel().tolist() if d >= 0) == list(range(18))
    assert (cells == -1).sum() == 2


def test_clicking_an_empty_cell_of_a_folded_grid_selects_nothing():
    from plotly.callbacks import Points

    from widgets import MeshView

    view = MeshView(ex.Mesh({"dp": 9, "tp": 2}))
    cells = view.figure.data[0]
    empty = [(r, c) for r, row in enumerate(cells.customdata) for c, d in enumerate(row) if d < 0]
    view._on_click(cells, Points([list(empty[0])], [0], [0], "cells", 0), None)
    assert view.selection.device is None and not view.errors.last
