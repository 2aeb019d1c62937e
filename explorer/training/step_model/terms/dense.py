"""Layers that differ along a mixture-of-experts model: DeepSeek's dense first layers.

`StageCosts.layer` is one MoE layer (the step model costs ``layer_config(cfg)``, whose
every layer holds experts); a model with ``first_dense_layers = k`` runs its first ``k``
layers as dense MLPs of ``ffn_hidden_size`` instead (DeepSeek-V3: 3 of 61, inner 18432).
This module costs that dense layer once (the same operator search and kernel timing as
the MoE layer, `dense_config`) and corrects each pipeline stage by the dense layers it
holds: compute time, parameters on a device (a dense layer's weights are split by tensor
parallelism only, never by expert parallelism), FLOPs, and no expert all-to-all. The
pipeline partition sees the per-layer times and parameters (`layer_times`,
`layer_static`), so a stage holding dense layers is balanced as what it is.

Expert parallelism also changes the experts' GEMMs (`ep_kernels`): the layer is searched
on a ``{"tp": t}`` mesh, where one device runs all ``E`` experts on ``capacity`` rows each;
in an ``ep`` group it runs ``E / ep`` experts on the tokens of ``ep`` devices
(``capacity * ep`` rows): the same FLOPs, ``1/ep`` of the expert weights read, larger
tiles. Their kernel times are re-timed with those shapes.

DeepSeek-V3's multi-token-prediction modules (``mtp_layers``) are built in the head's
scope, so the head's part cost holds their compute; their expert weights are split over
ep (`head_params_delta`) and their all-to-alls run on the head's stage (`moe_layers_in`).

Activations (`activation_terms`): Korthikanti et al.'s formula keeps ``24 sbh`` bytes
split by tensor parallelism, the insides of a multi-head attention (Q, K, V, the output
projection's input: 8h per token) and of a 4h GELU MLP (16h). A MoE or MLA layer keeps
other insides, counted per token by the same rule (every GEMM's and nonlinearity's input,
16 bits; router scores in fp32): MLA's queries and keys of ``n (nope + rope)`` and values
of ``n v`` per token, its two latents; the routed copies (input, gate and up outputs, the
product, the output: ``k (4h + 6 f_e)``), the router's ``8 e`` bytes, the shared experts'
``6 f_s``. ``split_bytes`` is scaled by their ratio to ``24 h`` (DeepSeek-V3: 2.99), for
every layer (a stage's dense first layers keep less: an upper bound there).

Not corrected: the tensor-parallel collectives of a dense layer (those of the MoE layer
are used), and the head's activations (the logits only, not those of the MTP layer).

Shared experts and routed experts of ``moe_intermediate_size`` need nothing here: they are
ops of the MoE layer the operator search costs; the shared experts' two-dimensional
weights are dense parameters (split over tp), the routed experts' three-dimensional ones
are ``expert_params`` (split over etp * ep, `ep.layer_params`).
"""

from __future__ import annotations

from dataclasses import replace

from ....hardware import Chip
from ....models import ModelConfig
from ...config import ParallelConfig
from ...memory import inner_bytes_per_token
from ...params import TrainingParams
from ...pipeline.partition import StagePartition
from ..costs import DenseLayers, StageCosts
from ..kernels import part_times, timed_costs
from ..stage_costs import stage_costs
from ..view import StepView
from . import cp, ep

__all__ = [ "layer_config", "dense_config", "dense_layers", "dense_in_stage",
    "stage_compute", "params_delta", "flops_delta", "moe_layers_in", "layer_times",
    "layer_static", "ep_kernels", "mtp_moe_layers", "head_params_delta", "activation_terms",
    "inner_bytes_per_token", "expert_overhead_s",
]  # fmt: skip


def layer_config(cfg: ModelConfig) -> ModelConfig:
    """The config the step model costs as "the layer": every layer a MoE layer."""
    if cfg.is_moe and cfg.first_dense_layers:
        return cfg.replace(first_dense_layers=0)
    return cfg


