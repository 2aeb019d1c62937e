"""ZeRO (Rajbhandari et al. 2020): what each stage shards over the data-parallel group and
the collectives that costs. Everything ZeRO changes in the step model is decided here.

=====  ===================  ==========================  =================================
stage  sharded over dp      gradient reduction          weights
=====  ===================  ==========================  =================================
0      nothing              all-reduce after the step   whole on every device
1      optimizer states     reduce-scatter after it     all-gather after the update
2      + gradients          reduce-scatter per micro-   all-gather after the update
                            batch (no full buffer)
3      + weights            reduce-scatter per micro-   all-gather before each forward and
                            batch                       backward; a prefetch buffer
=====  ===================  ==========================  =================================

Hybrid sharding (HSDP, ``ParallelConfig.dp_shard``): ZeRO shards over ``dp_shard * cp``
devices only (`ParallelConfig.shard_replicas`); its gathers and reduce-scatters run in
that group, on the inner levels it spans (`shard_mesh`: the ``dp`` axis split into
``dp_replicate`` outer and ``dp`` inner, as torchtitan's ``["dp_replicate", "dp_shard"]``
mesh and MaxText's ``dcn_data_parallelism`` outside ``ici_fsdp_parallelism``), and the
``dp_replicate`` copies of each shard all-reduce their sharded gradients once a step
(`replicate_s`, priced in `dp.tail_s`).
"""

from __future__ import annotations

import functools
import math

from ....hardware import Mesh, ring_latency
from ....hardware.wan import collective_time as dc_collective_time
from ...memory import StateBytes, reduce_buffer_bytes
from ..view import StepView
from . import recompute

__all__ = [
    "AXES",
    "REPLICATE_AXES",
    "shard_mesh",
    "shard_collective_s",
    "replicate_s",
    "model_state_bytes",
    "state_bytes",
    "gradient_collective",
    "gradients_per_microbatch",
    "shards_weights",
    "optimizer_params",
    "updated_params",
    "reduce_buffer",
    "gather_s",
    "gathered_weight_bytes",
    "reduced_gradient_bytes",
    "reduce_scatter_s",
    "ring_latency_s",
    "tail_gather_s",
    "gather_buffer_bytes",
    "comm_bytes",
    "stages_worth_searching",
]

_STATE = StateBytes()  # mixed-precision Adam, 16 bytes per parameter

# The data-parallel group of a device: dp replicas, experts split over ep of them, and the
# context-parallel ranks (same weights, other positions of the sequences).
AXES = ("dp", "ep", "cp")
# HSDP: the axis of `shard_mesh` over which the copies of one shard group all-reduce.
REPLICATE_AXES = ("dp_replicate",)


def shard_mesh(s: StepView) -> Mesh:
    """The mesh ZeRO's collectives run on: the step model's own without HSDP; with it,
    its ``dp`` axis split into ``dp_replicate`` (outer) and ``dp`` (inner: ``dp_shard``
    ranks with the ``ep`` and ``cp`` axes inside it), so that `AXES` is the shard group and
    `REPLICATE_AXES` the copies of a shard, each on the link levels it spans.

    >>> import explorer as ex
    >>> from explorer.training.step_model.model import StepModel
    >>> s = StepModel(ex.models.load("gpt3-1.3b"), ex.ParallelConfig(dp=32, zero=3, dp_shard=8),
    ...               ex.hardware.load("a100-80g"), 32, 2048, ex.TrainingParams())
    >>> print(shard_mesh(s))
    Mesh(pp=1 [inter], dp_replicate=4 [inter], dp=8 [intra], ep=1 [intra], cp=1 [intra], tp=1 [intra]) on a100-80g
    """
    r = s.par.dp_replicate
    return s.mesh if r == 1 else _split_dp(s.mesh, r)


