"""Which backend runs a region: a small cost model of the numpy path against a generated
numba kernel, from the region's element count and op count.

The numpy path (``ufunc_program``, blocked ufuncs, numexpr) pays per op: one ufunc call
(about a microsecond) plus a pass over memory per op. A numba kernel pays one call (a few
microseconds to check its arguments' types, more to wake its threads when parallel) plus
one pass over memory. So numba wins once a region has a few ops or a few thousand
elements; it runs on threads once a region is large enough to cover waking them.
The constants are measured on the development machine (2 cores, see bench/jit.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Choice", "choose", "MIN_WORK", "PARALLEL_MIN_NUMEL"]

# A region is worth a numba kernel when elements x ops reach this: below it the
# ufunc calls of the numpy path cost less than numba's argument checks.
MIN_WORK = 4096
# Threads across cores from this many elements on (waking numba's workers costs ~10 us).
PARALLEL_MIN_NUMEL = 1 << 16

Kind = Literal["elementwise", "softmax", "layernorm", "rmsnorm"]


@dataclass(frozen=True)
class Choice:
    """The backend of one region and why."""

    backend: Literal["numba", "numpy"]
    parallel: bool
    reason: str


def choose(kind: Kind, numel: int, n_ops: int, numba_ok: bool) -> Choice:
    """The backend for a region of ``numel`` output elements made of ``n_ops`` ops."""
    work = numel * max(n_ops, 1)
    if not numba_ok:
        return Choice("numpy", False, "numba is not installed (or EXPLORER_NO_NUMBA=1)")
    if work < MIN_WORK:
        return Choice("numpy", False,
                      f"{numel} elements x {n_ops} ops < {MIN_WORK}: numpy's calls are cheaper")  # fmt: skip
    parallel = numel >= PARALLEL_MIN_NUMEL
    how = "threads across cores" if parallel else "one thread"
    return Choice("numba", parallel, f"{numel} elements x {n_ops} ops, {how}")
