"""@jit: source transformation, control flow, cache and recompilation, symbolic dims,
strict and lax syntax, the tracing path."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, JitSyntaxError, ShapeError


def branchy(x):
    if x.sum() > 0:
        y = x * 2.0
    else:
        y = -x
    return y


def looping(x, limit):
    steps = 0
    while x.sum() < limit:
        x = x * 2.0
        steps = steps + 1
    return x, steps


def unrolled(x, n):
    for i in range(n):
        if i % 2 == 0:  # a branch on a Python value: resolved at compile time
            x = x + 1.0
        else:
            x = x * 3.0
    return x


def helper(x):
    if x.max() > 1.0:
        x = x / 2.0
    return x


def calls_helper(x):
    return helper(x) + 1.0


@pytest.mark.parametrize("level", ["O0", "O1", "O2"])
def test_if_on_tensor_becomes_cond(level):
    f = ex.jit(branchy, level=level)
    for a in ([1.0, -3.0], [1.0, 3.0]):
        x = ex.tensor(np.array(a))
        np.testing.assert_allclose(f(x).numpy(), branchy(x).numpy())
    ops = [n.op for n in f.graph(ex.tensor(np.array([1.0, 3.0]))).ops]
    assert "cond" in ops


@pytest.mark.parametrize("level", ["O0", "O1", "O2"])
def test_while_on_tensor_becomes_loop(level):
    f = ex.jit(looping, level=level)
    for a in ([1.0, 1.0], [50.0, 60.0]):
        x = ex.tensor(np.array(a))
        out, steps = f(x, 100.0)
        ref, ref_steps = looping(x, 100.0)
        np.testing.assert_allclose(out.numpy(), ref.numpy())
        assert int(steps.numpy()) == ref_steps
    assert "loop" in [n.op for n in f.graph(ex.tensor(np.array([1.0, 1.0])), 100.0).ops]


def test_for_range_is_unrolled_and_python_branches_resolved():
    f = ex.jit(unrolled, level="O0")
    x = ex.tensor(np.array([1.0, 2.0]))
    np.testing.assert_allclose(f(x, 3).numpy(), unrolled(x, 3).numpy())
    ops = [n.op for n in f.graph(x, 3).ops]
    assert ops.count("add") == 2 and ops.count("scale") == 1 and "cond" not in ops


def test_called_functions_are_converted_and_inlined():
    f = ex.jit(calls_helper)
    for a in ([0.5, 0.2], [4.0, 2.0]):
        x = ex.tensor(np.array(a))
        np.testing.assert_allclose(f(x).numpy(), calls_helper(x).numpy())
    assert "cond" in [n.op for n in f.graph(ex.tensor(np.array([1.0, 2.0]))).ops]


def test_cache_per_signature_and_recompile_in_trace():
    f = ex.jit(branchy)
    with ex.trace.record() as rec:
        f(ex.tensor(np.ones(3)))
        f(ex.tensor(np.ones(3)) * 2.0)
        f(ex.tensor(np.ones(4)))
    kinds = [e.kind for e in rec.trace.events if e.kind in ("compile", "recompile")]
    assert kinds == ["compile", "recompile"]
    recompile = rec.trace.of_kind("recompile")[0]
    assert "(3,)" in recompile.detail and "(4,)" in recompile.detail
    assert len(f.cache) == 2


def mlp_fn(x, w):
    return F.relu(x @ w).sum(axis=1)


def test_symbolic_dim_serves_many_batch_sizes(rng):
    f = ex.jit(mlp_fn, dynamic={"x": {0: "B"}})
    w = ex.tensor(rng.standard_normal((4, 3)))
    with ex.trace.record() as rec:
        for b in (1, 5, 8):
            x = ex.tensor(rng.standard_normal((b, 4)))
            np.testing.assert_allclose(f(x, w).numpy(), mlp_fn(x, w).numpy(), rtol=1e-5)
    assert len(f.cache) == 1
    assert len(rec.trace.of_kind("compile")) == 1 and not rec.trace.of_kind("recompile")
    assert len(rec.trace.of_kind("bind")) == 3


def uses_try(x):
    try:
        y = x + 1.0
    except ValueError:
        y = x
    return y


def calls_numpy(x):
    v = x.numpy()
    return x * float(v.sum())


def test_strict_rejects_with_file_line_and_hint():
    with pytest.raises(JitSyntaxError) as e:
        ex.jit(uses_try)(ex.tensor(np.ones(2)))
    msg = str(e.value)
    assert "test_jit.py:" in msg and "try statement" in msg and "Hint:" in msg
    assert e.value.location.lineno == uses_try.__code__.co_firstlineno + 1


def test_strict_numpy_inside_is_an_error_at_that_line():
    with pytest.raises(JitSyntaxError) as e:
        ex.jit(calls_numpy)(ex.tensor(np.ones(2)))
    assert e.value.location.lineno == calls_numpy.__code__.co_firstlineno + 1
    assert ".numpy()" in str(e.value)


def test_lax_falls_back_to_eager_and_records_graph_break():
    f = ex.jit(calls_numpy, syntax="lax")
    x = ex.tensor(np.array([1.0, 2.0]))
    with ex.trace.record() as rec:
        out = f(x)
    np.testing.assert_allclose(out.numpy(), [3.0, 6.0])
    breaks = rec.trace.of_kind("graph_break")
    assert breaks and "test_jit.py" in breaks[0].detail


def bad_shapes(x, w):
    y = x @ w
    return y


def test_shape_mismatch_points_at_user_line():
    with pytest.raises(ShapeError) as e:
        ex.jit(bad_shapes)(ex.tensor(np.ones((2, 3))), ex.tensor(np.ones((4, 5))))
    assert e.value.location.lineno == bad_shapes.__code__.co_firstlineno + 1


def test_trace_capture_differs_on_tensor_branch():
    """capture="trace" bakes in the branch of the first call; the AST path does not."""
    traced = ex.jit(branchy, capture="trace")
    converted = ex.jit(branchy)
    pos, neg = ex.tensor(np.array([1.0, 3.0])), ex.tensor(np.array([-1.0, -3.0]))
    traced(pos)
    np.testing.assert_allclose(converted(neg).numpy(), [1.0, 3.0])
    np.testing.assert_allclose(traced(neg).numpy(), [-2.0, -6.0])  # the frozen then-branch


class Scaler(ex.nn.Cell):
    def __init__(self):
        self.lin = ex.nn.Linear(3, 3, seed=0)

    @ex.jit
    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            y = F.relu(y)
        return y


def test_jit_on_cell_method_reads_current_parameters(rng):
    m = Scaler()
    m.parameters()
    x = ex.tensor(rng.standard_normal((2, 3)))
    first = m(x).numpy()
    m.lin.b.assign(np.full(3, 5.0))
    second = m(x).numpy()
    assert not np.allclose(first, second)
    np.testing.assert_allclose(second, F.relu(m.lin(x)).numpy(), rtol=1e-5)
