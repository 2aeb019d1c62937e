"""Where the devices of one configuration sit: the step model's mesh axes in device order.

On one datacenter devices are numbered over ``(pp, dp, ep, cp, tp)`` (tp innermost, inside
a node); a job spanning several datacenters puts ``dp`` outermost instead (`explorer.
training.datacenters` explains why).
"""

from __future__ import annotations

from ...hardware import Cluster
from ...hardware.wan import datacenter_count
from ..config import ParallelConfig

__all__ = ["mesh_axes"]


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
