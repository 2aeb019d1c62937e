"""Generated numba kernels (``explorer.compiler.codegen``) and the precompiled plan.

Generated kernels equal the numpy path within fp32 tolerance: rtol 1e-5, atol 1e-6 (their
exp has 8e-8 relative error against float64, numpy's fp32 exp 2e-7; row sums accumulate in
float64); inf and NaN where the numpy path has them. Without numba (simulated), the pass
takes the numpy path and its RewriteStep says why. The plan runs the interpreter's kernels,
so the two agree exactly.
"""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.compiler import F, Program, optimize
from explorer.compiler.codegen import broadcast_split, cost, numba_available
from explorer.compiler.errors import CompilerError

codegen_pass = importlib.import_module("explorer.compiler.passes.codegen")  # the module

needs_numba = pytest.mark.skipif(not numba_available(), reason="numba is not installed")
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def sync_compile(monkeypatch):
    """Kernels compile on the first call, so each test here runs the numba kernel itself
    (the background mode is tested in test_codegen_background.py)."""
    monkeypatch.setenv("EXPLORER_NUMBA_COMPILE", "sync")


@pytest.fixture
def every_region(monkeypatch):
    """Small test shapes get kernels too (the cost model would keep them on numpy)."""
    monkeypatch.setattr(cost, "MIN_WORK", 0)


def _tensor(rng, shape, kind="float"):
    if kind == "bool":
        return ex.tensor(rng.random(shape) > 0.4)
    return ex.tensor(rng.standard_normal(shape).astype(np.float32))


def _both(fn, *args):
    """(eager result, numba-backend @jit result, the jit function)."""
    f = ex.jit(fn, backend="numba")
    return fn(*args), f(*args), f


def _ops(f, *args):
    return [n.op for n in f.lower(*args).ops]


def block(x, b, mask, r):
    return F.where(mask, F.gelu(x + b), 0.0) + r


def mixed(x, c, s):
    return (x + c) * s - F.exp(x)


def compare(x, y):
    return x * 2.0 - 1.0 > y


def middle(x, m):
    return F.tanh(x * m) + x


ELEMENTWISE = [  # function, argument shapes and kinds
    (block, [((3, 5), "float"), ((5,), "float"), ((3, 5), "bool"), ((3, 5), "float")]),
    (mixed, [((2, 3, 7), "float"), ((2, 3, 1), "float"), ((), "float")]),
    (mixed, [((), "float"), ((), "float"), ((), "float")]),
    (block, [((0, 5), "float"), ((5,), "float"), ((0, 5), "bool"), ((0, 5), "float")]),
    (compare, [((4, 9), "float"), ((9,), "float")]),
]


@needs_numba
@pytest.mark.parametrize("fn,shapes", ELEMENTWISE)
def test_generated_elementwise_equals_eager(fn, shapes, every_region, rng):
    args = [_tensor(rng, s, k) for s, k in shapes]
    want, got, f = _both(fn, *args)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    assert "generated" in _ops(f, *args)


@needs_numba
def test_broadcast_along_a_middle_dim_stays_on_numpy(every_region, rng):
    args = [_tensor(rng, (4, 3, 5)), _tensor(rng, (4, 1, 5))]
    want, got, f = _both(middle, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    fallback = [s for s in f.steps(*args) if s.rule == "numpy_fallback"]
    assert fallback and "not generated: broadcast" in fallback[0].detail
    assert "generated" not in _ops(f, *args)


@needs_numba
def test_generated_exp_keeps_inf_nan_and_tiny_values(every_region):
    x = np.array([np.inf, -np.inf, np.nan, 88.7, 88.75, 89.0, -87.5, -100.0, -104.0, -200.0,
                  0.0, -0.0, 1e-30, 3.5, -3.5, 20.0], np.float32)  # fmt: skip
    y = np.linspace(-1, 1, x.size).astype(np.float32)

    def f(a, b):
        return F.exp(a) + b

    with np.errstate(over="ignore"):
        want = np.exp(x) + y
    got = ex.jit(f, backend="numba")(ex.tensor(x), ex.tensor(y)).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-40)


