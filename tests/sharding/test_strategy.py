"""Strategy enumeration: the generic einsum rule and the hand rules."""

from __future__ import annotations

import explorer as ex
from explorer.hardware import CollectiveKind
from explorer.sharding import Layout, node_strategies, strategies

from .helpers import MESH_1D, MESH_2D, op_graph


def _by_name(graph, node, mesh):
    return {s.name: s for s in node_strategies(graph, node, mesh)}


def test_matmul_strategies_golden():
    g, y = op_graph("matmul")  # "abk,kn->abn", x [8, 4, 8], w [8, 16]
    s = _by_name(g, y, MESH_1D)
    assert list(s) == ["replicated", "a=x", "b=x", "k=x", "n=x"]
    assert s["k=x"].out_layout == Layout(((), (), ()), ("x",))
    assert s["k=x"].in_layouts == (Layout(((), (), ("x",))), Layout((("x",), ())))
    assert s["n=x"].out_layout.format(g.node(y).type, "abn") == "fp32[A, B, N_x]"
    assert s["a=x"].is_data_parallel and not s["n=x"].is_data_parallel
    flops = g.node_flops(y)
    assert s["a=x"].local_flops == flops // 4 and s["replicated"].local_flops == flops
    assert s["n=x"].memory_bytes == 8 * 4 * 4 * 4 + 8 * 4 * 4  # local out + local weight
    assert s["n=x"].bytes_read == 8 * 4 * 8 * 4 + 8 * 4 * 4


def test_two_axes_order_and_divisibility():
    g, y = op_graph("matmul")
    names = list(_by_name(g, y, MESH_2D))
    assert "a=a+b" in names and "k=a+b" in names
    assert "b=a+b" not in names  # b has size 4, not divisible by 8
    assert names[0] == "replicated" and len(names) == len(set(names))


def test_sources_enumerate_every_layout():
    g, _ = op_graph("matmul")
    w = [s.out_layout.dims for s in node_strategies(g, "w", MESH_2D)]
    assert (("a", "b"), ()) in w and (("b",), ("a",)) in w and ((), ("a", "b")) in w
    assert all(not s.in_layouts for s in node_strategies(g, "w", MESH_2D))


def test_softmax_and_norm_stats_collectives():
    g, y = op_graph("softmax")  # [4, 8, 8]
    s = _by_name(g, y, MESH_1D)["d=x"]
    assert [c.kind for c in s.collectives] == [CollectiveKind.ALL_REDUCE] * 2
    assert s.collectives[0].size_bytes == 4 * 8 * 4  # one fp32 stat per row
    assert s.out_layout == Layout(((), (), ("x",)))
    g, y = op_graph("layernorm")
    ln = _by_name(g, y, MESH_1D)
    assert [c.size_bytes for c in ln["d=x"].collectives] == [2 * 4 * 8 * 4]
    assert ln["a=x"].collectives == ()


def test_cross_entropy_vocab_split_is_not_partial():
    g, y = op_graph("cross_entropy")
    s = _by_name(g, y, MESH_1D)["v=x"]
    assert s.out_layout == Layout(((), ())) and len(s.collectives) == 2


def test_embedding_vocab_split_is_partial():
    g, y = op_graph("embedding")  # "ab,vh->abh"
    s = _by_name(g, y, MESH_1D)["v=x"]
    assert s.out_layout.partial == ("x",) and s.collectives == ()


def test_topk_and_moe_hand_rules():
    g, y = op_graph("topk_gate")
    assert list(_by_name(g, y, MESH_1D)) == ["replicated", "t=x"]
    g, y = op_graph("moe_dispatch")  # "th,te->ech"
    assert list(_by_name(g, y, MESH_1D)) == ["replicated", "h=x", "e=x"]
    g, y = op_graph("moe_combine")  # "ech,te->th"
    s = _by_name(g, y, MESH_1D)
    assert list(s) == ["replicated", "e=x", "h=x"] and s["e=x"].out_layout.partial == ("x",)


def test_reshape_head_split_maps_to_outer_dim():
    g, y = op_graph("reshape")  # [4, 8, 16] -> [4, 8, 4, 4]: "abc->abce" after the rule
    s = _by_name(g, y, MESH_1D)
    assert "c=x" in s
    assert s["c=x"].out_layout == Layout(((), (), ("x",), ()))
    assert all("e=" not in name for name in s)
    assert "c=a+b" not in _by_name(g, y, MESH_2D)  # 4 heads cannot take 8 shards


def test_max_reduction_never_splits_reduced_dim():
    g, y = op_graph("max")
    assert "c=x" not in _by_name(g, y, MESH_1D)


def test_gpt_strategies_every_node_and_cached_layers_equal():
    cfg = ex.models.load("gpt2")
    g = ex.models.build(cfg.replace(num_layers=2), batch=8, seq=64)
    mesh = ex.Mesh({"dp": 2, "tp": 2, "pp": 2})
    st = strategies(g, mesh)
    assert set(st) == {n.name for n in g.nodes}
    a = [s.name for s in st["layers.0.attn.q"]]
    assert a == [s.name for s in st["layers.1.attn.q"]]
    assert all(s.node == "layers.1.attn.q" for s in st["layers.1.attn.q"])
