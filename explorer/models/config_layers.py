"""The transformer block of a `ModelConfig` (`block`: the one place that says what a layer
is, for every config `explorer.models.build` builds) and the layers beyond the plain
attention and MLP of `layers`: multi-head latent attention (MLA), q/k norms and q/k/v-only
biases, routed experts of their own size, shared experts (with Qwen2-MoE's gate), dense
first layers and DeepSeek-V3's multi-token prediction.

The scopes and op names are the same whichever layers a config uses (``attn``,
``mlp``/``moe``, ``scores``, ``scale``, ``mask``, ``probs``, ``context``), so the training
step model finds the attention core and the experts of DeepSeek as it does for LLaMA or
Mixtral. Parameters equal `config_counts.param_count` (and transformers' counts for
configs read from Hugging Face).

MLA is built as transformers' eager DeepSeek attention computes it, with the fused
projections split by their output columns (same parameters and FLOPs): queries of
``qk_nope_head_dim + qk_rope_head_dim`` per head (through the ``q_lora_rank`` latent when
set); the key/value latent ``kv_a`` (``kv_lora_rank``, normed) and the one rotary key
``k_rope`` shared by the heads; ``k_b`` and ``v_b`` expand the latent to every head. The
keys are ``cat(k_nope, expand(k_rope))``, so the attention core is one ``scores`` and one
``context`` GEMM (what flash attention fuses); rotary itself adds no parameters and its
few FLOPs are not modelled.

>>> from explorer.models import ModelConfig, build
>>> cfg = ModelConfig(name="tiny-v3", arch="decoder", hidden_size=32, num_layers=2,
...     num_heads=4, vocab_size=128, norm="rmsnorm", activation="swiglu", position="rope",
...     tied_embeddings=False, bias=False, attention="mla", q_lora_rank=16, kv_lora_rank=8,
...     qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_experts=8, experts_top_k=2,
...     moe_intermediate_size=16, num_shared_experts=1, first_dense_layers=1,
...     ffn_hidden_size=64)
>>> build(cfg, batch=2, seq=8).num_params() == cfg.num_params()
True
"""

from __future__ import annotations

import math

from ..ir import GraphBuilder
from .config import ModelConfig
from .layers import _dropout, attention, linear, mlp, moe, norm, residual, rotate

__all__ = ["block", "mla", "shared_expert", "mtp"]


def block(b: GraphBuilder, cfg: ModelConfig, x: str, *, causal: bool, query, seed: int,
          layer: int, rope: bool = False) -> str:  # fmt: skip
    """Layer ``layer`` of ``cfg`` (pre- or post-norm) on ``x: [b, s, h]``: an ``attn`` and
    an ``mlp`` (or ``moe``) residual sub-block. ``query`` replaces the query source (PanGu's
    top query layer); ``seed`` seeds the attention's dropout and ``seed + 1`` the MLP's;
    ``rope`` rotates the query and key heads of grouped-query attention (MLA's decoupled
    rotary part is not modelled: its cost is a few elementwise ops on ``qk_rope_head_dim``
    channels)."""

    def attn(y: str) -> str:
        if cfg.is_mla:
            return mla(b, cfg, y, causal=causal, seed=seed)
        if cfg.qkv_bias or cfg.qk_norm:
            return _attention_qk(b, cfg, y, causal=causal, seed=seed, rope=rope)
        return attention(b, cfg, y, causal=causal, query=query, seed=seed, rope=rope)

    is_moe = cfg.layer_is_moe(layer)

    def ff(y: str) -> str:
        if not is_moe:
            return mlp(b, cfg, y, seed + 1)
        out = moe(b, cfg.replace(ffn_hidden_size=cfg.moe_ffn), y)
        if cfg.num_shared_experts:
            out = b.op("add", out, shared_expert(b, cfg, y), name="add_shared")
        return out

    def normalize(y: str) -> str:
        return norm(b, cfg, y)

    pre = cfg.norm_position == "pre"
    with b.scope("attn"):
        x = residual(b, x, attn, normalize, pre=pre)
    with b.scope("moe" if is_moe else "mlp"):
        x = residual(b, x, ff, normalize, pre=pre)
    return x


