"""Expert parallelism (mixture of experts): experts split over ``ep`` devices, tokens
exchanged by an all-to-all before and after each MoE layer.

Unfolded (``ep`` divides ``dp``, ``etp = tp``), the ``ep`` devices are data-parallel
replicas: the all-to-all runs over the step model's ``ep`` mesh axis. Folded (Megatron-Core's
MoE parallel folding, `ParallelConfig.experts_folded`), the expert layers have their own mesh
``(pp, edp, ep, etp)`` over the same devices (`placement.expert_mesh`), and the all-to-all
runs over its ``ep`` axis, on the links those ranks span.

With a flex dispatcher (DeepEP, HybridEP: ``TrainingParams.moe_flex_dispatcher``) a token
crosses the network once per node holding any of its experts and is copied to them inside
it (`network_copies`); with ``TrainingParams.ep_comm_overlap_fraction`` the all-to-alls run
behind another microbatch's compute (`StepModel.stage_segments`).
"""

from __future__ import annotations

from math import comb

from explorer.hardware.wan import collective_time as dc_collective_time

from ....hardware import Mesh
from ....memo import memoize
from ..costs import PartCost
from ..placement import expert_mesh
from ..view import StepView

__all__ = ["layer_params", "all_to_all", "network_copies", "stage_s", "comm_bytes"]


def layer_params(layer: PartCost, tp: int, ep: int, etp: int | None = None) -> float:
    """Parameters of one layer on a device: dense weights split over tp, experts over
    ``etp * ep`` (``etp`` None: ``tp``, the unfolded layout)."""
    etp = tp if etp is None else etp
    return (layer.params - layer.expert_params) / tp + layer.expert_params / (etp * ep)


def all_to_all(s: StepView) -> tuple[float, float]:
    """(seconds, bytes sent) per MoE layer and microbatch, one way (dispatch and combine:
    two all-to-alls of the routed tokens, ``top_k * capacity_factor`` per token). Each
    device sends the ``1 / tp`` of its tokens it holds (Megatron-Core's dispatcher, the same
    folded or not), over the ``ep`` axis of the experts' mesh."""
    cfg, par = s.cfg, s.par
    if not cfg.is_moe or par.ep == 1:
        return 0.0, 0.0
    tokens = par.microbatch_size * s.seq_local * cfg.experts_top_k * cfg.capacity_factor
    size = tokens * cfg.hidden_size * s.act_dtype_bytes / par.tp * network_copies(s)
    bw_eff = s.tparams.cost.bandwidth_efficiency
    if not par.experts_folded:
        seconds = 2 * s.collective_s("all-to-all", size, ("ep",)) / bw_eff
        return seconds, 2 * s.mesh.collective_bytes("all-to-all", size, ("ep",))
    mesh = expert_mesh(par, s.mesh.hardware)
    seconds = 2 * _collective_s(mesh, "all-to-all", size, ("ep",)) / bw_eff
    return seconds, 2 * mesh.collective_bytes("all-to-all", size, ("ep",))


def network_copies(s: StepView) -> float:
    """The network bytes of a flex dispatcher over the ``alltoall`` dispatcher's: 1 without
    ``TrainingParams.moe_flex_dispatcher`` or when the ``ep`` group stays in one scale-up
    domain (`Cluster.scale_up_chips` of the job's view). Otherwise the group spans ``N``
    domains of ``E / N`` experts each; a token routed to ``k`` of the ``E`` experts (chosen
    at random: the published MoE benchmarks force-balance the router) crosses the network
    once per remote domain holding one of them, ``(N - 1)(1 - q)`` times on average with
    ``q = C(E - E/N, k) / C(E, k)`` the chance that a domain holds none, where the
    ``alltoall`` dispatcher sends its ``k (N - 1) / N`` remote copies: the ratio
    ``N (1 - q) / k`` scales the all-to-all (the copies inside a domain, over NVLink, are
    scaled with it: the network level paces the exchange). DeepSeek-V3 (256 experts, top
    8) over 4 nodes: 0.45; its group-limited routing (4 of 8 expert groups) is not counted.

    >>> from types import SimpleNamespace as NS
    >>> cfg = NS(num_experts=256, experts_top_k=8)
    >>> par = NS(ep=32, etp=1, cp=1, tp=1, experts_folded=True)
    >>> s = NS(cfg=cfg, par=par, cluster=NS(scale_up_chips=8),
    ...        tparams=NS(moe_flex_dispatcher=True))
    >>> round(network_copies(s), 3)
    0.452
    """
    cfg, par = s.cfg, s.par
    if not s.tparams.moe_flex_dispatcher:
        return 1.0
    stride = par.etp if par.experts_folded else par.cp * par.tp
    domains = -(-par.ep * stride // s.cluster.scale_up_chips)  # ceiling
    if domains < 2:
        return 1.0
    e, k = cfg.num_experts, cfg.experts_top_k
    q = comb(e - e // domains, k) / comb(e, k)
    return domains * (1.0 - q) / k


def stage_s(s: StepView, n_layers: int) -> float:
    """Seconds of the all-to-alls of ``n_layers`` layers in one direction (forward or
    backward) for one microbatch."""
    return n_layers * s.ep_s if s.cfg.is_moe else 0.0


def comm_bytes(s: StepView, n_layers: int) -> float:
    """Bytes a device sends per step: forward and backward of every microbatch."""
    return s.ep_bytes * 2 * n_layers * s.m if s.cfg.is_moe else 0.0


@memoize(maxsize=100_000, name="training.expert_collective_s")
def _collective_s(mesh: Mesh, kind: str, size: float, axes: tuple[str, ...]) -> float:
    """Seconds of a collective on the experts' mesh (memoized as the step model's own)."""
    return dc_collective_time(mesh, kind, size, axes)
