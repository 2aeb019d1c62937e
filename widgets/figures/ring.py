"""Ring collectives chunk by chunk, as data (what the MeshView's teaching mode steps).

A ring of ``n`` ranks splits the buffer into ``n`` chunks. Reduce-scatter: at step ``s``
rank ``r`` sends chunk ``(r - s) mod n`` to rank ``r + 1``, which adds it to its own copy;
after ``n - 1`` steps rank ``r`` holds the full sum of chunk ``(r + 1) mod n``. All-gather
passes complete chunks on the same way; all-reduce is reduce-scatter then all-gather
(``2 (n - 1)`` steps: the ``2(n-1)/n * S`` bytes of the cost model)::

    all-reduce, n = 3     step 0      step 2 (scattered)   step 4 (done)
    rank 0 chunks         1 1 1       1 3 2                3 3 3
    rank 1                1 1 1       2 1 3                3 3 3
    rank 2                1 1 1       3 2 1                3 3 3

Each number is how many ranks' contributions that copy of the chunk sums (``n`` = complete).
This is an illustration of the algorithm, not a cost: times come from
``explorer.hardware`` (``ring_time``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

__all__ = ["RingStep", "ring_steps", "TeachKind", "TEACH_KINDS"]

TeachKind = Literal["all-reduce", "all-gather", "reduce-scatter"]
TEACH_KINDS: tuple[str, ...] = get_args(TeachKind)


@dataclass(frozen=True)
class RingStep:
    """The state after a step: ``counts[rank, chunk]`` contributions held, and the sends
    ``(src rank, dst rank, chunk)`` of the step that produced it (none for step 0)."""

    index: int
    phase: str
    sends: tuple[tuple[int, int, int], ...]
    counts: np.ndarray


def ring_steps(kind: TeachKind, n: int) -> tuple[RingStep, ...]:
    """Every state of a ring ``kind`` over ``n`` ranks, initial state first.

    >>> steps = ring_steps("all-reduce", 3)
    >>> len(steps), int(steps[-1].counts.min())
    (5, 3)
    >>> steps[1].sends
    ((0, 1, 0), (1, 2, 1), (2, 0, 2))
    """
    if kind not in TEACH_KINDS:
        raise ValueError(f"kind={kind!r}; the ring teaching mode steps {', '.join(TEACH_KINDS)}")
    if n < 2:
        raise ValueError(f"a ring needs at least 2 ranks, got n={n}; pick a larger mesh axis")
    if kind == "all-gather":
        counts = np.zeros((n, n), dtype=np.int64)
        counts[np.arange(n), np.arange(n)] = n
    else:
        counts = np.ones((n, n), dtype=np.int64)
    out = [RingStep(0, "start", (), counts.copy())]
    if kind in ("reduce-scatter", "all-reduce"):
        for s in range(n - 1):
            sends = tuple((r, (r + 1) % n, (r - s) % n) for r in range(n))
            new = counts.copy()
            for src, dst, c in sends:
                new[dst, c] = counts[dst, c] + counts[src, c]
            counts = new
            out.append(RingStep(len(out), "reduce-scatter", sends, counts.copy()))
    if kind in ("all-gather", "all-reduce"):
        # all-gather: rank r starts owning chunk r; after a reduce-scatter, chunk r + 1.
        first = 0 if kind == "all-gather" else 1
        for s in range(n - 1):
            sends = tuple((r, (r + 1) % n, (r + first - s) % n) for r in range(n))
            new = counts.copy()
            for src, dst, c in sends:
                new[dst, c] = counts[src, c]
            counts = new
            out.append(RingStep(len(out), "all-gather", sends, counts.copy()))
    return tuple(out)
