"""Tiny Hugging Face configs for the import tests: every model type at small widths.

``tiny(model_type)`` is the transformers default config of that type with the sizes below
(2 layers, hidden 64, ...). ``traced(model_type)`` is ``from_hf`` of it at ``BATCH`` x
``SEQ`` and ``meta_model(model_type)`` the meta-device transformers model ``from_hf``
builds for it: each made once per process and shared by every test that asks (graphs
are immutable values; the models are only read).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

# pytest imports this module as ``models.hf_cases`` for tests/models (tests/ on sys.path);
# tests elsewhere import it as ``tests.models.hf_cases``. One module under both names, so
# that they share the traces cached below instead of each tracing its own.
for _name in ("models.hf_cases", "tests.models.hf_cases"):
    sys.modules.setdefault(_name, sys.modules[__name__])

#: Model types the tests trace (at least 30 architectures).
MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "gemma3_text", "phi", "phi3", "phimoe", "gpt2", "gpt_neox", "gptj",
    "gpt_bigcode", "falcon", "opt", "bloom", "mpt", "starcoder2", "olmo2", "stablelm",
    "cohere", "deepseek_v2", "deepseek_v3", "bert", "roberta", "t5", "vit",
)  # fmt: skip

_COMMON = {
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2,
    "num_decoder_layers": 2, "hidden_size": 64, "n_embd": 64, "d_model": 64,
    "intermediate_size": 128, "n_inner": 128, "ffn_dim": 128, "d_ff": 128,
    "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "n_heads": 4,
    "vocab_size": 128, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "d_kv": 16,
}  # fmt: skip

_SPECIAL: dict[str, dict[str, Any]] = {
    "llama": {"num_key_value_heads": 2},
    "mistral": {"num_key_value_heads": 2, "head_dim": 16},
    "mixtral": {"num_key_value_heads": 2, "head_dim": 16},
    "qwen2": {"num_key_value_heads": 2},
    "qwen2_moe": {"num_key_value_heads": 2},
    "qwen3": {"num_key_value_heads": 2, "head_dim": 16},
    "qwen3_moe": {"num_key_value_heads": 2, "head_dim": 16},
    "gemma": {"num_key_value_heads": 1, "head_dim": 16},
    "gemma2": {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4},
    "gemma3_text": {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4},
    "phi": {"num_key_value_heads": 4},
    "phi3": {"num_key_value_heads": 2, "pad_token_id": 0},
    "phimoe": {"num_key_value_heads": 2},
    "gpt_bigcode": {"n_positions": 64},
    "gpt2": {"n_positions": 64},
    "gptj": {"rotary_dim": 8, "n_positions": 64},
    # ffn_hidden_size: the default config stores 4 x its own width (18176), not ours
    "falcon": {"num_kv_heads": 2, "new_decoder_architecture": True, "ffn_hidden_size": 128},
    "mpt": {"d_model": 64, "expansion_ratio": 2, "max_seq_len": 64},
    "starcoder2": {"num_key_value_heads": 2},
    "olmo2": {"num_key_value_heads": 2},
    "stablelm": {"num_key_value_heads": 2},
    "cohere": {"num_key_value_heads": 2},
    "deepseek_v2": {"num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16,
                    "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
                    "first_k_dense_replace": 1, "n_shared_experts": 1, "n_group": 2,
                    "topk_group": 1, "topk_method": "greedy"},
    "deepseek_v3": {"num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16,
                    "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
                    "first_k_dense_replace": 1, "n_shared_experts": 1, "n_group": 2,
                    "topk_group": 1, "head_dim": 8},
    "bert": {"max_position_embeddings": 64, "is_decoder": True},
    "roberta": {"max_position_embeddings": 66, "is_decoder": True},
    "vit": {"image_size": 32, "patch_size": 8, "num_channels": 3},
    "t5": {"num_heads": 4},
}  # fmt: skip

SEQ = 8
BATCH = 2


def tiny(model_type: str) -> dict[str, Any]:
    """The config dict of a tiny ``model_type`` (keys the config class knows only)."""
    from transformers import AutoConfig

    base = AutoConfig.for_model(model_type)
    raw = {k: v for k, v in _COMMON.items() if hasattr(base, k)}
    raw.update(_SPECIAL.get(model_type, {}))
    out = base.to_dict()
    out.update(raw)
    if isinstance(out.get("layer_types"), list):  # one entry per layer
        out["layer_types"] = out["layer_types"][: out.get("num_hidden_layers", 2)]
    out["model_type"] = model_type
    return out


@functools.cache
def traced(model_type: str, dtype: str | None = "fp32") -> Any:
    """``from_hf(tiny(model_type), batch=BATCH, seq=SEQ, dtype=dtype)``, traced once per
    process. A test that monkeypatches the importer calls ``from_hf`` itself: what it
    traces must neither come from nor go into this cache."""
    from explorer.models import from_hf

    return from_hf(tiny(model_type), batch=BATCH, seq=SEQ, dtype=dtype)


@functools.cache
def meta_model(model_type: str) -> tuple[Any, Any]:
    """(the fp32 meta-device transformers model of ``tiny(model_type)``, its config), as
    ``from_hf`` builds it (`hf_model`), built once per process."""
    from explorer.models.hf import hf_model

    model, cfg, _ = hf_model(tiny(model_type), dtype="fp32")
    return model, cfg


def example_inputs(model_type: str, config: Any, batch: int = BATCH, seq: int = SEQ):
    """(args, kwargs) of a real CPU forward for the FLOP oracle."""
    import torch

    if model_type == "vit":
        n = config.image_size
        return (torch.zeros(batch, config.num_channels, n, n),), {}
    ids = torch.arange(batch * seq).reshape(batch, seq) % config.vocab_size
    if model_type == "t5":
        return (ids,), {"decoder_input_ids": ids, "use_cache": False}
    if model_type in ("bert", "roberta"):
        return (ids,), {}
    return (ids,), {"use_cache": False}


def seed_weights(model: Any, seed: int = 0) -> Any:
    """``model`` with seeded N(0, 1/fan_in) float32 weights, in eval mode."""
    import math

    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
    return model.float().eval()


def causal_lm(model_type: str, seed: int = 0, **over: Any) -> Any:
    """The tiny ``model_type`` (fields ``over`` changed) as transformers' causal LM with
    eager attention and seeded weights (`seed_weights`)."""
    import torch
    import transformers

    raw = {k: v for k, v in tiny(model_type).items() if k != "model_type"}
    raw.update(over)
    cfg = transformers.AutoConfig.for_model(model_type, **raw)
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    return seed_weights(m, seed)


def feeds_of(graph: Any, model: Any, ids: Any) -> dict[str, Any]:
    """Every source of ``graph`` traced from ``model``: its parameters and buffers by
    name, the token ids for the other inputs."""
    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(dict(model.named_buffers()))
    feeds = {n.name: state[n.name].detach().numpy() for n in graph.parameters}
    for n in graph.inputs:
        feeds[n.name] = state[n.name].numpy() if n.name in state else ids.numpy()
    return feeds
