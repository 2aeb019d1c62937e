"""The model of one training configuration: times and sizes per stage, memory per
device, communication per step. `simulate` and `estimate` (in ``simulate.py``) share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..hardware import Cluster, Mesh
from ..ir import DType
from ..models import ModelConfig
from ..search.params import CostParams
from ..search.planner import Method
from .config import ParallelConfig, ParallelConfigError
from .memory import (
    ActivationTerms,
    MemoryAllowances,
    MemoryBreakdown,
    StateBytes,
    activation_bytes_per_layer,
    model_state_bytes,
)
from .pipeline.partition import StagePartition
from .stage_costs import StageCosts, stage_costs

__all__ = ["TrainingParams", "CALIBRATED_COST", "COMM_KINDS", "StepModel"]

COMM_KINDS = ("tp", "pp", "dp", "zero", "ep")
_COLLECTIVES: dict[tuple, float] = {}  # (mesh, kind, bytes, axes) -> seconds

# The training model's default operator costs: 65% of peak for the searched contractions
# (a large bf16 GEMM on an A100 reaches 70-80%; the rest covers kernel launches and small
# shapes) and 80% of link and HBM bandwidth. Chosen once so that the ten rows of
# Narayanan et al. 2021, Table 1 are predicted within a few percent, the same values for
# every row (explorer.training.published; bench/training.py prints the table).
CALIBRATED_COST = CostParams(compute_efficiency=0.65, bandwidth_efficiency=0.8)


@dataclass(frozen=True)
class TrainingParams:
    """Every knob of the training-step model besides the per-operator `CostParams`.

    Args:
        cost: the cost model of the operator search and of collectives
            (``compute_efficiency``, ``bandwidth_efficiency``, ``grad_comm_overlap``, and
            ``device_memory_cap_bytes``: the memory a device may use, None = the chip's);
            default `CALIBRATED_COST`.
        state: bytes per parameter of weights, gradients, optimizer states.
        activations: Korthikanti et al.'s activation coefficients.
        allowances: runtime context, communication buffers, fragmentation.
        optimizer_step_bytes_per_param: HBM traffic of one Adam update per parameter:
            read and write fp32 master, momentum and variance (24 B) and the 16-bit
            gradient and weight (4 B).
        p2p_scatter_gather: send 1/t of a stage's output between nodes and all-gather it
            inside (Narayanan et al. 2021, section 4.1).
        zero3_prefetch_layers: layers of full weights a ZeRO-3 device holds at once (the
            layer running and the one prefetched, as DeepSpeed does).
        search_method: the operator-strategy search used for per-layer costs.
        fused_ops: layer ops whose cost a fused kernel absorbs (Megatron-LM's
            FusedScaleMaskSoftmax: scale and mask; bias_gelu: the fc1 bias; bias-dropout-
            add: the o and fc2 biases); ``()`` costs every op as its own kernel.
    """

    cost: CostParams = field(default_factory=lambda: CALIBRATED_COST)
    state: StateBytes = field(default_factory=StateBytes)
    activations: ActivationTerms = field(default_factory=ActivationTerms)
    allowances: MemoryAllowances = field(default_factory=MemoryAllowances)
    optimizer_step_bytes_per_param: float = 28.0
    p2p_scatter_gather: bool = True
    zero3_prefetch_layers: int = 2
    search_method: Method = "dynamic_programming"
    fused_ops: tuple[str, ...] = ("scale", "mask", "fc1_bias", "o_bias", "fc2_bias")

    def replace(self, **changes) -> TrainingParams:
        return replace(self, **changes)


class StepModel:
    """Times and sizes of one configuration: shared by `simulate` and `estimate`."""

    def __init__(
        self, cfg, par: ParallelConfig, cluster: Cluster, gb: int, seq: int, tp_: TrainingParams
    ):
        self.cfg, self.par, self.cluster, self.seq, self.tparams = cfg, par, cluster, seq, tp_
        _validate(cfg, par, cluster, seq)
        self.m = par.microbatches(gb)
        self.gb = gb
        self.costs: StageCosts = stage_costs(
            cfg,
            seq,
            par.tp,
            par.microbatch_size,
            cluster,
            tp_.cost,
            tp_.search_method,
            tp_.fused_ops,
        )
        dp_outer = par.dp // par.ep
        self.mesh = Mesh(
            {"pp": par.pp, "dp": dp_outer, "ep": par.ep, "tp": par.tp}, hardware=cluster
        )
        self.act_dtype_bytes = DType.parse(cfg.dtype).itemsize
        self.cap = tp_.cost.device_memory_cap_bytes or float(cluster.chip.memory_bytes)
        # what collective_time depends on, as plain values (cheap to hash)
        self._mesh_key = (
            cluster.chips_per_node, cluster.intra_node_bandwidth_bytes_per_s,
            cluster.intra_node_latency_s, cluster.inter_node_bandwidth_bytes_per_s,
            cluster.inter_node_latency_s, self.mesh.axes,
        )  # fmt: skip
        c, t = self.costs, par.tp
        bw_eff = tp_.cost.bandwidth_efficiency
        # Parameters on one device per part (TP splits every weight; experts also over ep).
        self.layer_params = (c.layer.params - c.layer.expert_params) / t + c.layer.expert_params / (
            t * par.ep
        )
        self.embed_params = c.embed.params / t
        head = c.head.params
        if cfg.tied_embeddings and par.stages > 1:
            head += cfg.vocab_size * cfg.hidden_size  # the last stage keeps a tied copy
        self.head_params = head / t
        # Point-to-point message between stages.
        msg = par.microbatch_size * seq * cfg.hidden_size * self.act_dtype_bytes
        if par.pp > 1:
            if tp_.p2p_scatter_gather and t > 1:
                self.p2p_s = (
                    self._coll("send/recv", msg / t, ("pp",))
                    + self._coll("all-gather", msg, ("tp",))
                ) / bw_eff
                self.p2p_bytes = msg / t
            else:
                self.p2p_s = self._coll("send/recv", msg, ("pp",)) / bw_eff
                self.p2p_bytes = msg
        else:
            self.p2p_s, self.p2p_bytes = 0.0, 0.0
        # Expert-parallel all-to-all per MoE layer and microbatch (dispatch + combine).
        self.ep_s = self.ep_bytes = 0.0
        if cfg.is_moe and par.ep > 1:
            tokens = par.microbatch_size * seq * cfg.experts_top_k * cfg.capacity_factor
            size = tokens * cfg.hidden_size * self.act_dtype_bytes / t
            self.ep_s = 2 * self._coll("all-to-all", size, ("ep",)) / bw_eff
            self.ep_bytes = 2 * self.mesh.collective_bytes("all-to-all", size, ("ep",))

    def _coll(self, kind: str, size: float, axes: tuple[str, ...]) -> float:
        key = (self._mesh_key, kind, size, axes)
        v = _COLLECTIVES.get(key)
        if v is None:
            if len(_COLLECTIVES) > 100_000:
                _COLLECTIVES.clear()
            v = _COLLECTIVES[key] = self.mesh.collective_time(kind, size, axes)
        return v

    # --- per-layer activations and recompute ------------------------------------------
    def layer_act(self, policy: str) -> float:
        cfg, par = self.cfg, self.par
        return activation_bytes_per_layer(
            self.seq, par.microbatch_size, cfg.hidden_size, cfg.num_heads, par.tp, par.sp,
            policy, self.tparams.activations,
        )  # fmt: skip

    def layer_policies(self, n_layers: int, n_full: int | None) -> tuple[int, int, int]:
        """(layers with no recompute, selective, full) among ``n_layers`` of a stage."""
        r = self.par.recompute
        if r == "none":
            return n_layers, 0, 0
        if r == "selective":
            return 0, n_layers, 0
        if r == "full":
            return 0, 0, n_layers
        k = min(n_full or 0, n_layers)
        return 0, n_layers - k, k

    # --- times per part ---------------------------------------------------------------
    def _zero3_gather_s(self, params: float) -> float:
        if self.par.zero < 3 or self.par.dp == 1:
            return 0.0
        size = params * self.tparams.state.weight_bytes
        return self._coll("all-gather", size, ("dp", "ep")) / self.tparams.cost.bandwidth_efficiency

    def stage_segments(self, part: StagePartition, g: int, n_full: int | None):
        """(forward segments, backward segments) of stage ``g`` for one microbatch."""
        c = self.costs
        n = part.layers(g)
        none_, sel, full = self.layer_policies(n, n_full)
        L = c.layer
        fwd = n * L.forward_s
        bwd = n * L.backward_s
        tpf = n * L.tp_forward_s
        tpb = n * L.tp_backward_s
        rec = full * (L.forward_s + L.tp_forward_s) + sel * L.recompute_selective_s
        params = n * self.layer_params
        for has, P in ((part.has_embed(g), c.embed), (part.has_head(g), c.head)):
            if has:
                fwd += P.forward_s
                bwd += P.backward_s
                tpf += P.tp_forward_s
                tpb += P.tp_backward_s
        params += part.has_embed(g) * self.embed_params + part.has_head(g) * self.head_params
        ep = n * self.ep_s if self.cfg.is_moe else 0.0
        zg = self._zero3_gather_s(params)
        grads = self._sharded_grad_s(params)
        f = [("zero-gather", zg), ("compute-forward", fwd), ("tp-comm", tpf), ("ep-comm", ep)]
        b = [("zero-gather", zg), ("recompute", rec), ("compute-backward", bwd),
             ("tp-comm", tpb), ("ep-comm", ep), ("dp-comm", grads)]  # fmt: skip
        return f, b

    def _grad_sync_s(self, kind: str, params: float) -> float:
        tp_ = self.tparams
        size = params * tp_.state.gradient_bytes
        t = self._coll(kind, size, ("dp", "ep")) / tp_.cost.bandwidth_efficiency
        return t * (1 - tp_.cost.grad_comm_overlap)

    def _sharded_grad_s(self, params: float) -> float:
        """ZeRO 2/3 keep only a 1/dp shard of the gradients, so every microbatch's
        backward reduce-scatters its gradients (no accumulation in a full buffer)."""
        if self.par.zero < 2 or self.par.dp == 1:
            return 0.0
        return self._grad_sync_s("reduce-scatter", params)

    def stage_params(self, part: StagePartition, g: int) -> float:
        return (
            part.layers(g) * self.layer_params
            + part.has_embed(g) * self.embed_params
            + part.has_head(g) * self.head_params
        )

    def tail(self, params: float) -> list[tuple[str, float]]:
        """Gradient reduction, optimizer step and (ZeRO 1/2) weight all-gather on a
        device holding ``params`` parameters."""
        par, tp_ = self.par, self.tparams
        eff = tp_.cost.bandwidth_efficiency
        axes = ("dp", "ep")
        if par.dp == 1 or par.zero >= 2:
            dp_s = 0.0  # ZeRO 2/3 reduce-scatter after every microbatch (stage_segments)
        else:
            dp_s = self._grad_sync_s("all-reduce" if par.zero == 0 else "reduce-scatter", params)
        local = params / (par.dp if par.zero >= 1 else 1)
        opt_s = (
            local
            * tp_.optimizer_step_bytes_per_param
            / (self.cluster.chip.memory_bandwidth_bytes_per_s * eff)
        )
        gather = 0.0
        if par.zero in (1, 2) and par.dp > 1:
            gather = self._coll("all-gather", params * tp_.state.weight_bytes, axes) / eff
        return [("dp-comm", dp_s), ("optimizer", opt_s), ("zero-gather", gather)]

    # --- memory -----------------------------------------------------------------------
    def stage_act(self, part: StagePartition, g: int, n_full: int | None) -> float:
        """Activation bytes of stage ``g`` per microbatch in flight."""
        none_, sel, full = self.layer_policies(part.layers(g), n_full)
        act = none_ * self.layer_act("none") + sel * self.layer_act("selective")
        act += full * self.layer_act("full")
        if part.has_embed(g):
            a = self.tparams.activations
            sbh = self.seq * self.par.microbatch_size * self.cfg.hidden_size
            act += sbh * a.embedding_dropout_bytes / (self.par.tp if self.par.sp else 1)
        return act

    def head_act(self) -> float:
        cfg, a = self.cfg, self.tparams.activations
        sbh = self.seq * self.par.microbatch_size * cfg.hidden_size
        return sbh * a.head_bytes * (1 + cfg.vocab_size / cfg.hidden_size) / self.par.tp

    def device_memory(
        self, part: StagePartition, d: int, n_full: int | None, live_act: float
    ) -> MemoryBreakdown:
        """The breakdown of device ``d`` given its peak live activations ``live_act``."""
        par, tp_ = self.par, self.tparams
        chunks = [c * par.pp + d for c in range(par.virtual_stages)]
        params = sum(self.stage_params(part, g) for g in chunks)
        w, gr, opt = model_state_bytes(params, par.dp, par.zero, tp_.state)
        act = live_act + (self.head_act() if any(part.has_head(g) for g in chunks) else 0.0)
        work = 0.0
        n_layers = [self.layer_policies(part.layers(g), n_full) for g in chunks]
        if any(f for _, _, f in n_layers):
            work = self.layer_act("none")
        elif any(s for _, s, _ in n_layers):
            work = self.layer_act("none") - self.layer_act("selective")
        zbuf = 0.0
        if par.zero >= 3:
            zbuf = tp_.zero3_prefetch_layers * self.layer_params * tp_.state.weight_bytes
        al = tp_.allowances
        rest = al.runtime_context_bytes + al.communication_buffer_bytes
        frag = al.fragmentation_fraction * (w + gr + opt + act + work + zbuf + rest)
        return MemoryBreakdown(
            parameters=w, gradients=gr, optimizer_states=opt, activations=act,
            recompute_working_set=work, zero_gather_buffer=zbuf,
            runtime_context=al.runtime_context_bytes,
            communication_buffers=al.communication_buffer_bytes, fragmentation=frag, stage=d,
        )  # fmt: skip

    def flops(self) -> tuple[float, float]:
        """(model FLOPs, hardware FLOPs with recomputation) of one step, whole job."""
        c, cfg = self.costs, self.cfg
        fwd = cfg.num_layers * c.layer.flops + c.embed.flops + c.head.flops
        factor = 1 + self.tparams.cost.backward_compute_ratio
        seqs = self.gb / self.par.microbatch_size
        model = factor * fwd * seqs
        r = self.par.recompute
        extra = 0.0
        if r == "full":
            extra = cfg.num_layers * c.layer.flops
        elif r in ("selective", "per_layer"):
            core = c.layer.recompute_selective_s / max(c.layer.forward_s, 1e-30)
            extra = cfg.num_layers * c.layer.flops * core  # the core's share, by time
        return model, model + extra * seqs

    def comm_bytes(self, part: StagePartition, worst: int) -> tuple[tuple[str, float], ...]:
        par, tp_ = self.par, self.tparams
        chunks = [k * par.pp + worst for k in range(par.virtual_stages)]
        params = sum(self.stage_params(part, g) for g in chunks)
        n = sum(part.layers(g) for g in chunks)
        tp_b = 0.0
        if par.tp > 1:
            per = 2 * self.seq * par.microbatch_size * self.cfg.hidden_size * self.act_dtype_bytes
            # two all-reduces forward and two backward per layer (Megatron), ring volume
            tp_b = 2 * n * self.mesh.collective_bytes("all-reduce", per, ("tp",)) * self.m
        pp_b = 2 * self.p2p_bytes * self.m * par.virtual_stages if par.pp > 1 else 0.0
        grad = params * tp_.state.gradient_bytes
        kind = "all-reduce" if par.zero == 0 else "reduce-scatter"
        dp_b = self.mesh.collective_bytes(kind, grad, ("dp", "ep"))
        if par.zero >= 2:
            dp_b *= self.m
        zero_b = 0.0
        if par.zero in (1, 2):
            zero_b = self.mesh.collective_bytes(
                "all-gather", params * tp_.state.weight_bytes, ("dp", "ep")
            )
        elif par.zero == 3:
            zero_b = (
                2
                * self.m
                * self.mesh.collective_bytes(
                    "all-gather", params * tp_.state.weight_bytes, ("dp", "ep")
                )
            )
        ep_b = self.ep_bytes * 2 * n * self.m if self.cfg.is_moe else 0.0
        return (("tp", tp_b), ("pp", pp_b), ("dp", dp_b), ("zero", zero_b), ("ep", ep_b))


def _validate(cfg: ModelConfig, par: ParallelConfig, cluster: Cluster, seq: int) -> None:
    if par.devices > cluster.capacity:
        raise ParallelConfigError(
            f"{par} needs {par.devices} devices but {cluster.name} holds {cluster.capacity}; "
            "use fewer devices or a larger cluster profile"
        )
    if cfg.arch == "mlp":
        raise ParallelConfigError(
            f"model {cfg.name!r} is an MLP; the training simulator models transformers"
        )
    if cfg.num_heads % par.tp:
        raise ParallelConfigError(
            f"tp={par.tp} does not divide the {cfg.num_heads} attention heads of {cfg.name!r}; "
            "choose tp among the divisors of the head count"
        )
    if par.stages > cfg.num_layers:
        raise ParallelConfigError(
            f"pp * virtual_stages = {par.stages} exceeds the {cfg.num_layers} layers of "
            f"{cfg.name!r}; every stage needs a layer"
        )
    if par.virtual_stages > 1 and cfg.num_layers % par.stages:
        raise ParallelConfigError(
            f"interleaved 1F1B with pp={par.pp} x virtual_stages={par.virtual_stages} needs "
            f"the {cfg.num_layers} layers of {cfg.name!r} to split evenly into "
            f"{par.stages} chunks (Megatron-LM's rule); choose pp * v dividing "
            f"{cfg.num_layers}"
        )
    if par.ep > 1 and (not cfg.is_moe or cfg.num_experts % par.ep):
        raise ParallelConfigError(
            f"ep={par.ep} needs a mixture-of-experts model whose expert count it divides; "
            f"{cfg.name!r} has {cfg.num_experts} experts"
        )
    if par.recompute == "per_layer" and par.recompute_num_layers is not None:
        if par.recompute_num_layers > math.ceil(cfg.num_layers / par.stages):
            raise ParallelConfigError(
                f"recompute_num_layers={par.recompute_num_layers} exceeds the layers per "
                f"stage ({math.ceil(cfg.num_layers / par.stages)})"
            )
