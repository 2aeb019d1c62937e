"""Gradients through data-dependent control flow under @jit: a tensor
``if`` is a ``cond`` forwards and backwards (only the taken branch runs), a tensor
``while``'s gradient costs O(n) body runs (counted from the trace's kernel events), and both
equal eager autodiff and finite differences. Unsupported control flow is one named error."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F
from explorer.compiler.errors import JitSyntaxError


def _runs(rec, op: str) -> int:
    """Kernel events that computed ``op`` (alone or inside a fused kernel)."""
    return sum(
        1 for e in rec.trace.events if e.kind == "kernel" and (e.name == op or op in e.replaced)
    )


def _fd(fn, args, k, eps=1e-3):
    """Central finite differences of the scalar ``fn`` w.r.t. argument ``k`` (float64)."""
    base = [np.asarray(a.numpy(), np.float64) for a in args]
    out = np.zeros_like(base[k])
    for i in np.ndindex(base[k].shape):
        vals = []
        for s in (1.0, -1.0):
            moved = [b.copy() for b in base]
            moved[k][i] += s * eps
            vals.append(float(fn(*[ex.tensor(m) for m in moved]).numpy()))
        out[i] = (vals[0] - vals[1]) / (2 * eps)
    return out


# --- if ----------------------------------------------------------------------------------------


def pick(x, w):
    if (x * w).sum() > 0:
        y = F.exp(x * w)
    else:
        y = F.tanh(x) * w
    return (y * y).sum()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_gradient_runs_only_the_taken_branch(sign):
    f = ex.jit(ex.grad(pick, argnums=(0, 1)), level="O1")
    x, w = ex.tensor(sign * np.linspace(0.1, 0.5, 4)), ex.tensor(np.full(4, 0.9))
    f(x, w)  # compile outside the record
    with ex.trace.record("if") as rec:
        got = f(x, w)
    taken, other = ("exp", "tanh") if sign > 0 else ("tanh", "exp")
    assert _runs(rec, other) == 0
    assert _runs(rec, taken) == 2  # the forward cond, and the backward cond's recompute
    ops = [n.op for n in f.lower(x, w).ops]
    assert "cond" in ops and "where" not in ops
    want = ex.grad(pick, argnums=(0, 1))(x, w)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.numpy(), _fd(pick, (x, w), k), rtol=2e-2, atol=2e-3)


def nested(x, w):
    total = x.sum() * 0.0
    if x.sum() > 1.0:
        if w.max() > 0.5:
            total = (x * w * w).sum()
        else:
            total = (x + w).sum()
    else:
        total = (F.tanh(x * w)).sum()
    return total


def test_nested_if_gradient_equals_eager_and_finite_differences(rng):
    f = ex.jit(ex.grad(nested, argnums=(0, 1)))
    for scale_x, scale_w in ((1.0, 1.0), (1.0, 0.1), (0.05, 1.0)):
        x = ex.tensor(scale_x * (rng.random(3) + 0.2))
        w = ex.tensor(scale_w * (rng.random(3) + 0.5))
        got = f(x, w)
        want = ex.grad(nested, argnums=(0, 1))(x, w)
        for k, (a, b) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(a.numpy(), _fd(nested, (x, w), k), rtol=2e-2, atol=2e-3)
    assert len(f.cache) == 1


# --- while ---------------------------------------------------------------------------------------


def walk(x, w, n):
    i = ex.tensor(np.array(0))
    while i < n:
        x = F.tanh(x * w) + 0.1
        i = i + 1
    return (x * x).sum()


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_while_gradient_body_runs_are_linear(level):
    f = ex.jit(ex.grad(walk, argnums=(0, 1)), level=level)
    x, w = ex.tensor(np.linspace(0.1, 0.5, 4)), ex.tensor(np.full(4, 0.9))
    for n in (0, 1, 2, 4, 8, 16):
        trips = ex.tensor(np.array(n))
        f(x, w, trips)
        with ex.trace.record("while") as rec:
            got = f(x, w, trips)
        # forward loop n + replay n + one body inside each of the n VJPs (was n(n-1)/2 + 2n)
        assert _runs(rec, "tanh") == 3 * n
        want = ex.grad(walk, argnums=(0, 1))(x, w, trips)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert len(f.cache) == 1


def test_while_gradient_equals_finite_differences():
    x, w = ex.tensor(np.linspace(0.1, 0.5, 3)), ex.tensor(np.array([0.9, 1.1, 0.7]))
    trips = ex.tensor(np.array(5))
    got = ex.jit(ex.grad(walk, argnums=(0, 1)))(x, w, trips)
    for k in (0, 1):
        fd = _fd(lambda a, b: walk(a, b, trips), (x, w), k)
        np.testing.assert_allclose(got[k].numpy(), fd, rtol=2e-2, atol=2e-3)


def decay(x, w):
    while x.sum() > 1.0:
        if x.max() > 2.0:
            x = x * w
        else:
            x = x * 0.5
    return (x * x).sum()


def test_while_with_if_inside_gradient_equals_eager(rng):
    f = ex.jit(ex.grad(decay, argnums=(0, 1)))
    for _ in range(3):
        x, w = ex.tensor(rng.random(3) * 4 + 0.5), ex.tensor(rng.random(3) * 0.3 + 0.5)
        for a, b in zip(f(x, w), ex.grad(decay, argnums=(0, 1))(x, w), strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    assert "while_vjp" in [n.op for n in f.lower(x, w).ops]


# --- unsupported control flow ---------------------------------------------------------------------


def break_in_while(x):
    while x.sum() < 10.0:
        x = x * 2.0
        if x.max() > 3.0:
            break
    return x


def return_in_if(x):
    if x.sum() > 0:
        return x
    return -x


@pytest.mark.parametrize(
    ("fn", "construct", "fix"),
    [
        (break_in_while, "a break in a `while` on a tensor", "loop `while go > 0`"),
        (return_in_if, "a return inside an `if` on a tensor", "in both branches"),
    ],
)
def test_unsupported_control_flow_is_one_named_error(fn, construct, fix):
    with pytest.raises(JitSyntaxError) as info:
        ex.jit(fn)(ex.tensor(np.ones(3)))
    msg = str(info.value)
    line = fn.__code__.co_firstlineno + 1
    assert construct in msg and f"(line {line})" in msg and fix in msg
    assert f"test_control_grad.py:{line}" in msg


# --- gradients of gradients ------------------------------------------------------------------


def cube_or_double(x):
    if x.sum() > 0:
        y = x * x * x
    else:
        y = x * 2.0
    return y.sum()


def three_squarings(x):
    i = ex.tensor(np.array(0))
    while i < 3:
        x = x * x * 0.5 + 0.1
        i = i + 1
    return x.sum()


@pytest.mark.parametrize("fn", [cube_or_double, three_squarings])
def test_second_order_gradient_equals_eager(fn):
    def slope_sum(x):
        return ex.grad(fn)(x).sum()

    for x in (np.array([0.5, 0.7]), np.array([-0.5, -0.7])):
        x = ex.tensor(x)
        want = ex.grad(slope_sum)(x).numpy()
        got = ex.jit(ex.grad(slope_sum))(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        if x.numpy().sum() > 0:  # x*x*x and the squarings: a real second derivative
            assert np.abs(want).min() > 0.05
