"""Expert parallelism (mixture of experts): experts split over ``ep`` of the data-parallel
replicas, tokens exchanged by an all-to-all before and after each MoE layer."""

from __future__ import annotations

from ..costs import PartCost
from ..view import StepView

__all__ = ["layer_params", "all_to_all", "stage_s", "comm_bytes"]


def layer_params(layer: PartCost, tp: int, ep: int) -> float:
    """Parameters of one layer on a device: dense weights split over tp, experts over
    tp * ep."""
    return (layer.params - layer.expert_params) / tp + layer.expert_params / (tp * ep)


def all_to_all(s: StepView) -> tuple[float, float]:
    """(seconds, bytes sent) per MoE layer and microbatch, one way (dispatch and combine:
    two all-to-alls of the routed tokens, ``top_k * capacity_factor`` per token)."""
    cfg, par = s.cfg, s.par
    if not cfg.is_moe or par.ep == 1:
        return 0.0, 0.0
    tokens = par.microbatch_size * s.seq_local * cfg.experts_top_k * cfg.capacity_factor
    size = tokens * cfg.hidden_size * s.act_dtype_bytes / par.tp
    bw_eff = s.tparams.cost.bandwidth_efficiency
    seconds = 2 * s.collective_s("all-to-all", size, ("ep",)) / bw_eff
    return seconds, 2 * s.mesh.collective_bytes("all-to-all", size, ("ep",))


def stage_s(s: StepView, n_layers: int) -> float:
    """Seconds of the all-to-alls of ``n_layers`` layers in one direction (forward or
    backward) for one microbatch."""
    return n_layers * s.ep_s if s.cfg.is_moe else 0.0


def comm_bytes(s: StepView, n_layers: int) -> float:
    """Bytes a device sends per step: forward and backward of every microbatch."""
    return s.ep_bytes * 2 * n_layers * s.m if s.cfg.is_moe else 0.0
