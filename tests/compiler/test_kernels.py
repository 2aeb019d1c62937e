"""Executor kernels: the numpy-ufunc path of fused kernels agrees with numexpr, and the
fused attention-score kernel (scale + causal mask + softmax) with the eager ops."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, kernels, optimize
from explorer.compiler.passes import fuse_softmax
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