def dense_config(cfg: ModelConfig) -> ModelConfig:
    """``cfg`` with dense MLPs of ``ffn_hidden_size`` in place of its experts."""
    return cfg.replace(
        num_experts=0, moe_intermediate_size=None, num_shared_experts=0,
        shared_expert_size=None, shared_expert_gate=False, first_dense_layers=0,
    )  # fmt: skip


def dense_layers(s: StepView) -> DenseLayers | None:
    """The dense first layers of ``s.cfg`` costed like the MoE layer (None: none)."""
    cfg = s.cfg
    if not cfg.is_moe or not cfg.dense_layers:
        return None

    tp_, par = s.tparams, s.par
    whole = stage_costs(
        dense_config(cfg), s.seq, par.tp, par.microbatch_size, s.cluster, tp_.cost,
        tp_.search_method, tp_.fused_ops, tp_.tp_layout,
    )  # fmt: skip
    layer = cp.split_costs(timed_costs(whole, s.cluster.chip, tp_), par.cp).layer
    return DenseLayers(cfg.dense_layers, layer, ep.layer_params(layer, par.tp, par.ep, par.etp))


def dense_in_stage(s: StepView, part: StagePartition, g: int) -> int:
    """Dense layers stage ``g`` holds (its parts ``bounds[g]:bounds[g+1]`` of ``[embed,
    layer 0, ..., head]``: layer ``i`` is part ``i + 1``)."""
    d = getattr(s, "dense", None)
    if d is None:
        return 0
    lo, hi = part.bounds[g], part.bounds[g + 1]
    return max(0, min(hi - 1, part.num_layers, d.count) - max(lo - 1, 0))


def moe_layers_in(s: StepView, part: StagePartition, stages) -> int:
    """Layers holding experts among ``stages`` (what the all-to-alls run for), the MoE
    layers of multi-token prediction with the head."""
    mtp = mtp_moe_layers(s.cfg)
    return sum(part.layers(g) - dense_in_stage(s, part, g) + mtp * part.has_head(g)
               for g in stages)  # fmt: skip


def mtp_moe_layers(cfg: ModelConfig) -> int:
    """MoE layers in the multi-token-prediction modules (each has one layer like the last)."""
    return cfg.mtp_layers if cfg.layer_is_moe(cfg.num_layers) else 0


def head_params_delta(s: StepView) -> float:
    """The head's expert weights (multi-token prediction's MoE layers) on one device: split
    over etp * ep, not tp alone as the rest of the head."""
    e, par = s.costs.head.expert_params, s.par
    if not e:
        return 0.0
    if not par.experts_folded:
        return -e / par.tp * (1 - 1 / par.ep)
    return e / (par.expert_tp * par.ep) - e / par.tp


def stage_compute(s: StepView, part: StagePartition, g: int, fwd: float, bwd: float):
    """(forward, backward) seconds of stage ``g`` with its dense layers at their own cost,
    and each MoE layer's per-expert host cost (`expert_overhead_s`) both ways."""
    e = expert_overhead_s(s) * moe_layers_in(s, part, (g,)) if s.cfg.is_moe else 0.0
    n = dense_in_stage(s, part, g)
    if not n:
        return fwd + e, bwd + e
    c, d = s.costs.layer, s.dense.layer
    return fwd + e + n * (d.forward_s - c.forward_s), bwd + e + n * (d.backward_s - c.backward_s)


def expert_overhead_s(s: StepView) -> float:
    """Seconds one MoE layer pass (forward or backward of a microbatch) spends per device on
    its local experts' launches: ``moe_expert_overhead_s`` x num_experts / ep."""
    return s.tparams.moe_expert_overhead_s * s.cfg.num_experts / max(s.par.ep, 1)


def params_delta(s: StepView, part: StagePartition, g: int) -> float:
    """Parameters on a device of stage ``g``: dense layers' minus the MoE layers' they
    replace, and the head's expert weights split over ep (`head_params_delta`)."""
    n = dense_in_stage(s, part, g)
    out = n * (s.dense.params - s.layer_params) if n else 0.0
    return out + (head_params_delta(s) if part.has_head(g) else 0.0)


def flops_delta(s: StepView) -> float:
    """Forward FLOPs of one microbatch: the dense layers' minus the MoE layers'."""
    d = getattr(s, "dense", None)
    return d.count * (d.layer.flops - s.costs.layer.flops) if d else 0.0