def scores(x, offset, scale):
    return F.softmax(F.causal_mask(x * scale, offset))


@needs_numba
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # eager's 0/0 rows
@pytest.mark.parametrize("offset", [0, 2, -1])
@pytest.mark.parametrize("scale", [0.125, -0.5])
def test_generated_masked_softmax_equals_eager(offset, scale, every_region, rng):
    x = _tensor(rng, (2, 3, 5, 6))
    want, got, f = _both(scores, x, offset, scale)
    # offset -1 masks the whole first row: NaN in both (0/0), as eager
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    assert "generated" in _ops(f, x, offset, scale)


def norms(x, g, b):
    return F.layer_norm(x, g, b), F.rms_norm(x, g), F.softmax(x)


@needs_numba
@pytest.mark.parametrize("shape", [(3, 16), (2, 3, 7), (1, 1)])
def test_generated_norms_and_softmax_equal_eager(shape, every_region, rng):
    x, g, b = _tensor(rng, shape), _tensor(rng, shape[-1:]), _tensor(rng, shape[-1:])
    want, got, f = _both(norms, x, g, b)
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), w.numpy(), rtol=RTOL, atol=ATOL)
    assert _ops(f, x, g, b).count("generated") == 3


@needs_numba
def test_parallel_kernel_equals_eager(every_region, monkeypatch, rng):
    monkeypatch.setattr(cost, "PARALLEL_MIN_NUMEL", 0)
    monkeypatch.setattr(codegen_pass, "numba_threads", lambda: 2)
    args = [_tensor(rng, (33, 17)), _tensor(rng, (17,)), _tensor(rng, (33, 17), "bool"),
            _tensor(rng, (33, 17))]  # fmt: skip
    want, got, f = _both(block, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    step = next(s for s in f.steps(*args) if s.rule == "numba_kernel")
    assert "prange(rows)" in step.source and "parallel=True" in step.source


@needs_numba
def test_rewrite_step_shows_the_generated_source(every_region, rng):
    args = [_tensor(rng, (3, 5)), _tensor(rng, (5,)), _tensor(rng, (3, 5), "bool"),
            _tensor(rng, (3, 5))]  # fmt: skip
    f = ex.jit(block, backend="numba")
    steps = [s for s in f.steps(*args) if s.pass_name == "codegen"]
    assert [s.rule for s in steps] == ["numba_kernel"]
    src = steps[0].source
    assert "@njit(" in src and "def fused_kernel(a0, a1, a2, a3, out):" in src
    assert "= a2[0, j]" in src  # the bias is read as a row vector, not copied
    node = steps[0].after.node(steps[0].nodes[0])
    assert node.op == "generated" and node.attr("source").text == src
    assert "<numba source, " in str(steps[0].after)  # the text IR prints it short
    assert node.attr("ops") == ("add", "gelu", "where", "add")


@needs_numba
def test_generated_kernel_writes_in_place_over_a_dying_matmul(every_region, rng):
    def mlp(x, w, b):
        return F.gelu(x @ w + b) @ w.T

    args = [_tensor(rng, (4, 8)), _tensor(rng, (8, 8)), _tensor(rng, (8,))]
    want, got, f = _both(mlp, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    _, steps, plan = optimize(f.graph(*args), "O2", "numba")
    graph = steps[-1].after
    assert any(graph.node(n).op == "generated" for n in plan.in_place)


def test_without_numba_the_numpy_path_runs_and_says_so(every_region, monkeypatch, rng):
    monkeypatch.setattr(codegen_pass, "numba_available", lambda: False)
    args = [_tensor(rng, (3, 5)), _tensor(rng, (5,)), _tensor(rng, (3, 5), "bool"),
            _tensor(rng, (3, 5))]  # fmt: skip
    want, got, f = _both(block, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    steps = [s for s in f.steps(*args) if s.pass_name == "codegen"]
    assert [s.rule for s in steps] == ["numpy_fallback"]
    assert "numba is not installed" in steps[0].detail
    assert "fused" in _ops(f, *args) and "generated" not in _ops(f, *args)


def test_cost_model_keeps_tiny_regions_on_numpy(rng):
    args = [_tensor(rng, (2, 3)), _tensor(rng, (3,)), _tensor(rng, (2, 3), "bool"),
            _tensor(rng, (2, 3))]  # fmt: skip
    f = ex.jit(block, backend="numba")
    f(*args)
    steps = [s for s in f.steps(*args) if s.pass_name == "codegen"]
    assert steps[0].rule == "numpy_fallback"
    assert "numpy's calls are cheaper" in steps[0].detail or "not installed" in steps[0].detail
    assert cost.choose("elementwise", 1 << 22, 4, True, threads=2).parallel
    assert not cost.choose("elementwise", 1 << 22, 4, True, threads=1).parallel


@needs_numba  # without numba the reason is "not installed"
def test_two_cheap_ops_stay_on_numpy(every_region, rng):
    def add2(x, y):
        return x + y * 2.0

    args = [_tensor(rng, (8, 8)), _tensor(rng, (8, 8))]
    want, got, f = _both(add2, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    step = next(s for s in f.steps(*args) if s.pass_name == "codegen")
    assert step.rule == "numpy_fallback" and "memory-bound" in step.detail


@needs_numba
def test_a_large_bias_and_residual_add_gets_a_kernel(rng):
    """From ``TWO_OP_MIN_NUMEL`` elements a two-add region (bias + residual of a prefill)
    runs in numba's one pass (numpy's two passes measured twice as slow); ragged rows."""

    def residual(x, h, b):
        return x + (h + b)

    shape = (1, 67, 500)
    assert 67 * 500 >= cost.TWO_OP_MIN_NUMEL
    args = [_tensor(rng, shape), _tensor(rng, shape), _tensor(rng, (500,))]
    want, got, f = _both(residual, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    assert "generated" in _ops(f, *args)
    step = next(s for s in f.steps(*args) if s.pass_name == "codegen")
    assert step.rule == "numba_kernel"


def test_broadcast_split_classifies_inputs():
    assert broadcast_split((4, 8), [(4, 8), (8,), (4, 1), ()]) == (
        1, ("full", "row", "col", "scalar"))  # fmt: skip
    assert broadcast_split((2, 3, 4), [(2, 3, 4), (3, 4)]) == (1, ("full", "row"))
    assert broadcast_split((2, 3, 4), [(2, 3, 4), (2, 3, 1)]) == (2, ("full", "col"))
    assert broadcast_split((2, 3, 4), [(2, 1, 4)]) is None
    assert broadcast_split((), [(), ()]) == (0, ("full", "full"))


def test_backend_must_be_known():
    with pytest.raises(ValueError, match="backend='cuda'"):
        ex.jit(block, backend="cuda")


# --- the precompiled plan -------------------------------------------------------------------

UNARY = ["neg", "exp", "tanh", "relu", "gelu", "abs"]
BINARY = ["add", "sub", "mul", "maximum"]


@st.composite
def graphs(draw):
    b = ex.GraphBuilder("rand")
    values = [b.input("x0", (3, 4)), b.input("x1", (4,)), b.input("x2", (3, 4))]
    for i in range(draw(st.integers(1, 10))):
        if draw(st.booleans()):
            values.append(b.op(draw(st.sampled_from(UNARY)), draw(st.sampled_from(values)),
                               name=f"v{i}"))  # fmt: skip
        else:
            a, c = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            values.append(b.op(draw(st.sampled_from(BINARY)), a, c, name=f"v{i}"))
    outs = [values[-1]] + ([values[0]] if draw(st.booleans()) else [])
    return b.build(outs)


@settings(max_examples=30, deadline=None)
@given(graphs(), st.sampled_from(["O0", "O2"]))
def test_plan_equals_interpreter(g, level):
    rng = np.random.default_rng(2)
    feeds = [(rng.standard_normal(n.type.shape) * 0.5).astype(np.float32) for n in g.inputs]
    opt, _, plan = optimize(g, level)
    prog = Program(opt, plan)
    want = [a.copy() for a in prog.run_interpreted(feeds)]
    got = prog.run(feeds)
    for a, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, w)


def two_branches(x):
    if x.sum() > 0:
        y, z = x * 2.0, x + 1.0
    else:
        y, z = -x, x - 1.0
    return y * z, z


def test_plan_runs_control_groups_like_the_interpreter():
    f = ex.jit(two_branches)
    for a in ([1.0, -3.0], [1.0, 3.0]):
        x = ex.tensor(np.array(a))
        got = [t.numpy() for t in f(x)]
        with ex.trace.record():  # traced calls run the interpreter
            traced = [t.numpy() for t in f(x)]
        want = [t.numpy() for t in two_branches(x)]
        for g1, g2, w in zip(got, traced, want, strict=True):
            np.testing.assert_array_equal(g1, g2)
            np.testing.assert_allclose(g1, w, rtol=1e-6)


def test_plan_is_straight_line_source_freeing_dead_values():
    b = ex.GraphBuilder("g")
    x = b.input("x", (2, 3))
    y = b.op("exp", x)
    g = b.build([b.op("add", y, b.op("scale", x, factor=2.0))])
    prog = Program(g)
    assert prog.source.startswith("def plan(v0):")
    assert "del v1" in prog.source  # exp's result is dropped after its last use
    with pytest.raises(CompilerError, match="takes 1 arrays"):
        prog.run([])


@needs_numba
def test_generated_kernels_serve_every_size_of_a_symbolic_dim(every_region, rng):
    dyn = {"x": {0: "B"}, "mask": {0: "B"}, "r": {0: "B"}}
    f = ex.jit(block, backend="numba", dynamic=dyn)
    for rows in (3, 8, 1):
        args = [_tensor(rng, (rows, 5)), _tensor(rng, (5,)), _tensor(rng, (rows, 5), "bool"),
                _tensor(rng, (rows, 5))]  # fmt: skip
        np.testing.assert_allclose(f(*args).numpy(), block(*args).numpy(), rtol=RTOL, atol=ATOL)
    assert len(f.cache) == 1 and "generated" in _ops(f, *args)


@st.composite
def broadcast_args(draw):
    """``mixed``'s arguments: x of a random shape, c broadcast along some dims, s a scalar."""
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=3)))
    lead = draw(st.integers(0, len(shape)))  # c: ones before ``lead``, x's dims after
    c_shape = (1,) * lead + shape[lead:]
    if draw(st.booleans()):  # or a column: x's dims up to ``lead``, ones after
        c_shape = shape[:lead] + (1,) * (len(shape) - lead)
    seed = draw(st.integers(0, 2**16))
    return shape, c_shape, seed


@needs_numba
@settings(max_examples=15, deadline=None)
@given(broadcast_args())
def test_generated_kernels_equal_eager_on_random_broadcasts(case):
    shape, c_shape, seed = case
    cost.MIN_WORK, saved = 0, cost.MIN_WORK  # hypothesis and function-scoped fixtures
    try:
        rng = np.random.default_rng(seed)
        args = [_tensor(rng, shape), _tensor(rng, c_shape), _tensor(rng, ())]
        want, got, _ = _both(mixed, *args)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    finally:
        cost.MIN_WORK = saved


@needs_numba
def test_one_softmax_and_one_norm_kernel_serve_every_scale_mask_and_eps(every_region, rng):
    """Scale, causal mask, offset and eps are the kernels' arguments: a second model with
    other values reuses the compiled kernel (and its disk-cache entry)."""
    x, g, b = _tensor(rng, (2, 5, 5)), _tensor(rng, (5,)), _tensor(rng, (5,))

    def one(x, g, b):
        return F.softmax(F.causal_mask(x * 0.5, 0)), F.layer_norm(x, g, b, eps=1e-5)

    def other(x, g, b):
        return F.softmax(x * -3.0), F.layer_norm(x, g, b, eps=0.25)

    sources = []
    for fn in (one, other):
        want, got, f = _both(fn, x, g, b)
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), w.numpy(), rtol=RTOL, atol=ATOL)
        sources.append(sorted(s.source for s in f.steps(x, g, b) if s.rule == "numba_kernel"))
    assert len(sources[0]) == 2 and sources[0] == sources[1]
