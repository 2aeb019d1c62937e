"""Training stacks as data: a `Stack` is a named preset of `TrainingParams` values for a
training framework as people run it, every value with its source.

=================  ===========================================================================
stack              what it models
=================  ===========================================================================
megatron-core      Megatron-Core (Megatron-LM 2023-): fused attention, distributed optimizer,
                   gradient reduce and parameter gather behind compute, pipeline sends
                   behind compute; TP communication overlap off (its default; switch on
                   with ``tp_comm_overlap_fraction=1.0``)
nemo               Megatron-Core as NVIDIA's NeMo / Megatron-Bridge performance recipes run
                   it: ``megatron-core`` with TP communication overlap on
torchtitan         PyTorch FSDP2 (one flat all-gather per wrapped block, reshard after
                   forward, FP32 gradient reduce-scatter), SDPA's fused attention, async TP
                   off (switch: ``tp_comm_overlap_fraction=1.0``), FP8 weight all-gather
                   off (switch: ``fp8_weight_gather=True``)
maxtext            MaxText (JAX/XLA) as NVIDIA's DGX Cloud recipes run it: FSDP over a
                   scanned layer loop, gathers and reduce-scatters pipelined behind
                   compute, cuDNN fused attention, FP32 weights and gradient reduction
pytorch-fsdp       PyTorch FSDP1 FULL_SHARD: one FlatParameter per wrapped module,
                   backward prefetch, SDPA's fused attention
deepspeed          DeepSpeed ZeRO as Megatron-DeepSpeed ran it (MT-NLG, BLOOM, 2022):
                   per-tensor ZeRO-3 gathers, unfused attention: today's TrainingParams()
                   values, with DeepSpeed's own defaults named
megatron-lm-2021   exactly ``TrainingParams()``: what reproduces Narayanan et al. 2021's
                   tables (unfused attention, no overlap, a 0.65 GEMM ceiling)
=================  ===========================================================================

``simulate``, ``estimate``, ``plan_training`` and ``calibrate`` take ``stack=`` (a name or a
`Stack`); without ``params`` or ``stack`` they use `DEFAULT_STACK` (``megatron-core``).
Give one of the two: ``params`` is used as it is; ``stack`` gives the stack's params; both
raise (`resolve`). Change a value of a stack with ``params(name, **changes)``.

>>> import explorer as ex
>>> ex.stacks.names()[:3]
('megatron-core', 'nemo', 'torchtitan')
>>> ex.stacks.params("torchtitan").zero3_gather_granularity
'block'
>>> ex.stacks.params("megatron-lm-2021") == ex.TrainingParams()
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache

from ..models import ModelConfig
from .errors import TrainingParamsError
from .params import TrainingParams
from .row_knobs import (
    COMPILE_FUSED_OPS,
    DEFAULT_FUSED_OPS,
    EAGER_LOSS_ACTIVATIONS,
    EAGER_NORM_ROPE_RATIOS,
    FP8_ROWWISE_MATMUL_RATIO,
    OPTIMIZER_STATE_BYTES,
    REMAT_NAMES,
    TP_COMM_OVERLAP_ON,
    UNFUSED_CE_BYTES,
    named_remat_fractions,
    row_changes,
)

__all__ = [
    "Stack",
    "STACKS",
    "DEFAULT_STACK",
    "DATASET_STACKS",
    "FRAMEWORK_STACKS",
    "TP_COMM_OVERLAP_ON",
    "COMPILE_FUSED_OPS",
    "OPTIMIZER_STATE_BYTES",
    "FP8_ROWWISE_MATMUL_RATIO",
    "EAGER_LOSS_ACTIVATIONS",
    "UNFUSED_CE_BYTES",
    "EAGER_NORM_ROPE_RATIOS",
    "REMAT_NAMES",
    "named_remat_fractions",
    "names",
    "get",
    "params",
    "params_for",
    "resolve",
    "row_params",
]

_FIELDS = tuple(f.name for f in fields(TrainingParams))


@dataclass(frozen=True)
class Stack:
    """A training framework's `TrainingParams` values, each with its source.

    Args:
        name: the stack's name (``"megatron-core"``).
        description: one sentence: the framework and version it imitates.
        values: `TrainingParams` field -> value (a mapping or ``(field, value)`` pairs;
            stored as pairs, sorted by field, so the stack stays hashable).
        sources: field -> where the value comes from: a citation, ``"fitted on <dataset>
            fit rows ..."`` or ``"assumption: ..."``; one for every value.

    >>> s = Stack("mine", "flash attention on", {"flash_attention": True},
    ...           {"flash_attention": "assumption: my cluster runs FlashAttention-2"})
    >>> s.params().flash_attention, s.source("flash_attention")
    (True, 'assumption: my cluster runs FlashAttention-2')
    """

    name: str
    description: str
    values: tuple[tuple[str, object], ...]
    sources: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TrainingParamsError(f"Stack name={self.name!r}; expected a non-empty string")
        values = _pairs(self.values, f"Stack {self.name!r} values")
        sources = _pairs(self.sources, f"Stack {self.name!r} sources")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "sources", sources)
        for key, _ in values:
            if key not in _FIELDS:
                raise TrainingParamsError(
                    f"Stack {self.name!r}: {key!r} is not a TrainingParams field; expected "
                    f"one of {', '.join(_FIELDS)}"
                )
        cited = dict(sources)
        for key, _ in values:
            src = cited.get(key)
            if not isinstance(src, str) or not src.strip():
                raise TrainingParamsError(
                    f"Stack {self.name!r}: {key!r} has no source; cite where its value comes "
                    "from, write 'fitted on <dataset> fit rows ...', or 'assumption: ...'"
                )
        extra = sorted(set(cited) - {k for k, _ in values})
        if extra:
            raise TrainingParamsError(
                f"Stack {self.name!r}: sources for {', '.join(extra)} without a value; give "
                "the value or drop the source"
            )
        self.params()  # every value checked by TrainingParams itself, now

    def params(self, base: TrainingParams | None = None, **changes) -> TrainingParams:
        """``base`` (default `TrainingParams()`) with this stack's values, then ``changes``
        (a value of the stack switched, e.g. ``tp_comm_overlap_fraction=1.0``)."""
        if base is None and not changes:
            return _preset_params(self)
        if base is not None and not isinstance(base, TrainingParams):
            raise TrainingParamsError(f"base={base!r}; expected a TrainingParams or None")
        out = (base or TrainingParams()).replace(**dict(self.values))
        return out.replace(**changes) if changes else out

    def source(self, field: str) -> str:
        """Where this stack's value of ``field`` comes from; for a field the stack does
        not set, that it keeps `TrainingParams`' default (whose own source `knob_table`
        prints)."""
        return dict(self.sources).get(field, "not set by this stack: TrainingParams' default")

    def table(self) -> str:
        """The stack's values as text: field | value | source."""
        rows = [f"{self.name}: {self.description}", "field | value | source"]
        src = dict(self.sources)
        rows += [f"{k} | {v!r} | {src[k]}" for k, v in self.values]
        return "\n".join(rows)

    def __str__(self) -> str:
        return f"{self.name}: {self.description}"


