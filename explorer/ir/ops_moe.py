"""Mixture-of-experts routing as first-class ops (GShard's grouped formulation).

Tokens are cut into ``g`` groups of ``s`` tokens (a traced model uses its batch: one group
per sequence). Each group fills its own ``capacity`` slots per expert, so a split of the
group dim needs no communication and expert parallelism is a split of the expert dim:

==================== ===================================== ===================================
op                   signature                             what
==================== ===================================== ===================================
moe_router           ``...d,ed(,e)->...e``                 gate matmul, softmax or sigmoid
                                                           scores, (group-limited) top-k,
                                                           normalisation, scaling; dense
                                                           ``[..., e]`` weights, zero for the
                                                           experts not chosen; ``...e->...e``
                                                           from logits computed elsewhere;
                                                           ``router="sparsemixer"``: PhiMoE's
                                                           two banded top-1 picks (eval mode)
moe_dispatch_grouped ``gsh,gse->egch``                     each group's tokens into
                                                           ``[experts, groups, capacity, h]``
                                                           (tokens past capacity are dropped)
moe_experts          ``egcd,eafd,ehf->egch``               every expert's gated MLP
                                                           ``down(act(x gate) * x up)`` as one
                                                           batched contraction; ``a`` = 2
                                                           holds [gate, up] (transformers'
                                                           ``gate_up_proj`` [e, 2f, d] viewed
                                                           as [e, 2, f, d])
moe_combine_grouped  ``egch,gse->gsh``                     each token's weighted sum of its
                                                           experts' outputs
==================== ===================================== ===================================

PhiMoE's router (``router="sparsemixer"``, ``jitter_eps`` = its ``router_jitter_noise``)
computes what transformers' ``sparsemixer`` computes in eval mode (`sparsemixer`). Its
training mode samples the picks (Gumbel) and reweights them by Heun's method at random:
out of scope, the op always routes as in eval.

Strategies (hand rules in `explorer.sharding.rules`): the router never splits ``e``;
dispatch and combine never split ``s`` or ``c`` (slots are a cumulative count over the
group); ``e`` split in the experts is expert parallelism: from a dispatch split on ``g``
(``[E, G_dp, C, H]``) to ``[E_dp, G, C, H]`` is one all-to-all, and back again before the
combine. ``f`` split in the experts is tensor parallelism inside each expert (output partial).

FLOPs count the matmuls torch runs: the router's ``2 t d e``, and for the experts only the
routed (token, expert) pairs, ``routed x (4 f d + 2 f h)`` (the ``top_k / num_experts``
share of the dense expert FLOPs), not the padding slots; the activation's few FLOPs per
element of ``f`` are left out as torch's FlopCounterMode leaves them out.

>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("moe")
>>> x = b.input("x", (2, 8, 16))
>>> gate = b.op("moe_router", x, b.param("router", (4, 16)), k=2)
>>> xe = b.op("moe_dispatch_grouped", x, gate, capacity=8)
>>> ye = b.op("moe_experts", xe, b.param("gate_up", (4, 2, 32, 16)),
...           b.param("down", (4, 16, 32)), routed=2 * 8 * 2)
>>> y = b.op("moe_combine_grouped", ye, gate, k=2)
>>> g = b.build([y]); g.signature(xe), g.node(ye).type.shape, g.node_flops(ye)
('gsh,gse->egch', (4, 2, 8, 16), 98304)
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import is_int, is_number
from . import signature as sigmod
from .activations import gelu, gelu_erf
from .errors import IRError
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__ = [
    "moe_capacity", "route", "sparsemixer", "group_slots", "ROUTERS", "ROUTER_SCORES",
    "GROUP_SCORES", "ACTS",
]  # fmt: skip

#: How the router picks: ``topk`` (scores, then the k best, optionally group-limited) or
#: ``sparsemixer`` (PhiMoE: two rounds of masked top-1, eval mode; see `sparsemixer`).
ROUTERS = ("topk", "sparsemixer")
ROUTER_SCORES = ("softmax", "sigmoid")
#: How a group of experts is scored for group-limited routing: DeepSeek-V3 sums the top two
#: (bias-corrected) scores of a group, DeepSeek-V2 takes the largest.
GROUP_SCORES = ("top2_sum", "max")


def _silu(x):
    return x / (1.0 + np.exp(-x))


#: The experts' activations: ``gelu`` is the tanh form (as the IR's ``gelu`` op), ``gelu_erf``
#: the exact one (torch's default ``nn.GELU()``).
ACTS = {"silu": _silu, "gelu": gelu, "gelu_erf": gelu_erf,
        "relu": lambda x: np.maximum(x, 0)}  # fmt: skip


def moe_capacity(tokens: int, k: int, experts: int, factor: float | None) -> int:
    """Slots per expert for a group of ``tokens``: ``ceil(tokens * k / experts * factor)``,
    at most ``tokens`` (a token picks an expert once); ``factor=None`` is dropless.

    >>> moe_capacity(4096, 8, 256, 1.25), moe_capacity(16, 2, 4, None)
    (160, 16)
    """
    if factor is None:
        return tokens
    if not factor > 0:
        raise IRError(f"capacity factor {factor!r} is not > 0; pass e.g. 1.25 or None")
    return max(1, min(tokens, math.ceil(tokens * k / experts * factor)))


# --- router -------------------------------------------------------------------------------


def route(logits, bias=None, *, k, score="softmax", norm_topk=True, scale=1.0, n_group=1,
          topk_group=1, group_score="top2_sum") -> np.ndarray:  # fmt: skip
    """Dense routing weights ``[..., e]`` from router logits: the top-k experts of each token
    keep their (normalised, scaled) score, the others 0. ``bias`` shifts the choice only
    (DeepSeek-V3's ``e_score_correction_bias``), never the weight."""
    e = logits.shape[-1]
    if score == "softmax":
        m = logits.max(axis=-1, keepdims=True)
        p = np.exp(logits - m)
        scores = p / p.sum(axis=-1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores if bias is None else scores + bias
    if n_group > 1:
        grouped = choice.reshape(*choice.shape[:-1], n_group, e // n_group)
        if group_score == "max":
            gs = grouped.max(axis=-1)
        else:
            gs = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)
        top_groups = np.argsort(-gs, axis=-1, kind="stable")[..., :topk_group]
        keep = np.zeros(gs.shape, dtype=bool)
        np.put_along_axis(keep, top_groups, True, axis=-1)
        keep = np.repeat(keep, e // n_group, axis=-1)
        choice = np.where(keep, choice, -np.inf)
    idx = np.argsort(-choice, axis=-1, kind="stable")[..., :k]
    w = np.take_along_axis(scores, idx, axis=-1)
    if norm_topk:
        w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
    out = np.zeros_like(scores)
    np.put_along_axis(out, idx, w * scale, axis=-1)
    return out


def sparsemixer(logits, jitter_eps: float) -> np.ndarray:
    """PhiMoE's router in eval mode (transformers' ``sparsemixer(..., training=False)``):
    dense weights ``[..., e]``, non-zero for two experts per token.

    Round 1 picks the best logit ``m``; its weight is the softmax, taken over only the
    experts whose logit is within the band ``(m - l) / max(|l|, m) <= 2 jitter_eps``, at
    the pick. Round 2 does the same on the logits with the first pick removed (the band
    measured from the second best, the first pick excluded). Weights are not renormalised.
    Training mode (Gumbel sampling of the picks and the Heun-method multipliers) is random
    and not modelled.

    >>> w = sparsemixer(np.array([[2.0, 1.99, 0.0, -1.0]]), jitter_eps=0.01)
    >>> np.round(w, 4).tolist()  # pick 0 shares its band with 1; pick 1 is alone in its own
    [[0.5025, 1.0, 0.0, 0.0]]
    """
    logits = np.asarray(logits)
    out = np.zeros_like(logits)
    masked = logits.copy()
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 (all-zero logits) is no band
        for _ in range(2):
            idx = np.argmax(masked, axis=-1)[..., None]  # first of ties, as torch.max on CPU
            top = np.take_along_axis(masked, idx, axis=-1)
            factor = np.maximum(np.abs(logits), top)
            band = np.where((top - logits) / factor > 2 * jitter_eps, -np.inf, masked)
            p = np.exp(band - top)
            w = np.take_along_axis(p, idx, axis=-1) / p.sum(axis=-1, keepdims=True)
            np.put_along_axis(out, idx, w, axis=-1)
            np.put_along_axis(masked, idx, -np.inf, axis=-1)
    return out


def _router_impl(x, w=None, bias=None, *, router="topk", jitter_eps=0.01, **attrs):
    logits = x if w is None else np.einsum("...d,ed->...e", x, w)
    if router == "sparsemixer":
        return sparsemixer(logits, jitter_eps) * attrs["scale"]
    return route(logits, bias, **attrs)


def _router_sig(in_types, attrs) -> str:
    if len(in_types) not in (1, 2, 3):
        raise IRError(
            f"moe_router takes (logits), (x, weight) or (x, weight, bias), got {len(in_types)}"
        )
    e = in_types[1].shape[0] if len(in_types) > 1 else in_types[0].shape[-1]
    if attrs["score"] not in ROUTER_SCORES:
        raise IRError(f"moe_router score={attrs['score']!r}; use one of {ROUTER_SCORES}")
    if attrs["group_score"] not in GROUP_SCORES:
        raise IRError(f"moe_router group_score={attrs['group_score']!r}; use one of {GROUP_SCORES}")
    if not is_int(attrs["k"], minimum=1, maximum=e):
        raise IRError(f"moe_router k={attrs['k']} is not in [1, {e}] (the expert count)")
    ng, tg = attrs["n_group"], attrs["topk_group"]
    if ng < 1 or e % ng or not 1 <= tg <= ng or attrs["k"] > tg * (e // ng):
        raise IRError(
            f"moe_router n_group={ng}, topk_group={tg} do not fit {e} experts and "
            f"k={attrs['k']}: n_group must divide the experts and the chosen groups must "
            "hold at least k experts"
        )
    if attrs["router"] not in ROUTERS:
        raise IRError(f"moe_router router={attrs['router']!r}; use one of {ROUTERS}")
    if attrs["router"] == "sparsemixer":
        _check_sparsemixer(len(in_types), attrs)
    elif attrs["jitter_eps"] != 0.01:  # the default: the top-k router reads no band
        raise IRError(
            f"moe_router jitter_eps={attrs['jitter_eps']!r} with router={attrs['router']!r}: "
            "only the sparsemixer router reads it; pass router='sparsemixer' or drop jitter_eps"
        )
    template = {1: "...e->...e", 2: "...d,ed->...e", 3: "...d,ed,e->...e"}[len(in_types)]
    return sigmod.expand(template, in_types)


def _check_sparsemixer(n_inputs: int, attrs) -> None:
    eps = attrs["jitter_eps"]
    bad = [
        (attrs["k"] != 2, f"k={attrs['k']}", "k=2 (transformers' sparsemixer always picks two)"),
        (attrs["score"] != "softmax", f"score={attrs['score']!r}", "score='softmax'"),
        (attrs["norm_topk"], "norm_topk=True", "norm_topk=False (its weights are not "
         "renormalised)"),
        (attrs["n_group"] != 1, f"n_group={attrs['n_group']}", "n_group=1"),
        (n_inputs == 3, "a bias input", "no e_score_correction_bias"),
        (not is_number(eps, minimum=0, finite=False),
         f"jitter_eps={eps!r}", "a float >= 0 (PhiMoE's router_jitter_noise)"),
    ]  # fmt: skip
    for wrong, what, fix in bad:
        if wrong:
            raise IRError(f"moe_router router='sparsemixer' with {what}: not PhiMoE's routing; "
                          f"pass {fix}")  # fmt: skip


def _router_flops(in_types, out_type, attrs) -> int:
    if len(in_types) == 1:  # logits given: the matmul is another node's
        return 0
    return 2 * in_types[0].numel * in_types[1].shape[0]


register(OpDef("moe_router", OpGroup.CONTRACTION, None, None, 2, _router_impl,
               attrs={"k": REQUIRED, "score": "softmax", "norm_topk": True, "scale": 1.0,
                      "n_group": 1, "topk_group": 1, "group_score": "top2_sum",
                      "router": "topk", "jitter_eps": 0.01},
               signature_rule=_router_sig, flops_rule=_router_flops,
               doc="router: x @ w.T, softmax/sigmoid scores, (group-limited) top-k, "
                   "normalised and scaled, or PhiMoE's sparsemixer (eval mode); zero for "
                   "experts not chosen"))  # fmt: skip

# --- dispatch and combine -----------------------------------------------------------------


def group_slots(gate: np.ndarray, capacity: int) -> np.ndarray:
    """``[g, s, e]``: the slot of each (token, expert) pair in its group's buffer of that
    expert, -1 when the token is not routed there or arrives past ``capacity``."""
    routed = gate != 0
    slot = np.cumsum(routed, axis=1) - 1
    return np.where(routed & (slot < capacity), slot, -1)


def _dispatch(x, gate, capacity, weighted=False):
    g, s, h = x.shape
    out = np.zeros((gate.shape[2], g, capacity, h), dtype=np.result_type(x, gate))
    slots = group_slots(gate, capacity)
    gi, si, ei = np.nonzero(slots >= 0)
    w = gate[gi, si, ei, None] if weighted else 1.0
    out[ei, gi, slots[gi, si, ei]] = x[gi, si] * w
    return out


def _combine(y, gate, k=2, weighted=True):
    e, g, c, h = y.shape
    slots = group_slots(gate, c)
    gi, si, ei = np.nonzero(slots >= 0)
    out = np.zeros((g, gate.shape[1], h), dtype=np.result_type(y, gate))
    w = gate[gi, si, ei, None] if weighted else 1.0
    np.add.at(out, (gi, si), w * y[ei, gi, slots[gi, si, ei]])
    return out


def _dispatch_shape(in_types, attrs):
    (g, s, h), (g2, s2, e) = in_types[0].shape, in_types[1].shape
    if (g, s) != (g2, s2):
        raise IRError(f"moe_dispatch_grouped: tokens {in_types[0]} and gate {in_types[1]} "
                      "differ in their [groups, tokens] dims")  # fmt: skip
    cap = attrs["capacity"]
    if not is_int(cap, minimum=1):
        raise IRError(f"moe_dispatch_grouped capacity={cap!r}; pass an int >= 1 "
                      "(explorer.ir.ops_moe.moe_capacity computes one)")  # fmt: skip
    return (e, g, cap, h)


register(OpDef("moe_dispatch_grouped", OpGroup.MOVEMENT, "gsh,gse->egch", 2, 0, _dispatch,
               attrs={"capacity": REQUIRED, "weighted": False}, shape_rule=_dispatch_shape,
               doc="each group's tokens into [experts, groups, capacity, hidden] (weighted: "
                   "times their routing weight, as Llama 4 scales tokens before the "
                   "experts)"))  # fmt: skip
register(OpDef("moe_combine_grouped", OpGroup.MOVEMENT, "egch,gse->gsh", 2, 0, _combine,
               attrs={"k": 2, "weighted": True},
               flops_rule=lambda i, o, a: 2 * a["k"] * o.numel,
               doc="each token's sum of its expert outputs, weighted by the routing "
                   "weights unless the dispatch applied them (the weighting's FLOPs are "
                   "counted here either way)"))  # fmt: skip

# --- the experts --------------------------------------------------------------------------


def _experts(x, gate_up, down, act="silu", routed=None):
    g = np.einsum("egcd,efd->egcf", x, gate_up[:, 0])
    u = np.einsum("egcd,efd->egcf", x, gate_up[:, 1])
    return np.einsum("egcf,ehf->egch", ACTS[act](g) * u, down)


def _experts_check(in_types, attrs):
    x, gu, dn = (t.shape for t in in_types)
    e, _, _, d = x
    if len(gu) != 4 or gu[0] != e or gu[1] != 2 or gu[3] != d:
        raise IRError(f"moe_experts gate_up {in_types[1]} is not [experts={e}, 2, f, d={d}]; "
                      "view transformers' gate_up_proj [e, 2f, d] as [e, 2, f, d]")  # fmt: skip
    if len(dn) != 3 or dn[0] != e or dn[2] != gu[2]:
        raise IRError(f"moe_experts down {in_types[2]} is not [experts={e}, h, f={gu[2]}]")
    if attrs["act"] not in ACTS:
        raise IRError(f"moe_experts act={attrs['act']!r}; use one of {sorted(ACTS)}")
    return (e, x[1], x[2], dn[1])


def _experts_flops(in_types, out_type, attrs) -> int:
    e, g, c, d = in_types[0].shape
    f, h = in_types[1].shape[2], in_types[2].shape[1]
    pairs = e * g * c if attrs["routed"] is None else min(attrs["routed"], e * g * c)
    return 2 * pairs * (2 * f * d + f * h)


register(OpDef("moe_experts", OpGroup.CONTRACTION, "egcd,eafd,ehf->egch", 3, 2, _experts,
               attrs={"act": "silu", "routed": None}, shape_rule=_experts_check,
               flops_rule=_experts_flops,
               doc="every expert's gated MLP down(act(x @ gate) * (x @ up)) on its slots; "
                   "routed = (token, expert) pairs that FLOPs count (None: every slot)"))  # fmt: skip
