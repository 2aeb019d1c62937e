"""The values a stepped lesson is made of (`explorer.sharding.lesson` builds them): each
tensor's state per device, a ring's rounds and moves, a collective done chunk by chunk, the
final check and one step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import TensorType
from .collective import Collective
from .layout import Layout

__all__ = ["TensorState", "ChunkMove", "RingRound", "LessonCollective", "Check", "LessonStep",
           "TOLERANCE"]  # fmt: skip

TOLERANCE = 1e-4  # float32 sums in another order than the float64 reference


@dataclass(frozen=True)
class TensorState:
    """One tensor at one step: its layout, the global block and local values per device.

    ``chunks``: while a ring collective runs, per device the number of devices'
    contributions each chunk of its buffer holds (0: not received yet); else None.
    """

    name: str
    role: str
    ttype: TensorType
    layout: Layout
    letters: str
    slices: tuple[tuple[tuple[int, int], ...], ...]
    values: tuple[np.ndarray, ...] = field(compare=False, repr=False)
    chunks: tuple[tuple[int, ...], ...] | None = None

    @property
    def notation(self) -> str:
        return self.layout.format(self.ttype, self.letters)

    @property
    def is_partial(self) -> bool:
        return bool(self.layout.partial)


@dataclass(frozen=True)
class ChunkMove:
    """``src`` sends chunk ``chunk`` of its buffer to ``dst``; ``reduce``: dst adds it."""

    src: int
    dst: int
    chunk: int
    reduce: bool


@dataclass(frozen=True)
class RingRound:
    """One round of a ring: the moves and, per mesh device, contributions per chunk after it."""

    index: int
    phase: str
    moves: tuple[ChunkMove, ...]
    counts: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class LessonCollective:
    """A ring collective done chunk by chunk.

    Args:
        kind: ``all-reduce``, ``all-gather`` or ``reduce-scatter``.
        axes: the mesh axes of each ring; ``rings``: device ids in ring order.
        chunk_dim: the dim of the buffer cut into ``len(ring)`` chunks.
        start: per device, contributions per chunk before the first round.
        bytes_per_device: counted from the moves (mean over the mesh's devices).
        predicted: the cost model's `Collective` (its ``bytes_per_device`` is the same).
    """

    kind: str
    axes: tuple[str, ...]
    tensor: str
    rings: tuple[tuple[int, ...], ...]
    chunk_dim: int
    start: tuple[tuple[int, ...], ...]
    rounds: tuple[RingRound, ...]
    bytes_per_device: float
    predicted: Collective | None

    @property
    def ring_size(self) -> int:
        return len(self.rings[0])


@dataclass(frozen=True)
class Check:
    """The sharded result against the unsharded numpy one."""

    tensors: tuple[str, ...]
    max_abs_error: float
    tolerance: float = TOLERANCE

    @property
    def ok(self) -> bool:
        return self.max_abs_error <= self.tolerance


@dataclass(frozen=True)
class LessonStep:
    """One step: the op, a sentence, every tensor's state; a collective's round if any.

    ``round``: 1-based round of ``collective`` this step shows (0 when none).
    """

    index: int
    op: str
    text: str
    tensors: tuple[TensorState, ...]
    collective: LessonCollective | None = None
    round: int = 0
    check: Check | None = None