@lru_cache(maxsize=64)
def _preset_params(stack: Stack) -> TrainingParams:
    return TrainingParams().replace(**dict(stack.values))


def _pairs(x, what: str) -> tuple[tuple[str, object], ...]:
    items = list(x.items()) if isinstance(x, Mapping) else list(x)
    if not all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str) for i in items):
        raise TrainingParamsError(f"{what}={x!r}; expected a mapping of field name -> value")
    keys = [k for k, _ in items]
    if len(set(keys)) != len(keys):
        raise TrainingParamsError(f"{what}: a field appears twice in {keys}")
    return tuple(sorted(items))


# --- the presets ---------------------------------------------------------------------------
_CHIP = "None: the chip's own figure (Chip.matmul_efficiency / attention_efficiency, each "
_CHIP += "with its source in explorer.hardware.chip.EFFICIENCY_FACTS)"
_MCORE_DDP = (
    "Megatron-Core DistributedDataParallelConfig (docs.nvidia.com/megatron-core, "
    "core.distributed.distributed_data_parallel_config)"
)
_BRIDGE_OVERLAP = (
    "Megatron-Bridge 'Communication Overlap' (docs.nvidia.com/nemo/megatron-bridge/latest/"
    "training/communication-overlap.html): DP communication chunked by transformer layer, "
    "overlapping compute, 'exposes only one DP communication chunk'"
)
_FLASH_TE = (
    "Megatron-Core's transformer layer runs attention through Transformer Engine's "
    "DotProductAttention (cuDNN fused attention or FlashAttention, attention_backend auto)"
)
_SDPA = (
    "torch.nn.functional.scaled_dot_product_attention(is_causal=True): a fused "
    "FlashAttention / cuDNN / memory-efficient kernel (torchtitan's attention, as the "
    "datasets/published torchtitan rows' knobs record)"
)
_TP_ON = (
    "assumption: all of it, capped by the stage's compute: Transformer Engine's userbuffers "
    "pipeline the TP all-gather / reduce-scatter chunks with the GEMMs they feed"
)
_FSDP_PREFETCH = (
    "assumption: all of it, capped by the compute: FSDP issues the next block's all-gather "
    "on its own stream before the current block computes (FSDP2 implicit forward prefetch "
    "and backward prefetch; Zhao et al. 2023, PyTorch FSDP, VLDB, section 3.3) and the "
    "reduce-scatter behind the next block's backward"
)
_AC_INSIDE = (
    "assumption: activation checkpointing wraps the block inside the FSDP unit (torchtitan "
    "applies AC before fully_shard), so the pre-backward all-gather serves both the "
    "recomputation and the backward: no third gather"
)

