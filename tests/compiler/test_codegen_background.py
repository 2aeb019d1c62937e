"""Background compilation of generated kernels (``EXPLORER_NUMBA_COMPILE=background``, the
default): a first call never waits for numba; the region's numpy kernel serves the calls
until the worker has compiled the kernel, then the numba kernel runs. Results equal eager
either way (rtol 1e-5, atol 1e-6, the tolerance of test_codegen.py).

The worker's ``load`` is wrapped so that a test decides when compilation finishes (an
Event) and counts the compiled kernel's calls: no test depends on timing.
"""

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F
from explorer.compiler.codegen import build, cost, numba_available

needs_numba = pytest.mark.skipif(not numba_available(), reason="numba is not installed")
RTOL, ATOL = 1e-5, 1e-6


def fresh(monkeypatch):
    """Background mode, every region a kernel, and a process that has loaded no kernel yet
    (kernels are shared by source: another test may have compiled the same one)."""
    monkeypatch.setattr(cost, "MIN_WORK", 0)
    monkeypatch.setenv("EXPLORER_NUMBA_COMPILE", "background")
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setattr(build, "_PENDING", {})
    monkeypatch.setattr(build, "_QUEUED", [])


@pytest.fixture
def gated(monkeypatch):
    """(release event, list of numba-kernel calls): the worker compiles only once the event
    is set; every call of a kernel it compiled is appended to the list."""
    fresh(monkeypatch)
    release, calls = threading.Event(), []
    real = build.load

    def slow_load(source, entry):
        assert release.wait(60), "the test never released the compile worker"
        fn = real(source, entry)

        def counted(*args):
            calls.append(entry)
            return fn(*args)

        return counted

    monkeypatch.setattr(build, "load", slow_load)
    yield release, calls
    release.set()
    build.wait_compiled(60)


def _args(rng, scale):
    x = ex.tensor(rng.standard_normal((6, 16)).astype(np.float32))
    g = ex.tensor(rng.standard_normal(16).astype(np.float32) * scale)
    b = ex.tensor(rng.standard_normal(16).astype(np.float32))
    return x, g, b


@needs_numba
def test_first_calls_run_numpy_until_the_kernel_is_compiled(gated, rng):
    release, calls = gated

    def f(x, g, b):
        return F.gelu(x * 1.7183 + b) * 0.3183, F.layer_norm(x, g, b, eps=3.1e-5)

    args = _args(rng, 1.0)
    want = f(*args)
    jf = ex.jit(f, backend="numba")
    assert not build.has_queued()
    for _ in range(3):  # the worker is held: the numpy kernels answer
        got = jf(*args)
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), w.numpy(), rtol=RTOL, atol=ATOL)
        assert not build.has_queued()  # handed to the worker after the run
    assert calls == []
    assert [n.op for n in jf.lower(*args).ops].count("generated") == 2
    release.set()
    assert build.wait_compiled(60)
    got = jf(*args)  # the same program now calls the compiled kernels
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), w.numpy(), rtol=RTOL, atol=ATOL)
    assert sorted(calls) == ["fused_kernel", "layernorm_kernel"]
    worker = next(t for t in threading.enumerate() if t.name == "explorer-numba")
    assert worker.daemon  # a process exits without waiting for kernels it no longer needs


@needs_numba
def test_in_place_regions_are_right_while_numpy_serves_them(gated, rng):
    """The memory plan may give a generated region its input's buffer; the numpy kernels of
    a norm are not in-place safe, so the pending kernel copies their result into it."""

    def mlp(x, w, g, b):
        h = x @ w
        return F.rms_norm(F.layer_norm(h, g, b, eps=2.7e-5) * 1.4142, g, eps=4.1e-6) @ w.T

    x, g, b = _args(rng, 0.5)
    w = ex.tensor(rng.standard_normal((16, 16)).astype(np.float32))
    jf = ex.jit(mlp, backend="numba", level="O2")
    want = mlp(x, w, g, b).numpy()
    np.testing.assert_allclose(jf(x, w, g, b).numpy(), want, rtol=RTOL, atol=ATOL)
    gated[0].set()
    assert build.wait_compiled(60)
    np.testing.assert_allclose(jf(x, w, g, b).numpy(), want, rtol=RTOL, atol=ATOL)
    assert gated[1], "the compiled kernels never ran"


@needs_numba
def test_a_kernel_that_fails_to_compile_keeps_numpy_and_warns_once(monkeypatch, rng):
    fresh(monkeypatch)

    def broken(source, entry):
        raise build.KernelBuildError(f"numba could not compile the generated kernel {entry}")

    monkeypatch.setattr(build, "load", broken)

    def f(x, b):
        return F.tanh(x * 2.2361 + b) * 0.5772

    x, _, b = _args(rng, 1.0)
    jf = ex.jit(f, backend="numba")
    jf(x, b)
    assert build.wait_compiled(60)
    with pytest.warns(RuntimeWarning, match="runs on numpy: numba could not compile"):
        got = jf(x, b)
    np.testing.assert_allclose(got.numpy(), f(x, b).numpy(), rtol=RTOL, atol=ATOL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        np.testing.assert_allclose(jf(x, b).numpy(), f(x, b).numpy(), rtol=RTOL, atol=ATOL)


def test_unknown_compile_mode_is_refused(monkeypatch):
    monkeypatch.setenv("EXPLORER_NUMBA_COMPILE", "eventually")
    with pytest.raises(build.KernelBuildError, match="'eventually'.*background, sync"):
        build.compile_mode()


@needs_numba
@pytest.mark.parametrize("env", [None, "1", "3"])
def test_thread_count_is_numbas_without_importing_numba(env):
    """Choosing a large region's backend asks for numba's thread count; it must not import
    numba on the calling thread (a fresh process: numba not yet imported)."""
    code = (
        "import sys\n"
        "from explorer.compiler.codegen.build import numba_threads\n"
        "n = numba_threads()\n"
        "assert 'numba' not in sys.modules, 'numba_threads imported numba'\n"
        "import numba\n"
        "assert n == numba.config.NUMBA_NUM_THREADS, (n, numba.config.NUMBA_NUM_THREADS)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    if env is not None:
        environ["NUMBA_NUM_THREADS"] = env
    root = Path(__file__).resolve().parents[2]  # the repository: explorer importable
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=300, check=False, cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
