"""Passes: golden printed graphs before/after, RewriteStep records, fusion, memory plan,
and hypothesis tests on random elementwise expression graphs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.compiler import F, Program, optimize
from explorer.compiler.passes import (
    PASSES,
    PassDidNotConverge,
    Rewrite,
    Rule,
    cse,
    dce,
    fold,
    fuse,
    plan_memory,
    run_rules,
    simplify,
)
from explorer.ir.ops_tensor import run_graph


def f_fold(x):
    a = F.constant(2.0) * F.constant(3.0)
    return x * a + 0.0


def test_fold_and_simplify_golden():
    f = ex.jit(f_fold, level="O1")
    x = ex.tensor(np.ones((2, 2)))
    before = str(f.graph(x))
    assert "mul(%const, %const_1)" in before
    assert str(f.lower(x)) == (
        "graph f_fold {\n"
        "  %x : fp32[2, 2] = input()\n"
        "  %mul_1 : fp32[2, 2] = scale(%x, factor=6)  # 4 FLOP\n"
        "  return %mul_1\n"
        "}"
    )
    rules = {(s.pass_name, s.rule) for s in f.steps(x)}
    assert ("fold", "fold_constants") in rules
    assert ("simplify", "identity") in rules and ("simplify", "scalar_mul_to_scale") in rules
    np.testing.assert_allclose(f(x).numpy(), 6.0)


def test_cse_and_dce():
    b = ex.GraphBuilder("g")
    x = b.input("x", (4,))
    e1 = b.op("exp", x, name="e1")
    e2 = b.op("exp", x, name="e2")
    b.op("tanh", x, name="unused")
    g = b.build([b.op("add", e1, e2, name="y")])
    g2, steps = cse(g)
    assert [s.rule for s in steps] == ["merge_duplicates"] and steps[0].nodes == ("e2",)
    g3, steps = dce(g2)
    assert str(g3) == (
        "graph g {\n"
        "  %x : fp32[4] = input()\n"
        "  %e1 : fp32[4] = exp(%x)  # 4 FLOP\n"
        "  %y : fp32[4] = add(%e1, %e1)  # 4 FLOP\n"
        "  return %y\n"
        "}"
    )
    assert steps[0].nodes == ("unused",)  # CSE merged e2; DCE drops what nothing uses
    assert steps[0].before is g2 and steps[0].after is g3


def test_driver_raises_when_rules_fight():
    b = ex.GraphBuilder("g")
    x = b.input("x", (2,))
    g = b.build([b.op("relu", x, name="y")])
    flip = Rule(
        "flip",
        lambda n, ctx: Rewrite(
            (n.__class__(n.name, "tanh" if n.op == "relu" else "relu", n.inputs, n.type),), n.name
        ),
    )
    with pytest.raises(PassDidNotConverge):
        run_rules(g, [flip], "fight")


def block(x, b, mask, r):
    return F.where(mask, F.gelu(x + b), 0.0) + r


def test_fusion_makes_one_kernel(rng):
    x = ex.tensor(rng.standard_normal((8, 16)))
    b = ex.tensor(rng.standard_normal(16))
    m = ex.tensor(rng.random((8, 16)) > 0.5)
    r = ex.tensor(rng.standard_normal((8, 16)))
    f = ex.jit(block)
    g = f.lower(x, b, m, r)
    assert [n.op for n in g.ops] == ["fused"]
    fused = g.ops[0]
    assert fused.attr("ops") == ("add", "gelu", "where", "add")
    assert g.flops() == f.graph(x, b, m, r).flops()
    np.testing.assert_allclose(
        f(x, b, m, r).numpy(), block(x, b, m, r).numpy(), rtol=1e-5, atol=1e-6
    )
    with ex.trace.record() as rec:
        f(x, b, m, r)
    k = rec.trace.compute_events[0]
    assert k.kind == "kernel" and k.replaced == ("add", "gelu", "where", "add")


def mlp4(x, ws):
    for w in ws:
        x = F.relu(x @ w + 1.0)
    return x


def test_memory_plan_reuses_buffers(rng):
    ws = tuple(ex.tensor(rng.standard_normal((16, 16))) for _ in range(4))
    x = ex.tensor(rng.standard_normal((8, 16)))
    f = ex.jit(mlp4)
    out = f(x, ws)
    np.testing.assert_allclose(out.numpy(), mlp4(x, ws).numpy(), rtol=1e-5)
    entry = next(iter(f.cache.values()))
    plan = entry.plan
    assert plan.planned_bytes < plan.naive_bytes
    assert len(plan.buffer_bytes) <= 2 and plan.in_place
    # two runs give the same answer (buffers are reused, outputs are fresh arrays)
    out2 = f(x, ws)
    np.testing.assert_array_equal(out.numpy(), out2.numpy())
    assert out.numpy() is not out2.numpy()


def test_memory_plan_keeps_views_alive():
    b = ex.GraphBuilder("v")
    x = b.input("x", (4, 4))
    e = b.op("exp", x, name="e")
    t = b.op("transpose", e, name="t", perm=(1, 0))
    n = b.op("neg", x, name="n")
    y = b.op("add", t, n, name="y")
    g = b.build([y])
    plan = plan_memory(g)
    bufs = plan.buffers()
    assert bufs["e"] != bufs.get("n", -1)  # e is alive (through t) while n is written
    a = np.arange(16, dtype=np.float32).reshape(4, 4) / 10
    np.testing.assert_allclose(Program(g, plan).run([a])[0], np.exp(a).T - a, rtol=1e-6)


UNARY = ["neg", "exp", "tanh", "relu", "gelu", "silu", "abs"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


@st.composite
def elementwise_graphs(draw):
    b = ex.GraphBuilder("rand")
    values = [b.input("x0", (3, 4)), b.input("x1", (4,)), b.input("x2", (3, 4))]
    for i in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            op = draw(st.sampled_from(UNARY))
            a = draw(st.sampled_from(values))
            values.append(b.op(op, a, name=f"v{i}"))
        else:
            op = draw(st.sampled_from(BINARY))
            a, c = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            values.append(b.op(op, a, c, name=f"v{i}"))
    outs = [values[-1]] + ([values[3]] if len(values) > 4 and draw(st.booleans()) else [])
    return b.build(outs)


@settings(max_examples=40, deadline=None)
@given(elementwise_graphs(), st.sampled_from(["O1", "O2"]))
def test_random_elementwise_graphs_optimised_equal_reference(g, level):
    rng = np.random.default_rng(1)
    feeds = {n.name: (rng.standard_normal(n.type.shape) * 0.5).astype(np.float32) for n in g.inputs}
    ref = run_graph(g, feeds)
    opt, _, plan = optimize(g, level)
    got = Program(opt, plan).run([feeds[n.name] for n in opt.inputs])
    for a, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5)


def test_passes_are_named_graph_functions():
    b = ex.GraphBuilder("g")
    g = b.build([b.op("exp", b.input("x", (2,)))])
    for p in (fold, cse, dce, simplify, fuse):
        out, steps = p(g)
        assert isinstance(out, ex.Graph) and steps == []


def special_values(x, y):
    a = x / 0.0  # inf, -inf and nan (0/0)
    b = (x * 1.0 + 0.0) / F.constant(np.float32(0.5))  # identities, an exact reciprocal
    c = F.exp(y) * 2.0 * 0.5 - y / 3.0
    d = F.relu(x - x) + F.where(x > 0.0, a, y)
    return a + b, c * d, F.softmax(y), F.maximum(x, y) / y


SPECIAL = np.array([[np.inf, -np.inf, np.nan, 0.0], [-0.0, 1.0, -2.5, 1e38]], np.float32)


def _same(got, want):
    """Bit-level agreement on inf/nan positions, values equal up to float rounding."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-6, atol=0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", ["fold", "simplify", "cse", "dce", "fuse_softmax", "fuse", "O1", "O2"])  # fmt: skip
