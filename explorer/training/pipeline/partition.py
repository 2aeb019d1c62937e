"""Split the model's parts (embedding, layers, head) into contiguous pipeline stages.

`partition_layers` is a dynamic programme over the parts' times: it minimises the slowest
stage subject to each stage's memory cap (``static + in_flight * activations <= cap``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import PartitionError

__all__ = ["StagePartition", "PartitionError", "partition_layers", "uniform_partition"]


@dataclass(frozen=True)
class StagePartition:
    """Stage ``g`` holds parts ``bounds[g]:bounds[g+1]`` of the list
    ``[embed, layer 0, ..., layer L-1, head]``.

    >>> print(uniform_partition(8, 4))
    embed+2 | 2 | 2 | 2+head
    """

    bounds: tuple[int, ...]
    num_layers: int
    shapes: tuple[tuple[int, bool, bool], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        end = self.num_layers + 2
        shapes = []
        for lo, hi in zip(self.bounds, self.bounds[1:], strict=False):
            embed, head = lo == 0, hi == end
            shapes.append((hi - lo - embed - head, embed, head))
        object.__setattr__(self, "shapes", tuple(shapes))

    @property
    def stages(self) -> int:
        return len(self.bounds) - 1

    def has_embed(self, g: int) -> bool:
        return self.shapes[g][1]

    def has_head(self, g: int) -> bool:
        return self.shapes[g][2]

    def layers(self, g: int) -> int:
        return self.shapes[g][0]

    def layer_counts(self) -> tuple[int, ...]:
        return tuple(self.layers(g) for g in range(self.stages))

    def __str__(self) -> str:
        parts = []
        for g in range(self.stages):
            s = str(self.layers(g))
            s = ("embed+" if self.has_embed(g) else "") + s + ("+head" if self.has_head(g) else "")
            parts.append(s)
        return " | ".join(parts)


def uniform_partition(num_layers: int, stages: int) -> StagePartition:
    """Megatron-LM's split: layers as even as possible (earlier stages take the extra
    ones), the embedding with the first stage and the head with the last. With one or two
    stages more than layers, the embedding (then the head) gets a stage of its own (Llama
    3's interleaved layout, Llama Team 2024 section 3.3.2).

    >>> print(uniform_partition(3, 5))
    embed+0 | 1 | 1 | 1 | 0+head
    """
    if stages > num_layers + 2:
        raise PartitionError(
            f"{stages} pipeline stages for {num_layers} layers leaves a stage without "
            f"layers, embedding or head; use pp * virtual_stages <= {num_layers + 2}"
        )
    if stages > num_layers:
        bounds = list(range(0, num_layers + 2))
        if stages == num_layers + 1:
            bounds[-1] = num_layers + 2
        else:
            bounds.append(num_layers + 2)
        return StagePartition(tuple(bounds), num_layers)
    base, extra = divmod(num_layers, stages)
    bounds, at = [0], 1
    for g in range(stages):
        at += base + (g < extra)
        bounds.append(at)
    bounds[-1] = num_layers + 2
    return StagePartition(tuple(bounds), num_layers)


def partition_layers(
    times: Sequence[float], static_bytes: Sequence[float], activation_bytes: Sequence[float],
    in_flight: Sequence[float], caps: Sequence[float], end_stages_alone: bool = False,
) -> StagePartition:  # fmt: skip
    """The contiguous split of the parts minimising the slowest stage's time.

    Args:
        times: seconds per part (forward + backward of one microbatch), in model order
            ``[embed, layers..., head]``.
        static_bytes: per part, memory that does not depend on microbatches in flight.
        activation_bytes: per part, activation memory per microbatch in flight.
        in_flight: per stage, microbatches in flight at its peak (from the schedule).
        caps: per stage, the bytes it may use.

    Every stage gets at least one layer; with ``end_stages_alone`` the first stage may
    hold the embedding alone and the last the head alone (Llama 3's interleaved layout,
    Llama Team 2024 section 3.3.2: "the first model chunk on the first stage has only the
    embedding"). Raises `PartitionError` naming the smallest cap excess when no split fits.

    >>> p = partition_layers([1, 4, 4, 4, 4, 3], [0] * 6, [0] * 6, [1, 1], [1, 1])
    >>> print(p)
    embed+2 | 2+head
    """
    n = len(times)
    stages = len(caps)
    layers = n - 2
    most = layers + 2 if end_stages_alone else layers
    if stages > most:
        raise PartitionError(
            f"{stages} pipeline stages for {layers} layers leaves a stage without layers; "
            f"use pp * virtual_stages <= {most}"
        )
    T = np.concatenate([[0.0], np.cumsum(times)])
    M = np.concatenate([[0.0], np.cumsum(static_bytes)])
    A = np.concatenate([[0.0], np.cumsum(activation_bytes)])
    idx = np.arange(n + 1)
    I, J = idx[:, None], idx[None, :]
    # A stage [i, j) needs at least one layer: not just the embed (j == 1) or the head.
    ok = J > I
    if not end_stages_alone:
        ok &= ~((I == 0) & (J == 1)) & ~((I == n - 1) & (J == n))
    seg_t = T[J] - T[I]
    seg_m = M[J] - M[I]
    seg_a = A[J] - A[I]
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((stages + 1, n + 1), dtype=np.int64)
    worst_excess = np.inf
    for k in range(1, stages + 1):
        need = seg_m + in_flight[k - 1] * seg_a
        feasible = ok & (need <= caps[k - 1])
        cand = np.maximum(best[:, None], seg_t)
        cand = np.where(feasible, cand, np.inf)
        if not np.isfinite(cand).any():
            excess = np.where(ok & np.isfinite(best[:, None]), need - caps[k - 1], np.inf)
            worst_excess = float(excess.min())
            break
        choice[k] = cand.argmin(axis=0)
        best = cand.min(axis=0)
    if not np.isfinite(best[n]) or np.isfinite(worst_excess):
        extra = f" (stage {k - 1} is over by at least {worst_excess / 2**30:.2f} GiB)"
        raise PartitionError(
            f"no split of {layers} layers into {stages} stages fits the memory caps"
            f"{extra if np.isfinite(worst_excess) else ''}; use more pipeline stages, "
            "recomputation, a higher ZeRO stage or a smaller microbatch"
        )
    bounds = [n]
    for k in range(stages, 0, -1):
        bounds.append(int(choice[k][bounds[-1]]))
    return StagePartition(tuple(reversed(bounds)), layers)
