"""The graph IR: types, registry, validation, text form, networkx export."""

import networkx as nx
import numpy as np
import pytest

import explorer as ex
from explorer.ir import DType, Graph, GraphBuilder, IRError, Node, OpGroup, TensorType, get


def tiny() -> Graph:
    b = GraphBuilder("tiny")
    x = b.input("x", (2, 8))
    with b.scope("fc1"):
        h = b.op("gelu", b.op("matmul", x, b.param("w", (8, 16)), name="mm"), name="act")
    with b.scope("fc2"):
        y = b.op("add", b.op("matmul", h, b.param("w", (16, 4)), name="mm"),
                 b.param("b", (4,)), name="out")  # fmt: skip
    return b.build([y])


GOLDEN_TINY = """\
graph tiny {
  %x : fp32[2, 8] = input()
  %fc1.w : fp32[8, 16] = param()
  %fc1.mm : fp32[2, 16] = matmul(%x, %fc1.w)  # 512 FLOP
  %fc1.act : fp32[2, 16] = gelu(%fc1.mm)  # 256 FLOP
  %fc2.w : fp32[16, 4] = param()
  %fc2.mm : fp32[2, 4] = matmul(%fc1.act, %fc2.w)  # 256 FLOP
  %fc2.b : fp32[4] = param()
  %fc2.out : fp32[2, 4] = add(%fc2.mm, %fc2.b)  # 8 FLOP
  return %fc2.out
}"""


def test_dtype_sizes_and_parse():
    sizes = {d.value: d.itemsize for d in DType}
    assert sizes == {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int32": 4, "int64": 8, "bool": 1}
    with pytest.raises(ValueError, match="bf16"):
        DType.parse("bf61")


def test_tensor_type():
    t = TensorType((8, 1024), DType.BF16)
    assert (str(t), t.nbytes, t.numel, t.rank) == ("bf16[8, 1024]", 16384, 8192, 2)
    with pytest.raises(ValueError, match="dim -1"):
        TensorType((2, -1))


def test_golden_text_form():
    assert str(tiny()) == GOLDEN_TINY


def test_golden_attention_fragment():
    b = GraphBuilder("attn", dtype="bf16")
    q = b.input("q", (2, 4, 2, 8))
    k = b.input("k", (2, 4, 2, 8))
    s = b.op("einsum", q, k, name="scores", eq="bsnd,btnd->bnst")
    p = b.op("softmax", b.op("causal_mask", b.op("scale", s, factor=0.25)), name="probs")
    m = b.op("reshape", q, name="merge", shape=(2, 4, 16))
    g = b.build([p, m])
    assert str(g) == (
        "graph attn {\n"
        "  %q : bf16[2, 4, 2, 8] = input()\n"
        "  %k : bf16[2, 4, 2, 8] = input()\n"
        "  %scores : bf16[2, 2, 4, 4] = einsum(%q, %k, eq='bsnd,btnd->bnst')  # 1.02 kFLOP\n"
        "  %scale : bf16[2, 2, 4, 4] = scale(%scores, factor=0.25)  # 64 FLOP\n"
        "  %causal_mask : bf16[2, 2, 4, 4] = causal_mask(%scale)  # 64 FLOP\n"
        "  %probs : bf16[2, 2, 4, 4] = softmax(%causal_mask)  # 320 FLOP\n"
        "  %merge : bf16[2, 4, 16] = reshape(%q, shape=(2, 4, 16))\n"
        "  return %probs, %merge\n"
        "}"
    )
    assert g.signature("merge") == "abcd->abe"
    assert g.signature("scores") == "bsnd,btnd->bnst"


def test_signatures_and_flops():
    g = tiny()
    assert g.signature("fc1.mm") == "ak,kn->an"
    assert g.signature("fc2.out") == "ab,b->ab"
    assert g.flops() == 512 + 256 + 256 + 8
    assert g.num_params() == 8 * 16 + 16 * 4 + 4
    assert g.node_bytes("fc1.mm") == ((2 * 8 + 8 * 16) * 4, 2 * 16 * 4)
    assert g.group("fc1.act") is OpGroup.ELEMENTWISE
    assert g.consumers("fc1.mm") == ("fc1.act",)
    assert [n.name for n in g.parameters] == ["fc1.w", "fc2.w", "fc2.b"]
    assert g.scopes() == ("fc1", "fc2")


def test_broadcast_size_one_dims_get_their_own_letter():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4, 4))
    m = b.input("m", (1, 1, 4, 4))
    g = b.build([b.op("add", x, m)])
    assert g.signature("add") == "abcd,efcd->abcd"


