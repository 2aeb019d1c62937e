"""Every click on a plot has a keyboard twin (issue 26, item 7): for each view that takes
clicks, one view is driven by a click (the plot's own click handler, as plotly calls it) and a
second, built alike, by its menu; both must end in the same state (what is picked, what the
linked selection holds, what the figure marks, what the text says), and the clicked view's
menu must show the click's choice."""

from __future__ import annotations

import numpy as np
import pytest
from plotly.callbacks import Points

import explorer as ex
from widgets import ParallelismLesson, ParetoView, PipelineView, PlanDiffView, Selection
from widgets.figures.mesh import TRACE_BLOCKS
from widgets.figures.pareto import TRACES
from widgets.figures.pipeline import TRACE_SELECTED_MB, trace_index
from widgets.figures.ring import TRACE_DEVICES
from widgets.pick_menu import NOTHING, PickMenu


def _click(view, trace, k: int) -> None:
    """What plotly does on a click on point ``k`` of ``trace``."""
    view._on_click(trace, Points([k], [0], [0], trace.name or "", 0), None)


def _arrays(trace, keys=("x", "y", "base")) -> list:
    return [None if trace[k] is None else np.asarray(trace[k]).tolist() for k in keys]


def test_pick_menu_calls_back_for_a_person_and_follows_quietly():
    calls = []
    menu = PickMenu([("none", NOTHING), ("a", 0)], calls.append, description="pick")
    assert menu.value == NOTHING and menu.description == "pick"
    menu.value = 0
    assert calls == [0]
    menu.show(7, [("none", NOTHING), ("a", 0), ("b", 7)])  # new options, then the value
    assert menu.value == 7 and [v for _, v in menu.options] == [NOTHING, 0, 7]
    menu.show(5)  # not offered: the first entry
    assert menu.value == NOTHING and calls == [0]  # show() never calls back


# --- PipelineView: a click on a box selects its stage and microbatch -----------------------


def test_pipeline_menus_and_a_click_on_a_box_give_the_same_state():
    def make():
        par = ex.ParallelConfig(dp=1, pp=4, microbatch_size=1, schedule="interleaved_1f1b",
                                virtual_stages=3)  # fmt: skip
        return PipelineView("gpt2", par, global_batch=8, seq=512, selection=Selection())

    clicked, keyed = make(), make()
    trace = clicked.figure.data[trace_index("compute-forward", 1)]  # a chunk-1 box
    k = len(trace.x) // 2
    stage, mb = int(trace.customdata[k]), int(trace.text[k])
    assert stage >= 4  # chunk 1 of pp 4: stages 4..7
    _click(clicked, trace, k)
    keyed.pick["stage"].value = stage
    keyed.pick["microbatch"].value = mb
    for v in (clicked, keyed):
        assert (v.stage, v.microbatch) == (stage, mb)
        assert (v.selection.stage, v.selection.microbatch) == (stage, mb)
        assert (v.pick["stage"].value, v.pick["microbatch"].value) == (stage, mb)
    a, b = (v.figure.data[TRACE_SELECTED_MB] for v in (clicked, keyed))
    assert _arrays(a) == _arrays(b) and len(a.x) > 0  # its boxes (around the window)
    assert clicked.errors.last is None and keyed.errors.last is None


# --- ParetoView: a click on a point picks that plan ----------------------------------------


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
                            objectives=("step_time", "memory", "communication"))  # fmt: skip


def _pareto_state(view: ParetoView) -> tuple:
    sel = view.figure.data[TRACES.index("selected")]
    t = view.selection.training
    return (view.picked, t.config, t.sim.step_time_s, _arrays(sel, ("x", "y", "customdata")),
            view.info.value, view.controls["point"].value, view.controls["dominated"].value)  # fmt: skip


@pytest.mark.parametrize("trace_name", ["front", "dominated"])
def test_pareto_menus_and_a_click_on_a_point_give_the_same_state(plan, trace_name):
    clicked = ParetoView(plan, selection=Selection())
    keyed = ParetoView(plan, selection=Selection())
    trace = clicked.figure.data[TRACES.index(trace_name)]
    k = len(trace.x) // 2
    index = int(trace.customdata[k])  # the point's index in plan.pareto.points
    _click(clicked, trace, k)
    menu = keyed.controls["point" if trace_name == "front" else "dominated"]
    assert index in [v for _, v in menu.options]  # every clickable point is in a menu
    menu.value = index
    assert _pareto_state(clicked) == _pareto_state(keyed)
    assert clicked.selection.training.config == plan.pareto.points[index].config
    on_front = trace_name == "front"
    assert clicked.controls["point"].value == (index if on_front else NOTHING)
    assert clicked.controls["dominated"].value == (NOTHING if on_front else index)
    assert clicked.errors.last is None and keyed.errors.last is None


def test_pareto_menus_list_every_point_once(plan):
    view = ParetoView(plan)
    f = plan.pareto
    values = [v for k in ("point", "dominated") for _, v in view.controls[k].options]
    assert sorted(v for v in values if v != NOTHING) == list(range(len(f.points)))
    label = dict((v, t) for t, v in view.controls["dominated"].options)[len(f.front)]
    assert f"dominated by {len(f.dominated[0].dominated_by)}" in label


# --- PlanDiffView: a click on a ringed op draws its two layouts -----------------------------


@pytest.fixture(scope="module")
def plans():
    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=256)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    a = ex.search(g, mesh, "dynamic_programming")
    b = ex.search(g, mesh, "dynamic_programming", params=ex.CostParams(beta_communication=8.0))
    return a, b


def test_plan_diff_menu_and_a_click_on_a_ringed_op_give_the_same_state(plans):
    clicked = PlanDiffView(*plans, selection=Selection())
    keyed = PlanDiffView(*plans, selection=Selection())
    row = next(r for r in clicked.diff.rows[1:] if r.changed)  # not the op drawn first
    nodes = clicked.graph_figure.data[1]
    units = [str(u) for u in nodes.customdata]
    unit = next(u for u in row.ops if u in units)  # one of the row's ops, drawn as a unit
    _click(clicked, nodes, units.index(unit))
    keyed.controls["op"].value = row.ops[0]
    for v in (clicked, keyed):
        assert v.op == row.ops[0] and v.selection.node == row.ops[0]
        assert v.controls["op"].value == row.ops[0]
    assert clicked.mesh_figure.to_json() == keyed.mesh_figure.to_json()
    assert clicked.errors.last is None and keyed.errors.last is None


# --- ParallelismLesson: a click on a block or a ring device lists that device's numbers ----


@pytest.mark.parametrize("where", ["blocks", "ring"])
def test_lesson_menu_and_a_click_on_a_device_give_the_same_state(where):
    clicked = ParallelismLesson(selection=Selection())
    keyed = ParallelismLesson(selection=Selection())
    for v in (clicked, keyed):
        v.controls["step"].value = 2
    if where == "blocks":
        trace = clicked.figure.data[TRACE_BLOCKS]
        k = list(trace.customdata).index(5)
        device = 5
    else:
        trace = clicked.ring_figure.data[TRACE_DEVICES]
        k = 3
        device = int(trace.text[k])
    _click(clicked, trace, k)
    keyed.controls["device"].value = device
    for v in (clicked, keyed):
        assert v.device == device and v.selection.device == device
        assert v.controls["device"].value == device  # the click moved the menu
    assert clicked.numbers.value == keyed.numbers.value
    assert clicked.errors.last is None and keyed.errors.last is None
