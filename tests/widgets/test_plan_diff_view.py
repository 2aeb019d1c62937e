"""PlanDiffView and its figures, headless: the bars are the core's terms, the graph rings
exactly the ops that changed strategy, the op menu draws that op's two layouts and selects
it in linked views, and a training diff shows its rows."""

from __future__ import annotations

import pytest

import explorer as ex
from widgets import GraphView, PlanDiffView, link
from widgets.figures.plan_diff import LESS, MORE, terms_figure

HW = "a100-80g"


@pytest.fixture(scope="module")
def plans():
    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=256)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=HW)
    a = ex.search(g, mesh, "dynamic_programming")
    b = ex.search(g, mesh, "dynamic_programming", params=ex.CostParams(beta_communication=8.0))
    return a, b


def test_bars_are_the_core_terms(plans):
    d = ex.diff(*plans)
    bars = terms_figure(d).data[0]
    assert list(bars.y)[::-1] == [k for k, _ in d.terms]
    assert list(bars.x)[::-1] == [v for _, v in d.terms]
    assert list(bars.marker.color) == [MORE if v > 0 else LESS for v in bars.x]
    assert f"{d.total:+.4g}" in terms_figure(d).layout.title.text


def test_graph_rings_the_changed_ops_and_the_menu_draws_layouts(plans):
    a, b = plans
    view = PlanDiffView(a, b)
    assert view.graph_figure.data[2].name == "changed"
    changed = set(a.changed(b))
    assert changed and set(view.diff.changed_ops) == changed
    options = [v for _, v in view.controls["op"].options]
    assert options == [r.ops[0] for r in view.diff.rows]
    target = next(r for r in view.diff.rows[1:] if r.changed)  # not the one drawn first
    graph = GraphView(a.graph, a)
    link(view, graph)
    view.controls["op"].value = target.ops[0]
    assert view.op == target.ops[0] and graph.selection.node == target.ops[0]
    titles = [t.text for t in view.mesh_figure.layout.annotations]
    assert titles[0].startswith(f"a: {target.strategy_a}")
    assert titles[1].startswith(f"b: {target.strategy_b}")
    assert view.errors.last is None


def test_ringed_units_are_the_changed_ops(plans):
    a, b = plans
    view = PlanDiffView(a, b)
    nodes = view.graph_figure.data[1]
    ringed = {(x, y) for x, y in zip(view.graph_figure.data[2].x, view.graph_figure.data[2].y,
                                     strict=True)}  # fmt: skip
    units = {str(u) for u, x, y in zip(nodes.customdata, nodes.x, nodes.y, strict=True)
             if (x, y) in ringed}  # fmt: skip
    assert units and units <= set(view.diff.changed_ops)


def test_an_op_that_did_not_change_is_refused_by_name(plans):
    a, b = plans
    view = PlanDiffView(a, b)
    same = next(n for n in a.assignment if n not in {o for r in view.diff.rows for o in r.ops})
    with pytest.raises(ex.ExplorerError, match=same.replace(".", r"\.")):
        view.choose(same)


def test_training_diff_shows_rows_and_terms():
    plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    view = PlanDiffView(plan, "dp4 tp2")
    assert view.graph_figure is None and "op" not in view.controls
    assert (
        "<td style='padding:2px 8px;text-align:left;vertical-align:top'>tp</td>" in view.table.value
    )
    assert len(view.figure.data[0].x) == len(view.diff.terms)
    assert f"{view.diff.total:+.4g}" in view.summary.value


def test_cost_tuner_shows_the_core_robustness_label():
    from widgets import CostTuner

    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=2), batch=16, seq=512)
    tuner = CostTuner(g, ex.Mesh({"dp": 4, "tp": 8}, hardware=HW))
    assert "not checked" in tuner.robust.value
    tuner.controls["robustness"].click()
    r = tuner.robustness
    assert r is not None and tuner.errors.last is None
    expect = ex.robustness(tuner.plan, k=5)  # the core's own scan of the same plan
    assert r.label == expect.label and r.verdict in tuner.robust.value
    assert r.label[len(r.verdict) :] in tuner.robust.value
    tuner.controls["beta_communication"].value = 2.0
    tuner.flush()
    assert tuner.robustness is None and "not checked" in tuner.robust.value


def test_dashboard_shows_the_plan_robustness_when_asked():
    from widgets import StrategyExplorer

    dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512)
    assert "not checked" in dash.robust.value
    assert "robustness:" not in dash.report.value  # a re-plan does not pay for the scan
    dash.controls["robustness"].click()
    r = dash.plan.robustness()
    assert dash.errors.last is None and r.verdict in dash.robust.value
    assert r.text().splitlines()[0] in dash.report.value


def test_set_plans_redraws_and_refuses_another_graph(plans):
    a, b = plans
    view = PlanDiffView(a, b)
    c = ex.search(a.graph, a.mesh, "dynamic_programming",
                  params=ex.CostParams(gamma_param_comm=4.0))  # fmt: skip
    view.set_plans(a, c)
    d = ex.diff(a, c)
    assert view.diff.total == d.total
    assert list(view.figure.data[0].x)[::-1] == [v for _, v in d.terms]
    assert [v for _, v in view.controls["op"].options] == [r.ops[0] for r in d.rows]
    assert view.op == d.rows[0].ops[0]
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    other = ex.search(g, a.mesh, "dynamic_programming")
    with pytest.raises(ex.ExplorerError, match="new PlanDiffView"):
        view.set_plans(other, other)
    assert view.diff.total == d.total