@functools.lru_cache(maxsize=256)
def _split_dp(mesh: Mesh, replicate: int) -> Mesh:
    axes: list[tuple[str, int]] = []
    for name, size in mesh.axes:
        if name == "dp":
            axes += [("dp_replicate", replicate), ("dp", size // replicate)]
        else:
            axes.append((name, size))
    return Mesh(axes, hardware=mesh.hardware)


def shard_collective_s(s: StepView, kind: str, size: float) -> float:
    """Seconds of one ``kind`` over ``size`` bytes in the ZeRO shard group (`AXES` on
    `shard_mesh`; the step model's own collective without HSDP)."""
    if s.par.dp_replicate == 1:
        return s.collective_s(kind, size, AXES)
    return dc_collective_time(shard_mesh(s), kind, size, AXES)


def replicate_s(s: StepView, params: float) -> float:
    """HSDP: seconds of the once-a-step all-reduce of a device's gradient shard (``params /
    shard_replicas`` parameters at `reduced_gradient_bytes`) over the ``dp_replicate``
    copies of its shard group, at ``bandwidth_efficiency``; 0 without HSDP."""
    if s.par.dp_replicate == 1:
        return 0.0
    size = params / s.par.shard_replicas * reduced_gradient_bytes(s)
    t = dc_collective_time(shard_mesh(s), "all-reduce", size, REPLICATE_AXES)
    return t / s.tparams.cost.bandwidth_efficiency


def model_state_bytes(
    params: float, dp: int, zero: int, state: StateBytes = _STATE
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) in bytes for ``params`` parameters on one
    device, divided over the ``dp`` replicas according to the ZeRO stage.

    >>> model_state_bytes(1e9, dp=8, zero=1)
    (2000000000.0, 2000000000.0, 1500000000.0)
    """
    weights = params * state.weight_bytes / (dp if zero >= 3 else 1)
    grads = params * state.gradient_bytes / (dp if zero >= 2 else 1)
    opt = params * state.optimizer_bytes / (dp if zero >= 1 else 1)
    return weights, grads, opt


def state_bytes(s: StepView, params: float) -> tuple[float, float, float]:
    """`model_state_bytes` of ``params`` parameters on a device of ``s`` (its weight
    replicas, ZeRO stage and `StateBytes`)."""
    par = s.par
    return model_state_bytes(params, par.shard_replicas, par.zero, s.tparams.state)


def gradient_collective(s: StepView) -> str:
    """The gradient reduction: all-reduce without ZeRO, reduce-scatter with it (each device
    updates its 1/dp shard)."""
    return "all-reduce" if s.par.zero == 0 else "reduce-scatter"


def gradients_per_microbatch(s: StepView) -> bool:
    """ZeRO 2/3 keep only a 1/dp shard of the gradients, so every microbatch's backward
    reduce-scatters its gradients (no accumulation in a full buffer)."""
    return s.par.zero >= 2


def shards_weights(s: StepView) -> bool:
    """ZeRO-3 shards the weights: gathered before each forward and backward, the gradients
    reduce-scattered layer by layer like them (`reduce_scatter_s`)."""
    return s.par.zero >= 3


def optimizer_params(params: float, dp: int, zero: int) -> float:
    """Parameters a device updates in the optimizer step (its shard with ZeRO >= 1)."""
    return params / (dp if zero >= 1 else 1)


def updated_params(s: StepView, params: float) -> float:
    """`optimizer_params` of a device of ``s`` holding ``params`` parameters."""
    return optimizer_params(params, s.par.shard_replicas, s.par.zero)


def reduce_buffer(s: StepView, unit_params: float) -> float:
    """`memory.reduce_buffer_bytes` of a device of ``s`` whose largest reduce unit holds
    ``unit_params`` parameters (``zero_reduce_bucket_params`` at most)."""
    tp_, par = s.tparams, s.par
    return reduce_buffer_bytes(
        unit_params, tp_.zero_reduce_bucket_params, tp_.state.gradient_bytes, par.zero,
        par.shard_replicas,
    )  # fmt: skip


def ring_latency_s(s: StepView) -> float:
    """Latency of one ring all-gather or reduce-scatter over the ZeRO group: NCCL's ring
    model, `explorer.hardware.ring_latency` with ``per_node`` given (the ``n - 1`` steps'
    data passes each hop once; the ``nodes - 1`` node boundaries at the inter-node latency,
    the other hops at the intra-node one). The group's members inside a node are
    ``chips_per_node / tp`` consecutive ones (its axes dp, ep, cp sit just outside tp; at
    most ``n``); latencies from the hardware profile.

    >>> import explorer as ex
    >>> from explorer.training.step_model.model import StepModel
    >>> s = StepModel(ex.models.load("gpt3-1.3b"), ex.ParallelConfig(dp=32, zero=3),
    ...               ex.hardware.load("a100-80g"), 32, 2048, ex.TrainingParams())
    >>> round(ring_latency_s(s) * 1e6, 1)  # 3 node hops x 10 us + 28 intra hops x 5 us
    170.0
    """
    n = s.par.shard_replicas
    cl = s.cluster
    per_node = max(1, min(n, cl.chips_per_node // s.par.tp))
    return ring_latency(
        "all-gather", n, cl.latency("intra"), per_node=per_node, inter_latency=cl.latency("inter")
    )


#: Weights Megatron-LM keeps as one tensor (fused QKV, fused SwiGLU gate and up): one
#: gather each; our built graphs hold them apart.
_FUSED = {
    "q_w": "qkv_w",
    "k_w": "qkv_w",
    "v_w": "qkv_w",
    "gate_w": "gate_up_w",
    "up_w": "gate_up_w",
}


def gathered_tensors(shapes, ep: int = 1, threshold: float = 1e5) -> int:
    """Weight tensors ZeRO-3 gathers for one layer: ``shapes`` are the layer's ``(name,
    shape)`` parameter tensors (`PartCost.param_shapes`); Megatron-LM's fused ones
    (`_FUSED`) count once; a stacked expert tensor ``[experts, ...]`` is one tensor per
    expert a device holds (``experts / ep``); tensors under ``threshold`` elements stay
    whole (DeepSpeed's persistence threshold).

    >>> gpt = [("attn.norm_g", (12288,)), ("attn.q_w", (12288, 12288)),
    ...        ("attn.k_w", (12288, 12288)), ("attn.v_w", (12288, 12288)),
    ...        ("attn.q_b", (12288,)), ("attn.o_w", (12288, 12288)),
    ...        ("mlp.fc1_w", (12288, 49152)), ("mlp.fc1_b", (49152,)),
    ...        ("mlp.fc2_w", (49152, 12288))]
    >>> gathered_tensors(gpt)  # fused QKV, attention output, fc1, fc2
    4
    >>> moe = [("attn.q_w", (64, 64)), ("moe.router_w", (4096, 8)),
    ...        ("moe.gate_w", (8, 4096, 14336)), ("moe.up_w", (8, 4096, 14336)),
    ...        ("moe.down_w", (8, 14336, 4096))]
    >>> gathered_tensors(moe, ep=2)  # 4 local experts x (gate_up, down); small q and router kept
    8
    """
    groups: dict[str, list[float]] = {}  # tensor -> [elements of one, how many a device holds]
    for name, shape in shapes:
        scope, _, short = name.rpartition(".")
        key = f"{scope}.{_FUSED.get(short, short)}"
        numel = float(math.prod(shape))
        count = 1.0
        if len(shape) == 3:  # stacked experts: DeepSpeed-MoE holds one module per expert
            numel /= shape[0]
            count = float(-(-shape[0] // ep))
        g = groups.setdefault(key, [0.0, count])
        g[0] += numel
    return int(sum(c for numel, c in groups.values() if numel >= threshold))


def collectives_per_layer(s: StepView) -> float:
    """ZeRO-3 collectives of one layer per gather or reduce-scatter pass: one with
    ``zero3_gather_granularity="block"`` (PyTorch FSDP: one flat buffer per wrapped layer),
    else the weight tensors it gathers (`gathered_tensors`) times
    ``zero3_collectives_per_tensor`` (DeepSpeed)."""
    tp_ = s.tparams
    if tp_.zero3_gather_granularity == "block":
        return 1.0
    n = gathered_tensors(s.costs.layer.param_shapes, s.par.ep, tp_.zero3_persistence_threshold)
    return tp_.zero3_collectives_per_tensor * n


def _zero3_collective_s(s: StepView, kind: str, size: float, n_layers: int) -> float:
    """ZeRO-3: seconds of one pass of ``kind`` over ``size`` bytes of ``n_layers``
    layers' tensors: the bytes at ``zero_bandwidth_efficiency`` of the link, plus a ring's
    latency (`ring_latency_s`) per collective (`collectives_per_layer` a layer, at least
    one)."""
    tp_ = s.tparams
    volume = shard_collective_s(s, kind, size) - shard_collective_s(s, kind, 0.0)
    per_layer, latency = _per_collective(s)
    calls = max(1.0, per_layer * n_layers)
    return volume / tp_.zero_bandwidth_efficiency + calls * latency


def _per_collective(s: StepView) -> tuple[float, float]:
    """(`collectives_per_layer`, `ring_latency_s`) of ``s``: the same for the whole
    configuration, kept in its ``derived`` table when it has one (each ZeRO-3 estimate asked
    for them ~6 times, each time checking the ring's arguments again)."""
    derived = getattr(s, "derived", None)
    found = derived.get(_PER_COLLECTIVE) if derived is not None else None
    if found is None:
        found = (collectives_per_layer(s), ring_latency_s(s))
        if derived is not None:
            derived[_PER_COLLECTIVE] = found
    return found


_PER_COLLECTIVE = ("zero", "per_collective")


def gather_s(s: StepView, params: float, n_layers: int) -> float:
    """ZeRO-3: seconds to all-gather ``params`` parameters' weights (``n_layers``
    layers') before one forward (and again before one backward) of one microbatch."""
    if s.par.zero < 3 or s.par.shard_replicas == 1:
        return 0.0
    size = params * gathered_weight_bytes(s)
    return _zero3_collective_s(s, "all-gather", size, n_layers)


def gathered_weight_bytes(s: StepView) -> float:
    """Bytes per parameter a ZeRO-3 weight all-gather moves: one with FP8 training and
    ``fp8_weight_gather`` (torchtitan's enable_fsdp_float8_all_gather, Megatron-Core's
    fp8_param_gather), else the weights' own (`StateBytes.weight_bytes`)."""
    tp_ = s.tparams
    if tp_.precision == "fp8" and tp_.fp8_weight_gather:
        return 1.0
    return tp_.state.weight_bytes


def reduced_gradient_bytes(s: StepView) -> float:
    """Bytes per parameter the gradient reduction moves: ``grad_reduce_bytes_per_param``
    (FP32 reduction: 4), or the gradients' own dtype when it is None."""
    tp_ = s.tparams
    b = tp_.grad_reduce_bytes_per_param
    return tp_.state.gradient_bytes if b is None else b


def reduce_scatter_s(s: StepView, params: float, n_layers: int) -> float:
    """ZeRO-3: seconds to reduce-scatter one microbatch's gradients of ``params``
    parameters (``n_layers`` layers'), priced as the gathers (`gather_s`)."""
    if s.par.zero < 3 or s.par.shard_replicas == 1:
        return 0.0
    size = params * reduced_gradient_bytes(s)
    return _zero3_collective_s(s, "reduce-scatter", size, n_layers)


def regather_fraction(s: StepView, n_layers: int, n_full: int | None) -> float:
    """ZeRO-3 with ``zero3_recompute_regather``: the share of a stage's ``n_layers``
    layers whose weights are gathered again for the recomputed forward (the fully
    recomputed ones), else 0."""
    if s.par.zero < 3 or not s.tparams.zero3_recompute_regather or n_layers == 0:
        return 0.0
    return recompute.layer_policies(s.par.recompute, n_layers, n_full)[2] / n_layers


def tail_gather_s(s: StepView, params: float) -> float:
    """ZeRO 1/2: seconds to all-gather the updated weights after the optimizer step."""
    if s.par.zero not in (1, 2) or s.par.shard_replicas == 1:
        return 0.0
    size = params * s.tparams.state.weight_bytes
    return shard_collective_s(s, "all-gather", size) / s.tparams.cost.bandwidth_efficiency


def gather_buffer_bytes(s: StepView) -> float:
    """ZeRO-3: the full weights held at once (the layer running and the prefetched ones),
    at most ``zero3_max_live_params`` parameters (DeepSpeed releases gathered weights past
    that count) but never less than one MLP weight matrix (gathered whole to run)."""
    if s.par.zero < 3:
        return 0.0
    tp_, cfg = s.tparams, s.cfg
    layers = tp_.zero3_prefetch_layers * s.layer_params
    if tp_.zero3_gather_granularity == "block":  # FSDP: whole flat buffers, no live cap
        return layers * tp_.state.weight_bytes
    one_matrix = min(s.layer_params, cfg.hidden_size * cfg.ffn / s.par.tp)
    return min(layers, max(tp_.zero3_max_live_params, one_matrix)) * tp_.state.weight_bytes


def comm_bytes(s: StepView, params: float) -> float:
    """Bytes a device holding ``params`` parameters sends per step for weight gathers:
    once after the step (ZeRO 1/2), forward and backward of every microbatch (ZeRO-3)."""
    zero, mesh = s.par.zero, shard_mesh(s)
    if zero in (1, 2):
        return mesh.collective_bytes("all-gather", params * s.tparams.state.weight_bytes, AXES)
    if zero == 3:
        n = math.ceil(s.cfg.num_layers / s.par.stages)
        gathers = 2 + regather_fraction(s, n, None if s.par.recompute != "per_layer" else 0)
        return (
            gathers
            * s.m
            * mesh.collective_bytes("all-gather", params * gathered_weight_bytes(s), AXES)
        )
    return 0.0


def stages_worth_searching(stages: tuple[int, ...], dp: int) -> tuple[int, ...]:
    """The ZeRO stages among ``stages`` that `plan_training` estimates on ``dp`` replicas:
    only 0 without data parallelism; ZeRO-0 is dropped when ZeRO-1 is offered, since its
    all-reduce sends the bytes of ZeRO-1's reduce-scatter + all-gather while ZeRO-1 keeps
    1/dp of the optimizer states and updates 1/dp of the weights.

    >>> stages_worth_searching((0, 1, 2, 3), dp=8), stages_worth_searching((0, 1), dp=1)
    ((1, 2, 3), (0,))
    """
    if dp == 1:
        return (0,)
    if 0 in stages and 1 in stages:
        return tuple(z for z in stages if z != 0)
    return tuple(stages)
