"""Periodic synchronisation across datacenters (local SGD, DiLoCo): seconds saved per step,
shown next to what it may cost in convergence.

Each datacenter trains its own replica of the model with the plan's data parallelism
inside it (the gradient reduce-scatter + all-gather stay inside the datacenter every step)
and the replicas synchronise across the WAN every ``H`` steps: one all-reduce of the
change in the weights since the last sync (DiLoCo's "outer gradient"), sized here like the
gradients (`StateBytes.gradient_bytes` per parameter). Per step that costs
``inside_s + wan_s / H`` of communication instead of the hierarchical all-reduce's
``inside_s + wan_s`` (`datacenters.gradient_sync`).

The step time counts the inside-datacenter sync as exposed as the plan's own dp
communication is (its share not hidden behind the backward pass) and the outer sync, once
every H steps, as fully exposed.

**Convergence caveat** (`CAVEAT`): this planner counts seconds, not loss. Fewer
synchronisations change the optimisation itself; the saving is worth having only if the
model reaches the same loss in about as many steps, which has been shown for some settings
only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checks import is_int
from ..hardware import Cluster, bytes_sent_per_device
from .datacenters import GradientSync, gradient_sync, sim_of
from .errors import TrainingError

__all__ = ["CAVEAT", "DILOCO_SOURCE", "LocalSGD", "LocalSGDRow", "local_sgd"]

DILOCO_SOURCE = (
    "Douillard et al. 2023, 'DiLoCo: Distributed Low-Communication Training of Language "
    "Models', arXiv:2311.08105"
)
CAVEAT = (
    "Convergence is not modelled: syncing every H steps changes the optimisation, not just "
    "the clock. DiLoCo (" + DILOCO_SOURCE + ") reports that 8 workers synchronising every "
    "500 inner steps (AdamW inside, Nesterov momentum outside) match fully synchronous "
    "training on C4 while communicating 500x less; its models are far smaller than the ones "
    "planned here, and plain local SGD (averaging the weights) loses more as H and the "
    "worker count grow. Check the loss before trusting the saving."
)


@dataclass(frozen=True)
class LocalSGDRow:
    """One synchronisation period: ``h`` steps between WAN syncs (1: every step)."""

    h: int
    comm_s: float  # gradient communication per step (inside + WAN / h)
    wan_bytes_per_step: float  # bytes each device sends over the WAN per step
    step_time_s: float
    saving_s: float  # per step, against syncing every step (hierarchical)

    def __str__(self) -> str:
        return (
            f"H={self.h:>4}: step {self.step_time_s:.3f} s, gradient sync {self.comm_s:.3f} s "
            f"per step, WAN {self.wan_bytes_per_step / 1e9:.3f} GB per device per step, "
            f"saves {self.saving_s:.3f} s per step"
        )


@dataclass(frozen=True)
class LocalSGD:
    """Syncing every step vs every H steps for one plan, with the caveat."""

    sync: GradientSync
    step_time_s: float  # the plan's step (hierarchical all-reduce every step)
    rows: tuple[LocalSGDRow, ...]
    caveat: str = CAVEAT

    def table(self) -> str:
        lines = [str(self.sync), *map(str, self.rows), "caveat: " + self.caveat]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {
            "sync": vars(self.sync), "step_time_s": self.step_time_s,
            "rows": [vars(r) for r in self.rows], "caveat": self.caveat,
        }  # fmt: skip

    def __str__(self) -> str:
        best = self.rows[-1]
        return (
            f"LocalSGD(H={best.h}: saves {best.saving_s:.3f} s per step of "
            f"{self.step_time_s:.3f} s; convergence not modelled)"
        )


def local_sgd(
    plan, h: tuple[int, ...] = (1, 10, 100, 500), hardware: str | Cluster | None = None
) -> LocalSGD:
    """Per-step seconds of syncing across datacenters every ``h`` steps, for each ``h``.

    >>> import dataclasses, explorer as ex
    >>> from explorer.hardware.wan import datacenters
    >>> two = datacenters(dataclasses.replace(ex.hardware.load("a100-80g"), max_nodes=4))
    >>> plan = ex.plan_training("gpt3-125m", devices=64, hardware=two, global_batch=128,
    ...                         seq=2048)
    >>> r = local_sgd(plan, (1, 100), hardware=two)
    >>> r.rows[1].saving_s > 0 == r.rows[0].saving_s
    True
    """
    hs = tuple(h) if isinstance(h, tuple | list) else (h,)
    if not hs or not all(is_int(x, minimum=1, numpy=True) for x in hs):
        raise TrainingError(f"local_sgd: h={h!r}; expected steps between syncs, ints >= 1")
    sync = gradient_sync(plan, hardware=hardware)
    if sync.datacenters < 2 or sync.wan_s == 0:
        raise TrainingError(
            f"local_sgd: the plan's data parallelism does not cross datacenters ({sync}); "
            "plan on a multi-datacenter cluster (explorer.hardware.wan.datacenters) with dp "
            "a multiple of the datacenter count"
        )
    sim = sim_of(plan, "local_sgd")
    exposed = dict(sim.time_by_kind).get("dp-comm", 0.0)
    exposure = min(exposed / sync.hierarchical_s, 1.0) if sync.hierarchical_s > 0 else 0.0
    base = sim.step_time_s - exposed  # the step without its gradient sync
    every = sync.inside_s + sync.wan_s
    # the all-reduce across datacenters of each device's 1/dp_inside shard
    shard = sync.size_bytes / sync.dp_inside
    wan_bytes = bytes_sent_per_device("all-reduce", shard, sync.datacenters)
    rows = []
    for k in sorted(set(hs)):
        comm = sync.inside_s + sync.wan_s / k
        step = (
            base + sync.inside_s * exposure + (sync.wan_s * exposure if k == 1 else sync.wan_s / k)
        )
        saving = 0.0 if k == 1 else (base + every * exposure) - step
        rows.append(LocalSGDRow(k, comm, wan_bytes / k, step, saving))
    if not all(math.isfinite(r.step_time_s) for r in rows):
        raise TrainingError("local_sgd: a non-finite step time; check the plan's timings")
    return LocalSGD(sync, sim.step_time_s, tuple(rows))
