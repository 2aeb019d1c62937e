"""The views headless: build, set a control, assert on fig.to_dict() or trait values."""

from __future__ import annotations

import asyncio

import pytest

import explorer as ex
from explorer.sharding import Layout
from widgets import (
    Coalescer,
    CostTuner,
    ErrorPane,
    GraphView,
    MeshView,
    Selection,
    link,
)
from widgets.figures.graph import TRACE_CHANGED, TRACE_NODES, TRACE_SELECTED
from widgets.figures.ring import TRACE_DEVICES, TRACE_RING_LABELS, TRACE_SENDS


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
    view.click("scope:layers.1")  # a click on a box opens one level: its blocks
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.1" not in units and "scope:layers.1.attn" in units
    view.click("scope:layers.1.attn")
    assert "layers.1.attn.norm" in view.figure.data[TRACE_NODES].customdata
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
    # the menu is never blank: the first collective is picked, "no highlight" comes last
    options = view.controls["collective"].options
    label, (kind, axes) = options[0]
    assert view.controls["collective"].value == (kind, axes) == view.collective
    assert options[-1] == ("no highlight", None)
    n = len(options) - 1
    assert f"{n} collective(s)" in view.info.value
    d = view.figure.to_dict()
    assert kind in d["layout"]["title"]["text"]
    groups = mesh.groups(axes)
    assert len([v for v in d["data"][1]["x"] if v is None]) == len(groups)
    assert node == view.tensor
    view.controls["collective"].value = None  # no highlight: no group lines
    assert not [v for v in view.figure.to_dict()["data"][1]["x"] if v is not None]


def test_mesh_view_says_none_when_an_op_has_no_collective(mesh, mlp, mlp_plan):
    view = MeshView(mesh, mlp_plan)
    for name in [n.name for n in mlp.ops]:
        view.selection.select(node=name)
        if not view.collectives():
            break
    else:
        pytest.skip("every op of this plan has a collective")
    assert view.controls["collective"].options == (("none", None),)
    assert view.controls["collective"].value is None
    assert "no collective" in view.info.value


def test_mesh_view_teaching_ring_on_devices(mesh):
    view = MeshView(mesh)
    view.controls["teach_kind"].value = "all-gather"
    view.controls["teach_axis"].value = "tp"
    assert view.controls["step"].max == 3  # rounds of a 4-device ring
    view.controls["step"].value = 2
    d = view.ring_figure.to_dict()
    assert "round 2 of 3" in d["layout"]["title"]["text"]
    assert "chunk" in d["layout"]["title"]["text"]  # the legend says what a square means
    assert len(d["layout"]["annotations"]) == 4  # one arrow per device of the ring
    sends = d["data"][TRACE_SENDS]["text"]
    assert all(t.startswith("chunk ") for t in sends) and len(sends) == 4
    assert list(d["data"][TRACE_DEVICES]["text"]) == ["0", "1", "2", "3"]
    view.click_device(5)  # the ring shows the clicked device's group
    assert view.selection.device == 5
    assert list(view.ring_figure.data[TRACE_DEVICES].text) == ["4", "5", "6", "7"]
    assert "4 → 5 → 6 → 7 → 4" in view.ring_figure.data[TRACE_RING_LABELS].text[0]


def test_mesh_view_ring_axis_of_size_one_errors_beside_the_menu():
    view = MeshView(ex.Mesh({"dp": 1, "tp": 4}))
    before = view.ring_figure.to_dict()["layout"]["title"]["text"]
    view.controls["teach_axis"].value = "dp"
    assert view.axis_error.visible and "size 1" in view.axis_error.text
    assert view.stale
    assert view.ring_figure.to_dict()["layout"]["title"]["text"] == before  # last valid kept
    view.axis_error.restore()
    assert view.controls["teach_axis"].value == "tp" and not view.axis_error.visible


