"""Dynamic shapes under @jit: sizes computed in Python from a symbolic dim
follow the bound size; each compilation is counted (``len(fn.cache)`` and the trace's
compile/recompile events), and results equal eager for several sizes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.compiler import F
from explorer.compiler.jit.symbolic import SymContext, evaluate, sentinel, show
from explorer.compiler.jit.variants import bucket_of

B = {"x": {0: "B"}}


def _compiles(rec) -> list[str]:
    events = rec.trace.events if rec.trace is not None else rec.events  # during the record
    return [e.kind for e in events if e.kind in ("compile", "recompile")]


def _check(fn, dynamic, sizes, make, **kw):
    """Run ``fn`` compiled and eagerly for each size; return the JitFunction and trace."""
    jf = ex.jit(fn, dynamic=dynamic, **kw)
    with ex.trace.record("dyn") as rec:
        for s in sizes:
            args = make(s)
            args = args if isinstance(args, tuple) else (args,)
            got, want = jf(*args), fn(*args)
            got = got if isinstance(got, tuple) else (got,)
            want = want if isinstance(want, tuple) else (want,)
            for a, b in zip(got, want, strict=True):
                assert a.shape == b.shape
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    return jf, rec


def _rows(n, cols=3, seed=0):
    return ex.tensor(np.random.default_rng(seed + n).standard_normal((n, cols)))


# --- one compilation for every size ----------------------------------------------------------


def first_half(x):
    h = x.shape[0] // 2
    return x[:h] * 2.0 + x[h : 2 * h]


def mod_and_add(x):
    n = x.shape[0]
    pad = F.concat([x, F.zeros_like(x)[: (3 - n % 3) % 3 + 1]], axis=0)
    return pad.sum(0) / (n + 1)


def tail_drop(x):
    return x[1:-1].sum(0) + x[-1]


def flatten_mean(x):
    return F.reshape(x, (-1,)).sum() / x.shape[0]


def concat_mixed(x, y):
    z = F.concat([x, y * 2.0, x[: x.shape[0] // 2]], axis=0)
    n = z.shape[0]
    return F.tanh(z[1 : n - 1]).sum(0) + F.reshape(z, (-1,)).sum() / n


@pytest.mark.parametrize(
    ("fn", "sizes"),
    [
        (first_half, (3, 5, 7, 9, 11)),  # odd sizes: 2 * (B // 2) == B - 1 holds for all
        (tail_drop, (2, 3, 6, 11)),
        (flatten_mean, (1, 2, 5, 8)),
    ],
)
def test_one_compile_serves_every_size(fn, sizes):
    jf, rec = _check(fn, B, sizes, _rows)
    assert len(jf.cache) == 1 and _compiles(rec) == ["compile"]


def test_modulo_and_concat_follow_the_size():
    # (3 - n % 3) % 3 is under TRACKED_MIN: a guard fixes it, so one compile per n % 3
    jf, rec = _check(mod_and_add, B, (3, 6, 9, 4, 7, 5, 8), _rows)
    assert len(jf.cache) == 3 and _compiles(rec).count("recompile") == 2


def test_two_symbols_and_concat():
    dyn = {"x": {0: "B"}, "y": {0: "S"}}
    sizes = ((3, 2), (5, 7), (9, 1), (7, 4))
    jf, rec = _check(concat_mixed, dyn, sizes, lambda s: (_rows(s[0]), _rows(s[1], seed=9)))
    assert len(jf.cache) == 1 and _compiles(rec) == ["compile"]


def test_parity_class_is_one_recompile():
    # x[h:2h] and x[:-1] stop at the same row for odd B only: even sizes get one more
    # compilation (B captured as a multiple of 2), shared by every even size
    def both(x):
        h = x.shape[0] // 2
        return x[h : 2 * h].sum(0), x[:-1].sum(0)

    jf, rec = _check(both, B, (3, 5, 4, 6, 10, 7, 8), _rows)
    assert len(jf.cache) == 2 and _compiles(rec) == ["compile", "recompile"]


def heads(x):
    b, h = x.shape
    return F.transpose(F.reshape(x, (b // 2, 2, h)), (1, 0, 2)).sum(1)


def test_reshape_by_half_is_captured_as_a_multiple_of_two():
    jf, rec = _check(heads, B, (4, 6, 8, 12, 2), _rows)
    assert len(jf.cache) == 1 and _compiles(rec) == ["compile"]
    assert [str(g) for g in jf.shape_guards if "%" in str(g)] == ["B % 2 == 0"]


def plus_size(x):
    return x + x.shape[0], x.sum() / x.shape[0]


def test_scalar_from_a_size_is_fed_not_frozen():
    jf, rec = _check(plus_size, B, (2, 5, 9), _rows, level="O0")
    assert _compiles(rec) == ["compile"]
    g = jf.graph(_rows(4))
    sym = [n for n in g.inputs if n.name.startswith("__sym")]
    assert len(sym) == 1 and sym[0].type.shape == ()  # x + B reads B from an input
    assert [n.op for n in g.ops] == ["add", "sum", "scale"]  # / B: a scale re-evaluated


def gpt_forward(model, tokens):
    return model(tokens)


def test_gpt_forward_with_symbolic_batch_and_sequence_compiles_once():
    model = ex.nn.GPT(vocab_size=64, hidden=32, num_layers=2, num_heads=4, max_seq_len=64, seed=0)
    jf = ex.jit(gpt_forward, dynamic={"tokens": {0: "B", 1: "S"}})
    rng = np.random.default_rng(0)
    with ex.trace.record("gpt") as rec:
        for b, s in ((1, 8), (2, 16), (3, 5), (2, 7), (1, 33)):
            tokens = ex.tensor(rng.integers(0, 64, (b, s)), "int32")
            np.testing.assert_allclose(
                jf(model, tokens).numpy(), model(tokens).numpy(), rtol=1e-5, atol=1e-5
            )
    assert len(jf.cache) == 1 and _compiles(rec) == ["compile"]
    assert len([e for e in rec.trace.events if e.kind == "bind"]) == 5


# --- guards ----------------------------------------------------------------------------------


def branch_on_size(x):
    if x.shape[0] > 4:
        return x * 2.0
    return x - 1.0


def test_guard_failure_recompiles_exactly_once():
    jf = ex.jit(branch_on_size, dynamic=B)
    with ex.trace.record("g") as rec:
        for n in (8, 9, 16):
            np.testing.assert_allclose(jf(_rows(n)).numpy(), branch_on_size(_rows(n)).numpy())
        assert _compiles(rec) == ["compile"]
        x2 = _rows(2)
        np.testing.assert_allclose(jf(x2).numpy(), branch_on_size(x2).numpy())
        assert _compiles(rec) == ["compile", "recompile"]
        for n in (2, 12, 2, 5):  # both entries now cached: no compile
            np.testing.assert_allclose(jf(_rows(n)).numpy(), branch_on_size(_rows(n)).numpy())
        assert _compiles(rec) == ["compile", "recompile"]
    failed = [e for e in rec.trace.events if e.name == "guard failed"]
    assert len(failed) == 1 and "B > 4" in failed[0].detail and "B=2" in failed[0].detail
    recompile = next(e for e in rec.trace.events if e.kind == "recompile")
    assert "shape guard B > 4 failed for B=2" in recompile.detail
    assert "B > 4" in [str(g) for g in jf.shape_guards]


# --- gradients --------------------------------------------------------------------------------


W1 = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
W2 = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)


def mlp_loss(x, labels):
    h = F.gelu(F.matmul(x, ex.tensor(W1)))
    logits = F.matmul(h, ex.tensor(W2))
    return F.cross_entropy(logits, labels) + F.softmax(logits)[:, 0].mean()


def test_training_step_gradient_for_every_batch_size():
    dyn = {"x": {0: "B"}, "labels": {0: "B"}}
    step = ex.jit(ex.grad(mlp_loss), dynamic=dyn)
    for n in (1, 3, 6, 11):
        x, lab = _rows(n), ex.tensor(np.arange(n) % 4)
        np.testing.assert_allclose(
            step(x, lab).numpy(), ex.grad(mlp_loss)(x, lab).numpy(), rtol=1e-4, atol=1e-6
        )
    assert len(step.cache) == 1


# --- bucket policy ------------------------------------------------------------------------------


def test_pow2_bucket_is_one_compile_per_bucket():
    jf, rec = _check(first_half, B, (3, 5, 7, 9, 11, 13), _rows, bucket="pow2")
    assert [bucket_of(n) for n in (3, 4, 5, 8, 9, 16)] == [4, 4, 8, 8, 16, 16]
    assert len(jf.cache) == 3  # buckets 4, 8, 16
    assert _compiles(rec) == ["compile", "recompile", "recompile"]
    with pytest.raises(ValueError, match="bucket="):
        ex.jit(first_half, bucket="linear")


# --- expressions ------------------------------------------------------------------------------


def test_symint_records_expressions_and_guards():
    p = sentinel(0)
    ctx = SymContext({"B": p})
    b = ctx.wrap(p)
    half = b // 2
    assert show(ctx.table[int(half)], ctx.names) == "B // 2"
    assert evaluate(ctx.table[int(b + 7 * half)], {p: 10}) == 10 + 35
    assert (b > 4) is True
    assert [str(g) for g in ctx.guards.values()] == ["B > 4"]
    small = b % 5  # under TRACKED_MIN: held by a guard, not followed by value
    assert int(small) not in ctx.table
    assert f"B % 5 == {p % 5}" in [str(g) for g in ctx.guards.values()]


def sum_rows(x):
    total = x[0] * 0.0
    for row in x:
        total = total + row
    return total


def test_iterating_over_a_symbolic_dim_is_a_named_error():
    with pytest.raises(ex.compiler.errors.JitSyntaxError, match=r"first dim is symbolic \(B\)"):
        ex.jit(sum_rows, dynamic=B)(_rows(3))
    np.testing.assert_allclose(ex.jit(sum_rows)(_rows(3)).numpy(), sum_rows(_rows(3)).numpy())


def grow(x, w):
    while x.sum() < 20.0:
        if x.mean() > 1.0:
            x = x * w + 0.1
        else:
            x = x * 1.5 + 0.2
    return (x * x).mean()


def test_gradient_through_while_and_if_with_a_symbolic_batch():
    g = ex.jit(ex.grad(grow, argnums=(0, 1)), dynamic=B)
    w = ex.tensor(np.full(3, 1.2))
    for n in (1, 2, 5, 9):
        x = ex.tensor(np.random.default_rng(n).random((n, 3)) + 0.1)
        for a, b in zip(g(x, w), ex.grad(grow, argnums=(0, 1))(x, w), strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    # one compilation; B == 3 (the other dim's size) would be a guard failure
    assert len(g.cache) == 1 and [str(s) for s in g.shape_guards] == ["not (B == 3)"]


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6))
def test_any_sizes_equal_eager_with_compiles_bounded_by_classes(sizes):
    def make(n):
        return _rows(n)

    for fn in (first_half, tail_drop):
        jf, _ = _check(fn, B, sizes, make)
        assert len(jf.cache) == 1
    # the prime sentinel is odd: even sizes take the other branch, one more compilation
    jf, _ = _check(heads_or_pad, B, sizes, make)
    assert len(jf.cache) == 1 + any(n % 2 == 0 for n in sizes)


def heads_or_pad(x):
    n = x.shape[0]
    if n % 2 == 0:
        return F.reshape(x, (n // 2, 2, x.shape[1])).sum(1)
    return F.concat([x, x[:1]], axis=0)[1:]


def test_programs_of_the_least_recently_used_sizes_are_dropped(monkeypatch):
    from explorer.compiler.jit import cache

    monkeypatch.setattr(cache, "MAX_BOUND_SIZES", 3)
    jf = ex.jit(first_half, dynamic=B)
    for n in (3, 5, 7, 9, 3):
        np.testing.assert_allclose(jf(_rows(n)).numpy(), first_half(_rows(n)).numpy())
    (entry,) = jf.cache.values()
    assert list(entry.programs) == [(7,), (9,), (3,)] and len(jf.cache) == 1


def with_size(x):
    return x.sum(0), x.shape[0] // 2, {"rows": x.shape[0]}


def test_a_size_returned_as_a_python_int_is_the_call_size():
    jf = ex.jit(with_size, dynamic=B)
    for n in (3, 8):
        total, half, d = jf(_rows(n))
        assert (half, d["rows"]) == (n // 2, n) and type(half) is int
    assert len(jf.cache) == 1


def float_of_size(x):
    n = x.shape[0]
    return x * (1.0 / n), x.sum(0) * (n * 0.5), x + 0.25 * n, x - n / 8


def test_floats_computed_from_a_size_follow_it():
    jf, rec = _check(float_of_size, B, (2, 3, 7, 12), _rows)
    assert _compiles(rec) == ["compile"]


def scaled_by_sqrt_of_size(x):
    return x * (1.0 / math.sqrt(x.shape[0]))


def test_a_math_function_of_a_symbolic_size_breaks_the_graph_instead_of_freezing_it():
    # math.sqrt(B) would be computed once, at the capture's placeholder size, and be wrong
    # for every real size: strict mode names the construct, lax mode runs it eagerly
    with pytest.raises(ex.compiler.errors.JitSyntaxError, match="math function of a symbolic"):
        ex.jit(scaled_by_sqrt_of_size, dynamic=B)(ex.tensor(np.ones((3, 2), np.float32)))
    lax = ex.jit(scaled_by_sqrt_of_size, dynamic=B, syntax="lax")
    for n in (3, 5, 9):
        got = lax(ex.tensor(np.ones((n, 2), np.float32))).numpy()
        np.testing.assert_allclose(got, np.full((n, 2), 1 / np.sqrt(n)), rtol=1e-6)
