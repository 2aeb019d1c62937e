"""GELU, defined once: the registry's impl (eager), the compiler's kernel, constant folding
and the fused expression all use the definitions here.

The tanh form (Hendrycks & Gimpel), as GPT-2 and Megatron use it::

    gelu(x) = 0.5 x (1 + tanh(c (x + k x^3))),   c = sqrt(2 / pi), k = 0.044715

The kernel keeps the input's dtype (fp32 in, fp32 maths: ``x*x*x``, never numpy's
float64 ``x**3``) and can write into a preallocated ``out``.

>>> import numpy as np
>>> y = gelu(np.array([-1.0, 0.0, 2.0], np.float32))
>>> y.dtype, [round(float(v), 4) for v in y]
(dtype('float32'), [-0.1588, 0.0, 1.9546])
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["GELU_C", "GELU_K", "gelu", "gelu_erf", "gelu_grad", "gelu_expression"]

GELU_C = math.sqrt(2.0 / math.pi)
GELU_K = 0.044715


def _floating(x) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """GELU of ``x`` in ``x``'s dtype; fills ``out`` (same shape, not ``x`` itself) if given."""
    x = _floating(x)
    dt = x.dtype.type
    o = np.empty_like(x) if out is None else out
    np.multiply(x, x, out=o)
    o *= x
    o *= dt(GELU_K)
    o += x
    o *= dt(GELU_C)
    np.tanh(o, out=o)
    o += dt(1.0)
    o *= x
    o *= dt(0.5)
    return o


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """The exact GELU, ``0.5 x (1 + erf(x / sqrt 2))``: torch's default ``nn.GELU()`` and
    the ``gelu`` of Hugging Face configs whose experts use it (the IR's ``gelu`` op is the
    tanh form above)."""
    from scipy.special import erf

    x = _floating(x)
    return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def gelu_grad(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``g * d gelu(x) / dx`` in ``x``'s dtype."""
    x = _floating(x)
    dt = x.dtype.type
    x2 = x * x
    t = np.tanh(dt(GELU_C) * (x + dt(GELU_K) * x2 * x))
    d = dt(0.5) * (1 + t) + dt(0.5) * x * (1 - t * t) * dt(GELU_C) * (1 + dt(3 * GELU_K) * x2)
    return (g * d).astype(x.dtype, copy=False)


def gelu_expression(x: str, const: Callable[[float], str]) -> str:
    """GELU as an expression over the variable ``x`` for generated code (the fused
    kernels); ``const(v)`` spells a constant. ``0.5 x (1 + tanh(u)) == x / (1 +
    exp(-2u))``, so the expression needs one exp and no tanh."""
    return (
        f"({x} / ({const(1.0)} + exp({const(-2.0 * GELU_C)} * ({x} + {const(GELU_K)} * "
        f"{x} * {x} * {x}))))"
    )
