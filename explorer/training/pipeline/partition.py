"""Split the model's parts (embedding, layers, head) into contiguous pipeline stages.

Every way of cutting layers into stages is `partition_layers`, a dynamic programme over the
parts' times (the same on every stage, or per stage: stages on different pools or on a slow
node) with a fixed time per stage and each stage's memory cap (``static + in_flight *
activations <= cap``). It minimises the slowest stage, then, among splits as slow, the sum
of the stage times (the other term of the 1F1B step ``sum_g T_g + (m - 1) max_g T_g``,
`pipeline_time`), then the slowest stage before each cut. `split_layers` is its form with
one time per layer per stage and a most-layers cap per stage (the pools' and the
straggler's split).

Tie-break. With one time per part on every stage the sum is the same for every split, so
the split is the one whose earlier stages are lightest: 1F1B's stage ``g`` keeps ``p - g``
microbatches in flight, so the work goes where the fewest activations wait. The embedding
and head are parts with their own time, so the bottleneck alone already leaves the first
and last stages fewer layers when they are slow, Megatron-Core's convention for uneven
splits (``--account-for-embedding/loss-in-pipeline-split``, `export.megatron_split`);
within a tie the later stages take more, the last included.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import PartitionError

__all__ = [
    "StagePartition", "PartitionError", "partition_layers", "split_layers", "uniform_partition",
    "device_chunks", "distinct_devices",
]  # fmt: skip

# Two sums of stage times closer than this (relative) are one sum: the sums of one set of
# part times over different splits differ by rounding alone.
_SAME_SUM = 1e-9


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

    @classmethod
    def from_layers(cls, layers: Sequence[int]) -> StagePartition:
        """The split with ``layers[g]`` layers on stage ``g`` (embedding first, head last).

        >>> print(StagePartition.from_layers([3, 4, 1]))
        embed+3 | 4 | 1+head
        """
        bounds, at = [0], 1
        for n in layers:
            at += n
            bounds.append(at)
        num_layers = sum(layers)
        bounds[-1] = num_layers + 2
        return cls(tuple(bounds), num_layers)

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


@functools.lru_cache(maxsize=1024)
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
    times: Sequence[float] | Sequence[Sequence[float]], static_bytes: Sequence[float],
    activation_bytes: Sequence[float], in_flight: Sequence[float], caps: Sequence[float],
    end_stages_alone: bool = False, extra_s: Sequence[float] | None = None,
) -> StagePartition:  # fmt: skip
    """The contiguous split of the parts minimising the slowest stage's time, then the sum
    of the stage times (module docstring: the tie-break).

    Args:
        times: seconds per part (forward + backward of one microbatch), in model order
            ``[embed, layers..., head]``; or one such list per stage (the part's time on
            the devices of that stage).
        static_bytes: per part, memory that does not depend on microbatches in flight.
        activation_bytes: per part, activation memory per microbatch in flight.
        in_flight: per stage, microbatches in flight at its peak (from the schedule).
        caps: per stage, the bytes it may use.
        extra_s: per stage, seconds it spends whatever parts it holds (default none).

    Every stage gets at least one layer; with ``end_stages_alone`` the first stage may
    hold the embedding alone and the last the head alone (Llama 3's interleaved layout,
    Llama Team 2024 section 3.3.2: "the first model chunk on the first stage has only the
    embedding"). Raises `PartitionError` naming the smallest cap excess when no split fits.

    >>> p = partition_layers([1, 4, 4, 4, 4, 3], [0] * 6, [0] * 6, [1, 1], [1, 1])
    >>> print(p)
    embed+2 | 2+head

    Per stage, a second stage twice as fast per layer takes twice the layers:

    >>> print(partition_layers([[0, 2, 2, 2, 2, 2, 2, 0], [0, 1, 1, 1, 1, 1, 1, 0]],
    ...                        [0] * 8, [0] * 8, [1, 1], [1, 1]))
    embed+2 | 4+head
    """
    stages = len(caps)
    per_stage = np.asarray(times, dtype=float)
    alike = per_stage.ndim == 1 and extra_s is None  # every split has the same sum
    if per_stage.ndim == 1:
        per_stage = np.broadcast_to(per_stage, (stages, per_stage.size))
    n = per_stage.shape[1]
    extra = np.zeros(stages) if extra_s is None else np.asarray(extra_s, dtype=float)
    layers = n - 2
    most = layers + 2 if end_stages_alone else layers
    if stages > most:
        raise PartitionError(
            f"{stages} pipeline stages for {layers} layers leaves a stage without layers; "
            f"use pp * virtual_stages <= {most}"
        )
    T = np.concatenate([np.zeros((stages, 1)), np.cumsum(per_stage, axis=1)], axis=1)
    M = np.concatenate([[0.0], np.cumsum(static_bytes)])
    A = np.concatenate([[0.0], np.cumsum(activation_bytes)])
    idx = np.arange(n + 1)
    I, J = idx[:, None], idx[None, :]
    # A stage [i, j) needs at least one layer: not just the embed (j == 1) or the head.
    ok = J > I
    if not end_stages_alone:
        ok &= ~((I == 0) & (J == 1)) & ~((I == n - 1) & (J == n))
    seg_m = M[J] - M[I]
    seg_a = A[J] - A[I]

    # pass 1: the smallest slowest stage
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((stages + 1, n + 1), dtype=np.int64)
    worst_excess = np.inf
    kept = []  # per stage: (its seconds for every [i, j), where it fits), for pass 2
    shared = T[0][J] - T[0][I] if alike else None  # one set of part times: every stage's
    for k in range(1, stages + 1):
        need = seg_m + in_flight[k - 1] * seg_a
        feasible = ok & (need <= caps[k - 1])
        if alike:
            seg_t = shared
        else:
            seg_t = T[k - 1][J] - T[k - 1][I] + extra[k - 1]
            kept.append((seg_t, feasible))
        cand = np.maximum(best[:, None], seg_t)
        cand = np.where(feasible, cand, np.inf)
        if not np.isfinite(cand).any():
            excess = np.where(ok & np.isfinite(best[:, None]), need - caps[k - 1], np.inf)
            worst_excess = float(excess.min())
            break
        choice[k] = cand.argmin(axis=0)
        best = cand.min(axis=0)
    if not np.isfinite(best[n]) or np.isfinite(worst_excess):
        extra_msg = f" (stage {k - 1} is over by at least {worst_excess / 2**30:.2f} GiB)"
        raise PartitionError(
            f"no split of {layers} layers into {stages} stages fits the memory caps"
            f"{extra_msg if np.isfinite(worst_excess) else ''}; use more pipeline stages, "
            "recomputation, a higher ZeRO stage or a smaller microbatch"
        )
    if not alike:
        choice = _least_sum(kept, best[n], n)
    bounds = [n]
    for k in range(stages, 0, -1):
        bounds.append(int(choice[k][bounds[-1]]))
    return StagePartition(tuple(reversed(bounds)), layers)


def _least_sum(kept, bottleneck: float, n: int) -> np.ndarray:
    """Pass 2 of `partition_layers`: with every stage at most ``bottleneck``, the least sum
    of stage times, then the least slowest stage before the cut, then the earliest cut (the
    order pass 1 breaks its ties in). Lexicographic (sum, max) is monotone under adding a
    stage, so the programme is exact."""
    bound = bottleneck + _SAME_SUM * abs(bottleneck)
    total = np.full(n + 1, np.inf)
    total[0] = 0.0
    slowest = total.copy()
    choice = np.zeros((len(kept) + 1, n + 1), dtype=np.int64)
    cols = np.arange(n + 1)
    for k, (t, fits) in enumerate(kept, start=1):
        feasible = fits & (t <= bound)
        s = np.where(feasible, total[:, None] + t, np.inf)
        least = s.min(axis=0)
        near = feasible & (s <= least + _SAME_SUM * np.abs(least))
        m = np.where(near, np.maximum(slowest[:, None], t), np.inf)
        choice[k] = m.argmin(axis=0)
        total = s[choice[k], cols]
        slowest = m.min(axis=0)
    return choice


def split_layers(
    num_layers: int, per_layer_s: Sequence[float], extra_s: Sequence[float],
    most: Sequence[int],
) -> list[int] | None:  # fmt: skip
    """Layers per stage minimising ``max_g l_g per_layer_s[g] + extra_s[g]``, then the sum
    (`partition_layers`), with ``1 <= l_g <= most[g]`` and ``sum l_g = num_layers``; None
    when no such split exists. The pools' split (stage ``g``'s pool prices its layers) and
    the straggler's (the slow node's stages price them slower).

    >>> split_layers(9, [1.0, 2.0], [0.0, 0.0], [9, 9])
    [6, 3]
    """
    S = len(per_layer_s)
    if sum(most) < num_layers or min(most) < 1 or num_layers < S:
        return None
    times = [[0.0] + [t] * num_layers + [0.0] for t in per_layer_s]
    held = [0] + [1] * num_layers + [0]  # a stage's "bytes": the layers it holds
    try:
        part = partition_layers(times, held, [0] * len(held), [1] * S, most, extra_s=extra_s)
    except PartitionError:
        return None
    return list(part.layer_counts())


@functools.lru_cache(maxsize=1024)
def device_chunks(part: StagePartition, p: int, v: int) -> tuple[tuple, ...]:
    """Per pipeline device of ``part`` over ``p`` devices and ``v`` chunks each, the shapes
    (layers, embedding?, head?) of its chunks: the same for every configuration with this
    split, and asked by each of a plan's ~1,000 estimates."""
    shapes = part.shapes
    return tuple(tuple(shapes[c * p + d] for c in range(v)) for d in range(p))


@functools.lru_cache(maxsize=1024)
def distinct_devices(part: StagePartition, p: int, v: int) -> tuple[int, ...]:
    """The first device of each distinct chunk-shape tuple (`device_chunks`), in order."""
    seen: set = set()
    out = []
    for d, shape in enumerate(device_chunks(part, p, v)):
        if shape not in seen:
            seen.add(shape)
            out.append(d)
    return tuple(out)
