"""ParetoView and pareto_figure, headless: the traces hold the front's
numbers in the units their axes say, a pick drives the linked training views, and bad
arguments are named errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

import explorer as ex
from widgets import MemoryView, ParetoView, PipelineView, link
from widgets.figures.errors import ViewError
from widgets.figures.pareto import TRACES, pareto_figure

JOB = {"global_batch": 64, "seq": 512}


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training(
        "gpt2", devices=8, **JOB, objectives=("step_time", "memory", "communication")
    )


def trace(fig, name):
    return fig.data[TRACES.index(name)]


def test_figure_draws_front_and_faded_dominated_in_axis_units(plan):
    f = plan.pareto
    fig = pareto_figure(f, "step_time", "memory", "communication")
    front, dom = trace(fig, "front"), trace(fig, "dominated")
    assert list(front.x) == [p.step_time_s for p in f.front]
    assert list(front.y) == [p.memory_bytes / 2**30 for p in f.front]
    assert list(front.marker.color) == [p.comm_bytes / 1e9 for p in f.front]
    assert list(dom.y) == [p.memory_bytes / 2**30 for p in f.dominated]
    assert dom.marker.opacity < 1 and dom.marker.color != front.marker.color
    # customdata maps a marker back to the core's point
    assert list(front.customdata) == list(range(len(f.front)))
    assert list(dom.customdata) == list(range(len(f.front), len(f.points)))
    assert fig.layout.xaxis.title.text == "step time (s)"
    assert fig.layout.yaxis.title.text == "peak memory per device (GiB)"
    assert "(GB)" in front.marker.colorbar.title.text
    # the plan's star sits on the front's chosen point; hover names the config
    star = trace(fig, "plan")
    assert (star.x[0], star.y[0]) == (front.x[f.chosen], front.y[f.chosen])
    assert str(plan.config) in star.hovertext[0]
    assert "dominated by" in dom.hovertext[0] and str(f.dominated[0].config) in dom.hovertext[0]


def test_two_objectives_draw_the_front_as_a_staircase_and_the_dominators(plan):
    two = ex.plan_training("gpt2", devices=8, **JOB, objectives=("step_time", "memory")).pareto
    d = len(two.front) + 2  # a dominated point
    fig = pareto_figure(two, "step_time", "memory", None, selected=d)
    line = trace(fig, "front line")
    assert list(line.x) == sorted(p.step_time_s for p in two.front)
    assert list(line.y) == sorted((p.memory_bytes / 2**30 for p in two.front), reverse=True)
    by = trace(fig, "dominators")
    assert list(by.customdata) == list(two.points[d].dominated_by) and len(by.x) > 0
    # a dominator that is the plan keeps its square visible around the star drawn above it
    star = trace(fig, "plan")
    assert by.marker.size >= star.marker.size + 2 * by.marker.line.width + 4
    # three objectives: the projection is no staircase; a front point has no dominators
    fig3 = pareto_figure(plan.pareto, selected=0)
    assert len(trace(fig3, "front line").x) == 0 and len(trace(fig3, "dominators").x) == 0


def test_empty_figure_keeps_every_trace():
    fig = pareto_figure(None)
    assert len(fig.data) == len(TRACES) and all(len(t.x) == 0 for t in fig.data)


def test_pick_drives_the_linked_training_views(plan):
    view = ParetoView(plan)
    pipe = PipelineView("gpt2", plan.config, **JOB)
    mem = MemoryView("gpt2", plan.config, **JOB)
    sel = link(view, pipe, mem)
    index = next(i for i, p in enumerate(plan.pareto.points) if p.config.pp > 1)
    chosen = plan.pareto.points[index].config
    view.pick(index)
    assert sel.training.config == chosen and sel.training.sim.config.pp == chosen.pp
    assert pipe.config == chosen.replace(num_microbatches=None, recompute_num_layers=None)
    assert mem.config == pipe.config
    sel_trace = trace(view.figure, "selected")
    assert sel_trace.customdata[0] == index
    assert "selected" in view.info.value and str(chosen) in view.info.value
    # a dominated point can be picked too, and the plan's own config brings back its sim
    last = len(plan.pareto.points) - 1
    view.pick(last)
    assert sel.training.config == plan.pareto.points[last].config
    by = plan.pareto.points[last].dominated_by
    fastest = min(by, key=lambda j: plan.pareto.front[j].step_time_s)
    assert f"by: {plan.pareto.front[fastest].config}" in view.info.value
    view.pick_config(plan.config)
    assert sel.training.sim is plan.sim


def test_the_front_plan_menu_picks_like_a_click(plan):
    view = ParetoView(plan)
    sel = link(view)
    menu = view.controls["point"]
    assert menu.value == -1 and menu.label.startswith("choose one")
    assert len(menu.options) == len(plan.pareto.front) + 1
    j = menu.options[2][1]
    menu.value = j
    assert view.picked == j and sel.training.config == plan.pareto.front[j].config
    view.pick(len(plan.pareto.points) - 1)  # a dominated point: the menu goes back to None
    assert menu.value == -1 and not view.errors.last


def test_a_plan_published_elsewhere_is_adopted(plan):
    view = ParetoView(plan)
    sel = link(view)
    view.pick(len(plan.pareto.front) - 1)  # an index the next front may not have
    other = ex.plan_training("gpt2", devices=8, **JOB, objectives=("step_time", "memory"))
    sel.publish(training=other)
    assert view.front is other.pareto and view.color is None and not view.errors.last
    assert len(view.controls["point"].options) == len(other.pareto.front) + 1
    front = trace(view.figure, "front")
    assert front.marker.color == "#1F77B4" and not front.marker.showscale  # no colour now
    assert list(front.x) == [p.step_time_s for p in other.pareto.front]
    # a plan without a front whose config is a point: marked as selected
    point = other.pareto.points[3]
    sel.publish(training=replace(other, config=point.config, pareto=None))
    assert view.picked == 3


def test_axes_controls_swap_and_recolour(plan):
    view = ParetoView(plan)
    view.controls["x"].value = "communication"
    assert (view.x, view.y) == ("communication", "memory")
    assert view.figure.layout.xaxis.title.text == "bytes sent per device per step (GB)"
    view.controls["y"].value = "communication"  # takes x's objective: the axes swap
    assert (view.x, view.y) == ("memory", "communication")
    view.controls["color"].value = "(none)"
    assert view.color is None and trace(view.figure, "front").marker.color == "#1F77B4"
    assert not view.errors.last


def test_bad_arguments_are_named(plan):
    with pytest.raises(ViewError, match="objectives="):
        ParetoView(ex.plan_training("gpt2", devices=8, **JOB))
    with pytest.raises(ViewError, match="'cost' is not an objective of this front"):
        ParetoView(plan, x="cost")
    with pytest.raises(ViewError, match="both 'memory'"):
        ParetoView(plan, x="memory", y="memory")
    view = ParetoView(plan)
    with pytest.raises(ViewError, match="point index"):
        view.pick(len(plan.pareto.points))
    with pytest.raises(ViewError, match="not a fitting configuration"):
        view.pick_config(ex.ParallelConfig(dp=1, tp=8))
    with pytest.raises(ViewError, match="objective 'speed'"):
        pareto_figure(plan.pareto, x="speed")
