"""The views headless: build, set a control, assert on fig.to_dict() or trait values."""

from __future__ import annotations

import asyncio

import pytest

import explorer as ex
from widgets import (
    Coalescer,
    CostTuner,
    ErrorPane,
    GraphView,
    MeshView,
    Selection,
    TraceCompare,
    link,
)
from widgets.figures.graph import TRACE_CHANGED, TRACE_NODES, TRACE_SELECTED


def test_public_api():
    import widgets

    for name in ("GraphView", "MeshView", "CostTuner", "TraceCompare"):
        assert name in widgets.__all__
        view_cls = getattr(widgets, name)
        assert issubclass(view_cls, widgets.View)


# --- GraphView ---------------------------------------------------------------------------


def test_graph_view_click_selects_and_colour_control(mlp, mlp_plan):
    view = GraphView(mlp, mlp_plan)
    view.click("layers.0.fc1")
    assert view.selection.node == "layers.0.fc1"
    assert len(view.figure.data[TRACE_SELECTED].x) == 1
    assert "chose" in view.info.value  # the explain panel
    view.controls["color_by"].value = "cost"
    assert view.figure.to_dict()["data"][TRACE_NODES]["marker"]["showscale"] is True


def test_graph_view_collapses_and_expands(tiny_gpt):
    view = GraphView(tiny_gpt, collapsed=True)
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.1" in units and len(units) < len(tiny_gpt)
    view.click("scope:layers.1")  # a click on a box expands it
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.1" not in units and "layers.1.attn.norm" in units
    view.controls["collapsed"].value = False
    assert len(view.figure.data[TRACE_NODES].x) == len(tiny_gpt)


def test_graph_view_plotly_click_callback(mlp):
    from plotly.callbacks import Points

    view = GraphView(mlp)
    i = list(view.figure.data[TRACE_NODES].customdata).index("layers.1.relu")
    view._on_click(view.figure.data[TRACE_NODES], Points([i], [0], [0], "nodes", 1), None)
    assert view.selection.node == "layers.1.relu"


def test_large_graph_starts_collapsed_with_webgl():
    g = ex.models.build(ex.models.load("gpt2-xl"), batch=1, seq=128)
    assert len(g) >= 2000
    view = GraphView(g)
    assert view.figure.data[TRACE_NODES].type == "scattergl"
    assert len(view.figure.data[TRACE_NODES].x) < 100  # one box per layer
    assert view.controls["collapsed"].value is True


# --- MeshView ----------------------------------------------------------------------------


def test_mesh_view_follows_selected_tensor(mesh, mlp_plan):
    view = MeshView(mesh, mlp_plan)
    view.selection.select(node="layers.0.fc1")
    title = view.figure.to_dict()["layout"]["title"]["text"]
    assert title.startswith("%layers.0.fc1 ")
    view.controls["operand"].value = 1  # the weight, as the op needs it
    assert "input 1" in view.figure.layout.title.text
    assert len(view.tensor_figure.layout.shapes) >= 1


def test_mesh_view_highlights_a_collective(mesh, mlp, mlp_plan):
    view = MeshView(mesh, mlp_plan)
    node = next(n for n in (x.name for x in mlp.ops) if view.selection.select(node=n) or
                len(view.controls["collective"].options) > 1)  # fmt: skip
    label, (kind, axes) = view.controls["collective"].options[1]
    view.controls["collective"].value = (kind, axes)
    d = view.figure.to_dict()
    assert kind in d["layout"]["title"]["text"]
    groups = mesh.groups(axes)
    assert len([v for v in d["data"][1]["x"] if v is None]) == len(groups)
    assert node == view.tensor


def test_mesh_view_teaching_slider(mesh):
    view = MeshView(mesh)
    view.controls["teach_kind"].value = "all-gather"
    view.controls["teach_axis"].value = "tp"
    assert view.controls["step"].max == 3
    view.controls["step"].value = 2
    d = view.ring_figure.to_dict()
    assert "step 2/3" in d["layout"]["title"]["text"]
    assert len(d["layout"]["annotations"]) == 4
    view.click_device(5)  # the ring shows the clicked device's group
    assert view.selection.device == 5
    assert "[4, 5, 6, 7]" in view.ring_figure.layout.title.text


# --- CostTuner ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuner(mlp, mesh):
    return CostTuner(mlp, mesh)


def test_tuner_has_a_control_per_cost_field(tuner):
    for k in ex.CostParams().fields():
        assert k in tuner.controls
    assert {"method", "mesh_shape", "preset"} <= set(tuner.controls)


def test_tuner_control_replans_and_updates_figure(tuner):
    before = tuner.plan
    tuner.controls["beta_communication"].value = 300.0
    assert tuner.plan is not before and tuner.plan.params.beta_communication == 300.0
    assert tuner.previous is before
    assert tuner.changed == tuner.plan.changed(before)
    d = tuner.figure.to_dict()
    assert d["data"][0]["name"] == "before" and d["data"][0]["y"][-1] == pytest.approx(
        before.cost.total
    )
    assert d["data"][1]["y"][-1] == pytest.approx(tuner.plan.cost.total)
    assert tuner.selection.plan is tuner.plan
    assert tuner.selection.highlight == tuner.changed
    tuner.controls["beta_communication"].value = 1.0


def test_tuner_preset_and_method_and_mesh(tuner):
    tuner.controls["preset"].value = "mindspore"
    assert tuner.plan.params == ex.CostParams.mindspore()
    assert tuner.controls["beta_communication"].value == 400.0
    tuner.controls["method"].value = "dynamic_programming"
    assert tuner.plan.method == "dynamic_programming"
    tuner.controls["mesh_shape"].value = (4, 2)
    assert tuner.plan.mesh.shape == (4, 2)
    tuner.controls["mesh_shape"].value = (2, 4)
    tuner.controls["preset"].value = "roofline"
    assert tuner.plan.params == ex.CostParams()


