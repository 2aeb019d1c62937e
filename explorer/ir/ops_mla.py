"""Multi-head latent attention (DeepSeek-V2/V3's MLA) as a first-class op.

MLA's query side is plain projections (``q_a_proj``, an RMSNorm, ``q_b_proj``; or one
``q_proj`` without ``q_lora_rank``), which stay ordinary ``einsum``/``rmsnorm`` nodes. The
key/value side is one op: the compressed output of ``kv_a_proj_with_mqa``
``[b, t, kv_lora_rank + qk_rope_head_dim]`` is split into the latent (RMS-normalised) and the
shared rotary key; ``kv_b_proj`` expands the latent into every head's no-rope key and value;
rotary embeddings go on the query's last ``qk_rope_head_dim`` dims and the shared key; then
causal softmax attention.

``mla_attention(q, ckv, kv_norm_w, kv_b_w, cos, sin)``, signature
``bsnq,btc,r,nkr,btp,btp->bsnv``:

======== ============================== ====================================================
input    shape                          what
======== ============================== ====================================================
q        [b, s, n, nope + rope]         the query heads before the rotary embedding
ckv      [b, t, kv_lora_rank + rope]    ``kv_a_proj_with_mqa`` output
kv_norm  [kv_lora_rank]                 ``kv_a_layernorm`` weight
kv_b     [n, nope + v, kv_lora_rank]    ``kv_b_proj.weight`` [n (nope + v), r] viewed per head
cos, sin [b, t, rope]                   the rotary tables (transformers' position_embeddings)
======== ============================== ====================================================

Output ``[b, s, n, v_head_dim]`` (``o_proj`` follows as an einsum). Strategies split the
batch ``b`` and the heads ``n`` (tensor parallel attention: the latent and rotary key are
replicated, each device expands its own heads); everything else stays whole.

FLOPs are those of the three matmuls torch runs in eager attention: the expansion
``2 b t r n (nope + v)``, the scores ``2 b n s t (nope + rope)`` and the context
``2 b n s t v``.

>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("mla")
>>> q = b.input("q", (1, 4, 2, 12)); ckv = b.input("ckv", (1, 4, 20))
>>> cos, sin = b.input("cos", (1, 4, 4)), b.input("sin", (1, 4, 4))
>>> y = b.op("mla_attention", q, ckv, b.param("kv_norm", (16,)), b.param("kv_b", (2, 16, 16)),
...          cos, sin, nope=8, scaling=12**-0.5)
>>> g = b.build([y]); g.node(y).type.shape, g.node_flops(y)
((1, 4, 2, 8), 5376)
"""

from __future__ import annotations

import numpy as np

from .errors import IRError
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__ = ["rotary", "mla_dims"]


def rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleave: bool) -> np.ndarray:
    """Rotary embedding as transformers applies it: ``rotate_half`` on the two halves, or
    (``interleave``) on the pairs ``(x0, x1), (x2, x3), ...``, written as the two halves."""
    if interleave:
        half = cos.shape[-1] // 2
        c, s = cos[..., :half], sin[..., :half]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def mla_dims(in_types, attrs) -> dict[str, int]:
    """The MLA sizes an op's inputs imply (and the checks that they agree)."""
    q, ckv, nw, kvb, cos, sin = (t.shape for t in in_types)
    nope = attrs["nope"]
    if len(q) != 4 or len(ckv) != 3 or len(nw) != 1 or len(kvb) != 3 or len(cos) != 3:
        raise IRError(
            "mla_attention takes q [b, s, n, nope+rope], ckv [b, t, r+rope], kv_norm [r], "
            f"kv_b [n, nope+v, r], cos and sin [b, t, rope]; got {', '.join(map(str, in_types))}"
        )
    b, s, n, dq = q
    r, rope = nw[0], cos[2]
    if cos != sin or cos[:2] != ckv[:2] or ckv[0] != b or ckv[2] != r + rope:
        raise IRError(f"mla_attention: ckv {in_types[1]}, cos {in_types[4]} and sin "
                      f"{in_types[5]} do not fit kv_lora_rank {r} + rope {rope} on batch {b}")  # fmt: skip
    if not 0 <= nope or dq != nope + rope:
        raise IRError(f"mla_attention: q {in_types[0]} has head dim {dq}, expected "
                      f"nope={nope} + rope={rope}")  # fmt: skip
    if kvb[0] != n or kvb[2] != r or kvb[1] <= nope:
        raise IRError(f"mla_attention: kv_b {in_types[3]} is not [heads={n}, nope={nope} + v, "
                      f"kv_lora_rank={r}]")  # fmt: skip
    if s != ckv[1]:
        raise IRError(f"mla_attention is self-attention: q has {s} positions, ckv {ckv[1]}")
    if rope % 2:
        raise IRError(f"mla_attention: the rotary dim {rope} must be even")
    return {"b": b, "s": s, "t": ckv[1], "n": n, "r": r, "rope": rope, "nope": nope,
            "v": kvb[1] - nope}  # fmt: skip


def _mla(q, ckv, norm_w, kv_b, cos, sin, nope, scaling, interleave=False, eps=1e-6,
         causal=True):  # fmt: skip
    r = norm_w.shape[0]
    lat, k_rot = ckv[..., :r], ckv[..., r:]
    lat = lat / np.sqrt((lat**2).mean(axis=-1, keepdims=True) + eps) * norm_w
    k_rot = rotary(k_rot, cos, sin, interleave)  # [b, t, rope], shared by the heads
    q_pass, q_rot = q[..., :nope], rotary(q[..., nope:], cos[:, :, None], sin[:, :, None],
                                          interleave)  # fmt: skip
    kv = np.einsum("btr,nkr->btnk", lat, kv_b)
    k_pass, v = kv[..., :nope], kv[..., nope:]
    scores = np.einsum("bsnd,btnd->bnst", q_pass, k_pass)
    scores = (scores + np.einsum("bsnp,btp->bnst", q_rot, k_rot)) * scaling
    if causal:
        s, t = scores.shape[-2:]
        keep = np.arange(t)[None, :] <= np.arange(s)[:, None]
        scores = np.where(keep, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    p = np.exp(scores - m)
    p = p / p.sum(axis=-1, keepdims=True)
    return np.einsum("bnst,btnv->bsnv", p, v)


def _mla_shape(in_types, attrs):
    d = mla_dims(in_types, attrs)
    return (d["b"], d["s"], d["n"], d["v"])


def _mla_flops(in_types, out_type, attrs) -> int:
    d = mla_dims(in_types, attrs)
    b, s, t, n = d["b"], d["s"], d["t"], d["n"]
    expand = 2 * b * t * d["r"] * n * (d["nope"] + d["v"])
    return expand + 2 * b * n * s * t * (d["nope"] + d["rope"]) + 2 * b * n * s * t * d["v"]


register(OpDef("mla_attention", OpGroup.CONTRACTION, "bsnq,btc,r,nkr,btp,btp->bsnv", 6, 2,
               _mla, attrs={"nope": REQUIRED, "scaling": REQUIRED, "interleave": False,
                            "eps": 1e-6, "causal": True},
               shape_rule=_mla_shape, flops_rule=_mla_flops,
               doc="DeepSeek's multi-head latent attention from the query heads and the "
                   "compressed kv (latent norm, kv_b expansion, rotary, causal softmax)"))  # fmt: skip