def test_mesh_view_every_dim_of_a_4d_tensor_is_reachable(mesh):
    view = MeshView(mesh)
    t = ex.TensorType((2, 4, 8, 16), "bf16")
    view.show_layout(t, Layout((("dp",), (), (), ("tp",))), "q")
    pairs = [v for _, v in view.controls["dims"].options]
    assert pairs == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert view.controls["dims"].value == (0, 3)  # the split dims first
    seen = set()
    for pair in pairs:
        view.controls["dims"].value = pair
        lay = view.tensor_figure.to_dict()["layout"]
        seen.add(lay["xaxis"]["title"]["text"].split()[1])
        seen.add(lay["yaxis"]["title"]["text"].split()[1])
        assert view.tensor_figure.to_dict()["data"][0]["x"]  # blocks drawn for every pair
    assert seen == {"0", "1", "2", "3"}
    view.controls["dims"].value = (1, 2)  # both split dims hidden: every device on one block
    d = view.tensor_figure.to_dict()
    assert list(d["data"][0]["text"]) == ["0,1,2,3,4,5,6,7"]
    assert "not drawn" in d["layout"]["title"]["text"]


def test_mesh_view_explains_the_devices_of_a_pipelined_job(mesh, mlp_plan):
    from types import SimpleNamespace

    view = MeshView(mesh, mlp_plan)
    job = SimpleNamespace(devices=64, config=SimpleNamespace(pp=8))
    view.selection.publish(training=job)
    assert "64 devices" in view.scope.value and "pp=8" in view.scope.value
    assert "8-device dp x tp mesh" in view.scope.value


def test_mesh_view_control_sequences_keep_every_trace_complete(mesh, mlp, mlp_plan):
    view = MeshView(mesh, mlp_plan)
    for name in [n.name for n in mlp.ops][:4]:
        view.selection.select(node=name)
        for _, op in view.controls["operand"].options:
            view.controls["operand"].value = op
            for kind in ("reduce-scatter", "all-reduce"):
                view.controls["teach_kind"].value = kind
                view.controls["step"].value = view.controls["step"].max
                for fig in (view.figure, view.tensor_figure, view.ring_figure):
                    for tr in fig.to_dict()["data"]:
                        if tr.get("visible", True) and tr["name"] != "groups":
                            assert len(tr.get("x") if "x" in tr else tr["z"]) > 0, tr["name"]


# --- CostTuner ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuner(mlp, mesh):
    return CostTuner(mlp, mesh)


@pytest.fixture
def fresh_tuner(mlp, mesh):
    return CostTuner(mlp, mesh)


def _figure_complete(fig) -> None:
    """Every trace holds data for every bar, visible or not (a later mode switch or a
    front-end that connects later never meets an empty trace)."""
    d = fig.to_dict()
    visible = [t for t in d["data"] if t.get("visible", True) is not False]
    assert visible, "no visible trace"
    for t in d["data"]:
        assert len(t["x"]) == len(t["y"]) and len(t["hovertext"]) == len(t["y"])
    for t in visible:
        assert any(v is not None for v in t["y"]), t["name"]


def test_tuner_has_a_control_per_cost_field_with_human_labels(tuner):
    for k in ex.CostParams().fields():
        assert k in tuner.controls and k in tuner.field_errors
        c = tuner.controls[k]
        assert "_" not in c.description and c.style.description_width == "initial"
        if hasattr(c, "readout"):  # sliders: the full value with units is shown beside them
            assert c.readout is False
    assert {"method", "mesh_shape", "preset", "scale", "pin", "reset"} <= set(tuner.controls)
    r = tuner.readouts
    assert r["beta_communication"].value == "×1" and r["compute_efficiency"].value == "50%"
    assert r["message_threshold_bytes"].value == "2.00 KiB"


def test_tuner_control_replans_and_compares_with_the_baseline(tuner):
    base = tuner.baseline
    assert tuner.plan is base and tuner.changed == ()
    tuner.controls["beta_communication"].value = 300.0
    first = tuner.plan
    assert first is not base and first.params.beta_communication == 300.0
    assert tuner.previous is base and tuner.changed == first.changed(base)
    tuner.controls["gamma_param_comm"].value = 0.1
    # "before" stays the baseline, not the previous step
    assert tuner.previous is first and tuner.baseline is base
    assert tuner.changed == tuner.plan.changed(base)
    d = tuner.figure.to_dict()
    assert d["data"][0]["name"] == "baseline" and d["data"][0]["y"][-1] == pytest.approx(
        base.cost.total
    )
    assert d["data"][1]["y"][-1] == pytest.approx(tuner.plan.cost.total)
    assert "baseline" in d["layout"]["title"]["text"]
    assert tuner.selection.plan is tuner.plan
    assert tuner.selection.highlight == tuner.changed
    tuner.reset()
    assert tuner.plan is base and tuner.params == base.params and tuner.changed == ()
    assert tuner.controls["beta_communication"].value == base.params.beta_communication


