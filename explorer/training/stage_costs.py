"""Per-layer costs inside one pipeline stage, found by the operator-strategy search.

The tensor-parallel layout of every operator comes from ``explorer.search`` on the
graph of a one-layer and a two-layer model over a ``{"tp": t}`` mesh (so Megatron-style
column/row splits are found, not assumed); the layer's cost is the difference of the two
plans' costs and the embedding + head cost is what remains of the one-layer plan. Each part also
carries its local kernels (`kernels.OpShape`: GEMM dims, bytes) under the chosen layouts,
which `kernels.timed_costs` turns into compute times by shape. Costs are
memoized on every argument (model, sequence, tp, microbatch size, hardware, cost
parameters, search method, fused ops): ``stage_costs.memo``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..hardware import Cluster, Mesh
from ..memo import memoize
from ..models import ModelConfig, build
from ..search.breakdown import CostBreakdown
from ..search.params import CostParams
from ..search.planner import Method, search
from .kernels import OpShape, op_shapes

__all__ = ["PartCost", "StageCosts", "stage_costs"]

_ATTENTION_CORE = ("scores", "scale", "mask", "probs", "probs_dropout", "context")


@dataclass(frozen=True)
class PartCost:
    """Seconds and sizes of one part of the model (one layer, the embedding or the head)
    for one microbatch on one tensor-parallel group.

    Args:
        forward_s, backward_s: compute time of the forward and the backward.
        tp_forward_s, tp_backward_s: tensor-parallel collectives (and redistributions) of
            the forward and the backward (the backward includes weight-gradient reduction).
        recompute_selective_s: forward time of the attention core (scores, softmax,
            context), what selective recomputation runs again.
        params: parameters of the part (whole, before any split).
        expert_params: the part of ``params`` in experts (split over ep).
        flops: forward FLOPs for one microbatch (whole, before any split).
        kernels: the part's local kernels under the chosen layouts (fused ops left out),
            what the kernel-time model (`explorer.training.kernels`) times.

    ``forward_s``, ``backward_s`` and ``recompute_selective_s`` are the operator search's
    flat estimate here; the step model replaces them with `kernels.timed_costs`.
    """

    forward_s: float = 0.0
    backward_s: float = 0.0
    tp_forward_s: float = 0.0
    tp_backward_s: float = 0.0
    recompute_selective_s: float = 0.0
    params: int = 0
    expert_params: int = 0
    flops: int = 0
    kernels: tuple[OpShape, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class StageCosts:
    """Costs of a layer, the embedding and the head, and the chosen strategies."""

    layer: PartCost
    embed: PartCost
    head: PartCost
    strategies: tuple[tuple[str, str], ...]  # (op in layer 0, strategy name)

    def describe(self, limit: int = 12) -> str:
        return ", ".join(f"{n.split('.')[-1]}:{s}" for n, s in self.strategies[:limit])


def _split(cost: CostBreakdown, p: CostParams) -> tuple[float, float, float, float]:
    """(forward, backward, tp forward, tp backward) seconds of a training cost."""
    fwd = cost.compute / (1 + p.backward_compute_ratio)
    comm_fwd = cost.communication_total / (1 + p.backward_comm_ratio)
    return (
        fwd,
        cost.compute - fwd,
        comm_fwd,
        cost.communication_total - comm_fwd + cost.gradient,
    )


def _part(cost: CostBreakdown, p: CostParams, **sizes) -> PartCost:
    f, b, tf, tb = _split(cost, p)
    return PartCost(forward_s=f, backward_s=b, tp_forward_s=tf, tp_backward_s=tb, **sizes)


@memoize(maxsize=256, name="training.stage_costs")
def stage_costs(
    cfg: ModelConfig, seq: int, tp: int, microbatch_size: int, cluster: Cluster,
    params: CostParams, method: Method = "dynamic_programming", fused: tuple[str, ...] = (),
) -> StageCosts:  # fmt: skip
    """Costs of one layer, the embedding and the head on a ``tp``-way group.

    ``fused`` names layer ops (by the last part of their name, e.g. ``"scale"``) that a
    fused kernel folds into their neighbour, so their own cost is dropped: Megatron-LM's
    fused scale-mask-softmax, bias-GeLU and bias-dropout-add kernels.

    >>> import explorer as ex
    >>> c = stage_costs(ex.models.load("gpt2"), 256, 2, 1, ex.hardware.load("a100-80g"),
    ...                 ex.CostParams())
    >>> c.layer.params
    7087872
    """
    p = params
    if p.device_memory_cap_bytes is None:
        # Memory is modelled per stage by the training simulator; the one-layer search
        # must not reject a layout because the whole device is the cap.
        p = replace(p, device_memory_cap_bytes=float("inf"))
    p = replace(p, training=True)
    mesh = Mesh({"tp": tp}, hardware=cluster)
    g1 = build(cfg.replace(num_layers=1), batch=microbatch_size, seq=seq)
    g2 = build(cfg.replace(num_layers=2), batch=microbatch_size, seq=seq)
    # reuse_layers=False: two layers gain nothing from solving repeats once
    plan1 = search(g1, mesh, method=method, params=p, reuse_layers=False)
    plan2 = search(g2, mesh, method=method, params=p, reuse_layers=False)
    layer_cost = plan2.cost - plan1.cost
    rest = plan1.cost - layer_cost
    embed_cost = CostBreakdown(unit=p.unit)
    core = CostBreakdown(unit=p.unit)
    for n in g1.ops:
        short = n.name.split(".")[-1]
        if n.scope.startswith("embed"):
            embed_cost = embed_cost + plan1.node_cost(n.name)
        elif n.scope.startswith("layers.0") and short in fused:
            layer_cost = layer_cost - plan1.node_cost(n.name)
        elif n.scope.startswith("layers.0") and short in _ATTENTION_CORE:
            core = core + plan1.node_cost(n.name)
    head_cost = rest - embed_cost

    def sizes(scope: str) -> dict[str, int]:
        params_ = [n for n in g1.parameters if n.scope.startswith(scope)]
        ops = [n.name for n in g1.ops if n.scope.startswith(scope)]
        return {
            "params": sum(n.type.numel for n in params_),
            "expert_params": sum(
                n.type.numel for n in params_ if ".moe" in n.name and len(n.type.shape) == 3
            ),
            "flops": g1.flops(ops),
        }

    def kernels(scope: str, skip: tuple[str, ...] = ()) -> tuple[OpShape, ...]:
        return op_shapes(g1, plan1, mesh, scope, skip, _ATTENTION_CORE)

    layer = _part(layer_cost, p, **sizes("layers.0"), kernels=kernels("layers.0", fused))
    layer = replace(layer, recompute_selective_s=_split(core, p)[0])
    out = StageCosts(
        layer=layer,
        embed=_part(embed_cost, p, **sizes("embed"), kernels=kernels("embed")),
        head=_part(head_cost, p, **sizes("head"), kernels=kernels("head")),
        strategies=tuple(
            (n.name, plan1.assignment[n.name].name)
            for n in g1.ops
            if n.scope.startswith("layers.0") and g1.group(n.name).value == "contraction"
        ),
    )
    return out