_MULTI_RAIL = (
    "NCCL builds one ring per channel and its rail-optimised rings leave a node through "
    "different NICs (NCCL src/graph/search.cc), so a data-parallel or ZeRO ring whose group "
    "holds several chips of a node moves at their NICs' total (nccl-tests' bus bandwidth "
    "across DGX nodes is the node's NIC total); a ring with one chip per node keeps one NIC"
)
_FP8_RATIO = (
    "fitted by least squares (bench/accuracy.py --fit) on the fit rows of the stack files of "
    "datasets/published (58 FP8 rows on H100, H100 HBM2e, H200, B200 and GB200 beside the "
    "BF16 ones of the same layouts; one value for every chip and stack): an FP8 GEMM "
    "reaches 0.9 of the share of the FP8 peak that a BF16 GEMM reaches of the BF16 peak "
    "(FP8 GEMMs run at 2x the BF16 peak on paper, 1.8x in the fit)"
)
_INTERFERENCE = (
    "fitted by least squares (bench/accuracy.py --fit) on the 113 fit rows of the stack files "
    "of datasets/published (one value for every chip and stack): communication hidden "
    "behind compute (TP overlap, FSDP prefetch, gradient reduce, parameter gather) slows "
    "that compute by 0.15 of its own time, the SMs and HBM bandwidth NCCL's and "
    "userbuffers' kernels hold while they run"
)
_ALIGNED = (
    "assumption: jobs on a GB200 NVL72 take 16 of a rack's 18 compute trays (64 GPUs; the "
    "Megatron-Bridge and DGX Cloud GB200 runs use multiples of 64 GPUs), so their power-of-"
    "two groups stay inside one NVLink domain; the MoE fit rows of megatron_bridge_2511 / "
    "2604 on GB200 (EP32 and EP64) measured 3-4x faster than their all-to-alls would run "
    "across racks"
)
_MOE_LAYER_OVERHEAD = (
    "fitted by least squares (bench/accuracy.py --fit) on the 3 MoE fit rows the torchtitan "
    "preset predicts (nemo_automodel_2026), jointly with moe_expert_overhead_s on the "
    "Megatron-Core rows: 0.68 ms per MoE layer forward or backward of a microbatch, the host "
    "synchronisation of the tokens-per-expert counts and the launches it exposes"
)
_MOE_OVERHEAD = (
    "fitted by least squares (bench/accuracy.py --fit) on the 13 MoE fit rows of "
    "megatron_bridge_2511 / 2604 (one value for every chip; moe_layer_overhead_s, one cost "
    "per MoE layer, fitted 0 when both were free on every MoE row): 177 us per local expert "
    "per MoE layer forward or backward of a microbatch, the host's per-expert launches of "
    "Transformer Engine's GroupedLinear (and its FP8 casts) after the tokens-per-expert "
    "counts reach the host. The fit rows with 16-32 local experts (EP8 of 128-256 experts) "
    "ran slower, those with 2-4 (EP32/EP64) faster, than one cost per layer could say; the "
    "Qwen3-30B-A3B rows at micro batch 1 and 4 differ by that per-microbatch cost"
)

