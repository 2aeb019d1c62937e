"""Where the devices of one configuration sit: the mesh axes in device order, and the job
ranks each pipeline device, replica and tensor-parallel rank holds.

Device ids run row-major over the axes ``(pp, dp, ep, cp, tp)``, outermost first, where
``dp`` here is ``par.dp // par.ep`` (the data-parallel ranks holding different experts are
the ``ep`` axis, carved out of dp): tp innermost, inside a node, then cp, ep, dp and pp
outermost. This is Megatron-Core's default rank order, ``order="tp-cp-ep-dp-pp"`` of
``megatron.core.parallel_state.initialize_model_parallel`` (its string lists the innermost
axis first). A job spanning several datacenters puts ``dp`` outermost instead,
``(dp, pp, ep, cp, tp)``, so that only data-parallel rings cross the WAN (`explorer.
training.datacenters` explains why).

>>> list(mesh_order(ParallelConfig(dp=4, tp=2, pp=2, cp=2, ep=2)).items())
[('pp', 2), ('dp', 2), ('ep', 2), ('cp', 2), ('tp', 2)]
>>> list(mesh_order(ParallelConfig(dp=4, tp=2, pp=2, cp=2, ep=2), dp_outermost=True))
['dp', 'pp', 'ep', 'cp', 'tp']
"""

from __future__ import annotations

import numpy as np

from ...hardware import Cluster
from ...hardware.wan import datacenter_count
from ..config import ParallelConfig

__all__ = ["mesh_axes", "mesh_order", "stage_ranks"]


def mesh_order(par: ParallelConfig, dp_outermost: bool = False) -> dict[str, int]:
    """The mesh axes of ``par`` in device order, outermost first (the module docstring):
    ``(pp, dp, ep, cp, tp)``, or ``(dp, pp, ep, cp, tp)`` with ``dp_outermost``; ``dp`` is
    ``par.dp // par.ep``."""
    dp_outer = par.dp // par.ep
    if dp_outermost:
        return {"dp": dp_outer, "pp": par.pp, "ep": par.ep, "cp": par.cp, "tp": par.tp}
    return {"pp": par.pp, "dp": dp_outer, "ep": par.ep, "cp": par.cp, "tp": par.tp}


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
    return mesh_order(par, dp_outermost=datacenter_count(cluster, par.devices) > 1)


def stage_ranks(par: ParallelConfig, dp_outermost: bool = False) -> np.ndarray:
    """Job ranks as an array ``[pp, replicas, tp]``: the ranks of pipeline device ``d``,
    replica ``r`` (over dp, ep and cp: ``r = (dp_i * ep + ep_i) * cp + cp_i``) and tensor
    rank ``t``, on the device order of `mesh_order`.

    >>> stage_ranks(ParallelConfig(dp=2, tp=2, pp=2)).tolist()
    [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    >>> stage_ranks(ParallelConfig(dp=4, tp=1, pp=2, cp=2, ep=2), dp_outermost=True)[0].ravel()
    array([ 0,  1,  2,  3,  8,  9, 10, 11])
    """
    order = mesh_order(par, dp_outermost)
    ranks = np.arange(par.devices, dtype=np.int64).reshape(tuple(order.values()))
    names = list(order)
    grid = ranks.transpose([names.index(a) for a in ("pp", "dp", "ep", "cp", "tp")])
    return grid.reshape(par.pp, par.dp * par.cp, par.tp)
