"""Constraints on the sharding search (issue 29): every method honours Pin and Forbid, the
exact ones stay exact, repeated layers stay correct, conflicts name their smallest subset."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import explorer as ex
from explorer.search import Planner, SearchError
from explorer.search.constraints import ConstraintError, Forbid, Pin
from explorer.search.costmodel import KINDS

HW = "a100-80g"
EXACT = ("exhaustive", "ilp", "dynamic_programming")


@pytest.fixture(scope="module")
def one_layer():
    return ex.models.build(ex.models.load("mlp-small").replace(num_layers=1), batch=8)


@pytest.fixture(scope="module")
def gpt2_4():
    return ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=128)


def _axes(s) -> set[str]:
    return {a for _, axes in s.dim_axes for a in axes}


def _brute(graph, mesh, allowed_node, forbidden_kinds=()):
    """Every assignment of every node (no folding, no solver), kept when ``allowed_node``
    accepts each node's strategy and no edge redistribution uses a forbidden kind: the
    cheapest total, by hand."""
    planner = Planner(graph, mesh, reuse_layers=False)
    m = planner.model
    w = m.weigh(planner.default_params())
    kinds = [KINDS.index(ex.hardware.CollectiveKind(k)) for k in forbidden_kinds]
    ranges = [
        [k for k, s in enumerate(nt.strategies) if allowed_node(nt.name, s)] for nt in m.nodes
    ]
    best = math.inf
    for choice in itertools.product(*ranges):
        bad = False
        for et in m.edges:
            ku, kv = choice[m.index[et.src]], choice[m.index[et.dst]]
            if kinds and np.isin(et.kind[ku, kv], kinds).any():
                bad = True
                break
        if bad:
            continue
        best = min(best, m.total(w, list(choice)))
    return best


CASES = {
    "forbid the axis for fc1": (
        [Forbid("layers.0.fc1", axis="d")],
        lambda n, s: n != "layers.0.fc1" or "d" not in _axes(s),
        (),
    ),
    "pin fc2 to its contraction split": (
        [Pin("layers.0.fc2", "k=d")],
        lambda n, s: n != "layers.0.fc2" or s.name == "k=d",
        (),
    ),
    "no all-reduce anywhere, x replicated": (
        [Forbid(collective="all_reduce"), Pin("x", "replicated")],
        lambda n, s: n != "x" or s.name == "replicated",
        ("all-reduce",),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_solvers_equal_a_brute_force_restricted_by_hand(one_layer, case):
    constraints, allowed, kinds = CASES[case]
    mesh = ex.Mesh({"d": 2}, hardware=HW)
    want = _brute(one_layer, mesh, allowed, kinds)
    free = ex.search(one_layer, mesh, "ilp").cost.total
    assert math.isfinite(want)
    for method in EXACT:
        plan = ex.search(one_layer, mesh, method, constraints=constraints)
        assert plan.cost.total == pytest.approx(want, rel=1e-9), method
        assert plan.status == "optimal"
        assert plan.constraints == tuple(constraints)
        for name, s in plan.assignment.items():
            assert allowed(name, s), (method, name, s.name)
    assert want >= free * (1 - 1e-12)  # a constraint never makes the optimum cheaper


def test_every_method_honours_pins_and_axis_forbids():
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=HW)
    cons = [Forbid("layers.1.*", axis="tp"), Pin("layers.0.fc1", "n=tp")]
    for method in ("ilp", "dynamic_programming", "recursive_programming",
                   "sharding_propagation"):  # fmt: skip
        plan = ex.search(g, mesh, method, constraints=cons)
        assert plan.assignment["layers.0.fc1"].name == "n=tp", method
        for name, s in plan.assignment.items():
            if name.startswith("layers.1."):
                assert "tp" not in _axes(s), (method, name, s.name)
        assert math.isfinite(plan.cost.total)


def test_forbidden_collective_is_absent_from_the_plan(gpt2_4):
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=HW)
    free = ex.search(gpt2_4, mesh, "dynamic_programming")
    kinds = {st.kind.value for r in free.redistributions.values() for st in r.steps}
    assert "reduce-scatter" in kinds  # the free plan uses it: the forbid has work to do
    plan = ex.search(gpt2_4, mesh, "dynamic_programming",
                     constraints=[Forbid(collective="reduce_scatter")])  # fmt: skip
    used = {st.kind.value for r in plan.redistributions.values() for st in r.steps}
    used |= {c.kind.value for s in plan.assignment.values() for c in s.collectives}
    assert "reduce-scatter" not in used
    assert plan.cost.total > free.cost.total


def test_a_constraint_on_some_repeated_layers_plans_unfolded_and_stays_exact(gpt2_4):
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=HW)
    cons = [Forbid("layers.2.*", axis="tp")]
    plan = ex.search(gpt2_4, mesh, "dynamic_programming", constraints=cons)
    assert "planned unfolded" in plan.diagnostics["repeated_layers"]
    assert "Forbid('layers.2.*', axis='tp')" in plan.diagnostics["repeated_layers"]
    whole = Planner(gpt2_4, mesh, reuse_layers=False).search("ilp", constraints=cons)
    assert plan.cost.total == pytest.approx(whole.cost.total, rel=1e-9)
    assert all(
        "tp" not in _axes(s) for n, s in plan.assignment.items() if n.startswith("layers.2.")
    )
    assert any("tp" in _axes(s) for n, s in plan.assignment.items() if n.startswith("layers.1."))


def test_a_constraint_on_every_repeated_layer_keeps_the_chain(gpt2_4):
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=HW)
    cons = [Forbid("layers.*.mlp.*", axis="dp")]
    plan = ex.search(gpt2_4, mesh, "dynamic_programming", constraints=cons)
    assert "solved as a chain" in plan.diagnostics["repeated_layers"]
    whole = Planner(gpt2_4, mesh, reuse_layers=False).search("ilp", constraints=cons)
    assert plan.cost.total == pytest.approx(whole.cost.total, rel=1e-9)
    assert all("dp" not in _axes(s) for n, s in plan.assignment.items() if ".mlp." in n)


def test_explain_says_forbidden_by(one_layer):
    mesh = ex.Mesh({"d": 2}, hardware=HW)
    free = ex.search(one_layer, mesh, "ilp")
    chosen = free.assignment["layers.0.fc1"].name
    con = Forbid("layers.0.fc1", axis="d")
    assert chosen != "replicated"  # the forbid removes the free plan's choice
    plan = ex.search(one_layer, mesh, "ilp", constraints=[con])
    why = plan.explain("layers.0.fc1", k=5)
    assert why.chosen.strategy.name == "replicated"
    marked = [a for a in why.runners_up if a.forbidden_by]
    assert {a.strategy.name for a in marked} == {"a=d", "k=d", "n=d"}
    assert all(a.forbidden_by == str(con) for a in marked)
    assert f"forbidden by {con}" in str(why)


def test_smallest_conflicting_subset_is_named(one_layer):
    mesh = ex.Mesh({"d": 2}, hardware=HW)
    noise = [Forbid("layers.0.relu", axis="d"), Pin("layers.0.fc2_b", "replicated")]
    a, b = Pin("layers.0.fc1", "n=d"), Forbid("layers.0.*", axis="d")
    with pytest.raises(ConstraintError) as info:
        ex.search(one_layer, mesh, "ilp", constraints=[noise[0], a, noise[1], b])
    err = info.value
    assert err.conflict == (a, b)
    assert "%layers.0.fc1 has no strategy left" in err.reason
    assert str(a) in str(err) and str(b) in str(err)
    assert isinstance(err, SearchError)
    for method in ("exhaustive", "dynamic_programming", "recursive_programming"):
        with pytest.raises(ConstraintError) as again:
            ex.search(one_layer, mesh, method, constraints=[noise[0], a, noise[1], b])
        assert again.value.conflict == (a, b)


def test_conflict_through_an_edge(one_layer):
    # each pin alone is fine; together the edge fc1 -> bias needs a forbidden collective
    mesh = ex.Mesh({"d": 2}, hardware=HW)
    a, b = Pin("layers.0.fc1", "k=d"), Forbid(collective="all-reduce")
    c = Forbid("layers.0.fc1_bias", collective="reduce-scatter")
    for subset in ([a, b], [a, c], [b, c]):
        ex.search(one_layer, mesh, "ilp", constraints=subset)
    with pytest.raises(ConstraintError) as info:
        ex.search(one_layer, mesh, "ilp", constraints=[a, b, c])
    assert set(info.value.conflict) == {a, b, c}
    assert "forbidden collective" in info.value.reason


@pytest.mark.parametrize(
    "con, words",
    [
        (Pin("layers.0.nothing", "replicated"), "matches no node"),
        (Pin("layers.0.fc1", "z=d"), "is not one of %layers.0.fc1's strategies"),
        (Forbid(axis="tp"), "axis 'tp' is not an axis"),
    ],
)
def test_bad_constraint_values_are_named(one_layer, con, words):
    mesh = ex.Mesh({"d": 2}, hardware=HW)
    with pytest.raises(ConstraintError, match=words) as info:
        ex.search(one_layer, mesh, "ilp", constraints=[con])
    assert info.value.conflict == (con,)


def test_malformed_constraints_are_refused():
    with pytest.raises(ConstraintError, match="forbids nothing"):
        Forbid("x")
    with pytest.raises(ConstraintError, match="not a collective kind"):
        Forbid(collective="broadcast")
    with pytest.raises(ConstraintError, match="pattern"):
        Pin("", "replicated")
    assert Forbid(collective="all_to_all").collective == "all-to-all"
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    with pytest.raises(ConstraintError, match="not a sharding constraint"):
        ex.search(g, ex.Mesh({"d": 2}, hardware=HW), "ilp", constraints=["tp<=4"])


def test_top_level_names():
    assert ex.Pin is Pin and ex.Forbid is Forbid and ex.ConstraintError is ConstraintError


def test_a_heuristic_that_breaks_a_constraint_is_re_solved_exactly(gpt2_4):
    # propagation settles attn.q before it sees that the pinned mask needs it split over
    # tp, which the forbid rules out: its plan breaks a constraint, so the planner re-solves
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=HW)
    cons = [
        ex.Forbid("layers.*.attn.mask", collective="all-to-all"),
        ex.Forbid("layers.*.attn.q", axis="tp"),
        ex.Pin("layers.*.attn.mask", "a=dp+tp"),
    ]
    plan = ex.search(gpt2_4, mesh, "sharding_propagation", constraints=cons)
    assert "re-solved by dynamic_programming" in plan.diagnostics["constraints"]
    exact = ex.search(gpt2_4, mesh, "dynamic_programming", constraints=cons)
    assert plan.cost.total == pytest.approx(exact.cost.total, rel=1e-9)
    assert all(s.name == "a=dp+tp" for n, s in plan.assignment.items() if n.endswith("attn.mask"))


def test_annotations_with_a_constraint_on_one_layer(gpt2_4):
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=HW)
    plan = ex.search(gpt2_4, mesh, "sharding_propagation",
                     annotations={"layers.0.attn.q": "a=dp"},
                     constraints=[Forbid("layers.2.*", axis="tp")])  # fmt: skip
    assert plan.assignment["layers.0.attn.q"].name == "a=dp"
    assert "planned unfolded" in plan.diagnostics["repeated_layers"]
    assert all(
        "tp" not in _axes(s) for n, s in plan.assignment.items() if n.startswith("layers.2.")
    )


def test_ranked_plans_all_honour_the_constraints(one_layer):
    mesh = ex.Mesh({"d": 2}, hardware=HW)
    con = Forbid("layers.0.fc2", axis="d")
    for method in ("exhaustive", "ilp"):
        plans = ex.search(one_layer, mesh, method, top_k=4, constraints=[con]).top_k(4)
        assert len(plans) == 4
        totals = [p.cost.total for p in plans]
        assert totals == sorted(totals)
        assert all(p.assignment["layers.0.fc2"].name == "replicated" for p in plans)
