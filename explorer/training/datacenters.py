"""Training across datacenters: where the mesh axes go, and the gradient sync over the WAN.

**Placement.** On one datacenter the step model numbers devices over the mesh
``(pp, dp, ep, cp, tp)`` (tp innermost, inside a node). For a job spanning several
datacenters (a cluster whose outermost level is the WAN, `explorer.hardware.wan`) the
data-parallel axis goes outermost instead,
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
  (`collective_time`);
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

from ..hardware import Cluster, Mesh, resolve
from ..hardware.wan import WAN, datacenter_count, datacenter_size
from .config import ParallelConfig

__all__ = [
    "mesh_axes", "collective_time", "Placement", "placement", "GradientSync", "gradient_sync",
]  # fmt: skip

#: Collectives over the data-parallel axis that run hierarchically across datacenters.
_HIERARCHICAL = ("all-reduce", "reduce-scatter", "all-gather")


def mesh_axes(par: ParallelConfig, cluster: Cluster) -> dict[str, int]:
    """The step model's mesh axes in device order (outermost first) for ``par``: dp
    outermost when the job spans several datacenters, else the one-datacenter order (a job
    inside one datacenter of a multi-datacenter profile is planned as on that datacenter).

    >>> from explorer.hardware import load
    >>> list(mesh_axes(ParallelConfig(dp=256, tp=8), load("dgx-h100-2dc")))
    ['dp', 'pp', 'ep', 'cp', 'tp']
    >>> list(mesh_axes(ParallelConfig(dp=4, tp=8), load("dgx-h100-2dc")))
    ['pp', 'dp', 'ep', 'cp', 'tp']
    """
    dp_outer = par.dp // par.ep
    if datacenter_count(cluster, par.devices) > 1:
        return {"dp": dp_outer, "pp": par.pp, "ep": par.ep, "cp": par.cp, "tp": par.tp}
    return {"pp": par.pp, "dp": dp_outer, "ep": par.ep, "cp": par.cp, "tp": par.tp}


def collective_time(mesh: Mesh, kind: str, size_bytes: float, axes: tuple[str, ...]) -> float:
    """`Mesh.collective_time`, except that an all-reduce, reduce-scatter or all-gather over
    ``dp`` alone (other axes of the group of size 1) crossing datacenters runs hierarchically (`split_mesh`): inside each
    datacenter on ``size_bytes``, across them on the ``1/dp_inside`` shard.

    - all-reduce: reduce-scatter inside + all-reduce across + all-gather inside;
    - reduce-scatter: inside, then across; all-gather: across, then inside.

    The step model prices its collectives through this function.
    """
    names = (axes,) if isinstance(axes, str) else tuple(axes)
    moving = tuple(a for a in names if mesh.axis_size(a) > 1)
    split = split_mesh(mesh) if moving == ("dp",) and kind in _HIERARCHICAL else None
    if split is None:
        return mesh.collective_time(kind, size_bytes, axes)
    inner = split.axis_size("dp")
    shard = size_bytes / inner
    if kind == "all-reduce":
        return (split.collective_time("reduce-scatter", size_bytes, ("dp",))
                + split.collective_time("all-reduce", shard, ("dc",))
                + split.collective_time("all-gather", size_bytes, ("dp",)))  # fmt: skip
    return split.collective_time(kind, size_bytes, ("dp",)) + split.collective_time(
        kind, shard, ("dc",)
    )


def split_mesh(mesh: Mesh) -> Mesh | None:
    """The mesh with its outermost ``dp`` axis split datacenter-major into ``("dc", "dp")``
    (the same device ids), or None when dp does not cross datacenters evenly: the job must
    fill every datacenter it touches (its ids run datacenter by datacenter, so a job of
    1.5 datacenters holds a whole one and half of the next) and dp must be a multiple of
    their count. Otherwise the collective is priced as one ring on the levels it crosses."""
    cluster = mesh.hardware
    if cluster is None or datacenter_size(cluster) is None or mesh.axis_names[0] != "dp":
        return None
    n_dc = datacenter_count(cluster, mesh.size)
    dp = mesh.axis_size("dp")
    # job ids fill datacenters in order: the halves are equal only when it fills them all
    if n_dc < 2 or dp % n_dc or mesh.size != n_dc * datacenter_size(cluster):
        return None
    rest = dict(mesh.axes[1:])
    return Mesh({"dc": n_dc, "dp": dp // n_dc, **rest}, hardware=cluster)


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


def placement(plan, hardware: str | Cluster | None = None) -> Placement:
    """Where a `TrainingPlan`'s (or SimResult's) axes run: the levels each one crosses.
    ``hardware``: the plan's cluster when it is not a catalog profile."""
    sim = getattr(plan, "sim", plan)
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
    sim = getattr(plan, "sim", plan)
    cluster = resolve(hardware or sim.hardware)
    par = sim.config
    if size_bytes is None:
        size_bytes = _gradient_bytes(plan, cluster)
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
    from ..models import load
    from .simulate import TrainingParams
    from .step_model import StepModel

    sim = getattr(plan, "sim", plan)
    cfg = getattr(plan, "model_config", None) or load(sim.model)
    tparams = TrainingParams()
    s = StepModel(cfg, sim.config, cluster, sim.global_batch, sim.seq, tparams)
    par, part = sim.config, sim.partition
    per_device = max(
        sum(s.stage_params(part, c * par.pp + d) for c in range(par.virtual_stages))
        for d in range(par.pp)
    )
    return per_device * tparams.state.gradient_bytes
