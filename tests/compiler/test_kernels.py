"""Executor kernels: the numpy-ufunc path of fused kernels agrees with numexpr, and the
fused attention-score kernel (scale + causal mask + softmax) with the eager ops."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, kernels, optimize
from explorer.compiler.passes import fuse, fuse_softmax
from explorer.compiler.ufunc_program import UnsupportedExpr, compile_expr

EXPRS = [
    "(in0 + in1) / (k0 + exp(k1 * ((in0 + in1) + k2 * (in0 + in1) * (in0 + in1))))",
    "where(in0 > in1, in0, in1) - where(in0 < k0, in0, k0)",
    "where(in2, in0 * k1, in1) + in0 ** k0",
    "where(~(in0 >= in1), sqrt(abs(in0)), log(abs(in1) + k0))",
    "-(in0 - in1) * tanh(in0)",
]


@pytest.mark.parametrize("expr", EXPRS)
def test_ufunc_program_matches_numexpr(expr, rng):
    import numexpr

    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    c = rng.random((4, 5)) > 0.5
    consts = [2.0, -1.5, 0.25]
    k = compile_expr(expr, [np.float32, np.float32, np.bool_], consts, (4, 5), np.float32)
    local = {"in0": a, "in1": b, "in2": c} | {f"k{i}": np.float32(v) for i, v in enumerate(consts)}
    want = numexpr.evaluate(expr, local_dict=local)
    np.testing.assert_allclose(k(a, b, c), want, rtol=1e-5, atol=1e-6)
    out = a.copy()  # written in place over its first operand, as the memory plan may ask
    np.testing.assert_allclose(k(out, b, c, out=out), want, rtol=1e-5, atol=1e-6)


def test_ufunc_program_rejects_what_it_does_not_know():
    with pytest.raises(UnsupportedExpr):
        compile_expr("arctan2(in0, in1)", [np.float32] * 2, [], (2,), np.float32)


def gelu_block(x, b, mask, r):
    return F.where(mask, F.gelu(x + b), 0.0) + r


@pytest.mark.parametrize("numel_limit", [0, 1 << 30])
def test_fused_kernel_paths_agree_with_eager(numel_limit, rng, monkeypatch):
    monkeypatch.setattr(kernels, "UFUNC_MAX_NUMEL", numel_limit)  # 0: numexpr, else ufuncs
    args = (ex.tensor(rng.standard_normal((8, 16))), ex.tensor(rng.standard_normal(16)),
            ex.tensor(rng.random((8, 16)) > 0.3), ex.tensor(rng.standard_normal((8, 16))))  # fmt: skip
    got = ex.jit(gelu_block)(*args).numpy()
    np.testing.assert_allclose(got, gelu_block(*args).numpy(), rtol=1e-5, atol=1e-6)


def scores(q, k):
    s = F.einsum("bsd,btd->bst", q, k) * 0.125
    return F.softmax(F.causal_mask(s))


def test_scale_mask_softmax_fuse_into_one_kernel(rng):
    q, k = (ex.tensor(rng.standard_normal((2, 5, 4))) for _ in range(2))
    f = ex.jit(scores)
    g = f.lower(q, k)
    assert [n.op for n in g.ops] == ["einsum", "masked_softmax"]
    fused = g.ops[1]
    assert fused.attr("ops") == ("scale", "causal_mask", "softmax")
    assert any(s.pass_name == "fuse_softmax" for s in f.steps(q, k))
    np.testing.assert_allclose(f(q, k).numpy(), scores(q, k).numpy(), rtol=1e-5, atol=1e-6)
    reference = optimize(f.graph(q, k), "O1")[0]
    assert not fuse_softmax(fuse_softmax(reference)[0])[1]  # nothing left to fuse


def test_masked_softmax_gradient_under_jit(rng):
    q, k = (ex.tensor(rng.standard_normal((1, 4, 3))) for _ in range(2))

    def loss(q, k):
        return scores(q, k).sum()

    eager = ex.grad(loss)(q, k)
    compiled = ex.jit(ex.grad(loss))(q, k)
    np.testing.assert_allclose(compiled.numpy(), eager.numpy(), rtol=1e-4, atol=1e-6)


# --- a fair eager baseline: eager runs the kernels @jit runs ---------------------------


def test_eager_gelu_is_the_jit_kernel_in_fp32(rng):
    from explorer.ir import activations, opdef

    x = rng.standard_normal((64, 32)).astype(np.float32)
    eager_impl = opdef.get("gelu").impl(x)
    assert eager_impl.dtype == np.float32  # no float64 maths on fp32 data
    node = ex.jit(F.gelu, level="O0", capture="trace").lower(ex.tensor(x)).ops[0]
    jit_kernel = kernels.make_kernel(node, (node.type,))
    np.testing.assert_array_equal(eager_impl, jit_kernel(x))
    np.testing.assert_array_equal(F.gelu(ex.tensor(x)).numpy(), activations.gelu(x))
    # the tanh form itself, against float64 maths: the fp32 kernel is within fp32 rounding
    x64 = x.astype(np.float64)
    ref = 0.5 * x64 * (1 + np.tanh(activations.GELU_C * (x64 + activations.GELU_K * x64**3)))
    np.testing.assert_allclose(eager_impl, ref, rtol=1e-6, atol=1e-7)


def test_gelu_fused_expression_is_the_same_function(rng):
    from explorer.ir import activations

    x = rng.standard_normal(1000).astype(np.float64)
    expr = activations.gelu_expression("x", repr)
    got = eval(expr, {"exp": np.exp, "x": x})  # noqa: S307  (our own generated expression)
    np.testing.assert_allclose(got, activations.gelu(x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    ("eq", "sa", "sb"),
    [("bsnd,btnd->bnst", (2, 5, 3, 4), (2, 7, 3, 4)), ("bnst,btnd->bsnd", (2, 3, 5, 7), (2, 7, 3, 4)),
     ("ij,jk->ik", (6, 5), (5, 3))],
)  # fmt: skip
def test_eager_einsum_runs_the_jit_contraction(eq, sa, sb, rng):
    from explorer.ir import opdef
    from explorer.ir.contraction import einsum_as_matmul

    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    eager = opdef.get("einsum").impl(a, b, eq=eq)
    np.testing.assert_array_equal(eager, einsum_as_matmul(eq, sa, sb)(a, b))
    np.testing.assert_allclose(eager, np.einsum(eq, a, b), rtol=1e-5, atol=1e-5)


def bias_gelu_mask(x, b, mask, r):
    return F.where(mask, F.gelu(x + b), 0.0) + r


def test_large_fused_kernel_runs_in_blocks_with_a_remainder(rng):
    shape = (1007, 300)  # 302,100 elements: blocked (54 rows a block, 35 in the last)
    args = (ex.tensor(rng.standard_normal(shape)), ex.tensor(rng.standard_normal(300)),
            ex.tensor(rng.random(shape) > 0.2), ex.tensor(rng.standard_normal(shape)))  # fmt: skip
    f = ex.jit(bias_gelu_mask)
    g = f.lower(*args)
    node = next(n for n in g.ops if n.op == "fused")
    k = kernels.make_kernel(node, g.input_types(node.name))
    assert k.__name__ == "k_blocked"
    assert shape[0] % (kernels.BLOCK_NUMEL // shape[1]) != 0  # the remainder block runs
    np.testing.assert_allclose(f(*args).numpy(), bias_gelu_mask(*args).numpy(), rtol=1e-5,
                               atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("rows", [1003, 1024])
def test_batch_one_fused_kernel_runs_in_blocks_along_its_rows(rows, rng):
    """A ``(1, rows, 300)`` output (batch 1) is cut along its rows, not handed to numexpr;
    inputs of rank 3 and 2 span the rows, a ``(1, 1, 300)`` bias and a ``(300,)`` one
    broadcast; ragged rows run a remainder block."""
    b = ex.GraphBuilder("g")
    ins = [b.input("x", (1, rows, 300)), b.input("y", (rows, 300)),
           b.input("c", (1, 1, 300)), b.input("d", (300,))]  # fmt: skip
    g = fuse(b.build([b.op("mul", b.op("add", b.op("add", ins[0], ins[1]), ins[2]),
                                 b.op("tanh", ins[3]))]))[0]  # fmt: skip
    node = next(n for n in g.ops if n.op == "fused")
    k = kernels.make_kernel(node, g.input_types(node.name))
    assert k.__name__ == "k_blocked"
    xs = [rng.standard_normal(t.shape).astype(np.float32) for t in g.input_types(node.name)]
    got = k(*xs, out=np.full((1, rows, 300), np.nan, np.float32))
    local = {f"in{i}": x for i, x in enumerate(xs)}
    want = eval(dict(node.attrs)["expr"], {"tanh": np.tanh}, local)  # the region's own expr
    np.testing.assert_allclose(got, np.broadcast_to(want, (1, rows, 300)), rtol=1e-6,
                               atol=1e-6)  # fmt: skip


def test_gelu_is_defined_once():
    from pathlib import Path

    root = Path(ex.__file__).parent
    holders = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if "0.044715" in p.read_text())  # fmt: skip
    assert holders == ["ir/activations.py"]


def test_gelu_grad_kernel_matches_the_registry_impl(rng):
    from explorer.ir.activations import gelu_grad

    b = ex.GraphBuilder("g")
    x, g = b.input("x", (5, 7)), b.input("gy", (5, 7))
    graph = b.build([b.op("gelu_grad", x, g)])
    node = graph.ops[0]
    k = kernels.make_kernel(node, graph.input_types(node.name))
    xs = (rng.standard_normal((5, 7)) * 3).astype(np.float32)
    xs[0, :3] = [0.0, -30.0, 30.0]
    gs = rng.standard_normal((5, 7)).astype(np.float32)
    want = gelu_grad(xs, gs)
    np.testing.assert_allclose(k(xs, gs), want, rtol=1e-5, atol=1e-6)
    out = np.empty_like(xs)
    assert k(xs, gs, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
