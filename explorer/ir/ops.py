"""The registered ops. Odd ops carry their own signature or shape rule beside their entry."""

from __future__ import annotations

import math
import string

import numpy as np

from . import signature as sigmod
from .activations import gelu
from .contraction import einsum
from .dtype import DType
from .errors import IRError
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__ = ["moe_slots", "FLOPS"]

# FLOPs per element of the non-contraction ops: the usual counts of estimators
# (a GELU in its tanh form is ~8 FLOPs, softmax = max, sub, exp, sum, div).
FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "relu": 1, "exp": 1, "tanh": 1, "scale": 1,
    "gelu": 8, "silu": 4, "dropout": 2, "causal_mask": 1, "softmax": 5, "layernorm": 8,
    "rmsnorm": 5, "cross_entropy": 6, "topk_gate": 6, "sum": 1, "mean": 1,
}  # fmt: skip

_LETTERS = string.ascii_lowercase


def _first_float(in_types, attrs) -> DType:
    for t in in_types:
        if t.dtype.is_float:
            return t.dtype
    return in_types[0].dtype


def _source_impl(*_, **__):
    raise IRError("source nodes (input, param) are fed by the executor, not computed")


for _name, _doc in (("input", "an activation fed to the graph"), ("param", "a trained weight")):
    register(OpDef(_name, OpGroup.SOURCE, "->", 0, 0, _source_impl,
                   attrs={}, shape_rule=lambda i, a: (), doc=_doc))  # fmt: skip

# --- contractions -------------------------------------------------------------------------

register(OpDef("matmul", OpGroup.CONTRACTION, "...k,kn->...n", 2, 2, np.matmul,
               doc="x @ w with a 2-D weight"))  # fmt: skip
register(OpDef("bmm", OpGroup.CONTRACTION, "...mk,...kn->...mn", 2, 2, np.matmul,
               doc="batched matmul"))  # fmt: skip


def _einsum_sig(in_types, attrs):
    eq = attrs["eq"]
    return sigmod.expand(eq, in_types) if "..." in eq else eq


register(OpDef("einsum", OpGroup.CONTRACTION, None, None, 2,
               einsum, attrs={"eq": REQUIRED},
               signature_rule=_einsum_sig, doc="general contraction, e.g. 'bsnd,btnd->bnst'"))  # fmt: skip

# --- elementwise --------------------------------------------------------------------------


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _causal_mask(x, offset=0):
    s, t = x.shape[-2], x.shape[-1]
    keep = np.arange(t)[None, :] <= (np.arange(s)[:, None] + offset)
    return np.where(keep, x, -np.inf).astype(x.dtype)


def dropout_mask(shape, p, seed):
    """The keep-mask of ``dropout``: a pure function of the global shape and the seed."""
    rng = np.random.default_rng(seed)
    return rng.random(shape) >= p


def _dropout(x, p=0.1, seed=0):
    if p == 0:
        return x
    return np.where(dropout_mask(x.shape, p, seed), x / (1.0 - p), 0.0).astype(x.dtype)


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
for _name, _fn in _BINARY.items():
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...,...->...", 2, FLOPS[_name], _fn,
                   dtype_rule=_first_float, doc=f"broadcasting {_name}"))  # fmt: skip

_UNARY = {"gelu": gelu, "silu": _silu, "relu": lambda x: np.maximum(x, 0), "exp": np.exp,
          "tanh": np.tanh}  # fmt: skip
for _name, _fn in _UNARY.items():
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...->...", 1, FLOPS[_name], _fn,
                   doc=f"elementwise {_name}"))  # fmt: skip


def _scale(x, factor):
    # the output keeps the input's dtype, as declared: an int64 index times 16 (T5's
    # relative-position buckets) stays int64 although the factor is stored as a float
    return np.asarray(x * factor, dtype=np.asarray(x).dtype)


register(OpDef("scale", OpGroup.ELEMENTWISE, "...->...", 1, FLOPS["scale"],
               _scale, attrs={"factor": REQUIRED},
               doc="multiply by a constant"))  # fmt: skip
register(OpDef("causal_mask", OpGroup.ELEMENTWISE, "...->...", 1, FLOPS["causal_mask"],
               _causal_mask, attrs={"offset": 0},
               doc="-inf above the diagonal of the last two dims (query, key)"))  # fmt: skip
register(OpDef("dropout", OpGroup.ELEMENTWISE, "...->...", 1, FLOPS["dropout"], _dropout,
               attrs={"p": 0.1, "seed": 0}, doc="seeded inverted dropout"))  # fmt: skip


