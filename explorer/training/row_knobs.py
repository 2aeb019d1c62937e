"""What a published row's ``knobs`` column switches on its stack's preset: the values each
switch sets, every one with its source, and `row_changes`, which reads the column
(`explorer.training.stacks.row_params` applies them to the row's preset).

>>> row_changes("bf16", "async_tp=true")["tp_comm_overlap_fraction"]
1.0
"""

from __future__ import annotations

from ..models import ModelConfig
from .errors import TrainingParamsError
from .memory import ActivationTerms, StateBytes

__all__ = [
    "TP_COMM_OVERLAP_ON",
    "DEFAULT_FUSED_OPS",
    "COMPILE_FUSED_OPS",
    "FP8_ROWWISE_MATMUL_RATIO",
    "UNFUSED_CE_BYTES",
    "EAGER_NORM_ROPE_RATIOS",
    "EAGER_LOSS_ACTIVATIONS",
    "OPTIMIZER_STATE_BYTES",
    "REMAT_NAMES",
    "named_remat_fractions",
    "row_changes",
]

#: The value ``tp_comm_overlap_fraction`` takes when TP communication overlap (Megatron-Core
#: --tp-comm-overlap) or async TP (torchtitan) is switched on.
TP_COMM_OVERLAP_ON = 1.0

DEFAULT_FUSED_OPS = ("scale", "mask", "fc1_bias", "o_bias", "fc2_bias")  # TrainingParams' default
#: ``fused_ops`` with torch.compile (torchtitan's compile.enable): Inductor fuses the SwiGLU
#: pointwise pair into one kernel and the residual add into the next RMSNorm's kernel.
COMPILE_FUSED_OPS = (*DEFAULT_FUSED_OPS, "silu", "residual")

#: ``float8_recipe=rowwise`` in a row's knobs (torchao's rowwise FP8 scaling): the
#: ``fp8_scaling_matmul_ratio`` fitted by bench/accuracy.py --fit-rowwise (minimize_scalar
#: on log(predicted / measured), the other values as stored) on the two rowwise FIT rows of
#: datasets/published/torchtitan_2025_asynctp.csv (Llama 3 70B vanilla TP, Llama 3 8B async
#: TP; its two rowwise check rows unread).
FP8_ROWWISE_MATMUL_RATIO = 0.52

#: (forward, backward) HBM bytes per BF16 logit of Megatron-Core's unfused cross-entropy
#: (megatron/core/tensor_parallel/cross_entropy.py at f2e5db402c, VocabParallelCrossEntropy):
#: forward .float() (read 2, write 4), max (read 4), in-place subtract (8), exp (8), sum (4),
#: in-place divide into the softmax it saves (8): 38; backward the in-place multiply by the
#: loss gradient (8) and the cast back to BF16 (6): 14. Megatron-LM's
#: --cross-entropy-loss-fusion is off unless given (megatron/training/arguments.py at
#: f2e5db402c, store_true); NeMo's launcher recipes set it from 24.09.
UNFUSED_CE_BYTES = (38.0, 14.0)

#: (norm, rotary embedding) HBM bytes over one fused pass when torchtitan runs without
#: torch.compile: its RMSNorm (torchtitan/models/norms.py at 9dec370, norm_type 'rmsnorm' in
#: train_configs/llama3_8b.toml) is x.float() (read 2, write 4), pow (8), mean (4), the
#: multiply by rsqrt (8), type_as (6) and the weight multiply (4): 36 bytes per element for
#: a fused kernel's 4 (9x); apply_rotary_emb (models/llama/model.py at 9dec370) is
#: xq.float() (6), the complex multiply (8) and type_as (6): 20 for 4 (5x).
EAGER_NORM_ROPE_RATIOS = (9.0, 5.0)

#: The activations of a run whose loss runs eagerly: PyTorch's cross_entropy on
#: ``pred.flatten(0, 1).float()`` (torchtitan train.py at 9dec370, loss_fn, its
#: ``torch.compile(loss_fn)`` commented out) keeps the BF16 logits (2 bytes), their FP32
#: copy (4) and log_softmax's FP32 output (4, saved for the backward) live together at the
#: loss: 10 bytes per logit in place of `ActivationTerms`' 4 (the FP32 loss alone). From
#: torchtitan e7c0cae (2025-06; torchtitan/components/loss.py, build_cross_entropy_loss) the
#: loss is compiled with the model (Inductor fuses the cast into the loss's reductions):
#: the default terms. A row's knobs ``loss_compiled=false`` (or ``compile=false``) set it.
EAGER_LOSS_ACTIVATIONS = ActivationTerms(head_bytes=10.0)

