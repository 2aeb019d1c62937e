"""Large weights moved onto transparent huge pages, in place (Linux ``MADV_COLLAPSE``).

A matrix-vector product at batch 1 streams its weight from memory once per call, and on a
page of 4 KiB every 4 KiB of the stream is a TLB miss. PyTorch allocates its tensors on
4 KiB pages (numpy advises huge pages for its own arrays from 4 MiB; torch does not), so
a model imported with ``ex.compile`` streams its weights slower than the same bytes in a
numpy array. Measured on this project's machine (one thread, numpy's BLAS, the weights of
GPT-2 small, 494 MB per decode step): the tied 768 x 50257 head 11.8 ms a pass from
torch's memory against 10.2-10.4 ms after the collapse, the 72 layer matrices
25.1-25.4 ms against 24.5 ms.

`collapse` asks the kernel to back each large array's whole 2 MiB pages by huge pages:
``madvise(MADV_COLLAPSE)`` copies the 4 KiB pages into huge pages synchronously and keeps
the data and the addresses, so nothing is copied in the process and nothing is
duplicated (no second copy of the weights, unlike packing them into a fresh numpy
buffer). It is advice: where the kernel refuses (not Linux, older than 6.1, THP set to
"never", file-backed memory, no free huge page) the array stays as it was and the
computation is the same; `collapse` returns the bytes the kernel did move.

>>> import numpy as np
>>> collapse([np.zeros(16, np.float32)])  # below MIN_BYTES: nothing asked
0
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Iterable

import numpy as np

__all__ = ["collapse", "MIN_BYTES", "HUGE_PAGE", "supported"]

#: Arrays from this size are collapsed (numpy's own threshold for advising huge pages).
MIN_BYTES = 4 << 20
#: The x86-64 transparent huge page: only whole, aligned pages inside an array are moved.
HUGE_PAGE = 2 << 20
_MADV_COLLAPSE = 25  # linux/mman.h, since Linux 6.1


@functools.cache
def _madvise():
    """libc's ``madvise``, or None off Linux (or without a C library to load)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def supported() -> bool:
    """Whether this process can ask for huge pages at all (Linux, THP not "never")."""
    if _madvise() is None:
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def collapse(arrays: Iterable[np.ndarray], min_bytes: int = MIN_BYTES) -> int:
    """Bytes moved onto huge pages: for each array of at least ``min_bytes`` (each memory
    range once, however many arrays view it), its whole aligned 2 MiB pages."""
    big = [a for a in arrays if isinstance(a, np.ndarray) and a.nbytes >= min_bytes]
    madvise = _madvise() if big and supported() else None
    if madvise is None:
        return 0
    moved = 0
    for start, end in _pages(big):
        if madvise(start, end - start, _MADV_COLLAPSE) == 0:
            moved += end - start
    return moved


def _pages(arrays: list[np.ndarray]) -> list[tuple[int, int]]:
    """The whole aligned huge pages inside the arrays' memory, as disjoint ``[start, end)``
    address ranges (arrays viewing the same memory give one range)."""
    spans = []
    for a in arrays:
        lo, hi = np.lib.array_utils.byte_bounds(a)
        start = (lo + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
        end = hi // HUGE_PAGE * HUGE_PAGE
        if end > start:
            spans.append((start, end))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
