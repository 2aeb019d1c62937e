"""A runner-up cheaper than the chosen strategy (Δ < 0, its neighbours as they are) says why
it lost: the explanation listed such runners-up with no word of why."""

from __future__ import annotations

import explorer as ex


def _gpt():
    cfg = ex.models.load("gpt2").replace(num_layers=2, hidden_size=64, num_heads=4,
                                         vocab_size=512, published_params=None)  # fmt: skip
    return ex.models.build(cfg, batch=8, seq=64)


def test_a_cheaper_runner_up_of_a_heuristic_plan_says_the_method_missed_it():
    graph, mesh = _gpt(), ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    plan = ex.search(graph, mesh, method="sharding_propagation")
    cheaper = [(e, a) for n in graph.ops for e in [plan.explain(n.name)]
               for a in e.runners_up if a.delta.total < 0]  # fmt: skip
    assert cheaper, "propagation kept no locally dearer strategy on this graph"
    e, a = cheaper[0]
    text = str(e)
    assert "lost although" in text and "sharding_propagation is a heuristic" in text
    assert f"{-a.delta.total:.4g} cheaper for this op alone" in e.why_not(a)


def test_an_exact_plan_has_no_cheaper_runner_up_and_no_excuse():
    graph, mesh = _gpt(), ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    plan = ex.search(graph, mesh, method="ilp")
    for n in graph.ops:
        e = plan.explain(n.name)
        assert all(a.delta.total >= -1e-12 for a in e.runners_up), str(e)
        assert "lost although" not in str(e)
