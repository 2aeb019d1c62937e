"""Golden numbers of the transformer block builders: every zoo model (two layers, so the
whole zoo builds in seconds) and small configs for each extended layer (MLA, q/k norms,
q/k/v-only biases, shared experts, dense first layers, MTP, dropout) and for the
transformers-named DeepSeek builder. Node count, parameter count, FLOPs and a hash of every
node (name, op, inputs, shape, dtype, attributes, scope) were captured before the block's
builders were merged into one; a merge that changes any graph fails here."""

from __future__ import annotations

import hashlib

import pytest

from explorer.models import ModelConfig, build, load, names
from explorer.models.deepseek import DeepSeekSpec, build_deepseek


def graph_key(g) -> tuple[int, int, int, str]:
    """(nodes, parameters, FLOPs, hash of every node) of a graph."""
    rows = [(n.name, n.op, tuple(n.inputs), tuple(n.type.shape), n.type.dtype.value,
             tuple((k, repr(v)) for k, v in n.attrs), n.scope) for n in g.nodes]  # fmt: skip
    rows.append(tuple(g.outputs))
    digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:16]
    return len(g.nodes), g.num_params(), g.flops(), digest


_TINY = dict(arch="decoder", hidden_size=32, num_layers=2, num_heads=4, vocab_size=128,
             norm="rmsnorm", activation="swiglu", position="rope", tied_embeddings=False,
             bias=False, ffn_hidden_size=64, max_seq_len=16)  # fmt: skip
_MLA = dict(attention="mla", q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=8)  # fmt: skip
_MOE = dict(num_experts=8, experts_top_k=2, moe_intermediate_size=16)

EXTRA = {
    "tiny-v3": ModelConfig(
        name="tiny-v3",
        **_TINY,
        **_MLA,
        **_MOE,
        num_shared_experts=1,
        first_dense_layers=1,
        mtp_layers=1,
    ),  # fmt: skip
    "tiny-v2-lite": ModelConfig(
        name="tiny-v2-lite",
        **_TINY,
        **{**_MLA, "q_lora_rank": None},
        **_MOE,
        num_shared_experts=2,
        first_dense_layers=1,
    ),  # fmt: skip
    "tiny-qwen2": ModelConfig(name="tiny-qwen2", **_TINY, num_kv_heads=2, qkv_bias=True),
    "tiny-qwen3": ModelConfig(name="tiny-qwen3", **_TINY, num_kv_heads=2, qk_norm=True),
    "tiny-qwen2-moe": ModelConfig(
        name="tiny-qwen2-moe",
        **_TINY,
        num_kv_heads=2,
        qkv_bias=True,
        **_MOE,
        num_shared_experts=1,
        shared_expert_size=48,
        shared_expert_gate=True,
    ),  # fmt: skip
    "tiny-post-moe": ModelConfig(
        name="tiny-post-moe",
        **{**_TINY, "norm": "layernorm"},
        norm_position="post",
        num_experts=4,
        dropout=0.1,
    ),  # fmt: skip
    "bert-base-dropout": load("bert-base").replace(num_layers=2, dropout=0.1),
    "gpt2-dropout": load("gpt2").replace(num_layers=2, dropout=0.1),
}