_MEGATRON_CORE_VALUES: dict[str, tuple[object, str]] = {
    "aligned_nvlink_domains": (True, _ALIGNED),
    "loss_forward_bytes_per_logit": (
        38.0,
        "Megatron-LM's --cross-entropy-loss-fusion is off unless given (megatron/training/"
        "arguments.py at f2e5db402c): VocabParallelCrossEntropy's FP32 passes, "
        "stacks.UNFUSED_CE_BYTES",
    ),
    "loss_backward_bytes_per_logit": (14.0, "stacks.UNFUSED_CE_BYTES, as the forward"),
    "tp_layout": (
        "megatron",
        "Megatron-Core's tensor parallelism: ColumnParallelLinear for the fused QKV and the "
        "MLP's first GEMM, RowParallelLinear for the attention output and the MLP's second "
        "(megatron/core/transformer/attention.py and mlp.py), attention split by heads, norms "
        "on a 1/tp share of the sequence with sequence_parallel (Korthikanti et al. 2022)",
    ),
    "fp8_matmul_efficiency_ratio": (0.9, _FP8_RATIO),
    "overlap_interference": (0.15, _INTERFERENCE),
    "moe_expert_overhead_s": (1.77e-4, _MOE_OVERHEAD),
    "multi_rail_collectives": (True, _MULTI_RAIL),
    "flash_attention": (True, _FLASH_TE),
    "fp8_saved_inputs": (
        True,
        "Transformer Engine's Linear, LayerNormLinear and LayerNormMLP save the FP8 copies "
        "of their inputs for the weight gradient (transformer_engine/pytorch/module/"
        "linear.py, _Linear.forward: the quantized inputmat is what ctx saves when fp8 is "
        "on); Megatron-Core's layers are TE modules",
    ),
    "fused_ops": (
        (*DEFAULT_FUSED_OPS, "silu"),
        "Megatron-LM's fused kernels (scale-mask-softmax, bias-GeLU, bias-dropout-add) and "
        "Megatron-Core's bias_swiglu_fusion (SiLU and the gate product in one kernel)",
    ),
    "flash_attention_efficiency": (None, _CHIP),
    "matmul_efficiency_cap": (None, _CHIP),
    "grad_overlap_fraction": (
        1.0,
        f"--overlap-grad-reduce ({_MCORE_DDP}.overlap_grad_reduce; on in Megatron-LM's "
        f"example scripts and Megatron-Bridge's recipes); {_BRIDGE_OVERLAP}; assumption: all "
        "of the reduction, capped by the last microbatch's backward",
    ),
    "param_gather_overlap_fraction": (
        1.0,
        f"--overlap-param-gather ({_MCORE_DDP}.overlap_param_gather: 'overlap param "
        "all-gather with forward compute'); assumption: all of it, capped by one "
        "microbatch's forward",
    ),
    "p2p_overlap_fraction": (
        1.0,
        "Megatron-Core overlap_p2p_comm (Megatron-Bridge CommOverlapConfig sets it for "
        "interleaved pipelines; the Megatron-LM README's scaling runs list pp_comm_overlap "
        "enabled by default); assumption: all of it",
    ),
    "tp_comm_overlap_fraction": (
        0.0,
        "--tp-comm-overlap is off by default (TransformerConfig.tp_comm_overlap = False; it "
        "needs Transformer Engine userbuffers); switch on with "
        "stacks.params('megatron-core', tp_comm_overlap_fraction=stacks.TP_COMM_OVERLAP_ON) "
        "or use the 'nemo' stack",
    ),
    "zero3_gather_granularity": (
        "block",
        "Megatron-FSDP (the ZeRO-3 of Megatron-Core) gathers and reduce-scatters a bucket "
        "per module, not per tensor",
    ),
    "zero_gather_overlap_fraction": (1.0, _FSDP_PREFETCH),
    "zero_grad_overlap_fraction": (1.0, _FSDP_PREFETCH),
}

_NEMO_VALUES = dict(_MEGATRON_CORE_VALUES) | {
    "loss_forward_bytes_per_logit": (
        0.0,
        "cross_entropy_loss_fusion: true in NeMo's launcher recipes from 24.09 "
        "(NeMo-Framework-Launcher launcher_scripts/conf/training/llama/*.yaml and nemotron/"
        "*.yaml at tag 24.09): the fused cross-entropy, one pass; a row run without it says "
        "loss_fusion=false",
    ),
    "loss_backward_bytes_per_logit": (0.0, "as loss_forward_bytes_per_logit"),
    "tp_comm_overlap_fraction": (
        TP_COMM_OVERLAP_ON,
        "NeMo / Megatron-Bridge performance recipes set CommOverlapConfig(tp_comm_overlap="
        "True) with tensor and sequence parallelism (Megatron-Bridge 'TP / DP / PP "
        f"Communication Overlap'; the Megatron-LM README runs list tp_comm_overlap=true); "
        f"{_TP_ON}",
    ),
}

