"""Where the devices of one configuration sit: the mesh axes in device order, and the job
ranks each pipeline device, replica and tensor-parallel rank holds; the mesh of the expert
layers (`expert_mesh_order`, `expert_ranks`).

Device ids run row-major over the axes ``(pp, dp, ep, cp, tp)``, outermost first, where
``dp`` here is ``par.dp // par.ep`` (the data-parallel ranks holding different experts are
the ``ep`` axis, carved out of dp): tp innermost, inside a node, then cp, ep, dp and pp
outermost. This is Megatron-Core's default rank order, ``order="tp-cp-ep-dp-pp"`` of
``megatron.core.parallel_state.initialize_model_parallel`` (its string lists the innermost
axis first). A job spanning several datacenters puts ``dp`` outermost instead,
``(dp, pp, ep, cp, tp)``, so that only data-parallel rings cross the WAN (`explorer.
training.datacenters` explains why).

MoE parallel folding (Megatron-Core; Liu et al. 2025, arXiv 2504.14960): the expert layers
lay the ``tp * cp * dp`` devices of a pipeline stage out as ``etp x ep x edp`` instead,
``etp`` innermost, then ``ep``, then ``edp``, within ``pp`` (the same order string with
``tp=etp, cp=1, dp=edp``: Megatron-Core's ``expert_decoder_rank_generator``). A layout
whose ``ep`` divides ``dp`` with ``etp = tp`` keeps the order above, ep carved out of dp
(`ParallelConfig.experts_folded` False; with cp = 1 the two orders are the same ranks).
A folded layout has no ``ep`` axis on the attention mesh (size 1 there) and its own
expert mesh, ``(pp, edp, ep, etp)``:

>>> list(expert_mesh_order(ParallelConfig(dp=16, tp=2, pp=8, ep=32, etp=1)).items())
[('pp', 8), ('edp', 1), ('ep', 32), ('etp', 1)]
>>> list(mesh_order(ParallelConfig(dp=4, tp=2, pp=2, cp=2, ep=2)).items())
[('pp', 2), ('dp', 2), ('ep', 2), ('cp', 2), ('tp', 2)]
>>> list(mesh_order(ParallelConfig(dp=4, tp=2, pp=2, cp=2, ep=2), dp_outermost=True))
['dp', 'pp', 'ep', 'cp', 'tp']
"""

from __future__ import annotations

import numpy as np

from ...hardware import Cluster, Mesh
from ...hardware.wan import datacenter_count
from ...memo import memoize
from ..config import ParallelConfig
from ..errors import ParallelConfigError

__all__ = [
    "mesh_axes", "mesh_order", "stage_ranks", "expert_mesh_order", "expert_mesh",
    "expert_ranks",
]  # fmt: skip


def mesh_order(par: ParallelConfig, dp_outermost: bool = False) -> dict[str, int]:
    """The mesh axes of ``par`` in device order, outermost first (the module docstring):
    ``(pp, dp, ep, cp, tp)``, or ``(dp, pp, ep, cp, tp)`` with ``dp_outermost``; ``dp`` is
    ``par.dp // par.ep`` (folded experts: ``par.dp``, and ``ep`` is 1 on this mesh)."""
    ep = 1 if par.experts_folded else par.ep
    dp_outer = par.dp // ep
    if dp_outermost:
        return {"dp": dp_outer, "pp": par.pp, "ep": ep, "cp": par.cp, "tp": par.tp}
    return {"pp": par.pp, "dp": dp_outer, "ep": ep, "cp": par.cp, "tp": par.tp}


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


def expert_mesh_order(par: ParallelConfig, dp_outermost: bool = False) -> dict[str, int]:
    """The mesh the expert layers run on, axes in device order (outermost first); its
    ``ep`` axis is the all-to-all's group.

    Unfolded (`ParallelConfig.experts_folded` False): `mesh_order` itself. Folded:
    Megatron-Core's expert mesh ``(pp, edp, ep, etp)`` over the same ranks. With
    ``dp_outermost`` (a job across datacenters, ``(dp, pp, cp, tp)``) a stage's devices are
    not consecutive, so an expert group must lie inside one data-parallel replica's
    ``tp * cp`` devices: ``(dp, pp, edp / dp, ep, etp)``; else `ParallelConfigError`.

    >>> list(expert_mesh_order(ParallelConfig(dp=4, tp=4, ep=2, etp=1), dp_outermost=True))
    ['dp', 'pp', 'edp', 'ep', 'etp']
    """
    if not par.experts_folded:
        return mesh_order(par, dp_outermost)
    etp, ep = par.expert_tp, par.ep
    if not dp_outermost:
        return {"pp": par.pp, "edp": par.edp, "ep": ep, "etp": etp}
    replica = par.tp * par.cp
    if replica % (etp * ep):
        raise ParallelConfigError(
            f"{par}: across datacenters dp is the outermost axis, so the experts' etp x ep = "
            f"{etp} x {ep} devices must lie inside one data-parallel replica's tp x cp = "
            f"{replica}; choose etp * ep dividing {replica}, or an ep that divides dp={par.dp} "
            f"with etp=tp={par.tp} (the unfolded layout)"
        )
    return {"dp": par.dp, "pp": par.pp, "edp": replica // (etp * ep), "ep": ep, "etp": etp}


def expert_mesh(par: ParallelConfig, cluster: Cluster) -> Mesh:
    """The expert layers' `Mesh` on ``cluster`` (`expert_mesh_order`; dp outermost when the
    job spans several datacenters, as `mesh_axes`). Memoized on the axes and the cluster.

    >>> from explorer.hardware import load
    >>> print(expert_mesh(ParallelConfig(dp=16, tp=2, pp=8, ep=32, etp=1), load("h100-sxm")))
    Mesh(pp=8 [inter], edp=1 [inter], ep=32 [inter], etp=1 [intra]) on h100-sxm
    """
    dp_out = datacenter_count(cluster, par.devices) > 1
    return _mesh(tuple(expert_mesh_order(par, dp_out).items()), cluster)


@memoize(maxsize=4096, name="training.expert_mesh")
def _mesh(axes: tuple[tuple[str, int], ...], cluster: Cluster) -> Mesh:
    return Mesh(axes, hardware=cluster)


def expert_ranks(par: ParallelConfig, dp_outermost: bool = False) -> np.ndarray:
    """Job ranks as an array ``[pp, edp, ep, etp]``: the devices of `stage_ranks` as the
    expert layers see them; ``[d, i, :, t]`` is an all-to-all group.

    >>> expert_ranks(ParallelConfig(dp=2, tp=2, ep=4, etp=1))[0].tolist()
    [[[0], [1], [2], [3]]]
    >>> expert_ranks(ParallelConfig(dp=4, cp=2, ep=2))[0, :, :, 0].tolist()  # unfolded
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    """
    stage = stage_ranks(par, dp_outermost)
    if par.experts_folded:
        return stage.reshape(par.pp, par.edp, par.ep, par.expert_tp)
    # replicas r = (dp_i * ep + ep_i) * cp + cp_i: edp runs over (dp_i, cp_i)
    grid = stage.reshape(par.pp, par.dp // par.ep, par.ep, par.cp, par.tp)
    return grid.transpose(0, 1, 3, 2, 4).reshape(par.pp, par.edp, par.ep, par.tp)
