"""The time-balanced stage split, memory ignored: `pipeline.partition.partition_layers`
with no memory terms and one set of part times, computed on the part of its programme a
split can use.

`partition_layers` fills, for each stage ``k``, an ``(n+1) x (n+1)`` table over every
stage ``[i, j)``, with its memory check. Without memory (``estimate`` and ``simulate`` ask
for this split a thousand times per plan) the check is always true, and stage ``k`` of
``S`` can only end at a part ``j`` with ``k <= j <= n - (S - k)`` (every stage holds at
least one part) after a start ``i`` where stage ``k - 1``'s best is finite. The table here
is that window of the same numbers (``T[j] - T[i]`` of the same cumulative sums, the same
``max``), so the minimum, its first index and the split are the same, bit for bit
(``tests/training/test_balanced_split.py`` compares the two on random and tied times).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..pipeline.partition import StagePartition, partition_layers

__all__ = ["balanced_split"]


def balanced_split(
    times: Sequence[float], stages: int, end_stages_alone: bool = False
) -> StagePartition:
    """The split of ``times`` (``[embed, layers..., head]``, seconds per part) over
    ``stages`` minimising the slowest stage, as ``partition_layers(times, zeros, zeros,
    [1.0] * stages, [inf] * stages, end_stages_alone)`` returns it (which also raises its
    `PartitionError` when no split exists).

    >>> print(balanced_split([1.0, 4.0, 4.0, 4.0, 4.0, 3.0], 2))
    embed+2 | 2+head
    """
    n = len(times)
    most = n if end_stages_alone else n - 2
    if stages > most or stages < 1:
        return _reference(times, stages, end_stages_alone)  # raises its error
    per_part = np.asarray(times, dtype=float)
    T = np.concatenate([np.zeros(1), np.cumsum(per_part)])
    idx = np.arange(n + 1)
    I, J = idx[:, None], idx[None, :]
    ok = J > I
    if not end_stages_alone:
        ok &= ~((I == 0) & (J == 1)) & ~((I == n - 1) & (J == n))
    seconds = np.where(ok, T[J] - T[I], np.inf)  # a stage [i, j); inf where not allowed
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((stages + 1, n + 1), dtype=np.int64)
    for k in range(1, stages + 1):
        finite = np.flatnonzero(np.isfinite(best))
        if finite.size == 0:
            return _reference(times, stages, end_stages_alone)
        lo, hi = int(finite[0]), n - (stages - k)  # starts from lo, ends up to hi
        if lo >= hi:
            return _reference(times, stages, end_stages_alone)
        cand = np.maximum(best[lo:hi, None], seconds[lo:hi, lo + 1 : hi + 1])
        at = cand.argmin(axis=0)
        new = np.full(n + 1, np.inf)
        new[lo + 1 : hi + 1] = cand[at, np.arange(hi - lo)]
        choice[k, lo + 1 : hi + 1] = at + lo
        best = new
    if not np.isfinite(best[n]):
        return _reference(times, stages, end_stages_alone)
    bounds = [n]
    for k in range(stages, 0, -1):
        bounds.append(int(choice[k][bounds[-1]]))
    return StagePartition(tuple(reversed(bounds)), n - 2)


def _reference(times: Sequence[float], stages: int, alone: bool) -> StagePartition:
    zeros = [0.0] * len(times)
    return partition_layers(times, zeros, zeros, [1.0] * stages, [np.inf] * stages, alone)