_FSDP_COMMON: dict[str, tuple[object, str]] = {
    "aligned_nvlink_domains": (True, _ALIGNED),
    "tp_layout": (
        "megatron",
        "torchtitan's tensor-parallel plan (torchtitan/parallelisms/parallelize_llama.py at "
        "9dec370, apply_tp: ColwiseParallel on attention.wq/wk/wv and feed_forward.w1/w3, "
        "RowwiseParallel on wo/w2 with Shard(1) outputs, SequenceParallel on attention_norm "
        "and ffn_norm, PrepareModuleInput all-gathering each block's input once): the "
        "Megatron-LM split",
    ),
    "fp8_matmul_efficiency_ratio": (0.9, _FP8_RATIO),
    "overlap_interference": (0.15, _INTERFERENCE),
    "moe_layer_overhead_s": (0.68e-3, _MOE_LAYER_OVERHEAD),
    "multi_rail_collectives": (True, _MULTI_RAIL),
    "flash_attention": (True, _SDPA),
    "flash_attention_efficiency": (None, _CHIP),
    "matmul_efficiency_cap": (None, _CHIP),
    "zero3_gather_granularity": (
        "block",
        "FSDP gathers one flat buffer per wrapped module (FSDP1 FlatParameter; FSDP2 "
        "fully_shard on each TransformerBlock, one all-gather and one reduce-scatter each)",
    ),
    "zero_gather_overlap_fraction": (1.0, _FSDP_PREFETCH),
    "zero_grad_overlap_fraction": (1.0, _FSDP_PREFETCH),
    "zero3_recompute_regather": (False, _AC_INSIDE),
    "grad_overlap_fraction": (
        1.0,
        "PyTorch DDP / HSDP replicas all-reduce gradient buckets behind the backward (Li et "
        "al. 2020, PyTorch Distributed, VLDB); assumption: all of it, capped by the backward",
    ),
}

_TORCHTITAN_VALUES = _FSDP_COMMON | {
    "kernel_overhead_s": (
        28.6e-6,
        "fitted by least squares (bench/accuracy.py --fit) on the 26 fit rows of the "
        "torchtitan-run files of datasets/published (torchtitan_2024_h100, "
        "torchtitan_2024_perf, torchtitan_2025_asynctp, torchtitan_2025_h200, "
        "nemo_automodel_2026), jointly with the chips' efficiencies: eager PyTorch's launch "
        "and dispatch gap between dependent kernels, seconds per kernel (bounded by 30 us, an "
        "assumption: what a host-bound launch gap can be)",
    ),
    "selective_recompute": (
        "op",
        "torchtitan's activation_checkpoint.selective_ac_option = 'op' (train_configs/"
        "llama3_8b.toml; 'selective (op per config)' in the torchtitan rows)",
    ),
    "fused_ops": (
        COMPILE_FUSED_OPS,
        "torch.compile on (compile.enable, as 30 of the 43 torchtitan rows of "
        "datasets/published ran; row_params drops it for compile=false): Inductor fuses the "
        "SwiGLU pointwise ops into one kernel and each residual add into the next RMSNorm",
    ),
    "grad_reduce_bytes_per_param": (
        4.0,
        "torchtitan's default mixed_precision_reduce = 'float32' (FSDP2 MixedPrecisionPolicy "
        "reduce_dtype; 'fp32 gradient reduce (config default)' in the torchtitan rows)",
    ),
    "tp_comm_overlap_fraction": (
        0.0,
        "async TP off by default (parallelism.enable_async_tensor_parallel = False; needs "
        "torch.compile); switch on with tp_comm_overlap_fraction=stacks.TP_COMM_OVERLAP_ON",
    ),
    "fp8_cast_bytes_per_element": (
        5.0,
        "torchao's Float8Linear scales each GEMM input dynamically (per-tensor current "
        "scaling, the 'tensorwise' recipe torchtitan's float8 converter uses): an amax "
        "reduction reads the BF16 tensor (2 bytes) before the cast reads it again and writes "
        "FP8 (2 + 1); TrainingParams' 3 is the cast alone",
    ),
    "fp8_weight_gather": (
        False,
        "float8.enable_fsdp_float8_all_gather is off by default; switch on with "
        "fp8_weight_gather=True (with precision='fp8')",
    ),
    "fp8_tp_gather": (
        True,
        "torchtitan's FP8 tensor parallelism (parallelize_llama.apply_tp at 9dec370 and "
        "820504e: Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput for "
        "tensorwise scaling; regular TP for the rowwise recipes): torchao casts each block "
        "input to FP8 before its all-gather and each row-parallel output's gradient to FP8 "
        "before the backward's all-gather (torchao/float8/float8_tensor_parallel.py at "
        "eab345c and 6243040, NoopFwToFloat8BwDynamic)",
    ),
}

