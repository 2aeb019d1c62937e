"""Symbolic dims: sentinel substitution terminates for every size, and any number of
symbols can be declared."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.compiler import F
from explorer.compiler.jit.symbolic import PRIMES, _sub, sentinel


def _finishes(fn, timeout_s: float = 10.0):
    """Run ``fn`` in a thread; assert it returned within ``timeout_s``; return its value."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"did not finish within {timeout_s} s"
    return box["v"]


@pytest.mark.parametrize(
    ("size", "mapping", "expected"),
    [
        (7919, {7919: 7919}, 7919),  # bound size equal to its sentinel
        (7919, {7919: 2 * 7919}, 2 * 7919),  # a multiple of the sentinel
        (7919 * 7919 * 3, {7919: 7919}, 7919 * 7919 * 3),  # B*B*3 with B == sentinel
        (7919 * 7927, {7919: 7927, 7927: 5}, 7927 * 5),  # one bound to another's sentinel
        (6, {7919: 8}, 6),  # no sentinel in it
        (0, {7919: 8}, 0),
    ],
)
def test_sub_terminates_and_substitutes_once(size, mapping, expected):
    assert _finishes(lambda: _sub(size, mapping)) == expected


def test_sentinels_beyond_the_table_are_distinct_primes():
    s = [sentinel(i) for i in range(12)]
    assert s[: len(PRIMES)] == list(PRIMES)
    assert len(set(s)) == 12 and s == sorted(s)
    assert all(all(p % k for k in range(2, int(p**0.5) + 1)) for p in s)
    with pytest.raises(ValueError, match="negative"):
        sentinel(-1)


def seven_symbols(a, b, c, d, e, f, g):
    return F.sum(a, 0) + F.sum(b, 0) + F.sum(c, 0) + F.sum(d, 0) + F.sum(e, 0) + F.sum(
        f, 0
    ) + F.sum(g, 0)  # fmt: skip


def test_more_than_six_symbols():
    names = "abcdefg"
    fn = ex.jit(seven_symbols, dynamic={n: {0: n.upper()} for n in names})
    rng = np.random.default_rng(0)
    for sizes in ((1, 2, 3, 4, 5, 6, 7), (7, 6, 5, 4, 3, 2, 1)):
        args = [ex.tensor(rng.standard_normal((s, 3))) for s in sizes]
        np.testing.assert_allclose(fn(*args).numpy(), seven_symbols(*args).numpy(), rtol=1e-5)
    assert len(fn.cache) == 1


def batch_mean(x):
    return F.mean(x, 0)


def test_bound_size_equal_to_the_sentinel_runs():
    fn = ex.jit(batch_mean, dynamic={"x": {0: "B"}})
    x = ex.tensor(np.ones((PRIMES[0], 2)))
    out = _finishes(lambda: fn(x).numpy(), timeout_s=60.0)
    np.testing.assert_allclose(out, 1.0)


@settings(max_examples=100, deadline=None)
@given(
    rest=st.integers(1, 5000).filter(lambda r: all(r % p for p in PRIMES[:3])),
    powers=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    values=st.lists(st.integers(1, 3 * PRIMES[2]), min_size=3, max_size=3),
)
def test_sub_replaces_each_sentinel_factor_by_its_size(rest, powers, values):
    size = rest
    expected = rest
    for p, k, v in zip(PRIMES[:3], powers, values, strict=True):
        size *= p**k
        expected *= v**k
    mapping = dict(zip(PRIMES[:3], values, strict=True))
    assert _finishes(lambda: _sub(size, mapping)) == expected