def _cast_dtype(in_types, attrs):
    return DType.parse(attrs["dtype"])


register(OpDef("cast", OpGroup.ELEMENTWISE, "...->...", 1, 0,
               lambda x, dtype: x.astype(DType.parse(dtype).numpy), attrs={"dtype": REQUIRED},
               dtype_rule=_cast_dtype, doc="change the element type"))  # fmt: skip

# --- reductions and normalisations -------------------------------------------------------


def _softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _layernorm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _rmsnorm(x, g, eps=1e-6):
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * g


def check_ids(ids: np.ndarray, vocab: int, where: str = "embedding") -> None:
    """Ids outside ``[0, vocab)`` are refused: numpy would read -1 as the last row and fail on
    ``vocab`` with a bare IndexError."""
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise IRError(f"{where}: id {bad} is outside 0..{vocab - 1} ({vocab} rows or classes); "
                      f"ids must be in [0, {vocab})")  # fmt: skip


def _cross_entropy(logits, labels):
    check_ids(np.asarray(labels), logits.shape[-1], "cross_entropy labels")
    m = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[..., 0]
    picked = np.take_along_axis(logits, labels[..., None].astype(np.int64), axis=-1)[..., 0]
    return lse - picked


register(OpDef("softmax", OpGroup.REDUCE, "...d->...d", 1, FLOPS["softmax"], _softmax,
               doc="softmax over the last dim"))  # fmt: skip
register(OpDef("layernorm", OpGroup.REDUCE, "...d,d,d->...d", 3, FLOPS["layernorm"],
               _layernorm, attrs={"eps": 1e-5}, doc="layer norm over the last dim"))  # fmt: skip
register(OpDef("rmsnorm", OpGroup.REDUCE, "...d,d->...d", 2, FLOPS["rmsnorm"], _rmsnorm,
               attrs={"eps": 1e-6}, doc="RMS norm over the last dim"))  # fmt: skip
register(OpDef("cross_entropy", OpGroup.REDUCE, "...v,...->...", 2, FLOPS["cross_entropy"],
               _cross_entropy, dtype_rule=lambda i, a: DType.FP32,
               doc="per-token loss of logits against integer labels"))  # fmt: skip


def _norm_axes(axes, rank):
    axes = tuple(sorted(a % rank for a in (axes if isinstance(axes, tuple | list) else (axes,))))
    if len(set(axes)) != len(axes) or any(a >= rank for a in axes):
        raise IRError(f"reduction axes {axes} are invalid for rank {rank}")
    return axes


def _reduce_sig(in_types, attrs):
    rank = in_types[0].rank
    axes = _norm_axes(attrs["axes"], rank) if attrs["axes"] is not None else tuple(range(rank))
    spec = _LETTERS[:rank]
    return f"{spec}->" + "".join(c for i, c in enumerate(spec) if i not in axes)


def _reduce_impl(np_fn):
    def impl(x, axes=None):
        return np_fn(x, axis=None if axes is None else tuple(axes))

    return impl


for _name, _fn in (("sum", np.sum), ("mean", np.mean)):
    register(OpDef(_name, OpGroup.REDUCE, None, 1, FLOPS[_name], _reduce_impl(_fn),
                   attrs={"axes": None}, signature_rule=_reduce_sig,
                   doc=f"{_name} over the given axes (all when None)"))  # fmt: skip

# --- movement -----------------------------------------------------------------------------


def _transpose_sig(in_types, attrs):
    rank = in_types[0].rank
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(rank)):
        raise IRError(f"perm {perm} is not a permutation of {rank} dims")
    spec = _LETTERS[:rank]
    return f"{spec}->" + "".join(spec[p] for p in perm)


