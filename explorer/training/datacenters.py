"""Training across datacenters: where a finished plan's mesh axes go, and its gradient sync
over the WAN.

**Placement.** On one datacenter the step model numbers devices over the mesh
``(pp, dp, ep, cp, tp)`` (tp innermost, inside a node; ``dp`` is ``dp // ep``;
Megatron-Core's default order, `explorer.training.step_model.placement`, which holds it).
For a job spanning several datacenters (a cluster whose outermost level is the WAN,
`explorer.hardware.wan`) the data-parallel axis goes outermost instead,
``(dp, pp, ep, cp, tp)``: when ``dp`` is a multiple of the datacenter count, every
tensor-, pipeline- and context-parallel group lies inside one datacenter and only the
data-parallel rings cross the WAN (once a step, not once a microbatch). `plan_training`
then prices every configuration on that placement: a configuration whose dp is not a
multiple of the datacenters sends pipeline traffic over the WAN and loses on time.

**Gradient sync.** `gradient_sync` prices one step's gradient all-reduce of a plan three
ways on the same meshes and links:

- ``flat``: one ring over all dp replicas: its 2(dp-1) steps each pay the WAN's latency
  and run at the slowest link's share;
- ``hierarchical``: reduce-scatter inside each datacenter, all-reduce of the 1/dp_in
  shards across datacenters, all-gather inside (Mesh ``(dc, dp, pp, ep, cp, tp)``: the same
  device ids with dp split datacenter-major); what the step model charges
  (`explorer.hardware.wan.collective_time`);
- ``inside``: the reduce-scatter + all-gather inside a datacenter alone (the inner steps of
  local SGD, `explorer.training.local_sgd`).

>>> import dataclasses, explorer as ex
>>> from explorer.hardware.wan import datacenters
>>> two = datacenters(dataclasses.replace(ex.hardware.load("a100-80g"), max_nodes=8))
>>> plan = ex.plan_training("gpt3-1.3b", devices=128, hardware=two, global_batch=256,
...                         seq=2048)
>>> placement(plan, two).crossing
('dp',)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import is_number
from ..hardware import Cluster, Mesh, resolve
from ..hardware.wan import WAN, collective_time, datacenter_count, split_mesh
from ..models import load
from .errors import TrainingError
from .params import TrainingParams
from .planning.result import TrainingPlan
from .simulate import SimResult
from .step_model.model import StepModel
from .step_model.placement import mesh_axes

__all__ = ["Placement", "placement", "GradientSync", "gradient_sync"]


@dataclass(frozen=True)
class Placement:
    """Which axes of a plan cross the WAN: ``levels`` per axis, ``crossing`` the axes whose
    groups span datacenters, ``datacenters`` the count the job touches."""

    levels: tuple[tuple[str, tuple[str, ...]], ...]
    crossing: tuple[str, ...]
    datacenters: int

    def __str__(self) -> str:
        across = ", ".join(self.crossing) or "none"
        return f"{self.datacenters} datacenter(s); axes across the WAN: {across}"


def sim_of(plan: object, who: str) -> SimResult:
    """The `SimResult` of a `TrainingPlan`, or ``plan`` itself when it is one."""
    if isinstance(plan, TrainingPlan):
        return plan.sim
    if isinstance(plan, SimResult):
        return plan
    raise TrainingError(
        f"{who}: plan={plan!r}; expected a TrainingPlan (plan_training) or a SimResult (simulate)"
    )


def placement(plan, hardware: str | Cluster | None = None) -> Placement:
    """Where a `TrainingPlan`'s (or SimResult's) axes run: the levels each one crosses.
    ``hardware``: the plan's cluster when it is not a catalog profile."""
    sim = sim_of(plan, "placement")
    cluster = resolve(hardware or sim.hardware)
    mesh = Mesh(mesh_axes(sim.config, cluster), hardware=cluster)
    levels = tuple((a, mesh.levels((a,))) for a in mesh.axis_names)
    crossing = tuple(a for a, lv in levels if WAN in lv)
    return Placement(levels, crossing, datacenter_count(cluster, sim.config.devices))


@dataclass(frozen=True)
class GradientSync:
    """Seconds of one gradient all-reduce of ``size_bytes`` per device, three ways."""

    size_bytes: float
    datacenters: int
    dp_inside: int
    flat_s: float
    hierarchical_s: float
    inside_s: float
    wan_s: float  # the hierarchical form's cross-datacenter all-reduce alone

    def __str__(self) -> str:
        return (
            f"gradient all-reduce of {self.size_bytes / 1e9:.2f} GB per device over "
            f"{self.datacenters} datacenter(s) x dp {self.dp_inside}: flat ring "
            f"{self.flat_s:.3f} s, hierarchical {self.hierarchical_s:.3f} s (WAN part "
            f"{self.wan_s:.3f} s), inside one datacenter {self.inside_s:.3f} s"
        )


def gradient_sync(
    plan, size_bytes: float | None = None, hardware: str | Cluster | None = None
) -> GradientSync:
    """The gradient all-reduce of ``plan`` priced flat, hierarchical and inside a datacenter.

    ``size_bytes``: bytes per device (``hardware``: as in `placement`); default the plan's gradients on its busiest pipeline
    device (parameters per device x `StateBytes.gradient_bytes`). A ZeRO plan's
    reduce-scatter + all-gather moves the same bytes as this all-reduce.
    """
    sim = sim_of(plan, "gradient_sync")
    cluster = resolve(hardware or sim.hardware)
    par = sim.config
    if size_bytes is None:
        size_bytes = _gradient_bytes(plan, cluster)
    elif not is_number(size_bytes, minimum=0, numpy=True):
        raise TrainingError(
            f"gradient_sync: size_bytes={size_bytes!r}; expected a finite number of bytes >= 0 "
            "per device, or None for the plan's gradients"
        )
    size_bytes = float(size_bytes)
    n_dc = datacenter_count(cluster, par.devices)
    full = Mesh(mesh_axes(par, cluster), hardware=cluster)
    flat = full.collective_time("all-reduce", size_bytes, ("dp",), algorithm="ring")
    split = split_mesh(full)
    if split is None:
        return GradientSync(size_bytes, n_dc, full.axis_size("dp"), flat, flat, flat, 0.0)
    inner = split.axis_size("dp")
    inside = split.collective_time("reduce-scatter", size_bytes, ("dp",)) + (
        split.collective_time("all-gather", size_bytes, ("dp",))
    )
    wan = split.collective_time("all-reduce", size_bytes / inner, ("dc",))
    hier = collective_time(full, "all-reduce", size_bytes, ("dp",))
    return GradientSync(size_bytes, n_dc, inner, flat, hier, inside, wan)


def _gradient_bytes(plan, cluster: Cluster) -> float:
    sim = sim_of(plan, "gradient_sync")
    cfg = getattr(plan, "model_config", None) or load(sim.model)
    tparams = TrainingParams()
    s = StepModel(cfg, sim.config, cluster, sim.global_batch, sim.seq, tparams)
    par, part = sim.config, sim.partition
    per_device = max(
        sum(s.stage_params(part, c * par.pp + d) for c in range(par.virtual_stages))
        for d in range(par.pp)
    )
    return per_device * tparams.state.gradient_bytes
