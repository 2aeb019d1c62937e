"""`from_hf_config` readers of the mixture-of-experts families whose layers `ModelConfig`
describes exactly: DeepSeek-V2/V3 (MLA attention, shared experts, dense first layers),
Qwen2-MoE (q/k/v biases, a gated shared expert) and Qwen3-MoE (q/k norms, experts of
``moe_intermediate_size``). Each reader takes `hf_config`'s typed field access and returns
the `ModelConfig` fields; the parameter count then equals the transformers model's
(tests/training/test_moe_config.py).

DeepSeek-V3's multi-token-prediction module (``num_nextn_predict_layers``) is not built by
transformers and not read here: its parameters (14B of the published 685B) are outside
``num_params`` and its training FLOPs outside the step model.
"""

from __future__ import annotations

from typing import Any

from ..checks import is_int
from .config import ModelConfigError

__all__ = ["SUPPORTED_MOE", "HARMLESS_MOE", "READERS"]

SUPPORTED_MOE = {
    "deepseek_v3": "decoder, MLA attention, shared + routed experts, dense first layers",
    "deepseek_v2": "decoder, MLA attention, shared + routed experts, dense first layers",
    "qwen2_moe": "decoder, q/k/v biases, routed experts + a gated shared expert",
    "qwen3_moe": "decoder, q/k norms, routed experts of moe_intermediate_size",
}

# routing details (which experts a token picks, how weights are scaled) change neither
# parameters nor FLOPs; MTP is named in the module docstring
_ROUTING = frozenset({
    "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob", "topk_method",
    "scoring_func", "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha",
    "seq_aux", "ep_size", "rope_interleave", "num_nextn_predict_layers", "qk_head_dim",
    "router_jitter_noise", "use_sliding_window", "sliding_window", "max_window_layers",
})  # fmt: skip

HARMLESS_MOE = {k: _ROUTING for k in SUPPORTED_MOE}


def _common(f: Any) -> dict[str, Any]:
    return dict(
        arch="decoder", hidden_size=f.positive("hidden_size"),
        num_layers=f.positive("num_hidden_layers"), num_heads=f.positive("num_attention_heads"),
        vocab_size=f.positive("vocab_size"),
        max_seq_len=f.optional("max_position_embeddings", int, 4096), norm="rmsnorm",
        activation=f.activation("hidden_act", "silu", gated=True), position="rope",
        tied_embeddings=f.optional("tie_word_embeddings", bool, False), bias=False,
    )  # fmt: skip


def _refuse(f: Any, key: str, value: Any, why: str) -> None:
    raise ModelConfigError(
        f"{f.where}: field {key!r} is {value!r}; {why}. Trace the transformers model instead: "
        "explorer.models.from_hf(config) (extra 'hf')"
    )


def _every_layer_moe(f: Any) -> None:
    """Qwen's ``decoder_sparse_step`` / ``mlp_only_layers`` / ``layer_types``: only the
    all-MoE, all-full-attention layout is read."""
    step = f.optional("decoder_sparse_step", int, 1)
    if step != 1:
        _refuse(f, "decoder_sparse_step", step, "only every layer holding experts is modelled")
    f.read.add("mlp_only_layers")
    if f.raw.get("mlp_only_layers") not in (None, []):
        _refuse(f, "mlp_only_layers", f.raw["mlp_only_layers"], "dense layers among MoE layers "
                "are modelled only as the first layers (first_dense_layers)")  # fmt: skip
    f.read.add("layer_types")
    types = f.raw.get("layer_types")
    if types is not None and (
        not isinstance(types, list) or any(t != "full_attention" for t in types)
    ):
        _refuse(f, "layer_types", types, "only full attention is modelled")


def _deepseek(f: Any, mtype: str) -> dict[str, Any]:
    for key in ("attention_bias", "mlp_bias"):
        if f.optional(key, bool, False):
            _refuse(f, key, True, "MLA is modelled without biases")
    freq = f.optional("moe_layer_freq", int, 1)
    if freq != 1:
        _refuse(f, "moe_layer_freq", freq, "only every layer after the dense ones is MoE")
    heads = f.positive("num_attention_heads")
    kv = f.positive_or_none("num_key_value_heads")
    if kv not in (None, heads):
        _refuse(f, "num_key_value_heads", kv, f"MLA expands its latent to all {heads} heads")
    f.read.add("head_dim")  # transformers derives it (= qk_rope_head_dim); MLA sizes are read
    experts = f.positive("n_routed_experts")
    for alias in ("num_local_experts", "num_experts"):  # transformers' attribute aliases
        f.read.add(alias)
        if f.raw.get(alias, experts) != experts:
            _refuse(f, alias, f.raw[alias], f"n_routed_experts is {experts}")
    return dict(
        _common(f), ffn_hidden_size=f.positive("intermediate_size"), attention="mla",
        q_lora_rank=f.positive_or_none("q_lora_rank"), kv_lora_rank=f.positive("kv_lora_rank"),
        qk_nope_head_dim=f.positive("qk_nope_head_dim"),
        qk_rope_head_dim=f.positive("qk_rope_head_dim"), v_head_dim=f.positive("v_head_dim"),
        num_experts=experts, experts_top_k=f.positive("num_experts_per_tok"),
        moe_intermediate_size=f.positive("moe_intermediate_size"),
        num_shared_experts=_count(f, "n_shared_experts"),
        first_dense_layers=_count(f, "first_k_dense_replace"),
    )  # fmt: skip


def _count(f: Any, key: str) -> int:
    f.read.add(key)
    value = f.raw.get(key) or 0
    if not is_int(value, minimum=0):
        f.fail(key, value, "an integer >= 0")
    return value


def _qwen2_moe(f: Any, mtype: str) -> dict[str, Any]:
    _every_layer_moe(f)
    shared = f.optional("shared_expert_intermediate_size", int, None)
    return dict(
        _common(f), num_kv_heads=f.positive_or_none("num_key_value_heads"),
        ffn_hidden_size=f.positive("intermediate_size"),
        qkv_bias=f.optional("qkv_bias", bool, True), num_experts=f.positive("num_experts"),
        experts_top_k=f.positive("num_experts_per_tok"),
        moe_intermediate_size=f.positive("moe_intermediate_size"),
        num_shared_experts=1 if shared else 0, shared_expert_size=shared,
        shared_expert_gate=bool(shared),
    )  # fmt: skip


def _qwen3_moe(f: Any, mtype: str) -> dict[str, Any]:
    _every_layer_moe(f)
    return dict(
        _common(f), num_kv_heads=f.positive_or_none("num_key_value_heads"),
        head_dim=f.positive_or_none("head_dim"), ffn_hidden_size=f.positive("intermediate_size"),
        bias=f.optional("attention_bias", bool, False), qk_norm=True,
        num_experts=f.positive("num_experts", "num_local_experts"),
        experts_top_k=f.positive("num_experts_per_tok"),
        moe_intermediate_size=f.positive("moe_intermediate_size"),
    )  # fmt: skip


READERS = {"deepseek_v3": _deepseek, "deepseek_v2": _deepseek, "qwen2_moe": _qwen2_moe,
           "qwen3_moe": _qwen3_moe}  # fmt: skip
