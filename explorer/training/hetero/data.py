"""Data parallelism across pools of different chips with uneven per-pool batches.

Each pool runs whole replicas of the model with its own best homogeneous configuration
(`plan_training` on the pool's chips, hardware and batch share), so tensor and pipeline
parallelism stay inside the pool. The global batch is split in proportion to each pool's
speed: first guess ``chips x peak FLOP/s``, then the measured throughput of each pool's plan
(sequences per second), in multiples of ``unit`` sequences (the largest power of two
dividing the batch with at most `MAX_UNITS` units) so the shares keep data-parallel
degrees that divide them.

The gradients are then all-reduced across pools (hierarchically: each pool's own plan
already reduces inside the pool; the pools then exchange the reduced gradient). That
exchange crosses the slowest link (`pools.cross_pool_link`), spread over the chips of the
smallest pool: each of its chips runs a ring all-reduce over the ``P`` pools of its
``1/chips_min`` share of the gradient (`explorer.hardware.ring_time`, at the link's
bandwidth times ``bandwidth_efficiency``)::

    t = 2 (P - 1) latency + 2 (P - 1) / P * params * gradient_bytes / (chips_min * bw * eff)

(a reduce-scatter and an all-gather of ``P - 1`` steps each).

With identical pools this is the homogeneous plan with a hierarchical gradient reduction
(ZeRO or the all-reduce inside each pool, on its fast links; one exchange across), which
`plan_training`'s own search does not have (its data-parallel axis is one flat ring), so it
can beat the homogeneous plan on the union of the pools; the ``pipeline`` arrangement on
identical pools reproduces `estimate` of the same configuration (tests/training/test_hetero.py).

The step is the slowest pool's step plus that exchange (it runs after the last backward
of every pool, before the optimizer; the pools' own tails are kept as they are).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...hardware import ring_time
from ...models import ModelConfig
from ..errors import TrainingPlanError
from ..params import TrainingParams
from ..planning.homogeneous import plan_homogeneous
from ..planning.result import TrainingPlan
from ..planning.space import SearchSpace
from .pools import Pool, cross_pool_link

__all__ = ["DataArrangement", "MAX_UNITS", "batch_shares", "cross_pool_allreduce_s", "plan_data"]

#: the global batch is split in at most this many units (a power of two).
MAX_UNITS = 64
#: batch splits evaluated at most (each plans every pool once).
MAX_SPLITS = 5


@dataclass(frozen=True)
class DataArrangement:
    """Each pool's replicas, batch share and plan.

    Attributes:
        batches: sequences per step per pool (job order); ``plans``: each pool's plan.
        allreduce_s: the cross-pool gradient exchange; ``step_time_s``: the job's step.
    """

    batches: tuple[int, ...]
    plans: tuple[TrainingPlan, ...]
    allreduce_s: float
    step_time_s: float

    @property
    def pool_step_s(self) -> tuple[float, ...]:
        return tuple(p.sim.step_time_s for p in self.plans)


def batch_shares(global_batch: int, weights: list[float], unit: int) -> tuple[int, ...]:
    """``global_batch`` split in proportion to ``weights``, in multiples of ``unit``, each
    pool at least one unit (largest remainders first).

    >>> batch_shares(64, [2.0, 1.0], 4)
    (44, 20)
    """
    units = global_batch // unit
    total = sum(weights)
    raw = [units * w / total for w in weights]
    got = [max(1, int(r)) for r in raw]
    while sum(got) > units:
        i = max((i for i in range(len(got)) if got[i] > 1), key=lambda i: got[i] - raw[i])
        got[i] -= 1
    while sum(got) < units:
        i = max(range(len(got)), key=lambda i: raw[i] - got[i])
        got[i] += 1
    return tuple(g * unit for g in got)


def _units_cap(pools: int) -> int:
    """The most units a split uses: `MAX_UNITS`, or the power of two that gives every pool
    one when there are more pools."""
    return max(MAX_UNITS, 1 << (pools - 1).bit_length())


def _unit(global_batch: int, pools: int) -> int:
    """Sequences per unit: ``global_batch / k`` for a power of two ``k`` dividing the batch,
    at most `_units_cap` units: the largest that keeps a unit at least ``pools`` sequences
    (large units keep data-parallel degrees that divide the shares), or, when that leaves
    fewer units than pools, the smallest that gives every pool one (before, 320 sequences
    over 40 pools stopped at 8 units and were refused as "fewer sequences than pools")."""
    k, cap = 1, _units_cap(pools)
    while global_batch % (2 * k) == 0 and 2 * k <= cap and (
        global_batch // (2 * k) >= pools or k < pools
    ):  # fmt: skip
        k *= 2
    return global_batch // k


def cross_pool_allreduce_s(
    cfg: ModelConfig, pools: tuple[Pool, ...], tparams: TrainingParams
) -> float:
    """Seconds of the gradient exchange between pools (formula in the module docstring)."""
    if len(pools) == 1:
        return 0.0
    link = cross_pool_link(pools)
    grad = cfg.num_params() * tparams.state.gradient_bytes
    share = grad / min(p.chips for p in pools)
    bw = link.bandwidth_bytes_per_s * tparams.cost.bandwidth_efficiency
    return ring_time("all-reduce", share, len(pools), bw, link.latency_s)


def _evaluate(cfg, pools, batches, seq, tparams, space, sync_s, offload) -> DataArrangement | str:
    plans = []
    for pool, b in zip(pools, batches, strict=True):
        try:
            plans.append(
                plan_homogeneous(
                    cfg, devices=pool.chips, hardware=pool.cluster, global_batch=b, seq=seq,
                    params=tparams, space=space, top_k=1, simulate_top=1, offload=offload,
                )
            )  # fmt: skip
        except TrainingPlanError as e:
            return f"{pool} with {b} sequences: {e}"
    step = max(p.sim.step_time_s for p in plans) + sync_s
    return DataArrangement(tuple(batches), tuple(plans), sync_s, step)


def plan_data(
    cfg: ModelConfig, pools: tuple[Pool, ...], global_batch: int, seq: int,
    tparams: TrainingParams, space: SearchSpace | None = None, offload: bool = False,
) -> tuple[DataArrangement | None, list[str]]:  # fmt: skip
    """The fastest batch split found (None if no split plans on every pool) and why the
    splits tried failed."""
    unit = _unit(global_batch, len(pools))
    units = global_batch // unit
    if units < len(pools):
        need = 1 << (len(pools) - 1).bit_length()
        return None, [
            f"global batch {global_batch} splits into at most {units} equal shares of "
            f"{unit} sequences (its largest power-of-two divisor), fewer than the "
            f"{len(pools)} pools; a global batch divisible by {need} gives every pool one"
        ]
    sync = cross_pool_allreduce_s(cfg, pools, tparams)
    weights = [p.chips * p.peak_flops for p in pools]
    tried: dict[tuple[int, ...], DataArrangement | str] = {}
    best: DataArrangement | None = None
    for _ in range(MAX_SPLITS):
        batches = batch_shares(global_batch, weights, unit)
        if batches in tried:
            batches = _neighbour(best, unit, tried) if best else None
            if batches is None:
                break
        r = _evaluate(cfg, pools, batches, seq, tparams, space, sync, offload)
        tried[batches] = r
        if isinstance(r, str):
            continue
        if best is None or r.step_time_s < best.step_time_s:
            best = r
        weights = [b / t for b, t in zip(r.batches, r.pool_step_s, strict=True)]
    why = [r for r in tried.values() if isinstance(r, str)]
    return best, why


def _neighbour(best: DataArrangement, unit: int, tried) -> tuple[int, ...] | None:
    """The best split with one unit moved from the slowest pool to the fastest-finishing
    one (the throughput estimate can overshoot by a unit either way)."""
    t = best.pool_step_s
    slow, fast = max(range(len(t)), key=t.__getitem__), min(range(len(t)), key=t.__getitem__)
    for a, b in ((slow, fast), (fast, slow)):
        cand = list(best.batches)
        if cand[a] <= unit or a == b:
            continue
        cand[a] -= unit
        cand[b] += unit
        if tuple(cand) not in tried:
            return tuple(cand)
    return None
