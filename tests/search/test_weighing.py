"""One weighing formula: the solver's objective is the plan's reported cost.

``CostModel.weigh`` (the solver's cost vectors and matrices) and ``plan_breakdown`` /
``explain`` (what a plan shows) both sum ``node_terms`` and ``edge_terms``; the tolerance
1e-9 relative covers summation order only.
"""

import pytest

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.search import CostParams, Planner
from explorer.search.breakdown import edge_breakdown, node_breakdown

MESH = ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g")
# No tie-break: the solver's objective then has no epsilon term beside the costs.
PARAMS = {
    "roofline": CostParams(prefer_data_parallel_on_ties=False),
    "roofline-inference": CostParams(
        prefer_data_parallel_on_ties=False, training=False, memory_weight_per_byte=1e-12
    ),  # fmt: skip
    "mindspore": CostParams.mindspore(prefer_data_parallel_on_ties=False),
}


def two_matmuls():
    b = GraphBuilder("mlp2")
    x = b.input("x", (8, 16))
    h = b.op("relu", b.op("matmul", x, b.param("w1", (16, 64)), name="fc1"), name="act")
    return b.build([b.op("matmul", h, b.param("w2", (64, 16)), name="fc2")])


def four_layers():
    cfg = ex.models.ModelConfig(name="t", arch="decoder", hidden_size=32, num_layers=4,
                                num_heads=4, vocab_size=64, max_seq_len=16, dtype="fp32")  # fmt: skip
    return ex.models.build(cfg, batch=4, seq=16)


@pytest.mark.parametrize("params", list(PARAMS))
@pytest.mark.parametrize(
    "graph, method",
    [(two_matmuls, "exhaustive"), (two_matmuls, "ilp"), (four_layers, "ilp"),
     (four_layers, "dynamic_programming"), (four_layers, "recursive_programming")],
    ids=lambda v: getattr(v, "__name__", v),
)  # fmt: skip
def test_solver_objective_equals_reported_cost(graph, method, params):
    g = graph()
    planner = Planner(g, MESH)
    plan = planner.search(method, PARAMS[params])
    assert plan.cost.total == pytest.approx(plan.diagnostics["objective"], rel=1e-9)
    full = planner.full_model  # the objective of the expanded plan on the whole graph
    assert plan.cost.total == pytest.approx(full.total(full.weigh(plan.params), plan._choice),
                                            rel=1e-9)  # fmt: skip


def test_breakdown_terms_are_the_weighed_entries():
    g = four_layers()
    m = Planner(g, MESH, reuse_layers=False).model
    for p in PARAMS.values():
        w = m.weigh(p)
        for i in range(0, len(m.names), 7):
            for k in range(len(m.nodes[i].strategies)):
                bd = node_breakdown(m, p, i, k)
                assert bd.total == pytest.approx(float(w.node_cost[i][k]), rel=1e-12, abs=0)
        for e in range(0, len(m.edges), 5):
            ku, kv = w.edge_cost[e].shape
            for a in range(ku):
                b = (a * 3) % kv
                if w.edge_cost[e][a, b] != float("inf"):
                    bd = edge_breakdown(m, p, e, a, b)
                    assert bd.total == pytest.approx(float(w.edge_cost[e][a, b]), rel=1e-12)


def test_explain_chosen_total_is_the_objective_around_the_node():
    g = two_matmuls()
    plan = ex.search(g, MESH, "exhaustive", PARAMS["mindspore"])
    why = plan.explain("act", k=10)
    # act's own cost plus its two edges, neighbours fixed: every alternative is no cheaper
    assert all(a.delta.total >= -1e-9 * why.chosen.cost.total for a in why.runners_up)