def shared_expert(b: GraphBuilder, cfg: ModelConfig, x: str) -> str:
    """The shared experts as one gated MLP of ``cfg.shared_ffn`` (two-dimensional weights:
    split by tensor parallelism like a dense MLP, never by expert parallelism), times
    ``sigmoid(x @ w)`` with Qwen2-MoE's gate."""
    h, f = cfg.hidden_size, cfg.shared_ffn
    if cfg.activation == "swiglu":
        g = b.op("silu", linear(b, x, h, f, "shared_gate", False), name="shared_silu")
        u = linear(b, x, h, f, "shared_up", False)
        a = b.op("mul", g, u, name="shared_glu")
    else:
        a = b.op(cfg.activation, linear(b, x, h, f, "shared_fc1", False), name="shared_act")
    out = linear(b, a, f, h, "shared_down", False)
    if cfg.shared_expert_gate:
        gate = b.op("sigmoid", linear(b, x, h, 1, "shared_gate_proj", False), name="shared_sig")
        out = b.op("mul", out, gate, name="shared_gated")
    return out


def _rms(b: GraphBuilder, x: str, width: int, name: str) -> str:
    return b.op("rmsnorm", x, b.param(f"{name}_g", (width,)), name=name)


def mla(b: GraphBuilder, cfg: ModelConfig, x: str, *, causal: bool, seed: int = 0) -> str:
    """Multi-head latent attention on ``x: [b, s, h]`` (DeepSeek-V2/V3)."""
    bs, s, h = b.shape(x)
    n, nope, rope, v = cfg.num_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    qr, kvr = cfg.q_lora_rank, cfg.kv_lora_rank
    if qr is None:
        q_src, q_in = x, h
    else:
        q_src, q_in = _rms(b, linear(b, x, h, qr, "q_a", False), qr, "q_a_norm"), qr
    q = linear(b, q_src, q_in, n * (nope + rope), "q_b" if qr else "q", False)
    latent = _rms(b, linear(b, x, h, kvr, "kv_a", False), kvr, "kv_a_norm")
    k_rope = linear(b, x, h, rope, "k_rope", False)
    k_nope = linear(b, latent, kvr, n * nope, "k_b", False)
    val = linear(b, latent, kvr, n * v, "v_b", False)
    q = b.op("reshape", q, name="q_heads", shape=(bs, s, n, nope + rope))
    k_nope = b.op("reshape", k_nope, name="k_heads", shape=(bs, s, n, nope))
    k_rope = b.op("reshape", k_rope, name="k_rope_head", shape=(bs, s, 1, rope))
    k_rope = b.op("expand", k_rope, name="k_rope_heads", shape=(bs, s, n, rope), axes=(2,))
    k = b.op("cat", k_nope, k_rope, name="k_cat", axis=3)
    val = b.op("reshape", val, name="v_heads", shape=(bs, s, n, v))
    scores = b.op("einsum", q, k, name="scores", eq="bsnd,btnd->bnst")
    scores = b.op("scale", scores, name="scale", factor=1.0 / math.sqrt(nope + rope))
    if causal:
        scores = b.op("causal_mask", scores, name="mask")
    probs = b.op("softmax", scores, name="probs")
    probs = _dropout(b, cfg, probs, "probs_dropout", seed)
    ctx = b.op("einsum", probs, val, name="context", eq="bnst,btnv->bsnv")
    ctx = b.op("reshape", ctx, name="merge_heads", shape=(bs, s, n * v))
    out = linear(b, ctx, n * v, h, "o", False)
    return _dropout(b, cfg, out, "dropout", seed + 1)


