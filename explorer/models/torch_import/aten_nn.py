"""Aten op -> IR mappings for contractions, norms, softmax, attention, convolutions,
grouped expert matmuls and the higher-order ops that wrap a subgraph."""

from __future__ import annotations

import math
import string

from .convert import Context, Ref, handler
from .report import Unmapped

__all__ = ["contract"]

_L = string.ascii_lowercase


def contract(cx: Context, x: Ref, w: Ref, *, transpose_w: bool = False) -> Ref:
    """``torch.matmul(x, w)`` (``w.T`` when ``transpose_w``) as one contraction, with
    numpy broadcasting of the batch dims (a size-1 batch dim is dropped by a reshape)."""
    xs, ws = cx.shape(x), cx.shape(w)
    if transpose_w and len(ws) == 2:
        ws_eff = (ws[1], ws[0])
    elif transpose_w:
        raise Unmapped("a transposed weight of rank other than 2")
    else:
        ws_eff = ws
    if len(ws_eff) == 2 and len(xs) >= 1 and not transpose_w:
        return cx.op("matmul", x, w)
    letters = iter(_L)
    k = next(letters)
    if len(xs) == 1 and len(ws_eff) == 1:
        return cx.op("einsum", x, w, eq=f"{k},{k}->")
    if len(ws_eff) == 1:  # [..., m, k] @ [k]
        pre = "".join(next(letters) for _ in xs[:-1])
        return cx.op("einsum", x, w, eq=f"{pre}{k},{k}->{pre}")
    n = next(letters)
    if len(xs) == 1:  # [k] @ [..., k, n]
        pre = "".join(next(letters) for _ in ws_eff[:-2])
        return cx.op("einsum", x, w, eq=f"{k},{pre}{k}{n}->{pre}{n}")
    if len(ws_eff) == 2:  # transposed 2-D weight: [..., k] @ [n, k].T
        pre = "".join(next(letters) for _ in xs[:-1])
        return cx.op("einsum", x, w, eq=f"{pre}{k},{n}{k}->{pre}{n}")
    m = next(letters)
    bx, bw = xs[:-2], ws_eff[:-2]
    rank = max(len(bx), len(bw))
    out = [next(letters) for _ in range(rank)]
    full = [1] * rank
    for b in (bx, bw):
        for i, d in enumerate(b):
            j = rank - len(b) + i
            full[j] = max(full[j], d)

    def side(ref: Ref, batch: tuple[int, ...], tail: str) -> tuple[Ref, str]:
        spec, keep = "", []
        for i, d in enumerate(batch):
            j = rank - len(batch) + i
            if d == full[j]:
                spec += out[j]
                keep.append(d)
            elif d != 1:
                raise Unmapped(f"batch dims {bx} and {bw} do not broadcast")
        shape = cx.shape(ref)
        ref = cx.reshape(ref, tuple(keep) + shape[len(batch) :])
        return ref, spec + tail

    x2, sx = side(x, bx, m + k)
    w2, sw = side(w, bw, k + n)
    return cx.op("einsum", x2, w2, eq=f"{sx},{sw}->{''.join(out)}{m}{n}")


@handler("linear")
def _linear(cx: Context, node, a):
    y = contract(cx, a["input"], a["weight"], transpose_w=True)
    return cx.op("add", y, a["bias"]) if isinstance(a.get("bias"), Ref) else y


@handler("matmul", "mm", "bmm")
def _matmul(cx: Context, node, a):
    return contract(cx, a["self"], a["mat2"] if "mat2" in a else a["other"])


@handler("addmm", "baddbmm", "addbmm")
def _addmm(cx: Context, node, a):
    y = contract(cx, a["batch1" if "batch1" in a else "mat1"], a["batch2" if "batch2" in a
                                                                 else "mat2"])  # fmt: skip
    if str(node.target).startswith("aten.addbmm"):
        raise Unmapped("addbmm sums over the batch")
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    if alpha != 1:
        y = cx.op("scale", y, factor=float(alpha))
    if beta == 0:
        return y
    base = a["self"] if beta == 1 else cx.op("scale", a["self"], factor=float(beta))
    return cx.op("add", y, base)


@handler("einsum")
def _einsum(cx: Context, node, a):
    ops = a["tensors"]
    eq = a["equation"].replace(" ", "")
    if len(ops) != 2 or "..." in eq or "->" not in eq:
        raise Unmapped("einsum of other than two operands with an explicit output")
    return cx.op("einsum", *ops, eq=eq)


@handler("embedding")
def _embedding(cx: Context, node, a):
    """Indices known at trace time (T5's relative-position buckets) are one constant."""
    return cx.op("embedding", cx.constant(a["indices"]), a["weight"])


# --- normalisation and softmax ------------------------------------------------------------


def _last(cx: Context, x: Ref, dim: int) -> bool:
    return dim % len(cx.shape(x)) == len(cx.shape(x)) - 1