def layer_times(s: StepView, times: list[float]) -> list[float]:
    """Per-part seconds ``[embed, layers..., head]`` for the pipeline partition, with the
    dense layers' own time (their compute, no all-to-all) and the all-to-alls of the
    head's multi-token-prediction MoE layers."""

    out = list(times)
    out[-1] += 2 * ep.stage_s(s, mtp_moe_layers(s.cfg))
    d = getattr(s, "dense", None)
    if d is None:
        return out
    c = s.costs.layer
    delta = (d.layer.forward_s + d.layer.backward_s + d.layer.tp_forward_s
             + d.layer.tp_backward_s) - (c.forward_s + c.backward_s + c.tp_forward_s
                                         + c.tp_backward_s) - 2 * ep.stage_s(s, 1)  # fmt: skip
    for i in range(1, 1 + d.count):
        out[i] += delta
    return out


def layer_static(s: StepView, static: list[float], per_param: float) -> list[float]:
    """Per-part model-state bytes with the dense layers' own parameters and the head's
    experts split over ep."""
    out = list(static)
    out[-1] += head_params_delta(s) * per_param
    d = getattr(s, "dense", None)
    if d is not None:
        for i in range(1, 1 + d.count):
            out[i] = d.params * per_param
    return out


_EXPERT_GEMMS = (".moe.gate", ".moe.up", ".moe.down", ".moe.fc1")


def ep_kernels(costs: StageCosts, cfg: ModelConfig, par: ParallelConfig, chip: Chip,
               p: TrainingParams) -> StageCosts:  # fmt: skip
    """``costs`` with the layer's expert GEMMs timed as one device of an ``ep`` group runs
    them (``E / ep`` experts of ``capacity * ep`` rows; the times of the other kernels
    kept; ``costs`` are one context-parallel rank's share, so the change is too).

    Folded with ``etp`` other than ``tp`` (Megatron-Core's MoE parallel folding), a device
    holds ``1 / etp`` of each expert's inner width and sees the tokens of ``etp * ep / tp``
    tensor-parallel groups: ``capacity * ep * etp / tp`` rows of width ``ffn / etp`` where
    the search split ``ffn`` over tp (gate/up's N, down's K), the same FLOPs."""
    layer = costs.layer
    if not cfg.is_moe or (par.ep == 1 and not par.experts_folded) or p.kernel_model != "shape":
        return costs
    tp, etp, ffn = par.tp, par.expert_tp, cfg.moe_ffn

    def local(o):
        if not (o.kind == "gemm" and o.name.endswith(_EXPERT_GEMMS) and o.batch % par.ep == 0):
            return o
        out = replace(o, batch=o.batch // par.ep, m=o.m * par.ep)
        rows, rest = divmod(out.m * etp, tp)
        if etp == tp or rest or ffn % etp:
            return out
        if o.n * tp == ffn:  # column-parallel (gate, up): N is ffn / tp
            return replace(out, m=rows, n=ffn // etp)
        if o.k * tp == ffn:  # row-parallel (down): K is ffn / tp
            return replace(out, m=rows, k=ffn // etp)
        return out

    ops = tuple(local(o) for o in layer.kernels)
    if ops == layer.kernels:
        return costs
    before, after = part_times(layer.kernels, chip, p), part_times(ops, chip, p)
    fwd = cp.device_share(after.forward_s - before.forward_s, par.cp)
    bwd = cp.device_share(after.backward_s - before.backward_s, par.cp)
    layer = replace(layer, forward_s=layer.forward_s + fwd, backward_s=layer.backward_s + bwd,
                    kernels=ops)  # fmt: skip
    return replace(costs, layer=layer)


def activation_terms(s: StepView):
    """``s.tparams.activations`` with ``split_bytes`` scaled to a MoE or MLA layer's insides
    (`inner_bytes_per_token` over ``24 h``); unchanged for other models."""
    terms, cfg = s.tparams.activations, s.cfg
    if not (cfg.is_moe or cfg.is_mla):
        return terms
    scale = inner_bytes_per_token(cfg) / (24 * cfg.hidden_size)
    return replace(terms, split_bytes=terms.split_bytes * scale)
