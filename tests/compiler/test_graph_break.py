"""Lax mode splits a function at a graph break: the statements before the break are
compiled, the rest runs eagerly, and each call records the break in the trace."""

import numpy as np

import explorer as ex
from explorer.compiler import F


def breaks_midway(x, w):
    h = F.relu(x @ w) + 1.0
    s = float(h.numpy().sum())
    return h * s


def prints_midway(x):
    y = x * 2.0
    print("y ready")
    return y + 1.0


def returns_early(x, flag):
    if flag:
        return x
    v = x.numpy()
    return x * float(v.sum())


def maybe_bound(x, flag):
    if flag:
        z = x + 1.0
    v = x.numpy()
    return z * float(v.sum()) if flag else x * 2.0


def test_runtime_break_compiles_the_head_and_runs_the_tail_eagerly(rng):
    f = ex.jit(breaks_midway, syntax="lax")
    x, w = ex.tensor(rng.standard_normal((2, 3))), ex.tensor(rng.standard_normal((3, 4)))
    with ex.trace.record() as rec:
        out = f(x, w)
        f(x, w)
    np.testing.assert_allclose(out.numpy(), breaks_midway(x, w).numpy(), rtol=1e-5)
    assert [n.op for n in f.lower(x, w).ops][0] == "matmul"  # the head is a compiled graph
    kernels = [e.name for e in rec.trace.events if e.kind == "kernel"]
    eager = [e.name for e in rec.trace.events if e.kind == "op"]
    assert "matmul" in kernels and eager == ["scale", "scale"]  # h * s, once per call
    breaks = rec.trace.of_kind("graph_break")
    line = breaks_midway.__code__.co_firstlineno + 2
    assert len(breaks) == 2 and f"eager from line {line}" in breaks[0].detail
    assert "test_graph_break.py" in breaks[0].detail and len(rec.trace.of_kind("compile")) == 1


def test_static_break_splits_before_the_statement(capsys, rng):
    f = ex.jit(prints_midway, syntax="lax")
    x = ex.tensor(rng.standard_normal(3))
    for _ in range(2):
        np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2.0 + 1.0, rtol=1e-6)
    assert capsys.readouterr().out.count("y ready") == 2
    assert [n.op for n in f.lower(x).ops] == ["scale"]


def test_no_split_when_the_head_may_return(rng):
    f = ex.jit(returns_early, syntax="lax")
    x = ex.tensor(rng.standard_normal(3))
    np.testing.assert_allclose(f(x, False).numpy(), returns_early(x, False).numpy(), rtol=1e-6)
    entry = next(iter(f.cache.values()))
    assert entry.graph is None and entry.split is None and entry.fallback is not None


def test_name_unbound_in_the_head_stays_unbound_in_the_tail(rng):
    f = ex.jit(maybe_bound, syntax="lax")
    x = ex.tensor(rng.standard_normal(3))
    for flag in (True, False):
        np.testing.assert_allclose(f(x, flag).numpy(), maybe_bound(x, flag).numpy(), rtol=1e-5)
    assert all(e.split is not None for e in f.cache.values())


def imports_then_breaks(x):
    import math

    y = x * 2.0
    print("a side effect: the graph breaks here")
    return y * math.pi


def test_a_local_import_before_a_graph_break_reaches_the_eager_rest(capsys):
    # the compiled head does not return module objects: the eager tail imports again
    f = ex.jit(imports_then_breaks, syntax="lax")
    got = f(ex.tensor(np.ones((2, 2), np.float32))).numpy()
    np.testing.assert_allclose(got, np.full((2, 2), 2 * np.pi, np.float32), rtol=1e-6)
    assert "graph breaks here" in capsys.readouterr().out
