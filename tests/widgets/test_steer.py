"""Pin and forbid from the views: the CostTuner's steer panel re-solves under the constraints
the selected op gets, the dashboard's steering row re-plans the training job, and a set no
plan satisfies is refused beside the control that added it (issue 29)."""

from __future__ import annotations

import pytest

import explorer as ex
from widgets import CostTuner, Selection
from widgets.steer import TrainingSteer, layer_pattern


@pytest.fixture(scope="module")
def graph():
    return ex.models.build(ex.models.load("mlp-small"), batch=8)


@pytest.fixture()
def tuner(graph):
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    return CostTuner(graph, mesh, method="dynamic_programming", selection=Selection())


def test_layer_pattern_stars_the_layer_index():
    assert layer_pattern("layers.12.attn.qkv") == "layers.*.attn.qkv"
    assert layer_pattern("h.3") == "h.*"
    assert layer_pattern("lm_head") is None


def test_panel_lists_the_selected_ops_strategies_with_their_cost(tuner):
    steer = tuner.steer
    assert steer.controls["pin"].disabled  # nothing selected yet
    tuner.selection.select(node="layers.0.fc1")
    options = steer.controls["strategy"].options
    chosen = tuner.plan.assignment["layers.0.fc1"].name
    assert options[0] == (f"{chosen} (chosen)", chosen) and len(options) > 2
    assert [v for _, v in steer.controls["scope"].options] == [
        "layers.0.fc1", "layers.*.fc1", "*"]  # fmt: skip
    assert set(steer.controls["axis"].options) == {"dp", "tp"}
    # an axis is picked (the op's own): "forbid axis" works without touching the menu
    chosen = tuner.plan.assignment["layers.0.fc1"].name
    assert steer.controls["axis"].value in chosen or chosen == "replicated"
    steer.controls["forbid_axis"].click()
    assert len(steer.constraints) == 1 and not steer.field_errors["forbid_axis"].visible


def test_pin_on_every_layer_re_solves_and_remove_restores(tuner):
    steer = tuner.steer
    before = dict(tuner.plan.assignment)
    tuner.selection.select(node="layers.0.fc1")
    other = next(v for _, v in steer.controls["strategy"].options[1:])
    steer.controls["scope"].value = "layers.*.fc1"
    steer.controls["strategy"].value = other
    steer.controls["pin"].click()
    assert tuner.constraints == (ex.Pin("layers.*.fc1", other),), steer.errors.last
    fc1s = [n for n in tuner.plan.assignment if n.endswith(".fc1")]
    assert fc1s and all(tuner.plan.assignment[n].name == other for n in fc1s)
    assert "remove" in steer.listing.children[0].children[0].description
    steer.listing.children[0].children[0].click()  # remove: back to the free plan
    assert tuner.constraints == () and dict(tuner.plan.assignment) == before


def test_forbid_an_axis_and_a_collective(tuner):
    steer = tuner.steer
    tuner.selection.select(node="layers.0.fc1")
    steer.controls["scope"].value = "*"
    steer.controls["axis"].value = "tp"
    steer.controls["forbid_axis"].click()
    assert all("tp" not in s.name for s in tuner.plan.assignment.values()), steer.errors.last
    steer.clear()
    steer.controls["collective"].value = "all_reduce"
    steer.controls["forbid_collective"].click()
    assert tuner.constraints == (ex.Forbid("*", collective="all_reduce"),)
    kinds = {c.kind.value for s in tuner.plan.assignment.values() for c in s.collectives}
    assert "all-reduce" not in kinds


def test_an_unsatisfiable_pin_is_refused_beside_its_button(tuner):
    """Forbid tp everywhere, then pin a tp strategy on one op: the conflict is named beside
    the pin button and the list and the plan stay as they were."""
    steer = tuner.steer
    tuner.selection.select(node="layers.0.fc1")
    steer.controls["scope"].value = "*"
    steer.controls["axis"].value = "tp"
    steer.controls["forbid_axis"].click()
    plan = tuner.plan
    tuner.selection.select(node="layers.0.fc1")
    with_tp = next(v for _, v in steer.controls["strategy"].options if "tp" in v)
    steer.controls["scope"].value = "layers.0.fc1"
    steer.controls["strategy"].value = with_tp
    steer.controls["pin"].click()
    err = steer.field_errors["pin"]
    assert err.visible and "Forbid" in err.text and "Pin" in err.text, err.text
    assert tuner.constraints == (ex.Forbid("*", axis="tp"),) and tuner.plan is plan
    steer.controls["pin"].click()  # the same pin again: still refused, nothing added
    assert len(steer.constraints) == 1


def test_training_steer_fixes_bounds_and_pins_an_alternative():
    calls: list[tuple] = []
    plan = ex.plan_training("gpt2", devices=16, hardware="a100-80g", global_batch=64, seq=512)

    def solve(constraints):
        calls.append(constraints)
        return ex.plan_training("gpt2", devices=16, hardware="a100-80g", global_batch=64,
                                seq=512, constraints=list(constraints))  # fmt: skip

    sel = Selection()
    steer = TrainingSteer(solve, selection=sel)
    sel.publish(training=plan)
    assert len(steer.alternatives.children) > 1  # a title and a row per alternative
    steer.controls["tp"].value = ("max", 2)
    assert calls[-1] == (ex.Bound("tp", max=2),)
    steer.controls["pp"].value = ("fix", 1)
    assert calls[-1] == (ex.Bound("tp", max=2), ex.Fix("pp", 1))
    alt = plan.alternatives[0].config
    assert steer.pin_config(alt)
    fixed = {c.knob: c.value for c in steer.constraints if isinstance(c, ex.Fix)}
    assert fixed["tp"] == alt.tp and fixed["dp"] == alt.dp
    assert steer.controls["tp"].value == ("fix", alt.tp)  # the menus show what is in force
    steer.controls["clear"].click()
    assert steer.constraints == () and steer.controls["tp"].value is None


def test_training_steer_refuses_an_impossible_value_beside_its_menu():
    plan = ex.plan_training("gpt2", devices=16, hardware="a100-80g", global_batch=64, seq=512)

    def solve(constraints):
        return ex.plan_training("gpt2", devices=16, hardware="a100-80g", global_batch=64,
                                seq=512, constraints=list(constraints))  # fmt: skip

    steer = TrainingSteer(solve)
    steer.selection.publish(training=plan)
    steer.controls["tp"].value = ("fix", 64)  # more than the 16 devices
    err = steer.field_errors["tp"]
    assert err.visible and "tp" in err.text, err.text
    assert steer.controls["tp"].value is None and steer.constraints == ()
    steer.controls["stage_layers"].value = "3,x"
    assert steer.field_errors["stage_layers"].visible
    assert "positive whole numbers" in steer.field_errors["stage_layers"].text


def test_the_panel_follows_the_tuner_to_a_linked_selection(graph):
    """``link(tuner, graph_view)`` gives both a new selection: the steer panel went on
    listening to the old one and never saw the op clicked in the graph."""
    from widgets import GraphView, link

    tuner = CostTuner(graph, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    view = GraphView(graph)
    link(tuner, view)
    assert tuner.steer.selection is tuner.selection is view.selection
    view.click("layers.0.fc1")
    assert [v for _, v in tuner.steer.controls["scope"].options][0] == "layers.0.fc1"
