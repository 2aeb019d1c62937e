"""A straggler rebalanced by layers: fewer layers on the pipeline stages its node holds.

When the slow node holds some (not all) pipeline stages, moving layers off those stages to
the others shortens the slowest stage. The split is `pipeline.partition.split_layers`' (the
one that sizes stages to each pool's speed): stage ``g`` takes ``l_g`` layers minimising the
slowest ``T_g = (l_g t + e_g) / s_g``, then ``sum_g T_g`` (``t`` one layer's forward +
backward, ``e_g`` the embedding/head on the first/last stage, ``s_g`` the stage's speed: the
straggler's on its stages, 1 elsewhere), with ``l_g`` at most the layers stage ``g`` can
hold in memory (``t``, ``e_g`` and that most: `step_model.split`).

The step is the old plan's under the event (`replan._slowed_step`: its compute seconds
divided by the speed) with the compute scaled by ``F(new) / F(old)``, ``F = sum_g T_g +
(m - 1) max_g T_g`` the closed-form 1F1B pipeline time (`pipeline_time`) of the two
splits with the slow stages slowed (``m`` microbatches per replica). The same split gives
the keep step back. Only 1F1B and GPipe plans (one chunk per device) are rebalanced this way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pipeline.partition import StagePartition, split_layers
from ..pipeline.schedule import peak_in_flight, pipeline_time
from ..step_model.model import StepModel
from ..step_model.split import layer_seconds, most_layers

__all__ = ["LayerSplit", "rebalance_layers"]


@dataclass(frozen=True)
class LayerSplit:
    """The new stage split and its pipeline time relative to the old split's (both with the
    slow stages slowed): ``ratio < 1`` is faster."""

    partition: StagePartition
    ratio: float
    old_layers: tuple[int, ...]
    new_layers: tuple[int, ...]


def rebalance_layers(step: StepModel, partition: StagePartition, slow: frozenset[int],
                     speed: float) -> LayerSplit | str:  # fmt: skip
    """The split with fewer layers on the ``slow`` stages (module docstring), or why none:
    a string (every stage slow, interleaved chunks, one layer per stage)."""
    c = step.par
    S, L = partition.stages, step.cfg.num_layers
    if c.pp == 1 or not slow:
        return "one pipeline stage: every layer is on the slow node"
    if c.virtual_stages > 1 or S != c.pp:
        return f"{c.schedule} with {c.virtual_stages} chunks per device: not rebalanced by layers"
    if len(slow) == S:
        return "every pipeline stage has a device on the slow node"
    if L <= S:
        return "one layer per stage: none to move"
    layer, emb, head = layer_seconds(step)
    speeds = [speed if g in slow else 1.0 for g in range(S)]
    extra = [(emb if g == 0 else 0.0) + (head if g == S - 1 else 0.0) for g in range(S)]
    per = [layer / speeds[g] for g in range(S)]
    ext = [extra[g] / speeds[g] for g in range(S)]
    flight = [peak_in_flight(c.schedule, S, step.m, g) for g in range(S)]
    most = [most_layers(step, L, S, g, flight[g]) for g in range(S)]
    old = list(partition.layer_counts())
    new = split_layers(L, per, ext, [max(m, o) for m, o in zip(most, old, strict=True)])
    if new is None:
        return "the other stages cannot hold more layers in memory"

    def pipeline_s(layers: list[int]) -> float:
        return pipeline_time([layers[g] * per[g] + ext[g] for g in range(S)], step.m)

    before, after = pipeline_s(old), pipeline_s(new)
    if after >= before:
        new = old
    ratio = min(1.0, after / before)
    return LayerSplit(StagePartition.from_layers(new), ratio, tuple(old), tuple(new))
