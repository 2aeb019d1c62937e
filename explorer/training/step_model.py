"""The model of one training configuration: times and sizes per stage, memory per
device, communication per step. `simulate` and `estimate` (in ``simulate.py``) share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from ..hardware import Cluster, Mesh
from ..ir import DType
from ..memo import memoize
from ..models import ModelConfig
from ..search.params import CostParams
from ..search.planner import METHODS, Method
from .config import ParallelConfig, ParallelConfigError
from .datacenters import collective_time as dc_collective_time
from .datacenters import mesh_axes
from .kernels import check_knobs, knob, timed_costs
from .memory import (
    ActivationTerms,
    MemoryAllowances,
    MemoryBreakdown,
    StateBytes,
    TrainingParamsError,
    check_nonnegative,
    reduce_buffer_bytes,
)
from .pipeline.partition import StagePartition
from .stage_costs import StageCosts, stage_costs
from .terms import cp, dp, ep, moe, pp, recompute, tp, zero

__all__ = ["TrainingParams", "CALIBRATED_COST", "COMM_KINDS", "StepModel", "exposed_s"]

COMM_KINDS = ("tp", "pp", "dp", "zero", "ep", "cp")

# The operator search's costs in the training model: 65% of peak for contractions and 80%
# of link and HBM bandwidth. With ``kernel_model="shape"`` (the default) they choose each
# op's layout and price collectives (bandwidth_efficiency); compute times come from
# `kernels` (matmul_efficiency_cap 0.65 on full waves of tiles, hbm_efficiency 0.8), set
# once so that the ten rows of Narayanan et al. 2021, Table 1 stay within 5% (worst row
# 4.7%; bench/training.py prints the table). ``kernel_model="flat"`` times compute with
# compute_efficiency alone (worst row 5.1%).
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
        activations: Korthikanti et al.'s activation coefficients (a GPT layer's), scaled
            to the model's layer (`memory.layer_terms`) unless ``per_architecture=False``.
        allowances: runtime context, communication buffers, fragmentation.
        optimizer_step_bytes_per_param: HBM traffic of one Adam update per parameter:
            read and write fp32 master, momentum and variance (24 B) and the 16-bit
            gradient and weight (4 B).
        p2p_scatter_gather: send 1/t of a stage's output between nodes and all-gather it
            inside (Narayanan et al. 2021, section 4.1).
        zero3_prefetch_layers: layers of full weights a ZeRO-3 device holds at once (the
            layer running and the one prefetched, as DeepSpeed does).
        zero3_recompute_regather: ZeRO-3 gathers a fully recomputed layer's weights a third
            time, for the recomputed forward (DeepSpeed: the checkpointed forward runs the
            module's pre-forward hooks again, which fetch the partitioned parameters;
            PyTorch FSDP likewise re-gathers under activation checkpointing).
        search_method: the operator-strategy search used for per-layer costs.
        fused_ops: layer ops whose cost a fused kernel absorbs (Megatron-LM's
            FusedScaleMaskSoftmax: scale and mask; bias_gelu: the fc1 bias; bias-dropout-
            add: the o and fc2 biases); ``()`` costs every op as its own kernel.
        kernel_model: ``shape`` times each layer's kernels by their local shapes
            (`explorer.training.kernels`: tile and wave quantization, rooflines, overheads);
            ``flat`` keeps the operator search's one fraction of peak
            (``cost.compute_efficiency``) for every op.
        flash_attention: the attention core runs as one fused kernel (FlashAttention);
            False: scores, softmax and context are separate kernels (Megatron-LM 2021).
            A layer then keeps no s x s scores (``recompute="none"`` needs the memory of
            ``"selective"``) and selective recomputation adds no time.
        cp_kv_regather: with context parallelism's all-gather exchange, a layer keeps only
            its own ``s / cp`` positions of K and V for the backward and all-gathers them
            again there (TransformerEngine's ``AttnFuncWithCPAndKVAllGather``, written
            after Llama 3 section 3.3.2, saves the local K, V and re-gathers in its
            backward): no gathered K, V held between forward and backward, one more
            all-gather per layer and microbatch. False (default, an assumption: Llama 3
            does not say): the gathered K, V are kept for the backward, as autograd keeps a
            plain all-gather's output that the attention reads.

    The float knobs below carry their unit, range and source in the field's metadata
    (`kernels.knob_table(params)` prints them; ``TrainingParamsError`` names a bad one):

    ============================  =========  ===============================================
    field                         unit       meaning
    ============================  =========  ===============================================
    matmul_efficiency_cap         fraction   of peak FLOP/s a full wave of GEMM tiles runs at
    tile_reuse_exponent           1          smaller tiles run at (reuse/best reuse)^this
    hbm_efficiency                fraction   of HBM bandwidth memory-bound kernels reach
    kernel_overhead_s             s          fixed time per kernel launched
    microbatch_overhead_s         s          fixed time per forward or backward of a stage
    memory_bound_backward_ratio   1          backward bytes / forward bytes, memory-bound ops
    flash_attention_efficiency    fraction   of peak the fused attention kernel runs at
    flash_backward_flops_ratio    1          fused attention backward FLOPs / forward
    flash_block_tokens            tokens     fused attention block (causal skip granularity)
    grad_overlap_fraction         fraction   of gradient reduction hidden behind backward
    zero3_max_live_params         params     ZeRO-3 gathered weights held at most at once
    zero_gather_overlap_fraction  fraction   of ZeRO-3 weight gathers hidden behind compute
    zero_grad_overlap_fraction    fraction   of ZeRO-2/3 per-microbatch reduce-scatters hidden
    zero_bandwidth_efficiency     fraction   of link bandwidth ZeRO-3's gathers/reduce-scatters reach
    zero3_collectives_per_tensor  1          ZeRO-3 collectives per gathered weight tensor
    zero3_persistence_threshold   elements   ZeRO-3 keeps smaller tensors whole on every device
    zero_reduce_bucket_params     params     ZeRO-2/3 unsharded gradients held until reduced
    ============================  =========  ===============================================
    """

    cost: CostParams = field(default_factory=lambda: CALIBRATED_COST)
    state: StateBytes = field(default_factory=StateBytes)
    activations: ActivationTerms = field(default_factory=ActivationTerms)
    allowances: MemoryAllowances = field(default_factory=MemoryAllowances)
    optimizer_step_bytes_per_param: float = 28.0
    p2p_scatter_gather: bool = True
    zero3_prefetch_layers: int = 2
    zero3_recompute_regather: bool = True
    search_method: Method = "dynamic_programming"
    fused_ops: tuple[str, ...] = ("scale", "mask", "fc1_bias", "o_bias", "fc2_bias")
    kernel_model: Literal["shape", "flat"] = "shape"
    flash_attention: bool = False
    cp_kv_regather: bool = False
    matmul_efficiency_cap: float = knob(
        0.65, "fraction of peak FLOP/s", 0.0, 1.0, low_open=True,
        source="assumption, set once so that Narayanan et al. 2021 Table 1 stays within 5% "
        "(bench/training.py)")  # fmt: skip
    tile_reuse_exponent: float = knob(
        0.5, "dimensionless", 0.0, 4.0,
        source="assumption; smaller cuBLAS tiles are less efficient (NVIDIA Matrix "
        "Multiplication Background User's Guide, section 2.3)")  # fmt: skip
    hbm_efficiency: float = knob(
        0.8, "fraction of HBM bandwidth", 0.0, 1.0, low_open=True,
        source="assumption (the earlier CostParams.bandwidth_efficiency default)")  # fmt: skip
    kernel_overhead_s: float = knob(
        2e-6, "seconds per kernel", 0.0, 1e-3,
        source="assumption: the gap between dependent kernels on one CUDA stream")  # fmt: skip
    microbatch_overhead_s: float = knob(
        0.0, "seconds per stage forward or backward", 0.0, 10.0,
        source="assumption (0: framework time per microbatch not modelled until fitted)")  # fmt: skip
    memory_bound_backward_ratio: float = knob(
        2.0, "backward bytes / forward bytes", 0.0, 10.0,
        source="assumption (CostParams.backward_compute_ratio's default)")  # fmt: skip
    flash_attention_efficiency: float = knob(
        0.6, "fraction of peak FLOP/s", 0.0, 1.0, low_open=True,
        source="Dao 2023, FlashAttention-2: 50-73% of A100 peak (assumption within it)")  # fmt: skip
    flash_backward_flops_ratio: float = knob(
        2.5, "backward FLOPs / forward FLOPs", 0.0, 10.0,
        source="Dao 2023, FlashAttention-2: 5 matmuls backward (scores recomputed) to 2 "
        "forward")  # fmt: skip
    flash_block_tokens: float = knob(
        128.0, "tokens", 1.0, 65536.0,
        source="Dao 2023, FlashAttention-2, section 3.3: blocks of 64-128 tokens")  # fmt: skip
    grad_overlap_fraction: float = knob(
        0.0, "fraction of the gradient reduction", 0.0, 1.0,
        source="assumption: Megatron-LM 2021 reduces gradients after the last backward")  # fmt: skip
    zero3_max_live_params: float = knob(
        1e9, "parameters", 1.0, 1e13,
        source="DeepSpeed's default stage3_max_live_parameters (1e9; DeepSpeed ZeRO "
        "configuration docs, Rajbhandari et al. 2021)")  # fmt: skip
    zero_gather_overlap_fraction: float = knob(
        0.65, "fraction of ZeRO-3 gathers", 0.0, 1.0,
        source="fitted (one value for both ZeRO overlaps, rounded to 0.05; jointly with "
        "zero_bandwidth_efficiency: 0.658) on the fit rows "
        "of Narayanan et al. 2021 Table 2's ZeRO-3 runs (gpt3-175b on 384 and 1536 GPUs, "
        "529.6b on 2240; published.FIT_ROWS, bench/accuracy.py fit_dataset_facts); "
        "DeepSpeed prefetches the next layer's parameters behind compute")  # fmt: skip
    zero_grad_overlap_fraction: float = knob(
        0.65, "fraction of ZeRO-2/3 gradient reduce-scatters", 0.0, 1.0,
        source="fitted with zero_gather_overlap_fraction (same value, same rows of "
        "Narayanan et al. 2021 Table 2); "
        "DeepSpeed's overlap_comm runs each microbatch's gradient reduce-scatter behind "
        "the backward")  # fmt: skip
    zero_bandwidth_efficiency: float = knob(
        1.0, "fraction of link bandwidth", 0.0, 1.0, low_open=True,
        source="fitted with zero_gather_overlap_fraction on the fit rows of Narayanan et al. "
        "2021 Table 2's ZeRO-3 runs (bench/accuracy.py fit_dataset_facts): least squares "
        "stops at the bound 1.0 (line rate). Those runs move the whole weights four times "
        "a step (three gathers, one reduce-scatter): 529.6B on 2240 GPUs in 183.7 s needs "
        "at least 0.92 of the 25 GB/s NIC; CostParams.bandwidth_efficiency's 0.8 is an "
        "assumption set with Table 1's tensor- and pipeline-parallel runs")  # fmt: skip
    zero3_collectives_per_tensor: float = knob(
        1.0, "collectives per gathered weight tensor per gather or reduce-scatter", 0.0, 100.0,
        source="DeepSpeed ZeRO-3 fetches a module's partitioned parameters tensor by tensor "
        "(deepspeed/runtime/zero/partition_parameters.py, Init._all_gather: with async_op, "
        "the prefetching path, one _allgather_param per parameter); assumption: the "
        "gradients' reduce-scatters as many; each pays a ring's latency "
        "(terms/zero.ring_latency_s). The tensors a layer gathers are counted from its "
        "architecture (terms/zero.gathered_tensors): a Megatron-LM GPT layer 4")  # fmt: skip
    zero3_persistence_threshold: float = knob(
        1e5, "elements", 0.0, 1e15,
        source="DeepSpeed's default stage3_param_persistence_threshold (1e5; DeepSpeed ZeRO "
        "configuration docs): smaller tensors (biases, norms, routers) stay whole on every "
        "device and are never gathered")  # fmt: skip
    zero_reduce_bucket_params: float = knob(
        5e8, "parameters", 1.0, 1e13,
        source="DeepSpeed's default reduce_bucket_size (5e8 elements; DeepSpeed ZeRO "
        "configuration docs); PyTorch FSDP reduce-scatters one wrapped module (a layer) at a "
        "time: a ZeRO-2/3 device holds min(layer, bucket) unsharded gradients "
        "(memory.reduce_buffer_bytes)")  # fmt: skip

    def __post_init__(self) -> None:
        kinds = (
            ("cost", CostParams),
            ("state", StateBytes),
            ("activations", ActivationTerms),
            ("allowances", MemoryAllowances),
        )
        for name, kind in kinds:
            if not isinstance(getattr(self, name), kind):
                raise TrainingParamsError(
                    f"TrainingParams.{name}={getattr(self, name)!r}; expected a {kind.__name__}"
                )
        check_nonnegative(self, ("optimizer_step_bytes_per_param",))
        check_knobs(self)
        if self.kernel_model not in ("shape", "flat"):
            raise TrainingParamsError(
                f"TrainingParams.kernel_model={self.kernel_model!r}; expected 'shape' "
                "(kernel time by shape) or 'flat' (one fraction of peak)"
            )
        for name in ("flash_attention", "p2p_scatter_gather", "cp_kv_regather"):
            if not isinstance(getattr(self, name), bool):
                raise TrainingParamsError(
                    f"TrainingParams.{name}={getattr(self, name)!r}; expected True or False"
                )
        k = self.zero3_prefetch_layers
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise TrainingParamsError(
                f"TrainingParams.zero3_prefetch_layers={k!r}; expected an int >= 1 (the layer "
                "running is always held)"
            )
        if self.search_method not in METHODS:
            raise TrainingParamsError(
                f"TrainingParams.search_method={self.search_method!r}; expected one of "
                f"{', '.join(METHODS)}"
            )
        if not isinstance(self.fused_ops, tuple) or not all(
            isinstance(x, str) for x in self.fused_ops
        ):
            raise TrainingParamsError(
                f"TrainingParams.fused_ops={self.fused_ops!r}; expected a tuple of op names "
                "such as ('scale', 'mask')"
            )

    def replace(self, **changes) -> TrainingParams:
        return replace(self, **changes)