# ``optim_dtype`` in a row's knobs: the dtype NeMo's ``distributed_fused_adam`` keeps its
# state in (the launcher YAML's ``optim.dtype``) -> the model-state bytes per parameter.
# NeMo (nemo/collections/nlp/models/language_modeling/megatron_base_model.py,
# setup_optimization) passes ``store_params=False`` to Apex's DistributedFusedAdam when that
# dtype equals the model's (BF16 with megatron_amp_O2): no master copy, Adam's two moments
# in BF16 (2 + 2 bytes), sharded over data parallelism like any distributed optimizer;
# with ``optim.dtype`` fp32 on a BF16 model it keeps FP32 moments and the 16 low bits of
# each FP32 weight (``store_param_remainders``: 4 + 4 + 2 bytes).
OPTIMIZER_STATE_BYTES: dict[str, StateBytes] = {
    "bf16": StateBytes(
        optimizer_bytes=4.0,
        source="NeMo distributed_fused_adam with optim.dtype bf16 on a BF16 model "
        "(megatron_base_model.setup_optimization: store_params=False): Adam's moments in "
        "BF16, no FP32 master weights",
    ),
    "fp32-remainders": StateBytes(
        optimizer_bytes=10.0,
        source="NeMo distributed_fused_adam with optim.dtype fp32 on a BF16 model "
        "(store_param_remainders=True): FP32 moments and the 16 low bits of each weight",
    ),
}


#: The tensors MaxText's decoder layer names with ``checkpoint_name`` (remat_policy=custom
#: saves those set to ``device`` and recomputes the rest; MaxText layers/attentions.py and
#: linears.py): each name's forward FLOPs per token, and the elements per token it keeps.
REMAT_NAMES: tuple[str, ...] = (
    "query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "mlpwi", "mlpwi_0",
    "mlpwi_1", "mlpwo", "context",
)  # fmt: skip


def _remat_table(cfg: ModelConfig, seq: int) -> dict[str, tuple[float, float]]:
    """name -> (forward FLOPs per token, elements kept per token) of one dense layer."""
    h, f = cfg.hidden_size, cfg.ffn
    q, kv = cfg.num_heads * cfg.dim_head, cfg.kv_heads * cfg.dim_head
    gated = cfg.activation == "swiglu"
    wi = (2.0 * h * f, f)  # one up-projection (gated: each of the two)
    return {
        "query_proj": (2.0 * h * q, q), "key_proj": (2.0 * h * kv, kv),
        "value_proj": (2.0 * h * kv, kv), "out_proj": (2.0 * q * h, h),
        "mlpwi_0": wi if gated else (0.0, 0.0), "mlpwi_1": wi if gated else (0.0, 0.0),
        "mlpwi": (0.0, 0.0) if gated else wi, "mlpwo": (2.0 * f * h, h),
        # the causal attention core (QK^T and PV over half the keys on average)
        "context": (2.0 * seq * q, q),
    }  # fmt: skip


def named_remat_fractions(
    cfg: ModelConfig, seq: int, saved: tuple[str, ...]
) -> tuple[float, float]:
    """(share of a layer's forward FLOPs, share of its activation bytes above the layer
    input) that a checkpoint policy saving the tensors ``saved`` keeps, for a dense
    decoder layer of ``cfg`` at ``seq`` tokens: ``TrainingParams.op_recompute_saved_fraction``
    and ``op_recompute_saved_bytes`` with ``selective_recompute="op"``. ``qkv_proj`` stands
    for the three projections. The bytes a layer keeps without recomputation are counted as
    its GEMM outputs, the two norms' inputs and outputs and the gated activation's output
    (what MaxText's layer saves under remat_policy=minimal plus the norms); an assumption
    about the elementwise tensors XLA keeps.

    >>> import explorer as ex
    >>> kept = named_remat_fractions(ex.models.load("llama2-70b"), 4096,
    ...                              ("qkv_proj", "out_proj", "mlpwo"))
    >>> tuple(round(x, 2) for x in kept)
    (0.43, 0.17)
    """
    unknown = [n for n in saved if n not in REMAT_NAMES]
    if unknown:
        raise TrainingParamsError(
            f"remat tensor name(s) {', '.join(map(repr, unknown))} unknown; expected names of "
            f"REMAT_NAMES ({', '.join(REMAT_NAMES)})"
        )
    table = _remat_table(cfg, seq)
    names = set(saved)
    if "qkv_proj" in names:
        names |= {"query_proj", "key_proj", "value_proj"}
    names.discard("qkv_proj")
    flops = sum(fl for fl, _ in table.values())
    h, f = cfg.hidden_size, cfg.ffn
    gate = f if cfg.activation == "swiglu" else 0
    every = sum(el for _, el in table.values()) + 4 * h + gate  # norms in/out, act output
    kept_flops = sum(table[n][0] for n in names)
    kept_elements = sum(table[n][1] for n in names)
    return kept_flops / flops, kept_elements / every


def _remat_saved(value: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in value.replace("+", ",").split(",") if x.strip())