register(OpDef("transpose", OpGroup.MOVEMENT, None, 1, 0,
               lambda x, perm: np.transpose(x, perm), attrs={"perm": REQUIRED},
               signature_rule=_transpose_sig, doc="permute dims", view=True))  # fmt: skip


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Pair runs of source dims with runs of target dims of equal product (head split/merge).

    >>> reshape_groups((2, 6), (2, 3, 2))
    [([0], [0]), ([1], [1, 2])]
    """
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        if i < len(src):
            gi.append(i)
            pi = src[i]
            i += 1
        if j < len(dst):
            gj.append(j)
            pj = dst[j]
            j += 1
        while pi != pj:
            if pi < pj and i < len(src):
                gi.append(i)
                pi *= src[i]
                i += 1
            elif j < len(dst):
                gj.append(j)
                pj *= dst[j]
                j += 1
            else:
                raise IRError(f"cannot reshape {src} to {dst}")
        groups.append((gi, gj))
    return groups


def _reshape_sig(in_types, attrs):
    src, dst = in_types[0].shape, tuple(attrs["shape"])
    if math.prod(src) != math.prod(dst):
        raise IRError(
            f"reshape of {src} ({math.prod(src)} elements) to {dst} "
            f"({math.prod(dst)} elements): the element counts must match"
        )
    letters = iter(_LETTERS + string.ascii_uppercase)
    lhs, rhs = [""] * len(src), [""] * len(dst)
    for gi, gj in reshape_groups(src, dst):
        if len(gi) == 1 and len(gj) == 1:
            lhs[gi[0]] = rhs[gj[0]] = next(letters)
        else:
            for k in gi:
                lhs[k] = next(letters)
            for k in gj:
                rhs[k] = next(letters)
    return "".join(lhs) + "->" + "".join(rhs)


register(OpDef("reshape", OpGroup.MOVEMENT, None, 1, 0,
               lambda x, shape: np.reshape(x, shape), attrs={"shape": REQUIRED},
               signature_rule=_reshape_sig, shape_rule=lambda i, a: tuple(a["shape"]),
               doc="reshape; letters are shared by dims kept as they are"))  # fmt: skip


def _embedding_check(in_types, attrs):
    ids, table = in_types
    if ids.dtype.is_float:
        raise IRError(f"embedding ids must be integers, got {ids}")
    return table.dtype


def _embedding_impl(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    check_ids(np.asarray(ids), table.shape[0])
    return table[ids]


register(OpDef("embedding", OpGroup.MOVEMENT, "...,vh->...h", 2, 0,
               _embedding_impl, dtype_rule=_embedding_check,
               doc="row lookup of integer ids in a [vocab, hidden] table"))  # fmt: skip

# --- mixture of experts -------------------------------------------------------------------


def _topk_gate(logits, k=2):
    idx = np.argsort(-logits, axis=-1, kind="stable")[..., :k]
    top = np.take_along_axis(logits, idx, axis=-1)
    w = np.exp(top - top.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    out = np.zeros_like(logits)
    np.put_along_axis(out, idx, w, axis=-1)
    return out


def moe_slots(gate: np.ndarray, capacity: int) -> np.ndarray:
    """Slot of every (token, expert) pair in the expert's buffer, -1 when not routed or dropped.

    Tokens fill an expert's ``capacity`` slots in token order; later ones are dropped.
    """
    routed = gate > 0
    slot = np.cumsum(routed, axis=0) - 1
    return np.where(routed & (slot < capacity), slot, -1)


def _dispatch(x, gate, capacity):
    t, h = x.shape
    e = gate.shape[1]
    out = np.zeros((e, capacity, h), dtype=x.dtype)
    slots = moe_slots(gate, capacity)
    tok, exp = np.nonzero(slots >= 0)
    out[exp, slots[tok, exp]] = x[tok]
    return out


def _combine(y, gate, k=2):
    e, capacity, h = y.shape
    slots = moe_slots(gate, capacity)
    tok, exp = np.nonzero(slots >= 0)
    out = np.zeros((gate.shape[0], h), dtype=y.dtype)
    np.add.at(out, tok, gate[tok, exp, None] * y[exp, slots[tok, exp]])
    return out


register(OpDef("topk_gate", OpGroup.REDUCE, "te->te", 1, FLOPS["topk_gate"], _topk_gate,
               attrs={"k": 2}, doc="router: softmax over the top-k logits, zero elsewhere"))  # fmt: skip
register(OpDef("moe_dispatch", OpGroup.MOVEMENT, "th,te->ech", 2, 0, _dispatch,
               attrs={"capacity": REQUIRED},
               shape_rule=lambda i, a: (i[1].shape[1], a["capacity"], i[0].shape[1]),
               doc="gather each expert's tokens into [experts, capacity, hidden]"))  # fmt: skip
register(OpDef("moe_combine", OpGroup.MOVEMENT, "ech,te->th", 2, 0, _combine,
               attrs={"k": 2},
               flops_rule=lambda i, o, a: 2 * a["k"] * o.numel,
               doc="weighted sum of each token's expert outputs"))  # fmt: skip