class StepModel:
    """Times and sizes of one configuration: shared by `simulate` and `estimate`.

    The parallelisms' terms live in ``terms/`` (tp, pp, dp, zero, recompute, ep, cp); this class
    holds the configuration and composes them into stage segments, the step's tail, memory
    per device, FLOPs and bytes sent.
    """

    def __init__(
        self, cfg, par: ParallelConfig, cluster: Cluster, gb: int, seq: int, tp_: TrainingParams
    ):
        self.cfg, self.par, self.cluster, self.seq, self.tparams = cfg, par, cluster, seq, tp_
        _validate(cfg, par, cluster, seq)
        self.m = par.microbatches(gb)
        self.gb = gb
        self.seq_local = cp.local_seq(seq, par.cp)  # positions per context-parallel rank
        whole = stage_costs(
            moe.layer_config(cfg),  # every layer a MoE layer; dense first layers: moe.py
            seq,
            par.tp,
            par.microbatch_size,
            cluster,
            tp_.cost,
            tp_.search_method,
            tp_.fused_ops,
        )
        whole = timed_costs(whole, cluster.chip, tp_)  # kernel time by shape (kernels.py)
        self.costs: StageCosts = cp.split_costs(whole, par.cp)
        self.costs = moe.ep_kernels(self.costs, cfg, par, cluster.chip, tp_)  # experts over ep
        # devices over (pp, dp, ep, cp, tp); across datacenters dp goes outermost
        self.mesh = Mesh(mesh_axes(par, cluster), hardware=cluster)
        self.act_dtype_bytes = DType.parse(cfg.dtype).itemsize
        self.cap = tp_.cost.device_memory_cap_bytes or float(cluster.chip.memory_bytes)
        # Parameters on one device per part.
        self.layer_params = ep.layer_params(self.costs.layer, par.tp, par.ep)
        self.embed_params = tp.split_params(self.costs.embed.params, par.tp)
        self.head_params = tp.split_params(pp.head_params(self), par.tp)
        self.p2p_s, self.p2p_bytes = pp.p2p(self)
        self.ep_s, self.ep_bytes = ep.all_to_all(self)
        self.cp_fwd_s, self.cp_bwd_s, self.cp_fwd_bytes, self.cp_bwd_bytes = cp.exchange(self)
        self.dense = moe.dense_layers(self)  # MoE models' dense first layers, or None

    def collective_s(self, kind: str, size: float, axes: tuple[str, ...]) -> float:
        """Seconds of one collective on this configuration's mesh (memoized)."""
        return _collective_s(self.mesh, kind, size, axes)

    # --- per-layer activations and recompute ------------------------------------------
    def layer_act(self, policy: str) -> float:
        return recompute.layer_act(self, policy)

    def layer_policies(self, n_layers: int, n_full: int | None) -> tuple[int, int, int]:
        """(layers with no recompute, selective, full) among ``n_layers`` of a stage."""
        return recompute.layer_policies(self.par.recompute, n_layers, n_full)

    # --- times per part ---------------------------------------------------------------
    def stage_compute_s(self, part: StagePartition, g: int) -> tuple[float, float]:
        """(forward, backward) compute seconds of stage ``g`` for one microbatch: its
        parts' kernels plus ``microbatch_overhead_s`` each way."""
        c = self.costs
        n = part.layers(g)
        fwd = n * c.layer.forward_s
        bwd = n * c.layer.backward_s
        for has, P in ((part.has_embed(g), c.embed), (part.has_head(g), c.head)):
            if has:
                fwd += P.forward_s
                bwd += P.backward_s
        fwd, bwd = moe.stage_compute(self, part, g, fwd, bwd)
        over = self.tparams.microbatch_overhead_s
        return fwd + over, bwd + over

    def stage_segments(self, part: StagePartition, g: int, n_full: int | None):
        """(forward segments, backward segments) of stage ``g`` for one microbatch."""
        n = part.layers(g)
        fwd, bwd = self.stage_compute_s(part, g)
        tpf, tpb = tp.stage_comm_s(self, part, g)
        rec = recompute.layers_s(self, n, n_full)
        params = self.stage_params(part, g)
        ep_s = ep.stage_s(self, moe.moe_layers_in(self, part, (g,)))
        zg_raw = zero.gather_s(self, params, n)
        z_frac = self.tparams.zero_gather_overlap_fraction
        zg = exposed_s(zg_raw, fwd, z_frac)  # forward gather behind the forward
        zgb = exposed_s(zg_raw, bwd, z_frac)  # backward gather behind the backward
        zgr_raw = zg_raw * zero.regather_fraction(self, n, n_full)
        zgr = exposed_s(zgr_raw, rec, z_frac)  # recompute's gather behind the recompute
        free = max(bwd + rec - (zg_raw - zgb) - (zgr_raw - zgr), 0.0)  # not yet hiding any
        grads = exposed_s(
            dp.microbatch_s(self, params, n), free, self.tparams.zero_grad_overlap_fraction
        )  # ZeRO 2/3: each microbatch's reduce-scatter behind its backward
        cpf, cpb = cp.stage_s(self, n, n_full)
        f = [("zero-gather", zg), ("compute-forward", fwd), ("tp-comm", tpf), ("ep-comm", ep_s),
             ("cp-comm", cpf)]  # fmt: skip
        b = [("zero-gather", zgb + zgr), ("recompute", rec), ("compute-backward", bwd),
             ("tp-comm", tpb), ("ep-comm", ep_s), ("cp-comm", cpb),
             ("dp-comm", grads)]  # fmt: skip
        return f, b

    def stage_params(self, part: StagePartition, g: int) -> float:
        return (
            part.layers(g) * self.layer_params
            + part.has_embed(g) * self.embed_params
            + part.has_head(g) * self.head_params
            + moe.params_delta(self, part, g)
        )

    def device_backward_s(self, part: StagePartition, d: int, n_full: int | None) -> float:
        """Compute seconds of one microbatch's backward (with recomputation) over the
        chunks of pipeline device ``d``: what the last gradient reduction can hide behind."""
        total = 0.0
        for c in range(self.par.virtual_stages):
            g = c * self.par.pp + d
            total += self.stage_compute_s(part, g)[1] + recompute.layers_s(
                self, part.layers(g), n_full
            )
        return total

    def tail(self, params: float, backward_window_s: float = 0.0) -> list[tuple[str, float]]:
        """Gradient reduction, optimizer step and (ZeRO 1/2) weight all-gather on a
        device holding ``params`` parameters; ``grad_overlap_fraction`` of the reduction
        runs behind the last microbatch's backward, at most ``backward_window_s`` of it
        (`device_backward_s`)."""
        par, tp_ = self.par, self.tparams
        local = zero.optimizer_params(params, par.weight_replicas, par.zero)
        hbm = tp_.hbm_efficiency if tp_.kernel_model == "shape" else tp_.cost.bandwidth_efficiency
        opt_s = (
            local
            * tp_.optimizer_step_bytes_per_param
            / (self.cluster.chip.memory_bandwidth_bytes_per_s * hbm)
        )
        grads = exposed_s(dp.tail_s(self, params), backward_window_s, tp_.grad_overlap_fraction)
        return [
            ("dp-comm", grads),
            ("optimizer", opt_s),
            ("zero-gather", zero.tail_gather_s(self, params)),
        ]

    # --- memory -----------------------------------------------------------------------
    def embed_act(self) -> float:
        """Activation bytes the embedding keeps per microbatch (its dropout mask; none
        when the model has no dropout, `recompute.activation_terms`)."""
        a = recompute.activation_terms(self)
        sbh = self.seq_local * self.par.microbatch_size * self.cfg.hidden_size
        return sbh * a.embedding_dropout_bytes / (self.par.tp if self.par.sp else 1)

    def stage_act(self, part: StagePartition, g: int, n_full: int | None) -> float:
        """Activation bytes of stage ``g`` per microbatch in flight."""
        act = recompute.layers_act(self, part.layers(g), n_full)
        if part.has_embed(g):
            act += self.embed_act()
        return act

    def head_act(self) -> float:
        cfg, a = self.cfg, self.tparams.activations
        sbh = self.seq_local * self.par.microbatch_size * cfg.hidden_size
        return sbh * a.head_bytes * (1 + cfg.vocab_size / cfg.hidden_size) / self.par.tp

    def device_memory(
        self, part: StagePartition, d: int, n_full: int | None, live_act: float
    ) -> MemoryBreakdown:
        """The breakdown of device ``d`` given its peak live activations ``live_act``."""
        par, tp_ = self.par, self.tparams
        chunks = [c * par.pp + d for c in range(par.virtual_stages)]
        params = sum(self.stage_params(part, g) for g in chunks)
        w, gr, opt = zero.model_state_bytes(params, par.weight_replicas, par.zero, tp_.state)
        act = live_act + (self.head_act() if any(part.has_head(g) for g in chunks) else 0.0)
        act += cp.transient_bytes(self)  # the layer in flight's gathered K, V (dK, dV)
        work = recompute.working_set(self, [part.layers(g) for g in chunks], n_full)
        zbuf = zero.gather_buffer_bytes(self)
        rbuf = self.reduce_buffer(part, chunks)
        al = tp_.allowances
        # Fragmentation is the caching allocator's: the CUDA context and the collective
        # library's buffers are allocated outside it (`MemoryAllowances`).
        frag = al.fragmentation_fraction * (w + gr + opt + act + work + zbuf + rbuf)
        return MemoryBreakdown(
            parameters=w, gradients=gr, optimizer_states=opt, activations=act,
            recompute_working_set=work, zero_gather_buffer=zbuf, zero_reduce_buffer=rbuf,
            runtime_context=al.runtime_context_bytes,
            communication_buffers=al.communication_buffer_bytes, fragmentation=frag, stage=d,
        )  # fmt: skip

    def reduce_buffer(self, part: StagePartition | None, chunks: list[int]) -> float:
        """Unsharded gradients a ZeRO-2/3 device holds until their reduce-scatter
        (`memory.reduce_buffer_bytes`): its largest part (a layer, the embedding or the
        head; every part when ``part`` is None) up to ``zero_reduce_bucket_params``."""
        units = [self.layer_params]
        if part is None or any(part.has_embed(g) for g in chunks):
            units.append(self.embed_params)
        if part is None or any(part.has_head(g) for g in chunks):
            units.append(self.head_params)
        tp_ = self.tparams
        return reduce_buffer_bytes(
            max(units), tp_.zero_reduce_bucket_params, tp_.state.gradient_bytes,
            self.par.zero, self.par.weight_replicas,
        )  # fmt: skip

    def flops(self) -> tuple[float, float]:
        """(model FLOPs, hardware FLOPs with recomputation) of one step, whole job."""
        c, cfg = self.costs, self.cfg
        fwd = cfg.num_layers * c.layer.flops + c.embed.flops + c.head.flops + moe.flops_delta(self)
        factor = 1 + self.tparams.cost.backward_compute_ratio
        seqs = self.gb / self.par.microbatch_size
        model = factor * fwd * seqs
        return model, model + recompute.extra_flops_per_sequence(self) * seqs

    def comm_bytes(self, part: StagePartition, worst: int) -> tuple[tuple[str, float], ...]:
        """Bytes device ``worst`` sends per step, by kind (``COMM_KINDS``)."""
        par = self.par
        chunks = [k * par.pp + worst for k in range(par.virtual_stages)]
        params = sum(self.stage_params(part, g) for g in chunks)
        n = sum(part.layers(g) for g in chunks)
        return (
            ("tp", tp.comm_bytes(self, n)),
            ("pp", pp.comm_bytes(self)),
            ("dp", dp.comm_bytes(self, params)),
            ("zero", zero.comm_bytes(self, params)),
            ("ep", ep.comm_bytes(self, moe.moe_layers_in(self, part, chunks))),
            ("cp", cp.comm_bytes(self, n)),
        )