def row_changes(
    precision: str = "", knobs: str = "", cfg: ModelConfig | None = None, seq: int = 0
) -> dict[str, object]:
    """The `TrainingParams` changes of one published row: its ``precision`` and the switches
    its ``knobs`` column names (``;``-separated ``key=value``): ``async_tp`` and
    ``tp_comm_overlap`` -> ``tp_comm_overlap_fraction``, ``fp8_allgather`` ->
    ``fp8_weight_gather``, ``compile`` -> ``fused_ops``: `COMPILE_FUSED_OPS` or the
    default (off: an eager loss, `EAGER_LOSS_ACTIVATIONS`, and eager norms and rotary
    embeddings, `EAGER_NORM_ROPE_RATIOS`);
    ``loss_compiled=false`` -> the same; ``loss_fusion=false`` (Megatron-Core's
    cross_entropy_loss_fusion off) -> `UNFUSED_CE_BYTES`; ``remat_saved`` (the tensors a
    MaxText remat_policy=custom saves, given ``cfg`` and ``seq``) -> op-level selective
    recomputation with `named_remat_fractions`;
    ``cpu_offload_layers`` (Megatron-Core's ``cpu_offloading_num_layers``) ->
    ``activation_offload_layers``; ``moe_a2a_overlap`` -> ``ep_comm_overlap_fraction``;
    ``moe_flex_dispatcher`` (deepep, hybridep) -> ``moe_flex_dispatcher``;
    ``recompute_modules`` (Megatron-Core's, ``+``-separated) -> ``recompute_modules``, the
    modules this model counts. Keys it does not know are left to the row's notes.
    """
    changes: dict[str, object] = {}
    if precision.strip():
        changes["precision"] = precision.strip()
    for item in knobs.split(";"):
        key, _, value = (x.strip().lower() for x in item.partition("="))
        on = value.startswith("true")
        if key in ("async_tp", "tp_comm_overlap") and value[:4] in ("true", "fals"):
            changes["tp_comm_overlap_fraction"] = TP_COMM_OVERLAP_ON if on else 0.0
        elif key == "fp8_allgather" and value[:4] in ("true", "fals"):
            changes["fp8_weight_gather"] = on
        elif key == "compile" and value[:4] in ("true", "fals"):
            changes["fused_ops"] = COMPILE_FUSED_OPS if on else DEFAULT_FUSED_OPS
            if not on:
                changes.update(_eager_loss())
                changes["eager_norm_bytes_ratio"] = EAGER_NORM_ROPE_RATIOS[0]
                changes["eager_rope_bytes_ratio"] = EAGER_NORM_ROPE_RATIOS[1]
        elif key == "loss_compiled" and value[:5] == "false":
            changes.update(_eager_loss())
        elif key == "loss_fusion" and value[:5] == "false":
            changes["loss_forward_bytes_per_logit"] = UNFUSED_CE_BYTES[0]
            changes["loss_backward_bytes_per_logit"] = UNFUSED_CE_BYTES[1]
        elif key == "float8_recipe" and value.split(" ")[0] == "rowwise":
            changes["fp8_scaling_matmul_ratio"] = FP8_ROWWISE_MATMUL_RATIO
            changes["fp8_tp_gather"] = False  # torchtitan: regular TP for rowwise recipes
        elif key == "optim_dtype" and value.split(" ")[0] in OPTIMIZER_STATE_BYTES:
            changes["state"] = OPTIMIZER_STATE_BYTES[value.split(" ")[0]]
        elif key == "moe_a2a_overlap" and value[:4] in ("true", "fals"):
            changes["ep_comm_overlap_fraction"] = 1.0 if on else 0.0
        elif key == "moe_flex_dispatcher":
            changes["moe_flex_dispatcher"] = value.split(" ")[0] in ("deepep", "hybridep")
        elif key == "recompute_modules":
            named = _remat_saved(value.split(" ")[0])  # "+"-separated, as remat_saved
            known = ("core_attn", "mla_up_proj", "moe_act", "layernorm")
            changes["recompute_modules"] = tuple(m for m in named if m in known)
        elif key == "cpu_offload_layers" and value.split(" ")[0].isdigit():
            changes["activation_offload_layers"] = int(value.split(" ")[0])
        elif key == "remat_saved" and cfg is not None and seq > 0 and _dense(cfg):
            time_keep, bytes_keep = named_remat_fractions(cfg, seq, _remat_saved(value))
            changes["selective_recompute"] = "op"
            changes["op_recompute_saved_fraction"] = time_keep
            changes["op_recompute_saved_bytes"] = bytes_keep
    return changes


def _eager_loss() -> dict[str, object]:
    # PyTorch's eager cross_entropy on the FP32 copy also makes more passes over the logits
    # than the graph's one (its .float(), log_softmax's max/sum/output passes): priced with
    # assumed per-pass bytes (22 forward, 26 backward per logit) it moved the torchtitan fit
    # rows away from their measurements (squared errors 429 -> 458 %^2), so it is not charged
    return {"activations": EAGER_LOSS_ACTIVATIONS}


def _dense(cfg: ModelConfig) -> bool:
    return not (cfg.is_moe or cfg.is_mla)
