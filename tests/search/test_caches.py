"""Caches: every one is an explorer.memo Memo whose key holds every input.

The strategy cache used to key on everything but the node name while the in-op collectives
carried it, so ``norm2``'s strategies came back with collectives labelled ``norm1``.
"""

import pytest

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.memo import all_memos, clear_all
from explorer.search import CostParams

MESH = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")


def two_norms():
    b = GraphBuilder("norms")
    x = b.input("x", (8, 16, 64))
    y = b.op("layernorm", x, b.param("g1", (64,)), b.param("b1", (64,)), name="norm1")
    z = b.op("layernorm", y, b.param("g2", (64,)), b.param("b2", (64,)), name="norm2")
    return b.build([z])


def test_identical_nodes_get_collectives_labelled_with_their_own_name():
    g = two_norms()
    strats = ex.sharding.strategies(g, MESH)
    for name in ("norm1", "norm2"):
        labelled = [c for s in strats[name] for c in s.collectives]
        assert labelled, "splitting the normalised dim must issue statistic all-reduces"
        assert {c.tensor for c in labelled} == {name}
        assert all(s.node == name for s in strats[name])


def test_search_and_sharding_caches_are_named_memos_cleared_together():
    names = {m.name for m in all_memos()}
    for want in ("sharding.strategies", "sharding.collective", "sharding.redistribute.plan",
                 "sharding.redistribute.shortest_from", "sharding.redistribute.moves",
                 "search.pair_arrays", "search.planners", "search.recursive.cut_keys",
                 "search.recursive.round_cands", "search.recursive.structure"):  # fmt: skip
        assert want in names
    g = two_norms()
    warm = ex.search(g, MESH, "recursive_programming")
    assert any(len(m) for m in all_memos())
    clear_all()
    assert all(len(m) == 0 for m in all_memos())
    cold = ex.search(g, MESH, "recursive_programming")
    assert cold is not warm and cold._model is not warm._model  # the planner was rebuilt
    assert cold.cost.total == warm.cost.total
    assert {n: s.name for n, s in cold.assignment.items()} == {
        n: s.name for n, s in warm.assignment.items()
    }


def test_the_planner_memo_keys_on_graph_mesh_and_layer_reuse():
    g = two_norms()
    a = ex.search(g, MESH, "ilp", CostParams(beta_communication=1.0))
    b = ex.search(g, MESH, "ilp", CostParams(beta_communication=3.0))
    assert a._model is b._model  # same graph and mesh: tables re-weighed only
    other = ex.Mesh({"dp": 4, "tp": 2}, hardware="a100-80g")
    assert ex.search(g, other, "ilp")._model is not a._model
    # an equal-looking graph is another graph (graphs compare by identity)
    assert ex.search(two_norms(), MESH, "ilp")._model is not a._model


@pytest.mark.parametrize("method", ["dynamic_programming", "recursive_programming"])
def test_plans_are_the_same_whether_caches_are_warm_or_cold(method):
    cfg = ex.models.ModelConfig(name="t", arch="decoder", hidden_size=32, num_layers=4,
                                num_heads=4, vocab_size=64, max_seq_len=16, dtype="fp32")  # fmt: skip
    g = ex.models.build(cfg, batch=4, seq=16)
    warm = [ex.search(g, MESH, method) for _ in range(2)]
    clear_all()
    cold = ex.search(g, MESH, method)
    assert warm[0]._choice == warm[1]._choice == cold._choice
