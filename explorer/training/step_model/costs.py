"""What the step model computes per part, as plain data: a kernel's local shape (`OpShape`),
one part's seconds and sizes (`PartCost`), a layer's, the embedding's and the head's
together (`StageCosts`), and the dense first layers of a mixture-of-experts model
(`DenseLayers`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["KernelKind", "OpShape", "PartCost", "StageCosts", "DenseLayers"]

KernelKind = Literal["gemm", "memory", "view"]


@dataclass(frozen=True)
class OpShape:
    """One operator of a part on one device of its tensor-parallel group, as the kernel
    model sees it (sizes are local: after the op's layout split them).

    Args:
        name: the node's name.
        kind: ``gemm`` (a two-input contraction), ``memory`` (timed by its bytes) or
            ``view`` (no kernel).
        flops: local forward FLOPs.
        read_bytes, written_bytes: local bytes the forward kernel reads and writes.
        batch, m, n, k: the GEMM ``C[batch, m, n] = A[batch, m, k] B[batch, k, n]``
            (``gemm`` only).
        grads: how many of the GEMM's two inputs need a gradient (one backward GEMM each).
        itemsize: bytes per element of the output.
        dtype: the output's dtype name (which peak FLOP/s applies).
        core: part of the attention core (what flash attention fuses and selective
            recomputation runs again).
        causal: a causal mask is applied in this op (flash attention skips masked blocks);
            the scores GEMM carries it when the mask is fused (``TrainingParams.fused_ops``).
    """

    name: str
    kind: KernelKind
    flops: float
    read_bytes: float
    written_bytes: float
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    grads: int = 2
    itemsize: int = 2
    dtype: str = "bf16"
    core: bool = False
    causal: bool = False


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
            what the kernel-time model (`explorer.training.step_model.kernels`) times.
        param_shapes: (name inside the part, whole shape) of each parameter tensor.

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
    param_shapes: tuple[tuple[str, tuple[int, ...]], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class StageCosts:
    """Costs of a layer, the embedding and the head, and the chosen strategies."""

    layer: PartCost
    embed: PartCost
    head: PartCost
    strategies: tuple[tuple[str, str], ...]  # (op in layer 0, strategy name)

    def describe(self, limit: int = 12) -> str:
        return ", ".join(f"{n.split('.')[-1]}:{s}" for n, s in self.strategies[:limit])


@dataclass(frozen=True)
class DenseLayers:
    """The first ``count`` layers are dense: ``layer`` is one of them (timed, one device's
    share under context parallelism), ``params`` its parameters on one device."""

    count: int
    layer: PartCost
    params: float
