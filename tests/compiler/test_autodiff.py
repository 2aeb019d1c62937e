"""Gradients: eager tape vs finite differences, and eager vs @jit."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F


def numeric_grad(f, a, eps=1e-3):
    a = a.astype(np.float64)
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        p, m = a.copy(), a.copy()
        p[i] += eps
        m[i] -= eps
        g[i] = (f(p) - f(m)) / (2 * eps)
    return g


CASES = {
    "gelu_matmul": lambda x, w: F.gelu(x @ w).mean(),
    "softmax": lambda x, w: (F.softmax(x @ w) * (x @ w)).sum(),
    "tanh_exp": lambda x, w: (F.tanh(x) * F.exp(x * 0.1)).sum() + (w * w).sum(),
    "layernorm": lambda x, w: (F.layer_norm(x, w[:, 0] + 1.0, w[:, 1]) ** 2.0).mean(),
    "rmsnorm_silu": lambda x, w: F.silu(F.rms_norm(x, w[:, 0] + 1.0)).sum(),
    "broadcast_div": lambda x, w: (x / (w[:, 0] * w[:, 0] + 1.0)).sum(),
    "max_where": lambda x, w: F.where(x > 0, x, x * 0.5).max(axis=1).sum() + w.sum(),
    "einsum": lambda x, w: F.einsum("ij,jk->ik", x, w).sum(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_grad_matches_finite_differences(name, rng):
    f = CASES[name]
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 2)).astype(np.float32)
    gx, gw = ex.grad(f, argnums=(0, 1))(ex.tensor(x), ex.tensor(w))
    nx = numeric_grad(lambda a: float(f(ex.tensor(a), ex.tensor(w)).numpy()), x)
    nw = numeric_grad(lambda a: float(f(ex.tensor(x), ex.tensor(a)).numpy()), w)
    np.testing.assert_allclose(gx.numpy(), nx, rtol=2e-2, atol=2e-3)
    np.testing.assert_allclose(gw.numpy(), nw, rtol=2e-2, atol=2e-3)


def loss_xent(w, x, labels):
    return F.cross_entropy(x @ w, labels)


@pytest.mark.parametrize("level", ["O0", "O1", "O2"])
def test_jit_grad_equals_eager(level, rng):
    w = ex.tensor(rng.standard_normal((4, 5)))
    x = ex.tensor(rng.standard_normal((6, 4)))
    labels = ex.tensor(rng.integers(0, 5, 6), "int32")
    ge = ex.grad(loss_xent)(w, x, labels)
    gj = ex.jit(ex.grad(loss_xent), level=level)(w, x, labels)
    np.testing.assert_allclose(gj.numpy(), ge.numpy(), rtol=1e-5, atol=1e-6)


def test_grad_of_cell_is_dict(rng):
    lin = ex.nn.Linear(4, 3, seed=1)
    x = ex.tensor(rng.standard_normal((2, 4)))
    g = ex.grad(lambda m, x: (m(x) ** 2.0).sum())(lin, x)
    assert sorted(g) == ["b", "w"] and g["w"].shape == (4, 3)


def test_grad_needs_scalar(rng):
    with pytest.raises(ValueError, match="scalar"):
        ex.grad(lambda x: x * 2.0)(ex.tensor(np.ones(3)))