def exposed_s(comm_s: float, window_s: float, fraction: float) -> float:
    """Seconds of ``comm_s`` still on the critical path when ``fraction`` of it runs
    behind ``window_s`` seconds of compute: ``comm_s - min(fraction * comm_s, window_s)``.

    >>> exposed_s(3.0, 2.0, 1.0), exposed_s(3.0, 2.0, 0.5), exposed_s(3.0, 2.0, 0.0)
    (1.0, 1.5, 3.0)
    """
    return comm_s - min(fraction * comm_s, max(window_s, 0.0))


@memoize(maxsize=100_000, name="training.collective_s")
def _collective_s(mesh: Mesh, kind: str, size: float, axes: tuple[str, ...]) -> float:
    """Seconds of a collective; keyed by the whole mesh (axes, links, cluster), which is
    everything `Mesh.collective_time` reads; dp across datacenters is hierarchical."""
    return dc_collective_time(mesh, kind, size, axes)


def _validate(cfg: ModelConfig, par: ParallelConfig, cluster: Cluster, seq: int) -> None:
    cp.validate(par, seq)
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
    if par.stages > cfg.num_layers + 2:
        raise ParallelConfigError(
            f"pp * virtual_stages = {par.stages} exceeds the {cfg.num_layers} layers of "
            f"{cfg.name!r} plus an embedding and a head stage; every stage needs a layer, "
            "the embedding or the head"
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