# MaxText as NVIDIA's DGX Cloud recipe runs it on H100 (github.com/NVIDIA/dgxc-benchmarking,
# maxtext/configure.sh, read at commit 0b71cfda5163540778e2a3d2db59858bf62f96f7; the rows cite
# tag v24.11.1 of the same recipe).
_MAXTEXT_CFG = "NVIDIA dgxc-benchmarking maxtext/configure.sh (commit 0b71cfda)"
_MAXTEXT_VALUES: dict[str, tuple[object, str]] = {
    "aligned_nvlink_domains": (True, _ALIGNED),
    "fp8_matmul_efficiency_ratio": (0.9, _FP8_RATIO),
    "overlap_interference": (0.15, _INTERFERENCE),
    "moe_layer_overhead_s": (0.68e-3, _MOE_LAYER_OVERHEAD),
    "multi_rail_collectives": (True, _MULTI_RAIL),
    "flash_attention": (
        True,
        f"attention=cudnn_flash_te and NVTE_FUSED_ATTN=1 ({_MAXTEXT_CFG}): cuDNN fused "
        "attention through Transformer Engine",
    ),
    "flash_attention_efficiency": (None, _CHIP),
    "matmul_efficiency_cap": (None, _CHIP),
    "fused_ops": (
        COMPILE_FUSED_OPS,
        "XLA fuses each elementwise chain into its neighbours (as torch.compile's Inductor "
        "does): the SwiGLU pointwise pair in one kernel, the residual add into the next "
        "RMSNorm",
    ),
    "zero3_gather_granularity": (
        "block",
        f"scan_layers=true ({_MAXTEXT_CFG}): the layers run as one XLA while loop whose body "
        "all-gathers the layer's FSDP-sharded weights as one combined collective "
        "(--xla_gpu_all_gather_combine_threshold_bytes) and reduce-scatters its gradients "
        "likewise",
    ),
    "zero_gather_overlap_fraction": (
        1.0,
        f"--xla_gpu_enable_pipelined_all_gather, --xla_gpu_enable_while_loop_double_buffering "
        f"and the latency-hiding scheduler with a profile (PGLE) ({_MAXTEXT_CFG}): the next "
        "layer's gather runs behind this layer's compute; assumption: all of it, capped by "
        "the compute",
    ),
    "zero_grad_overlap_fraction": (
        1.0,
        f"--xla_gpu_enable_pipelined_reduce_scatter with the latency-hiding scheduler "
        f"({_MAXTEXT_CFG}); assumption: all of it, capped by the backward",
    ),
    "grad_overlap_fraction": (
        1.0,
        f"--xla_gpu_enable_pipelined_all_reduce ({_MAXTEXT_CFG}): the data-parallel "
        "all-reduce of the dcn_data_parallelism replicas runs behind the backward; "
        "assumption: all of it, capped by the backward",
    ),
    "zero3_recompute_regather": (
        False,
        "MaxText's remat inside the scanned layer (save_qkv_proj in "
        f"{_MAXTEXT_CFG}; remat_policy=custom at the tag v24.11.1 the published rows ran, "
        "their ac_mode and remat_saved knob): the recomputed forward and the backward of a "
        "layer run in one loop iteration on the weights gathered once for it; no third "
        "gather",
    ),
    "grad_reduce_bytes_per_param": (
        4.0,
        "MaxText's base.yml weight_dtype: float32 (the weights are kept in FP32 and cast to "
        "BF16 for the matmuls), so the gradients reduce-scattered to their FSDP shards are "
        "FP32",
    ),
}