def test_every_pass_keeps_inf_and_nan_like_O0(name):
    x, y = ex.tensor(SPECIAL), ex.tensor(SPECIAL[::-1].copy())
    with np.errstate(all="ignore"):
        eager = [t.numpy() for t in special_values(x, y)]
        ref = ex.jit(special_values, level="O0")
        want = [t.numpy() for t in ref(x, y)]
        for w, e in zip(want, eager, strict=True):
            _same(w, e)
        if name in ("O1", "O2"):
            got = [t.numpy() for t in ex.jit(special_values, level=name)(x, y)]
        else:
            g, _ = PASSES[name](ref.graph(x, y))
            got = Program(g).run([SPECIAL, SPECIAL[::-1].copy()])
    for g_, w in zip(got, want, strict=True):
        _same(g_, w)


def divides_by_zero(x):
    return x / F.constant(np.float32(0.0))


def test_division_by_a_zero_constant_compiles_to_inf():
    x = ex.tensor(np.array([1.0, -1.0, 0.0]))
    for level in ("O0", "O1", "O2"):
        with np.errstate(all="ignore"):
            out = ex.jit(divides_by_zero, level=level)(x).numpy()
        np.testing.assert_array_equal(out[:2], [np.inf, -np.inf])
        assert np.isnan(out[2])