def test_a_mesh_view_linked_to_a_graph_view_made_with_a_plan_draws_the_clicked_op(
    mlp, mesh, mlp_plan
):
    """Notebook 03's path: ``GraphView(graph, plan)`` then ``link(view, MeshView(mesh))``
    and a click. The selection held the node but no plan, so the mesh view drew nothing."""
    view, devices = GraphView(mlp, mlp_plan), MeshView(mesh)
    sel = link(view, devices)
    assert sel.plan is mlp_plan and devices.plan is mlp_plan
    with_collectives = 0
    for node in (n.name for n in mlp.ops):
        view.click(node)
        assert devices.tensor == node and f"%{node}" in devices.figure.layout.title.text
        cells = next(t for t in devices.figure.data if t.name == "cells")
        assert cells.z is not None and len(cells.z) > 0
        with_collectives += bool(devices.collectives())
    assert with_collectives, "no clicked op offered its collectives"


def test_mesh_view_ring_says_whose_collective_it_is(mlp, mesh, mlp_plan):
    """The ring under the grid showed an all-gather for an op with no collective at all;
    its note now names the op's collective, or says the op needs none."""
    mv = MeshView(mesh, mlp_plan)
    seen = set()
    for n in mlp.ops:
        mv.tensor = n.name
        mv._retarget()
        note = mv.ring_figure.layout.title.text
        if mv.collectives():
            kind, axes = mv.collective
            assert f"%{n.name}'s {kind} over {axes[0]}" in note, note
            seen.add("has")
        else:
            assert f"%{n.name} needs no collective" in note, note
            seen.add("none")
    assert seen == {"has", "none"}


def test_mesh_view_names_dims_with_the_ops_signature_letters(mlp, mesh, mlp_plan):
    """One notation: the layout in the mesh view's titles and dim menu uses the letters of
    the op's signature, the letters its strategy name uses (it used A, B, C)."""
    mv = MeshView(mesh, mlp_plan)
    mv.tensor = "layers.0.fc1"
    mv._retarget()
    ins, out = mlp.signature("layers.0.fc1").split("->")
    strategy = mlp_plan.assignment["layers.0.fc1"].name  # e.g. "n=dp"
    assert all(part.split("=")[0] in out + ins for part in strategy.split(","))
    assert out == "an" and strategy.split("=")[0] in "an"  # A, B would differ at dim 1
    for title in (mv.figure.layout.title.text, mv.tensor_figure.layout.title.text):
        assert "[A, N" in title and "[A, B" not in title, title
    assert "(N, " in mv.controls["dims"].options[0][0]


def test_tuner_mesh_menu_keeps_the_search_method(tiny_gpt, mesh):
    """Notebook 04's path: a new mesh shape re-plans with the chosen method. ipywidgets
    selects a Dropdown's first option when its options change, and the method menu's notes
    change with the mesh: the method used to fall to "exhaustive", unavailable there."""
    t = CostTuner(tiny_gpt, mesh, method="dynamic_programming")
    notes = t.controls["method"].options[0][0]
    for shape in ((1, 8), (4, 2), (2, 4)):
        t.controls["mesh_shape"].value = shape
        t.flush()
        assert t.method == t.controls["method"].value == "dynamic_programming", shape
        assert t.plan.method == "dynamic_programming" and t.plan.mesh.shape == shape
        assert not t.stale, t.stale_reason if hasattr(t, "stale_reason") else shape
    assert t.controls["method"].options[0][0] == notes  # back on 2 x 4: its own notes
    t.controls["mesh_shape"].value = (1, 8)
    t.reset()
    assert t.mesh == mesh and t.controls["method"].value == "dynamic_programming"


def test_tuner_pin_makes_a_new_baseline(fresh_tuner):
    t = fresh_tuner
    t.controls["beta_communication"].value = 1000.0
    assert t.changed  # beta 1000 moves ops off the tensor-parallel strategies
    t.pin()
    assert t.baseline is t.plan and t.changed == ()
    assert "no op changed strategy" in t.changes.value
    t.controls["beta_communication"].value = 1.0
    assert t.changed == t.plan.changed(t.baseline) and t.changed


