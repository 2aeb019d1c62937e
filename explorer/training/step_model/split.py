"""What a pipeline split reads off the step model: one layer's time, the embedding's and
the head's (`layer_seconds`), and the most layers a stage holds in memory (`most_layers`).
The split itself is `pipeline.partition.split_layers` (`partition_layers` per stage); the
pools' pipeline (`hetero.pipeline`) and the straggler's rebalance (`replanning.layers`)
both price their stages with these.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..memory import MemoryBreakdown
from ..pipeline.partition import StagePartition
from .model import StepModel

__all__ = ["layer_seconds", "most_layers", "probe_partition", "stage_memory"]

StageMemory = Callable[[StepModel, StagePartition, int, int], MemoryBreakdown]


def probe_partition(L: int, S: int, g: int, n: int) -> StagePartition:
    """A split where stage ``g`` holds ``n`` layers (the others share the rest, >= 1 each).

    >>> print(probe_partition(8, 3, 1, 2))
    embed+1 | 2 | 5+head
    """
    rest = L - n
    others = [1] * (S - 1)
    if others:
        others[-1] += rest - (S - 1)
    return StagePartition.from_layers(others[:g] + [n] + others[g:])


def stage_memory(step: StepModel, part: StagePartition, g: int, flight: int) -> MemoryBreakdown:
    """Stage ``g``'s device memory with ``flight`` microbatches' activations held."""
    return step.device_memory(part, g, None, step.stage_act(part, g, None) * flight)


def most_layers(
    step: StepModel, L: int, S: int, g: int, flight: int, memory: StageMemory = stage_memory
) -> int:
    """The most layers stage ``g`` holds within the device's memory cap (0: not even one);
    ``memory`` prices a stage (default `stage_memory`; the pools' pipeline passes its
    offload-aware one)."""

    def need(n: int) -> float:
        return memory(step, probe_partition(L, S, g, n), g, flight).total

    hi = L - (S - 1)
    cap = step.cap
    first = need(1)
    if first > cap:
        return 0
    if hi == 1:
        return 1
    # memory is close to affine in the layers held: start at the affine guess, then walk to
    # the exact boundary (two or three evaluations instead of a bisection's log2 L)
    slope = need(2) - first
    n = hi if slope <= 0 else max(1, min(hi, 1 + math.floor((cap - first) / slope)))
    while n > 1 and need(n) > cap:
        n -= 1
    while n < hi and need(n + 1) <= cap:
        n += 1
    return n


def _stage_time(step: StepModel, part: StagePartition, g: int) -> float:
    f, b = step.stage_segments(part, g, None)
    return sum(x for _, x in f) + sum(x for _, x in b)


def layer_seconds(step: StepModel) -> tuple[float, float, float]:
    """(one layer, the embedding, the head): seconds of one microbatch's forward and
    backward (tensor-parallel collectives and recomputation included), read off the step
    model as differences of probe stages (needs ``L > S``)."""
    L, S = step.cfg.num_layers, step.par.pp
    one = _stage_time(step, probe_partition(L, S, 0, 1), 0)
    layer = _stage_time(step, probe_partition(L, S, 0, 2), 0) - one
    head = _stage_time(step, probe_partition(L, S, S - 1, 1), S - 1) - layer
    return layer, one - layer, head
