"""Building blocks shared by the model builders: norm, attention, MLP, MoE, linear."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ir import GraphBuilder
from .config import ModelConfig

__all__ = ["linear", "norm", "residual", "rotate", "attention", "mlp", "moe"]


def linear(b: GraphBuilder, x: str, d_in: int, d_out: int, name: str, bias: bool) -> str:
    """``x @ w (+ bias)`` with ``w: [d_in, d_out]``."""
    y = b.op("matmul", x, b.param(f"{name}_w", (d_in, d_out)), name=name)
    if bias:
        y = b.op("add", y, b.param(f"{name}_b", (d_out,)), name=f"{name}_bias")
    return y


def norm(b: GraphBuilder, cfg: ModelConfig, x: str, name: str = "norm") -> str:
    h = cfg.hidden_size
    if cfg.norm == "rmsnorm":
        return b.op("rmsnorm", x, b.param(f"{name}_g", (h,)), name=name)
    return b.op("layernorm", x, b.param(f"{name}_g", (h,)), b.param(f"{name}_b", (h,)), name=name)


def residual(b: GraphBuilder, x: str, sublayer: Callable[[str], str],
             normalize: Callable[[str], str], *, pre: bool, name: str = "residual") -> str:  # fmt: skip
    """One residual sub-block of a transformer layer: ``x + sublayer(normalize(x))``
    (pre-norm) or ``normalize(x + sublayer(x))`` (post-norm). The norm is applied before
    the sublayer is built, so its nodes come first; ``name`` names the ``add``."""
    y = sublayer(normalize(x) if pre else x)
    x = b.op("add", x, y, name=name)
    return x if pre else normalize(x)


def _dropout(b: GraphBuilder, cfg: ModelConfig, x: str, name: str, seed: int) -> str:
    if cfg.dropout == 0:
        return x
    return b.op("dropout", x, name=name, p=cfg.dropout, seed=seed)


def rotate(b: GraphBuilder, cfg: ModelConfig, x: str, name: str) -> str:
    """The rotary embedding of heads ``x: [b, s, heads, d]``: one ``rope`` op (3 FLOPs
    per element, as transformers' ``apply_rotary_pos_emb``) with its own cos and sin
    tables ``[1, s, 1, d]`` as graph inputs (each fused rope kernel reads them; an input
    read by one op only follows its layout, which the recursive solver handles best)."""
    s = b.shape(x)[-3]
    shape = (1, s, 1, cfg.dim_head)
    cos, sin = b.input(f"{name}_cos", shape), b.input(f"{name}_sin", shape)
    return b.op("rope", x, cos, sin, name=name)


def attention(
    b: GraphBuilder, cfg: ModelConfig, x: str, *, causal: bool, query: str | None = None,
    seed: int = 0, rope: bool = False,
) -> str:  # fmt: skip
    """Multi-head (or grouped-query) self-attention on ``x: [b, s, h]``.

    ``query`` replaces the query source by another ``[s, h]`` value (PanGu's top query).
    ``rope`` rotates the query and key heads (`rotate`), as LLaMA does.
    """
    bs, s, h = b.shape(x)
    n, kv, d = cfg.num_heads, cfg.kv_heads, cfg.dim_head
    g = n // kv
    q_src = x if query is None else query
    q = linear(b, q_src, h, n * d, "q", cfg.bias)
    k = linear(b, x, h, kv * d, "k", cfg.bias)
    v = linear(b, x, h, kv * d, "v", cfg.bias)
    qb = "" if query is None else "b"  # a shared [s, ...] query has no batch dim
    k = b.op("reshape", k, name="k_heads", shape=(bs, s, kv, d))
    v = b.op("reshape", v, name="v_heads", shape=(bs, s, kv, d))
    q = b.op("reshape", q, name="q_heads", shape=((bs,) if not qb else ()) + (s, n, d))
    if rope:
        q, k = rotate(b, cfg, q, "q_rope"), rotate(b, cfg, k, "k_rope")
    if g > 1:  # grouped-query: each key/value head serves g query heads (a broadcast view)
        k, v = (_repeat_heads(b, t, (bs, s, kv, d), g, name) for t, name in ((k, "k"), (v, "v")))
    scores = b.op("einsum", q, k, name="scores", eq=f"{'b' if not qb else ''}snd,btnd->bnst")
    ctx_eq = "bnst,btnd->bsnd"
    scores = b.op("scale", scores, name="scale", factor=1.0 / math.sqrt(d))
    if causal:
        scores = b.op("causal_mask", scores, name="mask")
    probs = b.op("softmax", scores, name="probs")
    probs = _dropout(b, cfg, probs, "probs_dropout", seed)
    ctx = b.op("einsum", probs, v, name="context", eq=ctx_eq)
    ctx = b.op("reshape", ctx, name="merge_heads", shape=(bs, s, n * d))
    out = linear(b, ctx, n * d, h, "o", cfg.bias)
    return _dropout(b, cfg, out, "dropout", seed + 1)


def _repeat_heads(b: GraphBuilder, t: str, shape: tuple[int, ...], g: int, name: str) -> str:
    """``[b, s, kv, d]`` -> ``[b, s, kv * g, d]``, each head repeated ``g`` times (as
    transformers' ``repeat_kv``): reshape, expand and reshape, all views. Heads then split
    over more devices than there are key/value heads (each holds the one it needs)."""
    bs, s, kv, d = shape
    t = b.op("reshape", t, name=f"{name}_groups", shape=(bs, s, kv, 1, d))
    t = b.op("expand", t, name=f"{name}_repeat", shape=(bs, s, kv, g, d), axes=(3,))
    return b.op("reshape", t, name=f"{name}_all_heads", shape=(bs, s, kv * g, d))


def mlp(b: GraphBuilder, cfg: ModelConfig, x: str, seed: int = 0) -> str:
    """Dense MLP: ``w2(act(w1 x))`` or SwiGLU ``w_down(silu(w_gate x) * w_up x)``."""
    h, f = cfg.hidden_size, cfg.ffn
    if cfg.activation == "swiglu":
        gate = b.op("silu", linear(b, x, h, f, "gate", cfg.bias), name="silu")
        up = linear(b, x, h, f, "up", cfg.bias)
        out = linear(b, b.op("mul", gate, up, name="glu"), f, h, "down", cfg.bias)
    else:
        a = b.op(cfg.activation, linear(b, x, h, f, "fc1", cfg.bias), name=cfg.activation)
        out = linear(b, a, f, h, "fc2", cfg.bias)
    return _dropout(b, cfg, out, "dropout", seed)


def moe(b: GraphBuilder, cfg: ModelConfig, x: str) -> str:
    """Mixture of experts (Mixtral style): top-k router, dispatch, batched expert SwiGLU
    or GELU MLPs, combine. Capacity per expert = ceil(tokens * k / experts * factor)."""
    bs, s, h = b.shape(x)
    e, k, f = cfg.num_experts, cfg.experts_top_k, cfg.ffn
    t = bs * s
    capacity = math.ceil(t * k / e * cfg.capacity_factor)
    tokens = b.op("reshape", x, name="tokens", shape=(t, h))
    logits = b.op("matmul", tokens, b.param("router_w", (h, e)), name="router")
    gate = b.op("topk_gate", logits, name="route", k=k)
    xin = b.op("moe_dispatch", tokens, gate, name="dispatch", capacity=capacity)
    if cfg.activation == "swiglu":
        g = b.op("einsum", xin, b.param("gate_w", (e, h, f)), name="gate", eq="ech,ehf->ecf")
        u = b.op("einsum", xin, b.param("up_w", (e, h, f)), name="up", eq="ech,ehf->ecf")
        a = b.op("mul", b.op("silu", g, name="silu"), u, name="glu")
    else:
        a = b.op("einsum", xin, b.param("fc1_w", (e, h, f)), name="fc1", eq="ech,ehf->ecf")
        a = b.op(cfg.activation, a, name=cfg.activation)
    y = b.op("einsum", a, b.param("down_w", (e, f, h)), name="down", eq="ecf,efh->ech")
    out = b.op("moe_combine", y, gate, name="combine", k=k)
    return b.op("reshape", out, name="out", shape=(bs, s, h))