@handler("softmax", "_softmax", "_safe_softmax")
def _softmax(cx: Context, node, a):
    x, dim = a["self"], a["dim"]
    if a.get("dtype") is not None:
        x = cx.cast(x, cx.dtype(a["dtype"]))
    if _last(cx, x, dim):
        return cx.op("softmax", x)
    rank = len(cx.shape(x))
    d = dim % rank
    perm = list(range(rank))
    perm[d], perm[-1] = perm[-1], perm[d]
    y = cx.op("softmax", cx.op("transpose", x, perm=tuple(perm)))
    return cx.op("transpose", y, perm=tuple(perm))


@handler("layer_norm")
def _layer_norm(cx: Context, node, a):
    x, shape, w, b, eps = a["input"], a["normalized_shape"], a["weight"], a["bias"], a["eps"]
    if len(shape) != 1:
        raise Unmapped(f"layer norm over {len(shape)} dims")
    if isinstance(w, Ref) and isinstance(b, Ref):
        return cx.op("layernorm", x, w, b, eps=float(eps))
    # no affine weight or no bias: the same maths as elementwise ops and means
    mu = cx.op("mean", x, axes=(len(cx.shape(x)) - 1,))
    mu = cx.reshape(mu, cx.shape(mu) + (1,))
    xc = cx.op("sub", x, mu)
    var = cx.op("mean", cx.op("mul", xc, xc), axes=(len(cx.shape(x)) - 1,))
    var = cx.reshape(var, cx.shape(var) + (1,))
    y = cx.op("mul", xc, cx.op("rsqrt", cx.op("scalar_op", var, fn="add", value=float(eps))))
    if isinstance(w, Ref):
        y = cx.op("mul", y, w)
    if isinstance(b, Ref):
        y = cx.op("add", y, b)
    return y


@handler("native_layer_norm")
def _native_layer_norm(cx: Context, node, a):
    """(out, mean, rstd): the statistics are only read by a backward pass."""
    return (_layer_norm(cx, node, a), None, None)


@handler("rms_norm")
def _rms_norm(cx: Context, node, a):
    x, shape, w, eps = a["input"], a["normalized_shape"], a["weight"], a["eps"]
    if len(shape) != 1 or not isinstance(w, Ref):
        raise Unmapped("RMS norm over several dims or without a weight")
    return cx.op("rmsnorm", x, w, eps=float(eps if eps is not None else 1e-6))


# --- attention ----------------------------------------------------------------------------


@handler("scaled_dot_product_attention")
def _sdpa(cx: Context, node, a):
    """softmax(q k^T * scale + mask) v on [b, heads, s, d], grouped heads kept grouped."""
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if a.get("dropout_p"):
        raise Unmapped("attention dropout in training mode")
    qs, ks = cx.shape(q), cx.shape(k)
    if len(qs) != 4 or len(ks) != 4:
        raise Unmapped("attention on other than [batch, heads, seq, dim]")
    b, n, s, d = qs
    kv = ks[1]
    scale = a.get("scale") or 1.0 / math.sqrt(d)
    g = n // kv
    if g == 1:
        scores = cx.op("einsum", q, k, eq="bnsd,bntd->bnst")
    else:
        q = cx.reshape(q, (b, kv, g, s, d))
        scores = cx.reshape(cx.op("einsum", q, k, eq="bkgsd,bktd->bkgst"), (b, n, s, ks[2]))
    scores = cx.op("scale", scores, factor=float(scale))
    if a.get("is_causal"):
        scores = cx.op("causal_mask", scores)
    if isinstance(mask, Ref):
        if cx.type(mask).dtype.value == "bool":
            neg = cx.full(-math.inf, (), cx.type(scores).dtype)
            scores = cx.op("where", mask, scores, neg)
        else:
            scores = cx.op("add", scores, mask)
    probs = cx.op("softmax", scores)
    if g == 1:
        return cx.op("einsum", probs, v, eq="bnst,bntd->bnsd")
    probs = cx.reshape(probs, (b, kv, g, s, ks[2]))
    ctx = cx.op("einsum", probs, v, eq="bkgst,bktd->bkgsd")
    return cx.reshape(ctx, (b, n, s, cx.shape(v)[-1]))


# --- convolution --------------------------------------------------------------------------


