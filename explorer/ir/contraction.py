"""The einsum kernel: a two-operand contraction runs as transpose + batched matmul +
transpose (one BLAS call), anything else as ``np.einsum(..., optimize=True)``.

The registry's ``einsum`` impl (eager) and the compiler's kernel use the same plan, so
eager and ``@jit`` run the same BLAS calls and only what the compiler adds differs.

>>> import numpy as np
>>> a, b = np.ones((2, 3, 4), np.float32), np.ones((2, 4, 5), np.float32)
>>> einsum(a, b, eq="bik,bkj->bij").shape
(2, 3, 5)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..memo import Memo

__all__ = ["einsum_as_matmul", "einsum"]

MatmulPlan = Callable[..., np.ndarray]


def einsum_as_matmul(eq: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...]):
    """``run(a, b, out=None)`` computing a two-operand ``eq`` as transpose + batched matmul
    + transpose; None when a letter is summed within one operand (or ``...`` appears)."""
    lhs, out = eq.replace(" ", "").split("->")
    sa, sb = lhs.split(",")
    if "." in eq or len(set(sa)) != len(sa) or len(set(sb)) != len(sb):
        return None
    if any(c not in sb and c not in out for c in sa) or any(
        c not in sa and c not in out for c in sb
    ):
        return None
    batch = [c for c in sa if c in sb and c in out]
    contr = [c for c in sa if c in sb and c not in out]
    lfree = [c for c in sa if c not in sb]
    rfree = [c for c in sb if c not in sa]
    size = dict(zip(sa, a_shape, strict=True)) | dict(zip(sb, b_shape, strict=True))
    pa = tuple(sa.index(c) for c in batch + lfree + contr)
    pb = tuple(sb.index(c) for c in batch + contr + rfree)
    nb = math.prod(size[c] for c in batch)
    L, K, R = (math.prod(size[c] for c in g) for g in (lfree, contr, rfree))
    mid = batch + lfree + rfree
    po = tuple(mid.index(c) for c in out)
    mid_shape = tuple(size[c] for c in mid)
    identity = po == tuple(range(len(po)))

    def run(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        a3 = a.transpose(pa).reshape(nb, L, K)
        b3 = b.transpose(pb).reshape(nb, K, R)
        if out is not None and identity:
            np.matmul(a3, b3, out=out.reshape(nb, L, R))
            return out
        r = np.matmul(a3, b3).reshape(mid_shape).transpose(po)
        if out is None:
            return np.ascontiguousarray(r)
        np.copyto(out, r)
        return out

    return run


# key: the equation and both shapes (every input of the plan)
_PLANS: Memo[MatmulPlan | None] = Memo("ir.einsum_plans", maxsize=1024)


def einsum(*xs: np.ndarray, eq: str) -> np.ndarray:
    """``np.einsum(eq, *xs)`` on BLAS: the matmul plan for two operands of matching rank,
    numpy's optimised path otherwise."""
    if len(xs) == 2 and "." not in eq:
        a, b = np.asarray(xs[0]), np.asarray(xs[1])
        lhs = eq.replace(" ", "").split("->")[0].split(",")
        if len(lhs) == 2 and a.ndim == len(lhs[0]) and b.ndim == len(lhs[1]):
            key = (eq, a.shape, b.shape)
            plan = _PLANS.get(key, lambda: einsum_as_matmul(eq, a.shape, b.shape))
            if plan is not None:
                return plan(a, b)
    return np.einsum(eq, *xs, optimize=True)