def test_numpy_impls_match_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5))
    np.testing.assert_allclose(get("softmax").impl(x).sum(-1), np.ones(3))
    ln = get("layernorm").impl(x, np.ones(5), np.zeros(5))
    np.testing.assert_allclose(ln.mean(-1), 0, atol=1e-12)
    labels = np.array([0, 4, 2])
    ce = get("cross_entropy").impl(x, labels)
    ref = -np.log(np.exp(x) / np.exp(x).sum(-1, keepdims=True))[np.arange(3), labels]
    np.testing.assert_allclose(ce, ref)
    gate = get("topk_gate").impl(rng.normal(size=(6, 4)), k=2)
    assert ((gate > 0).sum(-1) == 2).all() and np.allclose(gate.sum(-1), 1)
    tokens = rng.normal(size=(6, 3))
    disp = get("moe_dispatch").impl(tokens, gate, capacity=6)
    # identity experts + combine gives back the tokens (weights sum to one)
    np.testing.assert_allclose(get("moe_combine").impl(disp, gate), tokens)


def test_to_networkx():
    g = tiny()
    nxg = g.to_networkx()
    assert isinstance(nxg, nx.DiGraph)
    assert nxg.number_of_nodes() == len(g)
    assert nxg.nodes["fc1.mm"]["group"] == "contraction"
    assert nxg.edges["fc1.mm", "fc1.act"]["bytes"] == 2 * 16 * 4
    assert list(nx.topological_sort(nxg))[0] == "x"


def test_validation_names_the_node():
    t = TensorType((2, 3))
    with pytest.raises(IRError, match=r"%y.*declared fp32\[2, 4\]"):
        Graph((Node("x", "input", (), t), Node("y", "relu", ("x",), TensorType((2, 4)))), ("y",))
    with pytest.raises(IRError, match=r"%y \(relu\) uses %z, which is defined nowhere"):
        Graph((Node("x", "input", (), t), Node("y", "relu", ("z",), t)), ("y",))
    with pytest.raises(IRError, match="defined twice"):
        Graph((Node("x", "input", (), t), Node("x", "input", (), t)), ("x",))


def test_shape_mismatch_names_node_and_dims():
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    w = b.param("w", (9, 4))
    with pytest.raises(IRError, match=r"%matmul = matmul\(%x: fp32\[2, 8\], %w: fp32\[9, 4\]\)"):
        b.op("matmul", x, w)


def test_unknown_op_lists_close_matches():
    with pytest.raises(IRError, match="Did you mean 'matmul'"):
        get("matmull")
    b = GraphBuilder()
    x = b.input("x", (2,))
    with pytest.raises(IRError, match="no attribute 'axis'"):
        b.op("softmax", x, axis=0)


def test_reshape_element_count_error():
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    with pytest.raises(IRError, match="element counts must match"):
        b.op("reshape", x, shape=(5, 2))


def test_entry_point_summary():
    g = ex.models.build(ex.models.load("gpt2"), batch=2, seq=64)
    s = g.summary()
    assert s["params"] == 124_439_808
    assert s["ops_by_group"]["contraction"] == 12 * (6 + 2) + 1  # 6 matmuls, 2 einsums, head


# --- the interpreter: the reference run's and the SPMD executor's walk over the IR ---