@handler("conv2d", "convolution")
def _conv2d(cx: Context, node, a):
    """A patchify convolution (stride = kernel, no padding, dilation 1, one group) is a
    reshape and a contraction; other convolutions stay opaque."""
    x, w, b = a["input"], a["weight"], a["bias"]
    stride = tuple(a["stride"]) if isinstance(a["stride"], list | tuple) else (a["stride"],) * 2
    pad = a["padding"]
    o, c, kh, kw = cx.shape(w) if len(cx.shape(w)) == 4 else (0, 0, 0, 0)
    if (len(cx.shape(x)) != 4 or stride != (kh, kw) or any(p != 0 for p in pad)
            or a.get("groups", 1) != 1 or a.get("transposed") or any(d != 1 for d in
                                                                     a["dilation"])):  # fmt: skip
        raise Unmapped("a convolution other than a non-overlapping patchify one")
    n, cin, h, wd = cx.shape(x)
    if h % kh or wd % kw:
        raise Unmapped("an image size that is not a multiple of the patch size")
    x6 = cx.reshape(x, (n, cin, h // kh, kh, wd // kw, kw))
    y = cx.op("einsum", x6, w, eq="ncyhxw,ochw->noyx")
    if isinstance(b, Ref):
        y = cx.op("add", y, cx.reshape(b, (o, 1, 1)))
    return y


# --- mixture of experts -------------------------------------------------------------------


@handler("transformers.grouped_mm_fallback", "aten._grouped_mm")
def _grouped_mm(cx: Context, node, a):
    x = a.get("input", a.get("_0", a.get("self")))
    w = a.get("weight", a.get("_1", a.get("mat2")))
    offs = a.get("offs", a.get("_2", a.get("offsets")))
    if not all(isinstance(r, Ref) for r in (x, w, offs)) or len(cx.shape(w)) != 3:
        raise Unmapped("grouped matmul other than [tokens, k] x [experts, k, n]")
    return cx.op("grouped_mm", x, w, offs)


# --- higher-order ops: inline the wrapped subgraph ----------------------------------------


@handler("wrap_with_set_grad_enabled", "wrap_with_autocast", raw=True)
def _wrapped(cx: Context, node, a):
    args = [a[f"_{i}"] for i in range(len(a))]
    pos = next(i for i, v in enumerate(args) if hasattr(v, "graph"))
    sub, inputs = args[pos], args[pos + 1 :]
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    outer_env, outer_scope = cx.env, cx.scope
    # the subgraph's node names are its own: convert it in an environment of its own
    cx.env = {p.name: v for p, v in zip(placeholders, inputs, strict=True)}
    try:
        out = cx.run(sub)
    finally:
        cx.env, cx.scope = outer_env, outer_scope
    return tuple(out)


# --- loss ---------------------------------------------------------------------------------


@handler("cross_entropy_loss")
def _cross_entropy_loss(cx: Context, node, a):
    """Per-token cross-entropy, then its mean or sum (``ignore_index`` rows are counted
    like the others: the cost of the loss does not depend on which labels are ignored)."""
    logits, labels = a["self"], a["target"]
    if a.get("weight") is not None or a.get("label_smoothing") or len(cx.shape(logits)) < 2:
        raise Unmapped("class weights, label smoothing or unbatched logits")
    if len(cx.shape(logits)) != len(cx.shape(labels)) + 1:
        raise Unmapped("class-probability targets")
    cx.notes.add("cross_entropy_loss: rows with ignore_index are costed like the others")
    rows = cx.shape(labels)
    logits, labels = _unflattened(cx, logits, labels)
    losses = cx.op("cross_entropy", logits, labels)
    reduction = a.get("reduction", 1)
    if reduction == 0:
        return cx.reshape(losses, rows)
    return cx.op("mean" if reduction == 1 else "sum", losses)


def _unflattened(cx: Context, logits: Ref, labels: Ref) -> tuple[Ref, Ref]:
    """transformers flattens ``[b, s, V]`` logits to ``[b*s, V]`` for the loss; the loss
    reads the unflattened logits instead (and the labels take their shape): the logits
    are not copied, and their batch and sequence splits reach the loss as they are."""
    src = next((n for n in reversed(cx.b._nodes) if n.name == logits.name), None)
    if src is None or src.op != "reshape":
        return logits, labels
    (x,) = src.inputs
    shape = cx.b.shape(x)
    if len(shape) < 3 or shape[-1] != cx.shape(logits)[-1]:
        return logits, labels
    return Ref(x), cx.reshape(labels, shape[:-1])


@handler("pad", "constant_pad_nd")
def _pad(cx: Context, node, a):
    """Constant padding as a concatenation with filled blocks, last dims first."""
    x, pad = a["self"] if "self" in a else a["input"], list(a["pad"])
    if a.get("mode", "constant") != "constant" or any(p < 0 for p in pad):
        raise Unmapped("padding other than constant and non-negative")
    value = a.get("value") or 0
    rank = len(cx.shape(x))
    for k in range(len(pad) // 2):
        axis = rank - 1 - k
        lo, hi = pad[2 * k], pad[2 * k + 1]
        parts = []
        for n in (lo, None, hi):
            if n is None:
                parts.append(x)
            elif n:
                shape = list(cx.shape(x))
                shape[axis] = n
                parts.append(cx.full(value, tuple(shape), cx.type(x).dtype))
        x = parts[0] if len(parts) == 1 else cx.op("cat", *parts, axis=axis)
    return x