def test_tuner_changes_are_ranked_by_cost_delta(fresh_tuner):
    t = fresh_tuner
    t.controls["beta_communication"].value = 1000.0
    base, plan = t.baseline, t.plan
    deltas = {n: plan.node_cost(n).total - base.node_cost(n).total for n in t.changed}
    ranked = sorted(deltas, key=lambda n: -abs(deltas[n]))
    html = t.changes.value
    shown = [n for n in ranked[:10]]
    positions = [html.index(f"%{n}<") for n in shown]
    assert positions == sorted(positions)  # largest |delta| first
    top = ranked[0]
    assert base.assignment[top].name in html and plan.assignment[top].name in html
    assert f"{len(t.changed)} ops changed strategy" in html


def test_tuner_presets_set_every_field_and_the_toggle_follows(fresh_tuner):
    t = fresh_tuner
    assert t.controls["preset"].value == "roofline"
    t.controls["preset"].value = "mindspore"
    ms = ex.CostParams.mindspore()
    assert t.plan.params == ms and t.params == ms
    for k, v in ms.fields().items():
        assert t.controls[k].value == (0.0 if v is None else v), k
    assert t.readouts["beta_communication"].value == "×400"
    t.controls["beta_communication"].value = 30.0
    assert t.controls["preset"].value == "custom"
    t.controls["beta_communication"].value = 400.0
    assert t.controls["preset"].value == "mindspore"
    t.controls["preset"].value = "roofline"
    assert t.plan.params == ex.CostParams() and t.controls["beta_communication"].value == 1.0


def test_tuner_ignores_the_browser_slider_echo(fresh_tuner):
    """A browser log slider snaps 400 to its step and sends 398.1 back, possibly after the
    roofline preset already set 1.0 (notebook 04: roofline shown with beta 398)."""
    t = fresh_tuner
    slider = t.controls["beta_communication"]
    t.controls["preset"].value = "mindspore"
    plan = t.plan
    snapped = 10 ** (-4 + round((2.60206 + 4) / 0.05) * 0.05)
    slider.set_state({"value": snapped})  # the echo while 400 is current
    assert t.params.beta_communication == 400.0 and t.plan is plan
    assert t.controls["preset"].value == "mindspore"
    t.controls["preset"].value = "roofline"
    t.controls["preset"].value = "mindspore"  # sets 400 again: one more echo to come
    t.controls["preset"].value = "roofline"
    slider.set_state({"value": snapped})  # the echo of 400 arrives after roofline set 1.0
    assert t.params == ex.CostParams() and t.plan.params == ex.CostParams()
    assert slider.value == 1.0 and t.controls["preset"].value == "roofline"
    slider.set_state({"value": 10.0})  # a real drag is applied
    assert t.plan.params.beta_communication == 10.0


def test_tuner_scales_keep_every_trace_complete(fresh_tuner):
    t = fresh_tuner
    assert t.figure.layout.yaxis.type == "log"  # communication visible beside compute
    sequence = [
        ("scale", "stacked"), ("beta_communication", 100.0), ("preset", "mindspore"),
        ("scale", "linear"), ("mesh_shape", (4, 2)), ("scale", "log"),
        ("preset", "roofline"), ("scale", "stacked"), ("mesh_shape", (2, 4)),
    ]  # fmt: skip
    for key, value in sequence:
        t.controls[key].value = value
        t.flush()
        _figure_complete(t.figure)
        stacked = t.figure.layout.barmode == "stack"
        assert stacked == (t.scale == "stacked")
        comparable = t.plan.cost.unit == t.baseline.cost.unit
        assert t.figure.data[0].visible is (not stacked and comparable)
        assert t.figure.data[1].visible is (not stacked)
        assert t.figure.data[2].visible is stacked
    assert t.figure.layout.yaxis.ticksuffix == "s"


def test_tuner_marks_methods_that_cannot_run(tuner):
    labels = dict((v, k) for k, v in tuner.controls["method"].options)
    assert "unavailable" in labels["exhaustive"] and "limit" in labels["exhaustive"]
    assert "unavailable" not in labels["ilp"]
    plan = tuner.plan
    tuner.controls["method"].value = "exhaustive"
    err = tuner.field_errors["method"]
    assert err.visible and "exhaustive" in err.text and tuner.stale
    assert tuner.plan is plan  # the last valid plan stays shown
    assert tuner.errors.last is None  # beside the control, not in the bottom pane
    tuner.controls["method"].value = "ilp"
    assert not err.visible and not tuner.stale and tuner.plan.method == "ilp"
    assert "optimal" in tuner.status.value
    tuner.controls["method"].value = "dynamic_programming"


