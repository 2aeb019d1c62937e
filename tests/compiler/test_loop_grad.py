"""Gradients through a ``while`` on a tensor under ``@jit`` (a ``while_vjp`` node replaying the
loop) equal eager gradients at O0/O1/O2, for any trip count including zero."""

import numpy as np
import pytest

import explorer as ex


def grows(x, w, limit):
    steps = 0
    while x.sum() < limit:
        if x.max() > 2.0:
            x = x * w + 0.5
        else:
            x = x * 2.0
        steps = steps + 1
    return (x * x).sum() + steps


@pytest.mark.parametrize("level", ["O0", "O1", "O2"])
def test_while_gradient_matches_eager(level, rng):
    f = ex.jit(ex.grad(grows, argnums=(0, 1)), level=level)
    for _ in range(3):
        x = ex.tensor(rng.random(3) + 0.1)
        w = ex.tensor(1.1 + rng.random(3))
        want = ex.grad(grows, argnums=(0, 1))(x, w, 12.0)
        got = f(x, w, 12.0)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    assert len(f.cache) == 1 and "loop" in [n.op for n in f.lower(x, w, 12.0).ops]


def test_while_gradient_with_zero_trips(rng):
    x, w = ex.tensor(np.full(3, 5.0)), ex.tensor(np.ones(3))
    gx, gw = ex.jit(ex.grad(grows, argnums=(0, 1)))(x, w, 1.0)
    np.testing.assert_allclose(gx.numpy(), 2 * x.numpy())
    np.testing.assert_allclose(gw.numpy(), 0.0)