_DEEPSPEED_VALUES: dict[str, tuple[object, str]] = {
    "flash_attention": (
        False,
        "Megatron-DeepSpeed (MT-NLG, BLOOM, 2022) ran Megatron-LM's unfused attention "
        "(FusedScaleMaskSoftmax over the full score matrix)",
    ),
    "zero3_gather_granularity": (
        "tensor",
        "DeepSpeed ZeRO-3 fetches a module's partitioned parameters tensor by tensor "
        "(deepspeed/runtime/zero/partition_parameters.py)",
    ),
    "zero3_recompute_regather": (
        True,
        "the checkpointed forward runs the module's pre-forward hooks again, which fetch the "
        "partitioned parameters a third time",
    ),
    "zero3_max_live_params": (1e9, "DeepSpeed's default stage3_max_live_parameters (1e9)"),
    "zero3_persistence_threshold": (
        1e5,
        "DeepSpeed's default stage3_param_persistence_threshold (1e5)",
    ),
    "zero_reduce_bucket_params": (5e8, "DeepSpeed's default reduce_bucket_size (5e8)"),
}

_MEGATRON_2021_VALUES: dict[str, tuple[object, str]] = {
    "flash_attention": (False, "Narayanan et al. 2021: scores, softmax and context kernels"),
    "matmul_efficiency_cap": (
        0.65,
        "set once so that Narayanan et al. 2021 Table 1 stays within 5% (bench/training.py)",
    ),
    "grad_overlap_fraction": (
        0.0,
        "Megatron-LM 2021 reduces gradients after the last backward",
    ),
    "tp_comm_overlap_fraction": (0.0, "Megatron-LM 2021 waits for each TP all-reduce"),
}


def _stack(name: str, description: str, values: dict[str, tuple[object, str]]) -> Stack:
    return Stack(
        name,
        description,
        tuple((k, v) for k, (v, _) in values.items()),
        tuple((k, s) for k, (_, s) in values.items()),
    )


#: The presets by name, current stacks first.
STACKS: dict[str, Stack] = {
    s.name: s
    for s in (
        _stack(
            "megatron-core",
            "Megatron-Core (Megatron-LM 0.5+): fused attention, distributed optimizer, "
            "gradient reduce / parameter gather / pipeline sends behind compute; TP "
            "communication overlap switchable (off)",
            _MEGATRON_CORE_VALUES,
        ),
        _stack(
            "nemo",
            "NVIDIA NeMo / Megatron-Bridge performance recipes: megatron-core with TP "
            "communication overlap on",
            _NEMO_VALUES,
        ),
        _stack(
            "torchtitan",
            "torchtitan (PyTorch FSDP2 + DTensor TP/PP/CP): one flat all-gather per block, "
            "reshard after forward, FP32 reduce-scatter, SDPA fused attention; async TP and "
            "FP8 all-gather switchable (off)",
            _TORCHTITAN_VALUES,
        ),
        _stack(
            "pytorch-fsdp",
            "PyTorch FSDP1 (FULL_SHARD, FlatParameter per wrapped module, backward "
            "prefetch), SDPA fused attention",
            _FSDP_COMMON,
        ),
        _stack(
            "maxtext",
            "MaxText (JAX/XLA) as NVIDIA's DGX Cloud recipes run it: FSDP over a scanned "
            "layer loop (one combined gather and reduce-scatter per layer, pipelined behind "
            "compute by XLA's latency-hiding scheduler), cuDNN fused attention, FP32 weights",
            _MAXTEXT_VALUES,
        ),
        _stack(
            "deepspeed",
            "DeepSpeed ZeRO as Megatron-DeepSpeed ran it in 2022: per-tensor ZeRO-3 "
            "gathers, DeepSpeed's default buckets and thresholds, unfused attention",
            _DEEPSPEED_VALUES,
        ),
        _stack(
            "megatron-lm-2021",
            "Megatron-LM as Narayanan et al. 2021 ran it: exactly TrainingParams() "
            "(reproduces the 2021-2022 published tables)",
            _MEGATRON_2021_VALUES,
        ),
    )
}

#: The stack used when neither ``params`` nor ``stack`` is given.
DEFAULT_STACK = "megatron-core"

