"""ex.diff of sharding plans and ex.robustness of a sharding plan: the rows and the terms
sum to the total difference; repeated layers group into one row; plans on other graphs or
meshes are refused by name; the flip factor found really changes the searched plan and
does not just before it."""

import math

import pytest

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.search import Planner
from explorer.search.robustness import SPAN, scaled

HW = "a100-80g"
P = ex.CostParams(device_memory_cap_bytes=float("inf"))


@pytest.fixture(scope="module")
def gpt_plans():
    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=256)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=HW)
    a = ex.search(g, mesh, "dynamic_programming", params=P)
    b = ex.search(g, mesh, "dynamic_programming", params=P.replace(beta_communication=8.0))
    return a, b


def test_rows_and_terms_sum_to_the_total(gpt_plans):
    a, b = gpt_plans
    d = ex.diff(a, b)
    assert d.total == pytest.approx(b.cost.total - a.cost.total, abs=1e-15)
    assert math.fsum(v for _, v in d.terms) == pytest.approx(d.total, rel=1e-9, abs=1e-15)
    assert math.fsum(r.delta for r in d.rows) == pytest.approx(d.total, rel=1e-9, abs=1e-15)
    mags = [abs(v) for _, v in d.terms]
    assert mags == sorted(mags, reverse=True)
    assert set(d.changed_ops) == set(a.changed(b))
    assert d.as_dict()["total"] == d.total and "b - a" in d.text()


def test_repeated_layers_group_into_one_row(gpt_plans):
    a, b = gpt_plans
    d = ex.diff(a, b)
    grouped = [r for r in d.rows if r.count > 1]
    assert grouped, d.text()
    for r in grouped:
        assert r.label.startswith("layers.*.")
        assert {a.assignment[n].name for n in r.ops} == {r.strategy_a}
        assert {b.assignment[n].name for n in r.ops} == {r.strategy_b}


def test_a_plan_against_itself_has_no_rows(gpt_plans):
    a, _ = gpt_plans
    d = ex.diff(a, a)
    assert d.rows == () and d.total == 0 and d.unchanged == len(a.graph.nodes)


def test_other_graph_or_mesh_is_refused(gpt_plans):
    a, _ = gpt_plans
    other_mesh = ex.search(a.graph, ex.Mesh({"dp": 8}, hardware=HW), "dynamic_programming",
                           params=P)  # fmt: skip
    with pytest.raises(ex.search.SearchError, match="same mesh"):
        ex.diff(a, other_mesh)
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    with pytest.raises(ex.search.SearchError, match="same graph"):
        ex.diff(a, ex.search(g, a.mesh, "dynamic_programming", params=P))


def _two_matmuls():
    b = GraphBuilder("mm")
    x = b.input("x", (64, 1024))
    y = b.op("matmul", x, b.param("w", (1024, 1024)), name="y")
    z = b.op("matmul", y, b.param("w2", (1024, 1024)), name="z")
    return b.build([z])


def test_flip_factor_really_flips_the_searched_plan():
    g, mesh = _two_matmuls(), ex.Mesh({"d": 4}, hardware=HW)
    n = Planner(g, mesh).assignments(P)
    plan = ex.search(g, mesh, "exhaustive", params=P, top_k=n)  # every assignment kept
    r = ex.robustness(plan, k=n)
    found = [f for f in r.flips if f.factor is not None]
    assert found, r.text()

    def best(knob, factor):
        q = ex.search(g, mesh, "exhaustive", params=scaled(P, ((knob, factor),)))
        return {k: s.name for k, s in q.assignment.items()}

    chosen = {k: s.name for k, s in plan.assignment.items()}
    for f in found:
        rival = {k: s.name for k, s in r.plans[f.rival].assignment.items()}
        assert best(f.knob, f.factor) == rival != chosen
        before = f.factor * (1.005 if f.direction == "down" else 1 / 1.005)
        assert best(f.knob, before) == chosen
    inside = any(SPAN[0] <= f.factor <= SPAN[1] for f in found)
    assert r.verdict == ("fragile" if inside or any(w for *_, w in r.corners) else "robust")


def test_a_plan_without_rivals_is_searched_again(gpt_plans):
    a, _ = gpt_plans  # dynamic programming keeps one plan: every factor is re-searched
    r = ex.robustness(a, knobs=("beta_communication", "gamma_param_comm"))
    names = lambda p: [s.name for s in p.assignment.values()]  # noqa: E731
    assert any(f.factor for f in r.flips), r.text()
    for f in r.flips:
        if f.factor is None:
            continue
        again = ex.search(a.graph, a.mesh, a.method,
                          params=scaled(P, ((f.knob, f.factor),)))  # fmt: skip
        assert names(again) == names(r.plans[f.rival]) != names(a)
        before = f.factor * (1.005 if f.direction == "down" else 1 / 1.005)
        assert names(ex.search(a.graph, a.mesh, a.method,
                               params=scaled(P, ((f.knob, before),)))) == names(a)  # fmt: skip


def test_robustness_refuses_what_it_cannot_scan(gpt_plans):
    a, _ = gpt_plans
    prop = ex.search(a.graph, a.mesh, "sharding_propagation", params=P)
    with pytest.raises(ex.search.SearchError, match="annotations"):
        ex.robustness(prop)
    with pytest.raises(ex.search.SearchError, match="unknown knob"):
        ex.robustness(a, knobs=("warp",))
    with pytest.raises(ex.ExplorerError):
        ex.robustness("dp8")


@pytest.mark.slow  # ~60 ILP searches of GPT-2 on 32 devices
def test_a_plan_of_the_same_cost_is_not_a_flip():
    """Searched again at x1.004 of compute_efficiency, the ILP returned another plan of the
    same cost (a tie) for GPT-2 on 4 x 8: it was reported as 'fragile ... if
    compute_efficiency x1.00'. A rival now wins only by costing less."""
    import math

    import explorer as ex
    from explorer.search.breakdown import plan_breakdown
    from explorer.search.robustness import scaled

    mesh = ex.Mesh({"dp": 4, "tp": 8}, hardware=ex.hardware.load("a100-80g"))
    plan = ex.search(ex.models.build(ex.models.load("gpt2"), 8, 1024), mesh, method="ilp")
    r = ex.robustness(plan)
    for f in r.flips:
        if f.factor is None:
            continue
        assert abs(math.log(f.factor)) > 0.01, f
        p = scaled(plan.params, ((f.knob, f.factor),))
        rival, first = r.plans[f.rival], r.plans[0]
        a, b = (plan_breakdown(q._model, p, list(q._choice)).total for q in (first, rival))
        assert b < a, f
