"""Every way @jit differs from eager, one test each."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, JitSyntaxError

SCALE = 2.0


def uses_global(x):
    return x * SCALE


def test_python_globals_are_frozen_at_compile_time():
    global SCALE
    f = ex.jit(uses_global)
    x = ex.tensor(np.ones(2))
    f(x)
    SCALE = 3.0
    try:
        np.testing.assert_allclose(uses_global(x).numpy(), 3.0)  # eager sees the new value
        np.testing.assert_allclose(f(x).numpy(), 2.0)  # jit keeps the compiled constant
    finally:
        SCALE = 2.0


def scaled(x, k):
    return x * k


def test_python_scalar_arguments_are_constants_and_recompile():
    f = ex.jit(scaled)
    x = ex.tensor(np.ones(2))
    with ex.trace.record() as rec:
        f(x, 2.0)
        f(x, 3.0)
    assert len(f.cache) == 2 and len(rec.trace.of_kind("recompile")) == 1


def test_closure_arrays_are_frozen():
    w = ex.tensor(np.ones(2))

    def add_w(x):
        return x + w

    f = ex.jit(add_w)
    f(ex.tensor(np.zeros(2)))
    w.data[:] = 5.0  # mutate the captured array
    np.testing.assert_allclose(f(ex.tensor(np.zeros(2))).numpy(), 1.0)


def prints(x):
    print("hello")
    return x


def test_print_is_a_side_effect_rejected_in_strict_mode():
    with pytest.raises(JitSyntaxError, match="print"):
        ex.jit(prints)(ex.tensor(np.ones(1)))


def test_print_in_lax_mode_runs_eagerly_every_call(capsys):
    f = ex.jit(prints, syntax="lax")
    f(ex.tensor(np.ones(1)))
    f(ex.tensor(np.ones(1)))
    assert capsys.readouterr().out.count("hello") == 2


LOG: list = []


def appends(x):
    LOG.append(1)
    return x + 1.0


def test_mutating_outside_objects_is_rejected():
    with pytest.raises(JitSyntaxError, match="append"):
        ex.jit(appends)(ex.tensor(np.ones(1)))


def to_numpy(x):
    return ex.tensor(x.numpy() * 2)


def test_numpy_inside_compiled_function_is_a_graph_break():
    with pytest.raises(JitSyntaxError, match="numpy"):
        ex.jit(to_numpy)(ex.tensor(np.ones(2)))
    out = ex.jit(to_numpy, syntax="lax")(ex.tensor(np.ones(2)))
    np.testing.assert_allclose(out.numpy(), 2.0)


def early_return(x):
    if x.sum() > 0:
        return x
    return -x


def test_return_inside_tensor_if_is_rejected():
    with pytest.raises(JitSyntaxError) as e:
        ex.jit(early_return)(ex.tensor(np.ones(2)))
    assert e.value.location.lineno == early_return.__code__.co_firstlineno + 1


def one_branch(x):
    if x.sum() > 0:
        y = x * 2.0
    return y


def test_variable_defined_in_one_branch_only():
    np.testing.assert_allclose(one_branch(ex.tensor(np.ones(2))).numpy(), 2.0)  # fine eagerly
    with pytest.raises(JitSyntaxError, match="only one branch"):
        ex.jit(one_branch)(ex.tensor(np.ones(2)))


def shape_changing_loop(x):
    while x.sum() < 10.0:
        x = F.reshape(x, (-1,))[:1]
    return x


def test_loop_variable_must_keep_its_shape():
    with pytest.raises(ex.compiler.ShapeError, match="keep its shape"):
        ex.jit(shape_changing_loop)(ex.tensor(np.ones(2)))


def test_trace_capture_freezes_tensor_branches():
    def sign(x):
        return x * 1.0 if float(x.sum()) > 0 else -x

    f = ex.jit(sign, capture="trace")
    f(ex.tensor(np.ones(2)))
    np.testing.assert_allclose(f(ex.tensor(-np.ones(2))).numpy(), -1.0)  # eager gives +1


def test_results_are_fresh_arrays_not_buffers(rng):
    f = ex.jit(lambda_free)
    a = f(ex.tensor(np.ones((4, 4))))
    b = f(ex.tensor(np.zeros((4, 4))))
    assert not np.shares_memory(a.numpy(), b.numpy())
    np.testing.assert_allclose(a.numpy(), np.exp(1.0) * 2, rtol=1e-6)


def lambda_free(x):
    return F.exp(x) * 2.0


W_MODULE = ex.tensor(np.ones(2))


def adds_module_tensor(x):
    return x + W_MODULE


def calls_helper(x):
    return helper_reading_module_tensor(x) * 2.0


def helper_reading_module_tensor(x):
    return x - W_MODULE


def test_module_scope_tensors_are_guarded_and_recompile():
    global W_MODULE
    f, g = ex.jit(adds_module_tensor), ex.jit(calls_helper)
    x = ex.tensor(np.zeros(2))
    np.testing.assert_array_equal(f(x).numpy(), 1.0)
    np.testing.assert_array_equal(g(x).numpy(), -2.0)
    old = W_MODULE
    W_MODULE = ex.tensor(np.full(2, 5.0))  # rebinding: eager and jit both see the new value
    try:
        with ex.trace.record() as rec:
            np.testing.assert_array_equal(f(x).numpy(), adds_module_tensor(x).numpy())
            np.testing.assert_array_equal(g(x).numpy(), calls_helper(x).numpy())
        recompiles = rec.trace.of_kind("recompile")
        assert len(recompiles) == 2
        assert all("W_MODULE" in str(e.detail) for e in recompiles)
        np.testing.assert_array_equal(f(x).numpy(), 5.0)
        assert len(f.cache) == 1  # the stale entry was replaced, not kept beside
    finally:
        W_MODULE = old


def test_rebinding_a_closure_tensor_recompiles():
    w = ex.tensor(np.ones(2))

    def add_w(x):
        return x + w

    f = ex.jit(add_w)
    x = ex.tensor(np.zeros(2))
    f(x)
    w = ex.tensor(np.full(2, 3.0))  # noqa: F841  (rebinds the closure cell add_w reads)
    np.testing.assert_array_equal(f(x).numpy(), add_w(x).numpy())
    np.testing.assert_array_equal(f(x).numpy(), 3.0)
