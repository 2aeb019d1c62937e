"""``TrainingParams``: every knob of the training-step model, with the helpers that keep each
float knob's unit, range and source beside it (`knob`, `check_knobs`, `knob_table`).

The vocabulary of the training area: the step model, the planner and the calibration all
read it, and it reads nothing of theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from ..checks import is_int, is_number
from ..search.params import CostParams
from ..search.planner import METHODS, Method
from .errors import TrainingParamsError
from .memory import ActivationTerms, MemoryAllowances, StateBytes, check_nonnegative

__all__ = [
    "TrainingParams", "CALIBRATED_COST", "PRECISIONS", "knob", "check_knobs", "knob_table",
    "AUTO_KNOBS",
]  # fmt: skip

#: ``TrainingParams.precision``: the GEMMs' number format (a training choice, not a model
#: dtype: FP8 training keeps weights, norms, softmax and activations in BF16).
PRECISIONS = ("bf16", "fp8")


# --- the knobs (fields of TrainingParams) ---------------------------------------------------
def knob(
    default: float | None, unit: str, low: float, high: float, source: str,
    low_open: bool = False, auto: str = "",
) -> Any:  # fmt: skip
    """A float field of `TrainingParams`: its unit, its range ``[low, high]`` (``(low,
    high]`` with ``low_open``) and where its default comes from (a citation or the word
    "assumption"), kept in the field's metadata for `check_knobs`, `knob_table` and the
    calibration. ``auto`` names what a None value stands for (e.g. ``"chip.matmul_efficiency"``:
    the chip's own figure); a knob without ``auto`` must be a number."""
    meta = {
        "unit": unit, "range": (low, high), "low_open": low_open, "source": source, "auto": auto,
    }  # fmt: skip
    return field(default=default, metadata=meta)


def check_knobs(owner: object) -> None:
    """Raise `TrainingParamsError` naming the first `knob` field of ``owner`` that is not
    a finite number in its range."""
    cls = type(owner).__name__
    for f in fields(owner):  # type: ignore[arg-type]
        if "range" not in f.metadata:
            continue
        v, (lo, hi), lo_open = getattr(owner, f.name), f.metadata["range"], f.metadata["low_open"]
        if v is None and f.metadata.get("auto"):
            continue  # None: the figure named by ``auto`` (the chip's, the state's)
        if not is_number(v, minimum=lo, maximum=hi, above=lo if lo_open else None, numpy=True):
            where = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
            auto = f.metadata.get("auto")
            also = f", or None for {auto}" if auto else ""
            raise TrainingParamsError(
                f"{cls}.{f.name}={v!r}; expected a finite number in {where} "
                f"({f.metadata['unit']}){also}; default {f.default!r}"
            )


def knob_table(owner: object) -> str:
    """The `knob` fields of ``owner`` as text: name, value, unit, range, source.

    >>> import explorer as ex
    >>> print(knob_table(ex.training.TrainingParams()).splitlines()[0])
    field | value | unit | range | source
    """
    rows = ["field | value | unit | range | source"]
    for f in fields(owner):  # type: ignore[arg-type]
        if "range" in f.metadata:
            lo, hi = f.metadata["range"]
            v = getattr(owner, f.name)
            shown = f"auto ({f.metadata['auto']})" if v is None else repr(v)
            rows.append(
                f"{f.name} | {shown} | {f.metadata['unit']} | "
                f"{lo:g}..{hi:g} | {f.metadata['source']}"
            )
    return "\n".join(rows)


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
        tp_layout: ``searched``: a layer's tensor-parallel layouts are the operator
            search's (the cheapest it finds, which may split the batch or the sequence
            over ``tp``); ``megatron``: a dense layer's contractions take Megatron-LM's
            column/row split (`step_model.stage_costs.MEGATRON_TP`), the plan Megatron-Core
            and torchtitan run for any ``tp``.
        fused_ops: layer ops whose cost a fused kernel absorbs (Megatron-LM's
            FusedScaleMaskSoftmax: scale and mask; bias_gelu: the fc1 bias; bias-dropout-
            add: the o and fc2 biases); ``()`` costs every op as its own kernel.
        kernel_model: ``shape`` times each layer's kernels by their local shapes
            (`explorer.training.step_model.kernels`: tile and wave quantization, rooflines, overheads);
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
        precision: ``bf16`` or ``fp8``: with ``fp8`` the layers' GEMMs (projections, MLP,
            experts) run at the chip's FP8 peak with their inputs cast to FP8
            (``fp8_cast_bytes_per_element``); weights, norms, softmax, attention, the
            embedding and the output head stay BF16 (TransformerEngine's and torchao's
            Float8 training: Micikevicius et al. 2022, "FP8 Formats for Deep Learning").
        selective_recompute: what ``recompute="selective"`` recomputes: ``attention``,
            the attention core (Korthikanti et al. 2022; nothing more with a fused kernel,
            which recomputes its scores anyway), or ``op``: torchtitan's op-level policy,
            which keeps ``op_recompute_saved_fraction`` of the layer's matmul outputs and
            recomputes the rest of the layer's forward (its memory between no and full
            recomputation by the same fraction).
        zero3_gather_granularity: ``tensor``: ZeRO-3 gathers and reduce-scatters one
            weight tensor at a time (DeepSpeed; ``zero3_collectives_per_tensor`` each);
            ``block``: one flat all-gather and one reduce-scatter per wrapped layer
            (PyTorch FSDP1 FlatParameter per wrapped module, FSDP2 fully_shard per block).
        fp8_weight_gather: with ``precision="fp8"`` and ZeRO-3, the weights are all-gathered
            in FP8 (1 byte a parameter: torchtitan's enable_fsdp_float8_all_gather,
            Megatron-Core's fp8_param_gather).
        fp8_tp_gather: with ``precision="fp8"`` and ``tp_layout="megatron"``, the
            tensor-parallel all-gathers move FP8 (1 byte an element): the forward's of each
            block input, the backward's of each row-parallel output gradient (torchao's
            Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput, which
            torchtitan's tensorwise FP8 runs use); the reduce-scatters stay BF16. Half the
            layer's TP volume is all-gathers, so it moves 3/4 of the bytes
            (`terms.tp.fp8_gather_factor`).
        multi_rail_collectives: a data-parallel or ZeRO ring collective (all-reduce,
            all-gather, reduce-scatter) whose group holds several chips of a node spreads
            over their NICs, one ring per NIC, as NCCL's channels do (`Cluster.
            multi_rail_rings`; nccl-tests' bus bandwidth across DGX nodes is the node's NIC
            total): a 64-GPU ring on 8 nodes moves at 8 NICs' rate, eight DP rings beside
            TP-8 at one NIC each. False (default): one NIC per ring, the two-level model
            Narayanan et al. 2021's tables were set with (the ``megatron-lm-2021`` stack);
            the current stacks set True.
        aligned_nvlink_domains: the job places its devices so that its power-of-two
            parallel groups never straddle a link level's group: of a level whose group
            holds a count of child groups that is not a power of two it uses the largest
            power of two (16 of a GB200 NVL72 rack's 18 compute trays: 64 GPUs a rack, the
            other two trays spare), so an EP-64 or TP/DP group stays in one NVLink domain.
            False (default): the job fills every group of every level in order.
        fp8_saved_inputs: with ``precision="fp8"``, the GEMM inputs kept for the backward
            are the FP8 copies the forward cast (1 byte an element): TransformerEngine's
            Linear, LayerNormLinear and LayerNormMLP save their quantized inputs for the
            weight gradient, so the norms' outputs and the output projection's and the
            down projection's inputs are kept in one byte; the attention's Q, K, V and O
            (the fused kernel's) and the nonlinearity's input stay BF16, and the output
            projection's FP8 copy is kept beside the BF16 O (`memory.layer_counts`).
            False (default): BF16 copies (2 bytes), as autograd keeps a plain BF16 model.
        activation_offload_layers: layers of each pipeline stage whose activations go to
            host memory after their forward and come back for their backward
            (Megatron-Core's ``cpu_offloading_num_layers`` with ``cpu_offloading=True``,
            Transformer Engine's ``get_cpu_offload_context``): the copies run on their own
            stream over the chip's host link (`explorer.hardware.host`) behind the stage's
            compute; at the peak the device holds the other layers' activations, and at
            least ``activation_offload_buffer_layers`` layers' for the reloads
            (`step_model.terms.recompute.offload_saved_bytes`). 0 (default): none. A row's
            knob ``cpu_offload_layers=N`` sets it (`stacks.row_params`).
        moe_flex_dispatcher: Megatron-Core's flex token dispatcher
            (``moe_token_dispatcher_type="flex"`` with ``moe_flex_dispatcher_backend``
            ``deepep`` or ``hybridep``): a token crosses the network once per node (scale-up
            domain) that holds any of its experts and is copied to them there over NVLink
            (DeepEP's internode kernels, DeepSeek-AI 2025; NVIDIA's HybridEP), where the
            ``alltoall`` dispatcher sends one copy per routed expert
            (`step_model.terms.ep.network_copies`). False (default): ``alltoall``. A row's
            knob ``moe_flex_dispatcher=deepep|hybridep`` sets it.
        recompute_modules: what ``recompute="selective"`` recomputes when not empty:
            Megatron-Core's ``recompute_modules`` (``recompute_granularity="selective"``),
            a tuple of ``core_attn`` (the attention core), ``mla_up_proj`` (MLA's query and
            key/value up-projections: their outputs Q, K, V are dropped and recomputed from
            the latents), ``moe_act`` (the routed experts' activation output) and
            ``layernorm`` (the norms' outputs); `step_model.terms.recompute.
            module_bytes_per_token`. () (default): the attention core, or the op-level
            policy with ``selective_recompute="op"``. A row's knob
            ``recompute_modules=mla_up_proj+mlp`` sets it (``mlp``, the dense first layers'
            MLP, and other modules are not counted).

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
    tp_comm_overlap_fraction      fraction   of tensor-parallel collectives hidden (TP overlap)
    param_gather_overlap_fraction fraction   of the ZeRO-1/2 weight all-gather hidden
    p2p_overlap_fraction          fraction   of pipeline sends hidden behind compute
    fp8_cast_bytes_per_element    bytes      moved per FP8 GEMM input element (the cast)
    eager_norm_bytes_ratio        ratio      a norm's HBM bytes over one fused pass
    eager_rope_bytes_ratio        ratio      a rotary embedding's HBM bytes over one fused pass
    loss_forward_bytes_per_logit  bytes      per logit of an unfused loss's forward (0: fused)
    loss_backward_bytes_per_logit bytes      per logit of an unfused loss's backward (0: fused)
    fp8_matmul_efficiency_ratio   1          FP8 GEMM share of FP8 peak / BF16's of BF16's
    fp8_scaling_matmul_ratio      1          FP8 GEMM rate of the scaling recipe / per-tensor's
    overlap_interference          fraction   of hidden communication added to the compute
    moe_layer_overhead_s          s          per MoE layer forward or backward of a microbatch
    moe_expert_overhead_s         s          per local expert of each such MoE layer pass
    grad_reduce_bytes_per_param   bytes      per parameter in the gradient reduction
    op_recompute_saved_fraction   fraction   of matmul outputs op-level selective AC keeps
    op_recompute_saved_bytes      fraction   of the activations op-level AC keeps (None: same)
    activation_offload_buffer_layers layers  offloaded layers' activations still on the device
    ep_comm_overlap_fraction      fraction   of the MoE all-to-alls hidden behind another microbatch
    ============================  =========  ===============================================

    ``matmul_efficiency_cap``, ``flash_attention_efficiency`` and
    ``grad_reduce_bytes_per_param`` may be None: the chip's own figure
    (``Chip.matmul_efficiency``, ``Chip.attention_efficiency``) or the gradients' dtype
    (`AUTO_KNOBS`; `resolved` fills them). The stacks of `explorer.training.stacks` leave
    them None; ``TrainingParams()`` holds the 2021 values (the ``megatron-lm-2021`` stack).
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
    tp_layout: Literal["searched", "megatron"] = "searched"
    fused_ops: tuple[str, ...] = ("scale", "mask", "fc1_bias", "o_bias", "fc2_bias")
    kernel_model: Literal["shape", "flat"] = "shape"
    flash_attention: bool = False
    cp_kv_regather: bool = False
    matmul_efficiency_cap: float | None = knob(
        0.65, "fraction of peak FLOP/s", 0.0, 1.0, low_open=True, auto="chip.matmul_efficiency",
        source="assumption, set once so that Narayanan et al. 2021 Table 1 stays within 5% "
        "(bench/training.py); None: the chip's own GEMM ceiling (Chip.matmul_efficiency, "
        "with its source)")  # fmt: skip
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
    flash_attention_efficiency: float | None = knob(
        0.6, "fraction of peak FLOP/s", 0.0, 1.0, low_open=True,
        auto="chip.attention_efficiency",
        source="Dao 2023, FlashAttention-2: 50-73% of A100 peak (assumption within it); None: "
        "the chip's own fused-attention efficiency (Chip.attention_efficiency)")  # fmt: skip
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
    tp_comm_overlap_fraction: float = knob(
        0.0, "fraction of the tensor-parallel collectives", 0.0, 1.0,
        source="Megatron-LM 2021 waits for each tensor-parallel all-reduce (0). Megatron-Core's "
        "--tp-comm-overlap (Transformer Engine userbuffers: all-gather and reduce-scatter "
        "split and pipelined with the GEMMs) and torchtitan's async TP "
        "(enable_async_tensor_parallel, torch.compile's micro-pipelined collective matmuls) "
        "hide them behind the layer's own GEMMs; the hidden share is capped by the stage's "
        "compute (model.exposed_s)")  # fmt: skip
    param_gather_overlap_fraction: float = knob(
        0.0, "fraction of the ZeRO-1/2 weight all-gather", 0.0, 1.0,
        source="Megatron-LM 2021 all-gathers the updated weights after the step (0). "
        "Megatron-Core's --overlap-param-gather (DistributedDataParallelConfig."
        "overlap_param_gather) runs each bucket's all-gather behind the next step's forward; "
        "hidden at most behind one microbatch's forward of the device")  # fmt: skip
    p2p_overlap_fraction: float = knob(
        0.0, "fraction of a pipeline send/receive", 0.0, 1.0,
        source="Megatron-LM 2021 blocks on the stage-to-stage transfers (0). Megatron-Core's "
        "overlap_p2p_comm (on for interleaved schedules in Megatron-Bridge's "
        "CommOverlapConfig) posts them asynchronously behind the next chunk's compute")  # fmt: skip
    fp8_cast_bytes_per_element: float = knob(
        3.0, "bytes moved per FP8 GEMM input element", 0.0, 16.0,
        source="TransformerEngine / torchao: each FP8 GEMM's activation input (forward) and "
        "output gradient (backward) is cast from BF16 with a scale: read 2 bytes, write 1 "
        "(3; current scaling adds an amax pass, 2 more); weights are cast once per step "
        "(TE caches the FP8 weight over the microbatches), not counted; assumption: the cast "
        "runs as its own memory-bound pass at hbm_efficiency")  # fmt: skip
    eager_norm_bytes_ratio: float = knob(
        1.0, "HBM bytes of a norm op relative to one fused pass", 1.0, 20.0,
        source="1: a norm is one kernel reading its input and writing its output (a fused "
        "RMSNorm, torch.compile's Inductor); stacks.EAGER_NORM_ROPE_RATIOS for torchtitan "
        "run without torch.compile")  # fmt: skip
    eager_rope_bytes_ratio: float = knob(
        1.0, "HBM bytes of a rotary-embedding op relative to one fused pass", 1.0, 20.0,
        source="1: one fused kernel; stacks.EAGER_NORM_ROPE_RATIOS for torchtitan run "
        "without torch.compile")  # fmt: skip
    loss_forward_bytes_per_logit: float = knob(
        0.0, "HBM bytes per logit of the loss's forward kernels", 0.0, 100.0,
        source="0: the loss is one fused pass over the logits (the graph's cross-entropy op: "
        "Megatron-Core's cross_entropy_loss_fusion, a compiled loss); an unfused loss's "
        "passes over FP32 logits are its stack's or row's (stacks.UNFUSED_CE_BYTES: "
        "Megatron-Core's vocab_parallel_cross_entropy, 38)")  # fmt: skip
    loss_backward_bytes_per_logit: float = knob(
        0.0, "HBM bytes per logit of the loss's backward kernels", 0.0, 100.0,
        source="0: the graph's cross-entropy op's backward; unfused: stacks.UNFUSED_CE_BYTES "
        "(14)")  # fmt: skip
    moe_layer_overhead_s: float = knob(
        0.0, "seconds per MoE layer forward or backward of one microbatch", 0.0, 0.1,
        source="assumption (0: an MoE layer costs its kernels and all-to-alls only); "
        "Megatron-Core's all-to-all token dispatcher copies the tokens-per-expert counts to "
        "the host in every MoE layer to size the all-to-all and the grouped GEMM (a device "
        "synchronisation that drains the stream and exposes the host's launches of the "
        "router, permutation and grouped-GEMM kernels); the current stacks set the value "
        "fitted on the MoE fit rows of datasets/published")  # fmt: skip
    moe_expert_overhead_s: float = knob(
        0.0, "seconds per local expert per MoE layer forward or backward of a microbatch",
        0.0, 0.01,
        source="assumption (0: a device's experts cost their GEMM FLOPs only); Megatron-Core's "
        "TEGroupedMLP runs Transformer Engine's GroupedLinear, which splits the permuted "
        "tokens by the host's tokens-per-expert counts and launches per local expert its "
        "GEMM (cuBLAS, over several streams) and, in FP8, its input and weight casts and "
        "amax reductions: a host-bound cost per expert a device holds (num_experts / ep), "
        "whatever its tokens; the current stacks set the value fitted on the MoE fit rows of "
        "datasets/published")  # fmt: skip
    overlap_interference: float = knob(
        0.0, "fraction of the hidden communication time", 0.0, 1.0,
        source="assumption (0: communication behind compute costs the compute nothing); "
        "NCCL's and Transformer Engine userbuffers' kernels hold SMs and HBM bandwidth "
        "while they run, so the compute they hide behind runs slower; the current stacks "
        "set the value fitted on the fit rows of datasets/published")  # fmt: skip
    fp8_matmul_efficiency_ratio: float = knob(
        1.0, "FP8 GEMM fraction of FP8 peak / BF16 GEMM fraction of BF16 peak", 0.0, 1.0,
        low_open=True,
        source="assumption (1: an FP8 GEMM reaches the same share of the FP8 peak as a BF16 "
        "GEMM of the BF16 peak); the current stacks set the value fitted on the FP8 and BF16 "
        "fit rows of datasets/published")  # fmt: skip
    fp8_scaling_matmul_ratio: float = knob(
        1.0, "FP8 GEMM rate with the run's scaling recipe / with per-tensor scaling", 0.0, 1.0,
        low_open=True,
        source="assumption (1: per-tensor scaling, TransformerEngine's delayed or current "
        "scaling and torchao's tensorwise); torchao's rowwise recipe scales every row of "
        "both operands (a cast along each axis of each input, the scales applied in a "
        "rowwise-scaled GEMM's epilogue) and ran slower than BF16 in torchtitan's 2025-06 "
        "benchmark (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md; "
        "pytorch/torchtitan#1207): stacks.FP8_ROWWISE_MATMUL_RATIO, fitted on its fit "
        "rows (bench/accuracy.py --fit-rowwise)")  # fmt: skip
    grad_reduce_bytes_per_param: float | None = knob(
        None, "bytes per parameter in the gradient reduction", 0.5, 8.0,
        auto="state.gradient_bytes",
        source="None: the gradients are reduced in their own dtype (StateBytes.gradient_bytes, "
        "2 for BF16). torchtitan's FSDP2 default reduces in FP32 (mixed_precision_reduce = "
        "'float32': 4); Megatron-Core's grad_reduce_in_fp32 likewise")  # fmt: skip
    op_recompute_saved_fraction: float = knob(
        0.5, "fraction of a layer's matmul outputs kept", 0.0, 1.0,
        source="torchtitan's op-level selective checkpointing (selective_ac_option = 'op', "
        "torchtitan/models/llama3/infra/parallelize.py _apply_ac_to_transformer_block) saves "
        "every second matmul output (and the attention outputs) and recomputes the rest: "
        "0.5")  # fmt: skip
    op_recompute_saved_bytes: float | None = knob(
        None, "fraction of the activation bytes between full and no recomputation kept",
        0.0, 1.0, auto="op_recompute_saved_fraction",
        source="None (assumption): op-level selective checkpointing keeps the same share of "
        "the layer's activation bytes as of its forward time (op_recompute_saved_fraction). A policy "
        "that names the tensors it saves (MaxText's remat_policy=custom: "
        "stacks.named_remat_fractions) keeps their bytes, a different share")  # fmt: skip
    activation_offload_buffer_layers: float = knob(
        2.0, "layers of offloaded activations held on the device", 0.0, 8.0,
        source="Transformer Engine's CPU offload (transformer_engine/pytorch/cpu_offload.py, "
        "AsyncDoubleBufferGroupOffloadHandler, the handler Megatron-Core's "
        "get_cpu_offload_context builds): a layer's activations stay on the device until "
        "their copy to the host ends while the next layer runs, and the backward reloads "
        "into two buffers (double buffering): 2 layers")  # fmt: skip
    ep_comm_overlap_fraction: float = knob(
        0.0, "fraction of the expert-parallel all-to-alls hidden", 0.0, 1.0,
        source="0: Megatron-Core runs each MoE layer's dispatch and combine on the compute "
        "path. With overlap_moe_expert_parallel_comm (Megatron-Bridge's moe_a2a_overlap) "
        "it splits a forward and a backward of two microbatches into their sub-modules and "
        "runs one's all-to-alls behind the other's compute (a 1F1B step of either "
        "schedule); a row's knob moe_a2a_overlap=true sets 1.0 (assumption: every "
        "microbatch pair overlaps, the warm-up and cool-down of the pipeline too)")  # fmt: skip
    precision: Literal["bf16", "fp8"] = "bf16"
    selective_recompute: Literal["attention", "op"] = "attention"
    zero3_gather_granularity: Literal["tensor", "block"] = "tensor"
    fp8_weight_gather: bool = False
    fp8_tp_gather: bool = False
    multi_rail_collectives: bool = False
    aligned_nvlink_domains: bool = False
    fp8_saved_inputs: bool = False
    activation_offload_layers: int = 0
    moe_flex_dispatcher: bool = False
    recompute_modules: tuple[str, ...] = ()

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
        if self.precision not in PRECISIONS:
            raise TrainingParamsError(
                f"TrainingParams.precision={self.precision!r}; expected 'bf16' (every GEMM in "
                "BF16) or 'fp8' (the layers' GEMMs in FP8, weights, norms, softmax and "
                "activations in BF16)"
            )
        if self.selective_recompute not in ("attention", "op"):
            raise TrainingParamsError(
                f"TrainingParams.selective_recompute={self.selective_recompute!r}; expected "
                "'attention' (Korthikanti et al. 2022: the attention core) or 'op' "
                "(torchtitan: every second matmul output and the pointwise ops)"
            )
        if self.zero3_gather_granularity not in ("tensor", "block"):
            raise TrainingParamsError(
                f"TrainingParams.zero3_gather_granularity={self.zero3_gather_granularity!r}; "
                "expected 'tensor' (DeepSpeed: one collective per weight tensor) or 'block' "
                "(PyTorch FSDP: one flat all-gather and one reduce-scatter per wrapped layer)"
            )
        for name in ("flash_attention", "p2p_scatter_gather", "cp_kv_regather",
                     "fp8_weight_gather", "fp8_tp_gather", "multi_rail_collectives",
                     "aligned_nvlink_domains", "fp8_saved_inputs",
                     "moe_flex_dispatcher"):  # fmt: skip
            if not isinstance(getattr(self, name), bool):
                raise TrainingParamsError(
                    f"TrainingParams.{name}={getattr(self, name)!r}; expected True or False"
                )
        known = ("core_attn", "mla_up_proj", "moe_act", "layernorm")
        if not isinstance(self.recompute_modules, tuple) or any(
            m not in known for m in self.recompute_modules
        ):
            raise TrainingParamsError(
                f"TrainingParams.recompute_modules={self.recompute_modules!r}; expected a "
                f"tuple of {', '.join(known)} (Megatron-Core's recompute_modules this model "
                "counts), or () for the attention core"
            )
        if not is_int(self.activation_offload_layers, minimum=0):
            raise TrainingParamsError(
                f"TrainingParams.activation_offload_layers={self.activation_offload_layers!r}; "
                "expected an int >= 0 (layers per stage whose activations go to host memory; "
                "0: none)"
            )
        k = self.zero3_prefetch_layers
        if not is_int(k, minimum=1):
            raise TrainingParamsError(
                f"TrainingParams.zero3_prefetch_layers={k!r}; expected an int >= 1 (the layer "
                "running is always held)"
            )
        if self.tp_layout not in ("searched", "megatron"):
            raise TrainingParamsError(
                f"TrainingParams.tp_layout={self.tp_layout!r}; expected 'searched' (the "
                "operator search's layouts) or 'megatron' (Megatron-LM's column/row split)"
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

    def resolved(self, chip) -> TrainingParams:
        """These params with every knob left to the chip (None, ``auto="chip. ..."``)
        filled from ``chip`` (a `explorer.hardware.Chip`): the numbers the step model uses
        on that chip.

        >>> import explorer as ex
        >>> p = ex.training.TrainingParams(matmul_efficiency_cap=None)
        >>> chip = ex.hardware.load("a100-80g").chip
        >>> p.resolved(chip).matmul_efficiency_cap == chip.matmul_efficiency
        True
        """
        changes = {
            name: float(getattr(chip, path.removeprefix("chip.")))
            for name, path in AUTO_KNOBS.items()
            if getattr(self, name) is None and path.startswith("chip.")
        }
        return replace(self, **changes) if changes else self


#: The knobs that may be None, and the figure None stands for.
AUTO_KNOBS: dict[str, str] = {
    f.name: f.metadata["auto"] for f in fields(TrainingParams) if f.metadata.get("auto")
}