def test_tuner_bad_value_shows_beside_its_control_and_restores(fresh_tuner):
    t = fresh_tuner
    plan = t.plan
    t.controls["message_threshold_bytes"].value = -5.0
    err = t.field_errors["message_threshold_bytes"]
    assert err.visible and "-5" in err.text and t.stale
    assert t.controls["message_threshold_bytes"].value == -5.0  # not clamped silently
    assert t.plan is plan and t.params.message_threshold_bytes == 2048.0
    assert "stale" in t.stale_banner.value and "Message threshold" in t.stale_banner.value
    err.restore()
    assert t.controls["message_threshold_bytes"].value == 2048.0
    assert not err.visible and not t.stale


def test_tuner_memory_cap_in_human_units(fresh_tuner):
    t = fresh_tuner
    plan = t.plan
    assert t.readouts["device_memory_cap_bytes"].value == "chip's memory"
    t.controls["device_memory_cap_bytes"].value = 1000.0
    assert t.readouts["device_memory_cap_bytes"].value == "1000 B"
    err = t.field_errors["device_memory_cap_bytes"]
    assert err.visible and "no plan fits" in err.text and t.stale and t.plan is plan
    t.controls["device_memory_cap_bytes"].value = 0.0  # a valid re-plan clears both
    assert not err.visible and not t.stale


def test_error_pane_buttons_fit_their_text():
    pane = ErrorPane()
    assert pane.dismiss.layout.width == "auto" and pane.details_button.layout.width == "auto"
    pane.report(ValueError("bad"), "x")
    assert pane.output.layout.display == "none"  # the traceback is behind "details"
    pane.details_button.value = True
    assert pane.output.layout.display == "block"


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


# TraceCompare: tests/widgets/test_trace_compare.py


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


# --- dashboard errors ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dashboard():
    from widgets import StrategyExplorer

    return StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2)


def test_dashboard_bad_global_batch_shows_beside_it(dashboard):
    dash = dashboard
    plan, summary = dash.plan, dash.summary.value
    dash.controls["global_batch"].value = -5
    dash.flush()
    err = dash.field_errors["global_batch"]
    assert err.visible and "-5" in err.text
    assert dash.controls["global_batch"].value == -5  # not clamped silently
    assert dash.stale and "Global batch" in dash.stale_banner.value
    assert dash.plan is plan and dash.summary.value == summary  # the last valid plan stays
    assert dash.errors.last is None  # nothing at the bottom of the page
    # the error line, the stale banner and the controls come before the tabs
    kids = list(dash.children)
    assert kids.index(dash.stale_banner) < kids.index(dash.summary)
    err.restore()
    dash.flush()
    assert dash.controls["global_batch"].value == 64 and not err.visible and not dash.stale


def test_dashboard_bad_model_shows_beside_the_model_and_a_valid_plan_clears(dashboard):
    dash = dashboard
    dash.controls["model"].value = "mlp-small"  # plan_training refuses MLPs
    dash.flush()
    err = dash.field_errors["model"]
    assert err.visible and "MLP" in err.text and dash.stale
    assert dash.plan.model == "gpt2"
    dash.controls["model"].value = "gpt2"
    dash.flush()
    assert not err.visible and not dash.stale and dash.plan.model == "gpt2"
    assert err.last_valid == "gpt2"


def test_dashboard_controls_wrap_and_buttons_fit(dashboard):
    c = dashboard.controls
    for k in ("model", "hardware", "devices", "global_batch", "seq"):
        assert c[k].style.description_width == "initial" and "_" not in c[k].description
    assert c["plan"].layout.width == "auto"
    controls = dashboard.children[0]
    tabs_row = next(w for w in dashboard.children if dashboard.tabs in getattr(w, "children", ()))
    assert controls.layout.flex_flow == "row wrap" and tabs_row.layout.flex_flow == "row wrap"
    assert dashboard.tabs.layout.min_width == "0"  # the tabs shrink instead of overflowing