def _attention_qk(b: GraphBuilder, cfg: ModelConfig, x: str, *, causal: bool,
                  seed: int = 0, rope: bool = False) -> str:  # fmt: skip
    """Grouped-query attention with biases on q, k, v only (Qwen2) and/or RMSNorms over
    ``head_dim`` on queries and keys (Qwen3), rotated after the norms (``rope``)."""
    bs, s, h = b.shape(x)
    n, kv, d = cfg.num_heads, cfg.kv_heads, cfg.dim_head
    g = n // kv
    qkv_bias = cfg.bias or cfg.qkv_bias
    q = b.op("reshape", linear(b, x, h, n * d, "q", qkv_bias), name="q_heads",
             shape=(bs, s, kv, g, d))  # fmt: skip
    k = b.op("reshape", linear(b, x, h, kv * d, "k", qkv_bias), name="k_heads",
             shape=(bs, s, kv, d))  # fmt: skip
    v = b.op("reshape", linear(b, x, h, kv * d, "v", qkv_bias), name="v_heads",
             shape=(bs, s, kv, d))  # fmt: skip
    if cfg.qk_norm:
        q, k = _rms(b, q, d, "q_norm"), _rms(b, k, d, "k_norm")
    if rope:  # the rotation acts per head: q's [kv, g] heads are viewed as n
        q = b.op("reshape", q, name="q_flat_heads", shape=(bs, s, n, d))
        q = b.op("reshape", rotate(b, cfg, q, "q_rope"), name="q_group_heads",
                 shape=(bs, s, kv, g, d))  # fmt: skip
        k = rotate(b, cfg, k, "k_rope")
    scores = b.op("einsum", q, k, name="scores", eq="bskgd,btkd->bkgst")
    scores = b.op("scale", scores, name="scale", factor=1.0 / math.sqrt(d))
    if causal:
        scores = b.op("causal_mask", scores, name="mask")
    probs = _dropout(b, cfg, b.op("softmax", scores, name="probs"), "probs_dropout", seed)
    ctx = b.op("einsum", probs, v, name="context", eq="bkgst,btkd->bskgd")
    ctx = b.op("reshape", ctx, name="merge_heads", shape=(bs, s, n * d))
    out = linear(b, ctx, n * d, h, "o", cfg.bias)
    return _dropout(b, cfg, out, "dropout", seed + 1)


def mtp(b: GraphBuilder, cfg: ModelConfig, hidden: str, loss: str) -> str:
    """DeepSeek-V3's multi-token-prediction modules, in the head's scope: each normalises
    the previous depth's hidden states and the token embeddings (``embed.wte``; the one-
    position shift of the tokens changes no cost and is not modelled), projects their
    concatenation ``[2h] -> [h]``, runs one layer like the model's last, and predicts
    through the shared output head; the losses are added to ``loss``."""
    if not cfg.mtp_layers:
        return loss
    h = cfg.hidden_size
    for d in range(cfg.mtp_layers):
        with b.scope(f"mtp{d}"):
            emb = b.op("embedding", "tokens", "embed.wte", name="embed")
            both = b.op("cat", norm(b, cfg, hidden, "hnorm"), norm(b, cfg, emb, "enorm"),
                        name="concat", axis=2)  # fmt: skip
            x = linear(b, both, 2 * h, h, "eh_proj", False)
            with b.scope("layer"):
                x = block(b, cfg, x, causal=True, query=None, seed=0, layer=cfg.num_layers)
            hidden, y = x, norm(b, cfg, x, "final_norm")
            if cfg.tied_embeddings:
                logits = b.op("einsum", y, "embed.wte", name="logits", eq="bsh,vh->bsv")
            else:
                logits = b.op("matmul", y, "head.lm_head_w", name="logits")
            lm = b.op("mean", b.op("cross_entropy", logits, "labels", name="token_loss"),
                      name="loss")  # fmt: skip
            loss = b.op("add", loss, lm, name="total_loss")
    return loss
