"""Which backend runs a region: a small cost model of the numpy path against a generated
numba kernel, from the region's element count and op count.

The numpy path (``ufunc_program``, blocked ufuncs, numexpr) pays per op: one ufunc call
(about a microsecond) plus a pass over memory per op. A numba kernel pays one call (a few
microseconds to check its arguments' types, more to wake its threads when parallel) plus
one pass over memory. So numba wins once a region has a few ops or a few thousand
elements; it runs on threads once a region is large enough to cover waking them.

Measured here (2 shared cores, one @jit call each, median of 9 interleaved rounds):
bias + GELU at 8x512 numpy 34 us, numba 21 us; at 64x512 75 vs 50 us; bias + GELU + mask
+ residual at 64x512 125 vs 49 us; x + 2y at 64x512 27 vs 21 us. On two cores that other
jobs share, a parallel kernel waits for its slowest thread: x + 2y at 512x512 took 0.4 ms
in numpy and up to 8 ms on numba's threads, so regions go parallel only from 1M elements
and when numba has more than one thread.

Two-op regions without a heavy op (a bias add plus a residual add) stay on numpy below
``TWO_OP_MIN_NUMEL`` only: from there numba's one pass beats numpy's two (kernel calls of
this module's kernels, out= given, min of 80 interleaved calls, measured under load):
``x + y + b`` at 64x512 numpy 13 us, numba 6 us; 128x768 50 vs 22 us; 256x768 (numpy
blocked) 146 vs 68 us; 512x768 (GPT-2 small's 512-token prefill, 24 such regions) 347 vs
165 us. A single add is memory-bound either way (512x768: 161 vs 164 us).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Choice", "choose", "MIN_WORK", "PARALLEL_MIN_NUMEL", "HEAVY", "HEAVY_MIN_NUMEL",
           "TWO_OP_MIN_NUMEL"]  # fmt: skip

# A region is worth a numba kernel when elements x ops reach this: below it the
# ufunc calls of the numpy path cost less than numba's argument checks.
MIN_WORK = 4096
# A region with a HEAVY op goes to numba from this many elements even below MIN_WORK:
# numpy runs a tanh-GELU as about nine ufunc calls. Bias + tanh-GELU at 1x128 (the three
# regions of a batch-1 MLP of hidden 128, ex.compile): the whole call 19.8 -> 15.0 us
# (measured with other work running, kernels compiled).
HEAVY_MIN_NUMEL = 128
# A two-op region without a heavy op goes to numba from this many elements (see above).
TWO_OP_MIN_NUMEL = 1 << 15
# Threads across cores from this many elements on (see above).
PARALLEL_MIN_NUMEL = 1 << 20

# Ops numpy runs as several passes or numba's scalar code makes costly enough to fuse
# (exp-based activations, roots, powers). Two other ops are memory-bound either way:
# x + 2y at 64x512 took 37 us on both paths.
HEAVY = frozenset({"exp", "log", "tanh", "sqrt", "pow", "gelu", "silu", "sigmoid", "where"})

Kind = Literal["elementwise", "softmax", "layernorm", "rmsnorm", "attention"]


@dataclass(frozen=True)
class Choice:
    """The backend of one region and why."""

    backend: Literal["numba", "numpy"]
    parallel: bool
    reason: str


def choose(kind: Kind, numel: int, n_ops: int, numba_ok: bool, threads: int = 1,
           ops: tuple[str, ...] = ()) -> Choice:  # fmt: skip
    """The backend for a region of ``numel`` output elements made of ``n_ops`` ops (an
    elementwise region's op names in ``ops``), with ``threads`` numba threads available.

    >>> choose("elementwise", 64 * 512, 4, True).backend
    'numba'
    >>> choose("elementwise", 16, 2, True).reason
    "16 elements x 2 ops < 4096: numpy's calls are cheaper"
    >>> choose("elementwise", 128, 2, True, ops=("add", "gelu")).backend
    'numba'
    >>> [choose("elementwise", n, 2, True, ops=("add", "add")).backend for n in (4096, 1 << 15)]
    ['numpy', 'numba']
    """
    work = numel * max(n_ops, 1)
    if not numba_ok:
        return Choice("numpy", False, "numba is not installed (or EXPLORER_NO_NUMBA=1)")
    if work < MIN_WORK and not (HEAVY.intersection(ops) and numel >= HEAVY_MIN_NUMEL):
        return Choice("numpy", False,
                      f"{numel} elements x {n_ops} ops < {MIN_WORK}: numpy's calls are cheaper")  # fmt: skip
    light = kind == "elementwise" and not HEAVY.intersection(ops)
    if light and (n_ops <= 1 or (n_ops == 2 and numel < TWO_OP_MIN_NUMEL)):
        return Choice("numpy", False, f"{' and '.join(ops) or 'two ops'} of {numel} elements: "
                                      "memory-bound, no gain")  # fmt: skip
    parallel = numel >= PARALLEL_MIN_NUMEL and threads > 1
    how = "threads across cores" if parallel else "one thread"
    return Choice("numba", parallel, f"{numel} elements x {n_ops} ops, {how}")
