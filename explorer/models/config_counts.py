"""Parameters and forward matmul FLOPs of a `ModelConfig`, counted from its fields alone.

The counts follow the builders (`explorer.models.build`) part by part, so
``param_count(cfg) == build(cfg).num_params()``; for configs read from a Hugging Face
``config.json`` they equal ``sum(p.numel())`` of the transformers model (tests/training/
test_moe_config.py checks DeepSeek-V3, DeepSeek-V2, Qwen3-MoE, Qwen2-MoE and Mixtral).

FLOPs are those of the matrix products (2 per multiply-add), as torch's FlopCounterMode
counts them with eager attention (the full ``s x s`` scores, no causal skip) and eager
experts (each token through its ``top_k`` routed experts only, the router and the shared
experts for every token). Norms, softmax, rotary and elementwise ops are left out.

>>> from explorer.models import load
>>> cfg = load("mixtral-8x7b")
>>> param_count(cfg)
46702792704
>>> per_layer = layer_params(cfg, 0)
>>> per_layer["experts"], per_layer["router"]
(1409286144, 32768)
"""

from __future__ import annotations

from .config import ModelConfig

__all__ = ["param_count", "layer_params", "forward_flops", "layer_flops", "active_params"]


def _norm(cfg: ModelConfig, width: int | None = None) -> int:
    w = cfg.hidden_size if width is None else width
    return 2 * w if cfg.norm == "layernorm" else w


def _attention_params(cfg: ModelConfig) -> dict[str, int]:
    h, n = cfg.hidden_size, cfg.num_heads
    if cfg.is_mla:
        nope, rope, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        kvr, qr = cfg.kv_lora_rank, cfg.q_lora_rank
        q = h * n * (nope + rope) if qr is None else h * qr + qr + qr * n * (nope + rope)
        kv = h * (kvr + rope) + kvr + kvr * n * (nope + v)
        return {"q": q, "kv": kv, "o": n * v * h}
    kv, d = cfg.kv_heads, cfg.dim_head
    out = {"q": h * n * d, "kv": 2 * h * kv * d, "o": n * d * h}
    if cfg.bias or cfg.qkv_bias:
        out["q"] += n * d
        out["kv"] += 2 * kv * d
    if cfg.bias:
        out["o"] += h
    if cfg.qk_norm:
        out["q"] += d
        out["kv"] += d
    return out


def _mlp_params(cfg: ModelConfig, f: int, bias: bool) -> int:
    h = cfg.hidden_size
    if cfg.activation == "swiglu":
        return 3 * h * f + (2 * f + h if bias else 0)
    return 2 * h * f + (f + h if bias else 0)


def layer_params(cfg: ModelConfig, i: int) -> dict[str, int]:
    """Parameters of layer ``i`` by part: ``norms``, ``q``, ``kv``, ``o`` (attention),
    ``mlp`` (dense layers) or ``router``, ``experts``, ``shared`` (MoE layers), and
    ``query`` (PanGu's top query table on the last layer)."""
    out = _layer(cfg, cfg.layer_is_moe(i))
    if cfg.query_layer and i == cfg.num_layers - 1:
        out["query"] = cfg.max_seq_len * cfg.hidden_size
    return out


def _layer(cfg: ModelConfig, moe: bool) -> dict[str, int]:
    out = {"norms": 2 * _norm(cfg), **_attention_params(cfg)}
    h = cfg.hidden_size
    if moe:
        per_expert = (3 if cfg.activation == "swiglu" else 2) * h * cfg.moe_ffn
        out["router"] = h * cfg.num_experts
        out["experts"] = cfg.num_experts * per_expert
        if cfg.num_shared_experts:
            out["shared"] = _mlp_params(cfg, cfg.shared_ffn, False) + (
                h if cfg.shared_expert_gate else 0
            )
    else:
        out["mlp"] = _mlp_params(cfg, cfg.ffn, cfg.bias)
    return out


def _embed_head_params(cfg: ModelConfig) -> tuple[int, int]:
    h, V = cfg.hidden_size, cfg.vocab_size
    embed = V * h
    if cfg.position == "learned":
        embed += cfg.max_seq_len * h
    embed += cfg.type_vocab_size * h
    if cfg.embed_norm:
        embed += _norm(cfg)
    head = _norm(cfg) if cfg.norm_position == "pre" else 0
    if cfg.arch == "encoder":
        head += h * h + (h if cfg.bias else 0) + _norm(cfg)
    head += 0 if cfg.tied_embeddings else h * V
    if cfg.arch == "encoder" and cfg.bias:
        head += V
    return embed, head


