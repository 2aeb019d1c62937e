"""@jit from many threads: the capture state is per thread, the cache is locked, and
concurrent calls never share a program's buffers."""

import threading

import numpy as np

import explorer as ex
from explorer.compiler import F

THREADS, CALLS = 8, 200


def dense(x, w, b):
    return F.relu(x @ w + b) * 2.0


def attention_like(x, w):
    return F.softmax(x @ w) * 3.0 + x @ w


def _hammer(fn, make_args, expected):
    """Each thread calls ``fn`` CALLS times on its own inputs; returns the wrong results and
    the exceptions raised."""
    wrong: list = []
    errors: list = []
    start = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        try:
            args = make_args(k)
            start.wait()
            for _ in range(CALLS):
                out = fn(*args).numpy()
                if not np.array_equal(out, expected[k]):
                    wrong.append(k)
        except Exception as e:  # noqa: BLE001  (reported below, with its type)
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish"
    return wrong, errors


def test_threads_calling_one_jit_function_get_eager_results_exactly():
    rng = np.random.default_rng(0)
    w = ex.tensor(rng.standard_normal((16, 32)))
    b = ex.tensor(rng.standard_normal(32))
    xs = [ex.tensor(rng.standard_normal((4, 16))) for _ in range(THREADS)]
    expected = [dense(x, w, b).numpy() for x in xs]  # eager
    f = ex.jit(dense)  # first compiled by the threads themselves, all at once
    wrong, errors = _hammer(f, lambda k: (xs[k], w, b), expected)
    assert errors == []
    assert wrong == []
    assert len(f.cache) == 1


def test_threads_share_no_scratch_buffers():
    rng = np.random.default_rng(1)
    w = ex.tensor(rng.standard_normal((16, 16)))
    xs = [ex.tensor(rng.standard_normal((8, 16))) for _ in range(THREADS)]
    f = ex.jit(attention_like)
    expected = [f(x, w).numpy() for x in xs]  # one thread: the reference results
    for x, e in zip(xs, expected, strict=True):
        np.testing.assert_allclose(e, attention_like(x, w).numpy(), rtol=1e-5, atol=1e-6)
    wrong, errors = _hammer(f, lambda k: (xs[k], w), expected)
    assert errors == []
    assert wrong == []


def test_eager_ops_run_while_another_thread_compiles():
    inside, release = threading.Event(), threading.Event()

    def gate():
        inside.set()
        assert release.wait(timeout=60)

    def slow_to_compile(x):
        y = x * 2.0
        gate()  # capture pauses here, with this thread's tracer active
        return y + 1.0

    f = ex.jit(slow_to_compile)
    result: dict = {}

    def compile_it():
        try:
            result["jit"] = f(ex.tensor(np.ones(3))).numpy()
        except Exception as e:  # noqa: BLE001
            result["error"] = repr(e)

    t = threading.Thread(target=compile_it)
    t.start()
    try:
        assert inside.wait(timeout=60)
        x = ex.tensor(np.arange(3.0))
        eager = (x * 2.0 + 1.0).numpy()  # would be a GraphBreak if it joined the capture
        grads = ex.grad(lambda v: (v * v).sum())(x).numpy()
    finally:
        release.set()
        t.join(timeout=60)
    np.testing.assert_array_equal(eager, [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(grads, [0.0, 2.0, 4.0])
    assert "error" not in result, result
    np.testing.assert_array_equal(result["jit"], [3.0, 3.0, 3.0])
    captured = f.graph(ex.tensor(np.ones(3)))
    assert [n.op for n in captured.ops] == [
        "scale",
        "constant",
        "add",
    ]  # nothing of the eager thread