def test_tuner_bad_value_goes_to_error_pane(tuner):
    plan = tuner.plan
    tuner.controls["unit"].value = "bytes"  # unit alone is valid...
    tuner.controls["unit"].value = "seconds"
    assert tuner.errors.last is None
    tuner.controls["method"].value = "exhaustive"  # too many assignments: a SearchError
    assert "exhaustive" in tuner.errors.last
    assert tuner.errors.layout.display == "flex"
    tuner.controls["method"].value = "recursive_programming"
    tuner.errors.clear()
    assert tuner.plan.params == plan.params


def test_selection_propagates_across_linked_views(mlp, mesh):
    tuner, graph, devices = CostTuner(mlp, mesh), GraphView(mlp), MeshView(mesh)
    sel = link(tuner, graph, devices)
    assert graph.plan is tuner.plan and devices.plan is tuner.plan  # published on link
    tuner.controls["beta_communication"].value = 500.0  # publishes plan + highlight
    assert graph.plan is tuner.plan and devices.plan is tuner.plan
    changed = graph.figure.data[TRACE_CHANGED].x
    assert len(changed) == len({graph.unit_of(n) for n in tuner.changed})
    graph.click("layers.1.fc1")  # a click in the graph selects in the mesh
    assert sel.node == "layers.1.fc1" and devices.tensor == "layers.1.fc1"
    assert devices.figure.layout.title.text.startswith("%layers.1.fc1")
    sel.select(node="layers.0.fc2")  # and the other way round
    assert len(graph.figure.data[TRACE_SELECTED].x) == 1 and graph.selected == "layers.0.fc2"


def test_selection_rejects_unknown_node(mlp):
    import traitlets as tl

    sel = Selection()
    sel.publish(graph=mlp)
    with pytest.raises(tl.TraitError, match="not a node"):
        sel.select(node="nope")


# --- TraceCompare ------------------------------------------------------------------------


def test_trace_compare_reruns_and_shows_recompilation():
    view = TraceCompare(batch=1, size=16)
    assert view.recompiles == 0 and "compile" in view.compile_info.value
    view.controls["size"].value = 24
    d = view.figure.to_dict()
    assert view.recompiles == 1 and d["data"][2]["text"][0].startswith("recompile")
    assert "recompile" in view.compile_info.value
    view.controls["size"].value = 16  # seen before: a cache hit, no new compile
    assert view.recompiles == 1 and "cache hit" in view.compile_info.value
    view.controls["step"].value = 1
    assert view.steps_figure.layout.title.text == str(view.steps[1])
    assert view.summary_figure.to_dict()["data"][0]["type"] == "table"


def test_trace_compare_links_a_fused_kernel_to_its_eager_ops():
    view = TraceCompare(batch=1, size=16)
    kernels = view.comparison.static.compute_events
    i = next(i for i, k in enumerate(kernels) if len(k.replaced) > 1)
    view.click_kernel(i)
    picked = view.figure.data[4]
    assert picked.name == "picked"
    assert len([v for v in picked.x if v is None]) == len(kernels[i].replaced)
    assert " + ".join(kernels[i].replaced) in view.kernel_info.value


def test_trace_compare_bad_size_goes_to_error_pane():
    view = TraceCompare(batch=1, size=16)
    view.make_args(1, 16)
    view.controls["size"].value = 128
    assert view.errors.last is None
    view.size = 256
    view._rerun_soon.submit()
    assert "max_seq_len" in view.errors.last


# --- infrastructure ----------------------------------------------------------------------


def test_error_pane_guard():
    pane = ErrorPane()

    @pane.guard
    def boom():
        raise RuntimeError("kaput")

    boom()
    assert pane.last == "RuntimeError: kaput" and pane.layout.display == "flex"
    assert "kaput" in pane.output.outputs[0]["text"]


def test_coalescer_runs_once_per_burst_in_an_event_loop():
    calls = []
    c = Coalescer(calls.append, delay_s=0.01)

    async def burst():
        for v in range(20):
            c.submit(v)
        await asyncio.sleep(0.05)

    asyncio.run(burst())
    assert calls == [19] and c.submitted == 20 and c.calls == 1


def test_progress_shows_for_slow_work_only(mlp, mesh):
    tuner = CostTuner(mlp, mesh)
    assert any(t.startswith("cost tables") for t in tuner.progress.shown)
    tuner.progress.shown.clear()
    tuner.progress.last_s[f"re-planning ({tuner.method})"] = 0.01
    tuner.controls["gamma_param_comm"].value = 2.0
    assert tuner.progress.shown == []  # known to be fast: no flashing bar


def test_mesh_view_heatmap_click_selects_device(mesh):
    from plotly.callbacks import Points

    view = MeshView(mesh)
    cells = view.figure.data[0]
    view._on_click(cells, Points([[1, 2]], [2], [1], "cells", 0), None)  # row 1, column 2
    assert view.selection.device == 6


def test_a_late_linked_view_catches_up(mlp, mesh):
    tuner = CostTuner(mlp, mesh)
    tuner.selection.select(node="layers.0.fc2")
    late = MeshView(mesh, selection=tuner.selection)
    assert late.plan is tuner.plan and late.tensor == "layers.0.fc2"
    assert late.figure.layout.title.text.startswith("%layers.0.fc2")
    graph = GraphView(mlp, selection=tuner.selection)
    assert graph.plan is tuner.plan and graph.selected == "layers.0.fc2"
