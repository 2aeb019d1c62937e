"""The jit cache is bounded (least recently used evicted, counted and shown) and ``dynamic=``
is checked against the function's signature."""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F
from explorer.compiler.errors import CompilerArgumentError
from explorer.compiler.jit.api import DEFAULT_CACHE_SIZE


def double(x):
    return F.relu(x) * 2.0


def two(x, y):
    return x + y


def test_one_entry_per_shape_up_to_the_bound_then_eviction():
    f = ex.jit(double, cache_size=3)
    for n in range(1, 8):
        x = np.arange(n, dtype=np.float32) - 3
        np.testing.assert_array_equal(f(x).numpy(), np.maximum(x, 0) * 2)
    assert len(f.cache) == 3 and f.cache.evicted == 4
    assert "cached=3, evicted=4" in repr(f)
    # the evicted shape compiles again and still computes the right thing
    x = np.arange(1, dtype=np.float32)
    np.testing.assert_array_equal(f(x).numpy(), np.maximum(x, 0) * 2)
    assert f.cache.evicted == 5


def test_the_default_bound_holds_many_shapes():
    f = ex.jit(double)
    for n in range(1, DEFAULT_CACHE_SIZE + 11):
        f(np.ones(n, np.float32))
    assert len(f.cache) == DEFAULT_CACHE_SIZE and f.cache.evicted == 10


def test_eviction_is_noted_in_the_trace():
    f = ex.jit(double, cache_size=1)
    with ex.trace.record() as rec:
        f(np.ones(2, np.float32))
        f(np.ones(3, np.float32))
    notes = [e for e in rec.events if getattr(e, "name", "") == "cache full"]
    assert notes and "cache_size" in notes[0].detail


@pytest.mark.parametrize("size", [0, -1, True, 2.5, None])
def test_a_bad_cache_size_is_named(size):
    with pytest.raises(CompilerArgumentError, match="cache_size"):
        ex.jit(double, cache_size=size)


def test_dynamic_naming_a_missing_argument_is_refused():
    with pytest.raises(CompilerArgumentError, match=r"'z'.*two\(\) does not take.*x, y"):
        ex.jit(two, dynamic={"z": {0: "B"}})


@pytest.mark.parametrize("spec", [{"x": [0]}, {"x": {}}, {"x": {"0": "B"}}, {"x": {0: 3}},
                                  {"x": {0: "not a name"}}, {"x": {True: "B"}}])  # fmt: skip
def test_a_malformed_dynamic_is_refused(spec):
    with pytest.raises(CompilerArgumentError, match="dynamic"):
        ex.jit(two, dynamic=spec)


def test_dynamic_with_numpy_axis_works():
    f = ex.jit(two, dynamic={"x": {np.int64(0): "B"}, "y": {0: "B"}})
    for n in (2, 5, 9):
        a = np.ones(n, np.float32)
        np.testing.assert_array_equal(f(a, a).numpy(), 2 * a)
    assert len(f.cache) == 1