def _mlp() -> tuple[Graph, dict[str, np.ndarray]]:
    b = GraphBuilder("mlp")
    x, w1, w2 = b.input("x", (3, 4)), b.param("w1", (4, 5)), b.param("w2", (5, 5))
    h = b.op("relu", b.op("matmul", x, w1, name="mm1"), name="h")
    y = b.op("add", b.op("matmul", h, w2, name="mm2"), b.op("neg", h, name="negh"), name="y")
    rng = np.random.default_rng(1)
    vals = {"x": rng.standard_normal((3, 4)), "w1": rng.standard_normal((4, 5)),
            "w2": rng.standard_normal((5, 5))}  # fmt: skip
    return b.build([b.op("sum", y, name="total", axes=(1,))]), vals


def _chain(n: int) -> Graph:
    b = GraphBuilder("chain")
    v = b.input("x", (2,))
    for i in range(n):
        v = b.op("neg", v, name=f"n{i}")
    return b.build([v])


def test_graph_run_is_the_numpy_program():
    g, v = _mlp()
    h = np.maximum(v["x"] @ v["w1"], 0)
    want = (h @ v["w2"] + -h).sum(axis=1)
    np.testing.assert_allclose(g.run(v)["total"], want, rtol=1e-12)
    assert list(g.run(v)) == ["total"]


def test_run_visits_nodes_in_graph_order_through_the_hooks():
    g, v = _mlp()
    seen: list[tuple[str, str]] = []

    class Recording(ex.ir.Interpreter):
        def placeholder(self, node):
            seen.append(("placeholder", node.name))
            return super().placeholder(node)

        def call_op(self, node, args):
            seen.append(("call_op", node.name))
            return super().call_op(node, args)

    Recording(g).run(v)
    assert [name for _, name in seen] == [n.name for n in g.nodes]
    assert {kind for kind, name in seen if g.node(name).is_source} == {"placeholder"}


def test_kernel_tables_override_the_registry_impl():
    g, v = _mlp()

    class Doubling(ex.ir.Interpreter):
        kernels = {"relu": lambda node, args: 2 * np.maximum(args[0], 0)}

    h = 2 * np.maximum(v["x"] @ v["w1"], 0)
    np.testing.assert_allclose(Doubling(g).run(v)["total"], (h @ v["w2"] - h).sum(axis=1))
    # a table given to the constructor wins over the class table
    zero = Doubling(g, kernels={"relu": lambda node, args: np.zeros_like(args[0])})
    np.testing.assert_array_equal(zero.run(v)["total"], np.zeros(3))


def test_free_dead_keeps_only_live_values():
    g = _chain(50)
    peak = []

    class Watching(ex.ir.Interpreter):
        def run_node(self, node, env):
            peak.append(len(env))
            return super().run_node(node, env)

    w = Watching(g, free_dead=True)
    out = w.run({"x": np.array([1.0, -2.0])})
    assert max(peak) == 1  # a chain holds one value between nodes
    assert list(w.env) == ["n49"] and out["n49"].tolist() == [1.0, -2.0]
    full = ex.ir.Interpreter(g)
    full.run({"x": np.array([1.0, -2.0])})
    assert list(full.env) == [n.name for n in g.nodes]


def test_deep_graph_runs_without_recursion():
    g = _chain(3000)  # deeper than Python's default recursion limit of 1000
    assert g.run({"x": np.array([1.0, 2.0])})["n2999"].tolist() == [1.0, 2.0]


def test_interpreter_errors_name_the_node_or_input():
    g, v = _mlp()
    with pytest.raises(IRError, match=r"needs a value for %w2; pass one array"):
        g.run({"x": v["x"], "w1": v["w1"]})
    with pytest.raises(IRError, match=r"'bias'.*not an input or param.*%w1, %w2, %x"):
        g.run({**v, "bias": np.zeros(2)})
    with pytest.raises(IRError, match=r"node %mm1 = matmul\(%x: \(3, 3\), %w1: \(4, 5\)\)") as e:
        g.run({**v, "x": np.zeros((3, 3))})
    assert isinstance(e.value.__cause__, ValueError)


def test_run_graph_uses_the_interpreter():
    from explorer.ir.ops_tensor import run_graph

    g, v = _mlp()
    np.testing.assert_array_equal(run_graph(g, v)[0], ex.ir.Interpreter(g).run(v)["total"])