def param_count(cfg: ModelConfig) -> int:
    """All parameters of ``cfg`` (tied embeddings once)."""
    if cfg.arch == "mlp":
        per = 2 * cfg.hidden_size * cfg.ffn + (cfg.ffn + cfg.hidden_size if cfg.bias else 0)
        return cfg.num_layers * per
    embed, head = _embed_head_params(cfg)
    dense = sum(_layer(cfg, moe=False).values()) if cfg.dense_layers else 0
    moe = sum(_layer(cfg, moe=True).values()) if cfg.moe_layers else 0
    query = cfg.max_seq_len * cfg.hidden_size if cfg.query_layer else 0
    return embed + head + cfg.dense_layers * dense + cfg.moe_layers * moe + query + _mtp(cfg)


def _mtp(cfg: ModelConfig) -> int:
    """Parameters of the multi-token-prediction modules (embedding and head shared)."""
    if not cfg.mtp_layers:
        return 0
    h = cfg.hidden_size
    layer = sum(_layer(cfg, cfg.layer_is_moe(cfg.num_layers)).values())
    return cfg.mtp_layers * (layer + 2 * h * h + 3 * _norm(cfg))


def active_params(cfg: ModelConfig) -> int:
    """Parameters one token passes through: the routed experts counted ``top_k`` times
    out of ``num_experts`` (DeepSeek-V3: 37B of 671B)."""
    total = param_count(cfg)
    if not cfg.is_moe:
        return total
    experts = _layer(cfg, moe=True)["experts"]
    idle = experts * (cfg.num_experts - cfg.experts_top_k) // cfg.num_experts
    return total - cfg.moe_layers * idle


def layer_flops(cfg: ModelConfig, i: int, seq: int, batch: int = 1) -> int:
    """Forward matmul FLOPs of layer ``i`` for ``batch`` sequences of ``seq``."""
    t = batch * seq
    h, n = cfg.hidden_size, cfg.num_heads
    if cfg.is_mla:
        nope, rope, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        qr, kvr = cfg.q_lora_rank, cfg.kv_lora_rank
        proj = h * n * (nope + rope) if qr is None else h * qr + qr * n * (nope + rope)
        proj += h * (kvr + rope) + kvr * n * (nope + v) + n * v * h
        core = seq * n * (nope + rope + v)
    else:
        d, kv = cfg.dim_head, cfg.kv_heads
        proj = h * n * d + 2 * h * kv * d + n * d * h
        core = seq * n * 2 * d
    flops = 2 * t * (proj + core)
    gated = 3 if cfg.activation == "swiglu" else 2
    if cfg.layer_is_moe(i):
        flops += 2 * t * h * cfg.num_experts  # router
        flops += 2 * t * cfg.experts_top_k * gated * h * cfg.moe_ffn
        if cfg.num_shared_experts:
            flops += 2 * t * 3 * h * cfg.shared_ffn + (2 * t * h if cfg.shared_expert_gate else 0)
    else:
        flops += 2 * t * gated * h * cfg.ffn
    return flops


def forward_flops(cfg: ModelConfig, seq: int, batch: int = 1) -> int:
    """Forward matmul FLOPs of the whole model (layers, the output head and BERT's
    transform) for ``batch`` sequences of ``seq``."""
    if cfg.arch == "mlp":
        return 2 * batch * seq * cfg.num_layers * 2 * cfg.hidden_size * cfg.ffn
    t, h = batch * seq, cfg.hidden_size
    dense = layer_flops(cfg, 0, seq, batch) if cfg.dense_layers else 0
    moe = layer_flops(cfg, cfg.num_layers - 1, seq, batch) if cfg.moe_layers else 0
    head = 2 * t * h * cfg.vocab_size + (2 * t * h * h if cfg.arch == "encoder" else 0)
    mtp = (
        layer_flops(cfg, cfg.num_layers, seq, batch)
        + 2 * t * 2 * h * h
        + 2 * t * h * cfg.vocab_size
    )
    return cfg.dense_layers * dense + cfg.moe_layers * moe + head + cfg.mtp_layers * mtp
