"""Every fused and generated elementwise kernel at least as accurate as eager, at the
arguments where formulas go wrong: zero, signed tiny and subnormal, moderate, large (where
exp overflows), and non-finite.

The claim (fp32, the only float dtype the fused kernels take): against the float64 value of
the same formula (``REFERENCE``, rounded to fp32), a kernel's error is at most ``RTOL`` = 2e-6
(17 fp32 ulps) of the value's magnitude plus ``ATOL`` = 1e-37 (subnormal results), or no more
than eager's own error where eager is further off (eager's fp32 GELU, ``0.5 x (1 + tanh(u))``,
cancels for x < -3; the kernels' ``x / (1 + exp(-2u))`` does not, and is the reference). Signed zeros, infinities
and NaNs where the reference has them. Each function runs on the numpy backend above the
size where the fused numexpr expression runs (below it numpy ufuncs run op by op), and the
functions with an op the cost model sends to numba (`cost.HEAVY`) on the numba backend's
generated kernel. A fused ``tanh`` written as ``2 / (1 + exp(-2u)) - 1`` failed here (7% off
at u = 1e-6); the earlier codegen tests' absolute tolerance of 1e-6 hid it.
"""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F
from explorer.compiler.codegen import cost, numba_available
from explorer.compiler.codegen.cost import HEAVY
from explorer.ir.activations import GELU_C, GELU_K

RTOL, ATOL = 2e-6, 1e-37
TINY = [1e-39, 1e-38, 1e-30, 1e-12, 1e-8, 1e-6, 1e-4, 1e-3]
MID = [0.03, 0.1, 0.5, 0.9, 1.0, 1.5, 3.0, 7.0]
BIG = [10.0, 20.0, 30.0, 44.0, 80.0, 88.0, 89.0, 100.0, 1e4, 1e30, 3e38]
ODD = [0.0, -0.0, np.inf, -np.inf, np.nan]
VALUES = np.array(TINY + MID + BIG + [-v for v in TINY + MID + BIG] + ODD, np.float32)
# above the size where the numpy backend runs the fused numexpr expression
N = 1 << 17


def k_exp(x):
    return F.exp(x) * 1.5


def k_log(x):
    return F.log(x) * 1.5


def k_tanh(x):
    return F.tanh(x) * 2.0


def k_sqrt(x):
    return F.sqrt(x) * 1.5


def k_abs(x):
    return F.abs(x) * 1.5


def k_neg(x):
    return F.neg(x) * 1.5


def k_relu(x):
    return F.relu(x) * 1.5


def k_gelu(x):
    return F.gelu(x) * 1.5


def k_silu(x):
    return F.silu(x) * 1.5


def k_sigmoid(x):
    return F.sigmoid(x) * 1.5


def k_scale(x):
    return F.scale(x, 0.125) + 0.5


def k_mixed(x):
    return F.exp(x) * F.tanh(x) + F.sigmoid(x) * F.silu(x)


OPS = {  # the ops of each function (which ones the numba backend generates kernels for)
    "exp": ["exp"],
    "log": ["log"],
    "tanh": ["tanh"],
    "sqrt": ["sqrt"],
    "abs": ["abs"],
    "neg": ["neg"],
    "relu": ["relu"],
    "gelu": ["gelu"],
    "silu": ["silu"],
    "sigmoid": ["sigmoid"],
    "scale": ["scale"],
    "mixed": ["exp", "tanh", "silu"],
}
FUNCTIONS = {
    "exp": k_exp,
    "log": k_log,
    "tanh": k_tanh,
    "sqrt": k_sqrt,
    "abs": k_abs,
    "neg": k_neg,
    "relu": k_relu,
    "gelu": k_gelu,
    "silu": k_silu,
    "sigmoid": k_sigmoid,
    "scale": k_scale,
    "mixed": k_mixed,
}


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


REFERENCE = {  # float64 values of each function (the same formulas)
    "exp": lambda x: np.exp(x) * 1.5,
    "log": lambda x: np.log(x) * 1.5,
    "tanh": lambda x: np.tanh(x) * 2.0,
    "sqrt": lambda x: np.sqrt(x) * 1.5,
    "abs": lambda x: np.abs(x) * 1.5,
    "neg": lambda x: -x * 1.5,
    "relu": lambda x: np.maximum(x, 0.0) * 1.5,
    # 0.5 x (1 + tanh(u)) == x sigmoid(2u); the first cancels even in float64 for x < -5
    "gelu": lambda x: x * _sigmoid(2 * GELU_C * (x + GELU_K * x**3)) * 1.5,
    "silu": lambda x: x * _sigmoid(x) * 1.5,
    "sigmoid": lambda x: _sigmoid(x) * 1.5,
    "scale": lambda x: x * 0.125 + 0.5,
    "mixed": lambda x: np.exp(x) * np.tanh(x) + _sigmoid(x) * x * _sigmoid(x),
}


def _check(name: str, x: np.ndarray, got: np.ndarray, eager: np.ndarray) -> None:
    with np.errstate(all="ignore"):
        ref = REFERENCE[name.split()[0]](x.astype(np.float64)).astype(np.float32)
    bad = []
    for v, g, e, r in zip(x, got, eager, ref, strict=True):
        if np.isnan(r) or np.isinf(r) or r == 0:
            ok = (np.isnan(g) and np.isnan(r)) or (g == r and np.signbit(g) == np.signbit(r))
            ok = ok or (g == e and np.signbit(g) == np.signbit(e))  # no worse than eager
        else:
            err = abs(float(g) - float(r))
            ok = err <= RTOL * abs(float(r)) + ATOL or err <= abs(float(e) - float(r))
        if not ok:
            bad.append(f"x={v!r}: kernel {g!r}, eager {e!r}, float64 {r!r}")
    assert not bad, f"{name}: {len(bad)} values off: " + "; ".join(sorted(set(bad))[:8])


def _run(name: str, backend: str) -> None:
    x = np.tile(VALUES, N // VALUES.size + 1)[:N].reshape(N // 256, 256)
    fn = FUNCTIONS[name]
    with np.errstate(all="ignore"):
        want = np.asarray(fn(ex.tensor(x)).numpy()).ravel()
        f = ex.jit(fn, backend=backend)
        got = np.asarray(f(ex.tensor(x)).numpy()).ravel()
    ops = [n.op for n in f.lower(ex.tensor(x)).ops]
    assert ("generated" if backend == "numba" else "fused") in ops, ops
    _check(f"{name} ({backend})", x.ravel(), got, want)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_fused_numpy_kernel_as_accurate_as_eager(name):
    _run(name, "numpy")


@pytest.mark.skipif(not numba_available(), reason="numba is not installed")
@pytest.mark.parametrize("name", [n for n in FUNCTIONS if HEAVY & set(OPS[n])])
def test_generated_numba_kernel_as_accurate_as_eager(name, monkeypatch):
    monkeypatch.setenv("EXPLORER_NUMBA_COMPILE", "sync")
    monkeypatch.setattr(cost, "MIN_WORK", 0)
    _run(name, "numba")