#: The stack each published dataset (``datasets/published/NAME.csv``) ran with; the old
#: tables reproduce with the 2021 values (`explorer.training.calibration.published` adds a
#: dataset's own `RUN_FACTS` on top).
DATASET_STACKS: dict[str, str] = {
    "megatron_2021_table1": "megatron-lm-2021",
    "megatron_2021_table2": "megatron-lm-2021",
    "llama3_2024_table4": "megatron-lm-2021",
    "mtnlg_2022": "deepspeed",
    "bloom_2022": "deepspeed",
    "torchtitan_2024_perf": "torchtitan",
    "torchtitan_2024_h100": "torchtitan",
    "torchtitan_2025_asynctp": "torchtitan",
    "torchtitan_2025_h200": "torchtitan",
    "megatron_lm_2024_weak_scaling": "nemo",
    "nemo_2024_h100": "nemo",
    "nemo_2024_long_context": "nemo",
    "megatron_bridge_2511": "nemo",
    "megatron_bridge_2604": "nemo",
    "nemo_automodel_2026": "torchtitan",
    "dgxc_2411_h100": "nemo",
    "dgxc_2505_gb200": "nemo",
}

#: The published CSVs' ``stack`` column -> the preset that models it.
FRAMEWORK_STACKS: dict[str, str] = {
    "torchtitan": "torchtitan",
    "megatron-core": "megatron-core",
    "nemo": "nemo",
    "megatron-bridge": "nemo",
    "nemo-automodel": "torchtitan",
    "maxtext": "maxtext",
}


def names() -> tuple[str, ...]:
    """The preset names, current stacks first."""
    return tuple(STACKS)


def get(stack: str | Stack) -> Stack:
    """The `Stack` named ``stack`` (a `Stack` is returned as it is); raises
    `TrainingParamsError` listing the names.

    >>> get("megatron-core").name
    'megatron-core'
    """
    if isinstance(stack, Stack):
        return stack
    if isinstance(stack, str) and stack in STACKS:
        return STACKS[stack]
    raise TrainingParamsError(
        f"stack={stack!r}; expected a Stack or one of {', '.join(STACKS)} "
        "(explorer.training.stacks)"
    )


def params(stack: str | Stack, base: TrainingParams | None = None, **changes) -> TrainingParams:
    """The `TrainingParams` of ``stack``: ``base`` (default `TrainingParams()`) with the
    stack's values, then ``changes``.

    >>> params("megatron-core", tp_comm_overlap_fraction=1.0).tp_comm_overlap_fraction
    1.0
    """
    return get(stack).params(base, **changes)


def params_for(stack: str | Stack) -> TrainingParams:
    """`params` of ``stack`` without changes (the name the published-rows loader uses)."""
    return params(stack)


def resolve(
    params: TrainingParams | None, stack: str | Stack | None, where: str = "simulate"
) -> TrainingParams:
    """The params a run uses: ``params`` as given; else ``stack``'s; else
    `DEFAULT_STACK`'s. Both given raise `TrainingParamsError` naming the fix."""
    if params is not None and stack is not None:
        name = stack.name if isinstance(stack, Stack) else stack
        raise TrainingParamsError(
            f"{where}(params=..., stack={name!r}): give one of the two; for the stack with "
            f"changes pass params=explorer.stacks.params({name!r}, <field>=<value>, ...)"
        )
    if params is not None:
        return params
    return get(DEFAULT_STACK if stack is None else stack).params()


def row_params(
    dataset: str, framework: str = "", precision: str = "", knobs: str = "",
    cfg: ModelConfig | None = None, seq: int = 0,
) -> TrainingParams:  # fmt: skip
    """The params of one published row: the preset of its ``framework`` (the CSVs'
    ``stack`` column, `FRAMEWORK_STACKS`), else of its ``dataset`` (`DATASET_STACKS`),
    with its ``precision`` and the switches its ``knobs`` column names
    (`explorer.training.row_knobs.row_changes`).

    >>> p = row_params("torchtitan_2025_asynctp", "torchtitan", "bf16", "async_tp=true")
    >>> p.tp_comm_overlap_fraction
    1.0
    """
    if framework and framework in FRAMEWORK_STACKS:
        name = FRAMEWORK_STACKS[framework]
    elif dataset in DATASET_STACKS:
        name = DATASET_STACKS[dataset]
    else:
        raise TrainingParamsError(
            f"no stack for dataset {dataset!r} (framework {framework!r}); expected a dataset "
            f"of DATASET_STACKS ({', '.join(DATASET_STACKS)}) or a framework of "
            f"FRAMEWORK_STACKS ({', '.join(FRAMEWORK_STACKS)})"
        )
    return params(name, **row_changes(precision, knobs, cfg, seq))
