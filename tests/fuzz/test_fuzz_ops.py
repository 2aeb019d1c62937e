"""Fuzzing ``ex.F`` ops with generated (mostly bad) axes, indices, ``p`` and dtypes.

Every call must give a valid Tensor (its data agrees with its type) or a named error (an
``ExplorerError`` subclass with a message), eagerly and under ``@jit``: never a builtin
exception. Examples are derandomized, so a run is the same on every machine.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.compiler import F

from .interfaces import Interface

#: Examples per test; the file ran in a few seconds on the shared 2-core box.
EXAMPLES = 600
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=5_000,  # ms per case
    max_examples=EXAMPLES,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.filter_too_much),
)  # fmt: skip

ints = st.one_of(st.integers(-3, 3), st.integers(-12, 12), st.sampled_from([10**9, -(10**9)]))
odd = st.sampled_from([None, 1.5, "0", True, float("nan"), (), (0, 0), [1, -1], ...])
axis = st.one_of(ints, odd, st.tuples(ints, ints))
index_entry = st.one_of(ints, odd, st.slices(8), st.just(Ellipsis))
arrays = st.sampled_from([
    np.arange(6.0).reshape(2, 3), np.arange(24.0).reshape(2, 3, 4), np.float32(2.0),
    np.arange(4), np.array([True, False]), np.array([1j]), np.array(["a", "b"]),
    np.array([object()]), np.zeros((0, 3)),
])  # fmt: skip

OPS = {
    "softmax": lambda x, a: F.softmax(x, axis=a),
    "sum": lambda x, a: F.sum(x, axis=a),
    "mean": lambda x, a: F.mean(x, axis=a, keepdims=True),
    "max": lambda x, a: F.max(x, axis=a),
    "transpose": lambda x, a: F.transpose(x, a if isinstance(a, tuple | list) else (a,)),
    "getitem": lambda x, a: x[a],
    "dropout": lambda x, a: F.dropout(x, p=a),
    "embedding": lambda x, a: F.embedding(a, x),
    "cross_entropy": lambda x, a: F.cross_entropy(x, a),
    "layer_norm": lambda x, a: F.layer_norm(x, x, x, eps=a),
    "add": lambda x, a: x + a,
}
calls = st.tuples(
    st.sampled_from(sorted(OPS)),
    arrays,
    st.one_of(ints, axis, st.tuples(index_entry, index_entry), st.floats(0, 1), st.floats()),
)


def consistent(y) -> None:
    """A result passes its own validation: a Tensor whose data agrees with its type."""
    assert isinstance(y, ex.Tensor), type(y)
    data = y.numpy()
    assert data.shape == y.shape, (data.shape, y.type)
    assert data.dtype.kind in "biuf", data.dtype


def outcome(fn) -> str:
    """'valid' (a consistent Tensor), 'named' (an ExplorerError with a message) or raise."""
    try:
        y = fn()
    except ex.ExplorerError as e:
        assert str(e).strip(), type(e)
        return "named"
    consistent(y)
    return "valid"


def run_op(name, array, arg):
    return outcome(lambda: OPS[name](ex.tensor(array), arg))


def test_fuzz_ops_eager():
    seen: Counter[str] = Counter()

    @FUZZ
    @given(calls)
    def run(call):
        seen[run_op(*call)] += 1

    run()
    print(f"\nex.F eager: {sum(seen.values())} cases, {dict(seen)}")
    assert seen["valid"] and seen["named"], seen  # both sides reached


def jitted(name, arg):
    def f(x):
        return OPS[name](x, arg)

    return ex.jit(f, capture="trace")


def test_fuzz_ops_under_jit():
    seen: Counter[str] = Counter()

    @settings(FUZZ, max_examples=EXAMPLES // 3)
    @given(calls)
    def run(call):
        name, array, arg = call
        if np.asarray(array).dtype.kind not in "biuf":
            seen[outcome(lambda: ex.tensor(array))] += 1
            return
        seen[outcome(lambda: jitted(name, arg)(ex.tensor(array)))] += 1

    run()
    print(f"\nex.F @jit: {sum(seen.values())} cases, {dict(seen)}")
    assert seen["valid"] and seen["named"], seen


def _eager_call(call, _folder) -> None:
    name, array, arg = call
    consistent(OPS[name](ex.tensor(array), arg))


def _jit_call(call, _folder) -> None:
    name, array, arg = call
    x = ex.tensor(array)  # arrays of no numeric dtype are refused here, before any capture
    consistent(jitted(name, arg)(x))


#: The same calls as interfaces of the shared driver, for bench/fuzz.py's counts.
OPS_INTERFACES: dict[str, Interface] = {
    "ops_eager": Interface("ops_eager", calls, _eager_call),
    "ops_jit": Interface("ops_jit", calls, _jit_call),
}
