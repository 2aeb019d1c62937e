"""Tensor parallelism (Megatron-LM): the weight split, the searched per-layer collectives,
and the bytes they send.

The layouts inside a layer, and so the collectives' seconds, come from the operator search
(`stage_costs`); this module sums them over a stage and counts their bytes.
"""

from __future__ import annotations

from ...pipeline.partition import StagePartition
from ..kernels import TP_GATHER_SHARE, fp8_gather_factor
from ..view import StepView

__all__ = ["split_params", "stage_comm_s", "comm_bytes", "fp8_gather_factor", "regathered_s"]


def split_params(params: float, tp: int) -> float:
    """Parameters of a dense part on one device: every weight is split ``tp`` ways."""
    return params / tp


def stage_comm_s(s: StepView, part: StagePartition, g: int) -> tuple[float, float]:
    """(forward, backward) seconds of stage ``g``'s tensor-parallel collectives for one
    microbatch: its layers, plus the embedding and the head when it holds them."""
    c = s.costs
    n = part.layers(g)
    fwd = n * c.layer.tp_forward_s
    bwd = n * c.layer.tp_backward_s + regathered_s(s, n)
    for has, P in ((part.has_embed(g), c.embed), (part.has_head(g), c.head)):
        if has:
            fwd += P.tp_forward_s
            bwd += P.tp_backward_s
    return fwd, bwd


def comm_bytes(s: StepView, n_layers: int) -> float:
    """Bytes a device sends per step for ``n_layers`` layers: two all-reduces of the
    layer's ``b s h`` output forward and two backward per layer (Megatron), ring volume,
    for each of the ``m`` microbatches."""
    par = s.par
    if par.tp <= 1:
        return 0.0
    per = 2 * s.seq_local * par.microbatch_size * s.cfg.hidden_size * s.act_dtype_bytes
    return 2 * n_layers * s.mesh.collective_bytes("all-reduce", per, ("tp",)) * s.m


def regathered_s(s: StepView, n_layers: int) -> float:
    """Seconds of the tensor-parallel all-gathers op-level selective checkpointing runs
    again in the backward of ``n_layers`` selectively recomputed layers of one microbatch:
    torchtitan's save list keeps the matmul, attention and reduce-scatter outputs but not
    the all-gathered block inputs (torchtitan/models/llama3/parallelize_llama.py at
    820504e, ``_save_list``), which the weight gradients of q, k, v and of the MLP's first
    GEMMs need: each block's all-gather runs again (`TP_GATHER_SHARE` of the layer's forward
    TP seconds, less with FP8 all-gathers, `fp8_gather_factor`). 0 for the attention-core
    policy, without tensor parallelism or with the searched layouts."""
    p, par = s.tparams, s.par
    if p.selective_recompute != "op" or p.tp_layout != "megatron" or par.tp == 1:
        return 0.0
    sel = s.layer_policies(n_layers, None)[1]
    g = fp8_gather_factor(p)
    gather_share = (g - (1.0 - TP_GATHER_SHARE)) / g  # of the (FP8-scaled) forward seconds
    return sel * gather_share * s.costs.layer.tp_forward_s
