"""Data parallelism: the gradient reduction over the replicas (``dp * cp`` devices: the
context-parallel ranks hold the same weights).

ZeRO decides its kind and how often it runs (`zero.gradient_collective`,
`zero.gradients_per_microbatch`); this module prices it. With hybrid sharding (HSDP) the
reduce-scatter runs in the shard group and the step ends with the all-reduce of each
shard over its ``dp_replicate`` copies (`zero.replicate_s`, in `tail_s`).
"""

from __future__ import annotations

from ..view import StepView
from . import zero

__all__ = ["grad_sync_s", "microbatch_s", "tail_s", "comm_bytes"]


def grad_sync_s(s: StepView, kind: str, params: float) -> float:
    """Seconds of one ``kind`` reduction of ``params`` parameters' gradients, less the part
    hidden behind the backward (``CostParams.grad_comm_overlap``)."""
    tp_ = s.tparams
    size = params * zero.reduced_gradient_bytes(s)
    t = zero.shard_collective_s(s, kind, size) / tp_.cost.bandwidth_efficiency
    return t * (1 - tp_.cost.grad_comm_overlap)


def microbatch_s(s: StepView, params: float, n_layers: int) -> float:
    """Seconds of the reduction after each microbatch's backward (ZeRO 2/3: ``params``
    parameters of ``n_layers`` layers), else 0. ZeRO-3's is priced as its gathers
    (`zero.reduce_scatter_s`)."""
    if not zero.gradients_per_microbatch(s) or s.par.shard_replicas == 1:
        return 0.0
    if zero.shards_weights(s):
        return zero.reduce_scatter_s(s, params, n_layers) * (1 - s.tparams.cost.grad_comm_overlap)
    return grad_sync_s(s, zero.gradient_collective(s), params)


def tail_s(s: StepView, params: float) -> float:
    """Seconds of the reduction after the last microbatch (ZeRO 0/1), plus HSDP's
    all-reduce of the gradient shards over the replicas (`zero.replicate_s`, less the part
    hidden behind the backward as `grad_sync_s`'s), else 0."""
    t = zero.replicate_s(s, params) * (1 - s.tparams.cost.grad_comm_overlap)
    if s.par.shard_replicas == 1 or zero.gradients_per_microbatch(s):
        return t
    return t + grad_sync_s(s, zero.gradient_collective(s), params)


def comm_bytes(s: StepView, params: float) -> float:
    """Bytes a device holding ``params`` parameters sends per step for gradients."""
    grad = params * zero.reduced_gradient_bytes(s)
    mesh = zero.shard_mesh(s)
    sent = mesh.collective_bytes(zero.gradient_collective(s), grad, zero.AXES)
    sent = sent * s.m if zero.gradients_per_microbatch(s) else sent
    if s.par.dp_replicate > 1:  # HSDP: the shard's all-reduce over its copies
        shard = grad / s.par.shard_replicas
        sent += mesh.collective_bytes("all-reduce", shard, zero.REPLICATE_AXES)
    return sent