# name -> (nodes, params, flops, hash), batch 2, seq 16 (the MLP: no sequence)
GOLDEN: dict[str, tuple[int, int, int, str]] = {
    "bert-base": (110, 38635578, 2457555680, "49efd762ce3412ad"),
    "bert-large": (110, 58057530, 3693892320, "058ceaa6fa83eeec"),
    "bloom-176b": (97, 8529547264, 546032664608, "59a2ef6e92a5c99b"),
    "gpt2": (98, 53561088, 3392204000, "b0871dd1768b4288"),
    "gpt2-medium": (98, 77706240, 4922375392, "2493c405dac165f3"),
    "gpt2-xl": (98, 143534400, 9101361376, "5f42283a73753e36"),
    "gpt3-1.3b": (98, 207841280, 13056212192, "23d12e4365c79765"),
    "gpt3-125m": (98, 54347520, 3392204000, "26556de79ffa3a9f"),
    "gpt3-13b": (98, 902239500, 57112207456, "c40ebf4bdcc9e744"),
    "gpt3-175b": (98, 4278534144, 272304341024, "82c5e90a71f6477e"),
    "gpt3-6.7b": (98, 617009152, 38987676896, "47146873300f5bcc"),
    "llama2-13b": (84, 962094080, 51125166112, "3bd6dd147134d47e"),
    "llama2-70b": (96, 2235604992, 126357585952, "5522c7c2a66cd737"),
    "llama2-7b": (84, 666914816, 34324676640, "6b5dc374e7adb847"),
    "llama3-405b": (96, 10578116608, 542636294176, "ab4a81bc0e9fb514"),
    "llama3-70b": (96, 3812663296, 176841932832, "45c8a9f0e502a78d"),
    "llama3-8b": (96, 1486901248, 61589831712, "ca92bae9542415bb"),
    "megatron-1.7b": (98, 250149888, 15732277280, "e79ad874c3ba8096"),
    "megatron-1008b": (98, 17092505600, 1090738913312, "03ebb6ad06679892"),
    "megatron-145.6b": (98, 4278534144, 272304341024, "82c5e90a71f6477e"),
    "megatron-18.4b": (98, 1233297408, 78175027232, "1f07f1cdf0595c0a"),
    "megatron-3.6b": (98, 390156288, 24596971552, "a58a46e71cf2307d"),
    "megatron-310.1b": (98, 7315324928, 466148392992, "f4e53e4d416d7d85"),
    "megatron-39.1b": (98, 2047049728, 129999896608, "43de4dfa6c691b34"),
    "megatron-529.6b": (98, 11157422080, 711531823136, "61300c94d0c0c994"),
    "megatron-7.5b": (98, 620871680, 39235059744, "9f6e552113dd9bce"),
    "megatron-76.1b": (98, 3062128640, 194709667872, "fcacea28ec3817c6"),
    "mixtral-8x7b": (110, 3164688384, 58896829472, "2d43bb5ab49c3989"),
    "mlp-small": (19, 16787456, 67145728, "8ed6e75de0f91e5a"),
    "pangu-alpha-13b": (100, 844574720, 52583321632, "4ba456d870124340"),
    "pangu-alpha-2.6b": (100, 265000960, 16438972448, "b01b18b3864af869"),
    "pangu-alpha-200b": (100, 7131824128, 445811994656, "cdb215263ff1f16a"),
    "tiny-v3": (188, 54536, 2731329, "84c60b4084f86be8"),
    "tiny-v2-lite": (106, 37040, 1783840, "35c15c39d0d53f5a"),
    "tiny-qwen2": (100, 26912, 1689632, "d79201ece4eaf8dc"),
    "tiny-qwen3": (96, 26816, 1700896, "5c6a99e98bbcd532"),
    "tiny-qwen2-moe": (140, 48992, 1943840, "0ac6e165e8f10ce8"),
    "tiny-post-moe": (104, 66048, 2672160, "6207e02b2591a692"),
    "bert-base-dropout": (116, 38635578, 2457776864, "a6459a59ce11e9ab"),
    # the pre-norm MLP dropout was seeded 0 in every layer before the merge (e845040e5c3305c7)
    "gpt2-dropout": (104, 53561088, 3392425184, "675f1b65f10b4332"),
}


def _case(name: str) -> ModelConfig:
    if name in EXTRA:
        return EXTRA[name]
    cfg = load(name)
    return cfg if cfg.arch == "mlp" else cfg.replace(num_layers=2)


@pytest.mark.parametrize("name", [*names(), *EXTRA])
def test_built_graph_is_unchanged(name):
    cfg = _case(name)
    g = build(cfg, batch=2, seq=None if cfg.arch == "mlp" else 16)
    assert graph_key(g) == GOLDEN[name]


def test_dropout_seeds_are_per_layer_and_sublayer_pre_and_post_norm():
    """Layer ``i`` seeds its attention probabilities' dropout ``2i`` and its attention
    output and MLP dropouts ``2i + 1``, in pre-norm as in post-norm configs (as the post-norm
    block always did; the plain pre-norm block seeded every layer's MLP dropout 0)."""
    for name in ("gpt2-dropout", "bert-base-dropout"):
        g = build(EXTRA[name], batch=2, seq=16)
        seeds = {n.name: n.attr("seed") for n in g.nodes if n.op == "dropout"}
        for i in range(2):
            assert seeds[f"layers.{i}.attn.probs_dropout"] == 2 * i
            assert seeds[f"layers.{i}.attn.dropout"] == 2 * i + 1
            assert seeds[f"layers.{i}.mlp.dropout"] == 2 * i + 1


DEEPSEEK = {
    "doc": DeepSeekSpec(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=2,
        topk_group=1,
    ),  # fmt: skip
    "lite": DeepSeekSpec(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=3,
        num_attention_heads=4,
        q_lora_rank=None,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=0,
        first_k_dense_replace=2,
        n_group=1,
        topk_group=1,
        tie_word_embeddings=True,
    ),  # fmt: skip
}
DEEPSEEK_GOLDEN: dict[str, tuple[int, int, int, str]] = {
    "doc": (82, 26448, 669456, "e43081b40bc72fbe"),
    "lite": (90, 33272, 1065488, "ec872585157f0644"),
}


@pytest.mark.parametrize("name", list(DEEPSEEK))
def test_deepseek_graph_is_unchanged(name):
    g = build_deepseek(DEEPSEEK[name], batch=2, seq=8)
    assert graph_key(g) == DEEPSEEK_GOLDEN[name]
