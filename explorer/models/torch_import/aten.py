"""Aten op -> IR mappings for elementwise, movement, reduction and factory ops.

Each handler receives the conversion `Context`, the fx node and the op's arguments by
schema name (tensors as `Ref`), and returns the IR value(s). Raising `Unmapped`
turns the node opaque with the reason in the report. The contraction, norm and attention
mappings are in `aten_nn`.
"""

from __future__ import annotations

import math
from typing import Any

from ...checks import is_int
from ...ir import DType
from .constants import causal_kind, sliding_window
from .convert import Context, Ref, handler
from .report import Unmapped

__all__: list[str] = []

# --- no-ops -------------------------------------------------------------------------------


@handler("alias", "contiguous", "clone", "detach", "lift_fresh_copy", "alias_copy",
         "detach_", "_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
         "_assert_async")  # fmt: skip
def _identity(cx: Context, node, a):
    x = a.get("self", a.get("input"))
    return x if isinstance(x, Ref) else None


@handler("dropout", "native_dropout", "feature_dropout")
def _dropout(cx: Context, node, a):
    p, train = a.get("p", 0.0), a.get("train", False)
    x = a["input"]
    out = x if not train or not p else cx.op("dropout", x, p=float(p))
    return (out, None) if str(node.target).startswith("aten.native_dropout") else out


@handler("to", "_to_copy", "type_as", "float", "double", "half", "bfloat16")
def _to(cx: Context, node, a):
    x = a.get("self")
    if not isinstance(x, Ref):
        raise Unmapped("a device or layout change without a tensor")
    return cx.cast(x, cx.dtype(node.meta["val"].dtype))


# --- elementwise --------------------------------------------------------------------------

_UNARY = {
    "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin",
    "cos": "cos", "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu", "silu": "silu",
    "abs": "abs", "reciprocal": "reciprocal", "erf": "erf", "logical_not": "logical_not",
    "bitwise_not": "logical_not",
}  # fmt: skip


def _unary(op: str):
    def fn(cx: Context, node, a):
        x = a["self"]
        if op == "logical_not" and cx.type(x).dtype is not DType.BOOL:
            raise Unmapped("bitwise not of an integer tensor")
        return cx.op(op, x)

    return fn


for _k, _v in _UNARY.items():
    handler(_k, f"{_k}_")(_unary(_v))


@handler("gelu", "gelu_")
def _gelu(cx: Context, node, a):
    """``approximate="tanh"`` is the IR's ``gelu``; torch's default is the exact form,
    written out as ``0.5 x (1 + erf(x / sqrt 2))`` (the two differ by up to ~1e-3)."""
    x = a["self"]
    if a.get("approximate", "none") == "tanh":
        return cx.op("gelu", x)
    e = cx.op("erf", cx.op("scale", x, factor=1.0 / math.sqrt(2.0)))
    half = cx.op("scale", x, factor=0.5)
    return cx.op("mul", half, cx.op("scalar_op", e, fn="add", value=1.0))


# (tensor-tensor op, scalar_op fn with the scalar second, with the scalar first)
_BINARY = {
    "add": ("add", "add", "add"), "sub": ("sub", "sub", "rsub"), "mul": ("mul", "mul", "mul"),
    "div": ("div", "div", "rdiv"), "maximum": ("maximum", "maximum", "maximum"),
    "minimum": ("minimum", "minimum", "minimum"), "max": ("maximum", "maximum", "maximum"),
    "min": ("minimum", "minimum", "minimum"), "pow": ("pow", "pow", "rpow"),
    "lt": ("lt", "lt", "gt"), "le": ("le", "le", "ge"), "gt": ("gt", "gt", "lt"),
    "ge": ("ge", "ge", "le"), "eq": ("eq", "eq", "eq"), "ne": ("ne", "ne", "ne"),
    "floor_divide": (None, "floordiv", None), "remainder": (None, "remainder", None),
    "__and__": ("logical_and", None, None), "bitwise_and": ("logical_and", None, None),
    "logical_and": ("logical_and", None, None), "__or__": ("logical_or", None, None),
    "bitwise_or": ("logical_or", None, None), "logical_or": ("logical_or", None, None),
}  # fmt: skip


def _promoted(cx: Context, node, r):
    """``r`` cast to torch's float result type when an integer tensor meets a float scalar
    or a true division (``ids * 0.5``, ``ids / 2``): the op then runs in float, as in
    torch, instead of in the integer type and being cast after (truncated)."""
    val = node.meta.get("val")
    if not isinstance(r, Ref) or not hasattr(val, "dtype") or not val.dtype.is_floating_point:
        return r
    if cx.type(r).dtype.is_float:
        return r
    return cx.cast(r, cx.dtype(val.dtype))


def _binary(name: str):
    tensor_op, fn_second, fn_first = _BINARY[name]

    def fn(cx: Context, node, a):
        if name in ("max", "min") and "other" not in a:
            return _max_reduction(cx, node, a, name)
        x = a.get("self", a.get("input"))
        y = a.get("other", a.get("exponent"))
        alpha = a.get("alpha", 1) or 1
        if tensor_op in ("logical_and", "logical_or"):
            if not (isinstance(x, Ref) and isinstance(y, Ref)) or any(
                cx.type(r).dtype is not DType.BOOL for r in (x, y)
            ):
                raise Unmapped("bitwise ops on integers")
        if name == "div" and a.get("rounding_mode"):
            raise Unmapped(f"division with rounding_mode={a['rounding_mode']!r}")
        x, y = _promoted(cx, node, x), _promoted(cx, node, y)
        if isinstance(y, Ref) and alpha != 1:
            y = cx.op("scale", y, factor=float(alpha))
        if isinstance(x, Ref) and isinstance(y, Ref):
            if name == "add":
                masked = _added_mask(cx, x, y)
                if masked is not None:
                    return masked
            if tensor_op is None:
                raise Unmapped(f"{name} of two tensors")
            return cx.op(tensor_op, x, y)
        if isinstance(x, Ref):
            v = _number(y) * (alpha if name in ("add", "sub") else 1)
            if name in ("mul", "div") and v == 1 and not isinstance(v, bool):
                return x  # rotary tables times attention_scaling = 1.0: no op
            if name == "mul":
                return cx.op("scale", x, factor=float(v))
            if name == "div" and v != 0 and cx.type(x).dtype.is_float:
                return cx.op("scale", x, factor=1.0 / float(v))
            if fn_second is None:
                raise Unmapped(f"{name} with a scalar")
            return cx.op("scalar_op", x, fn=fn_second, value=v)
        if isinstance(y, Ref):
            if fn_first is None:
                raise Unmapped(f"{name} with the scalar first")
            return cx.op("scalar_op", y, fn=fn_first, value=_number(x))
        raise Unmapped(f"{name} of two scalars")

    return fn


def _added_mask(cx: Context, x: Ref, y: Ref) -> Ref | None:
    """``scores + mask`` with a shape-only ``mask`` (`constants`): all zero is ``scores``
    itself, a causal mask one ``causal_mask`` op (what the builders emit; a fused
    attention kernel applies it without reading a mask tensor), a sliding-window causal
    mask one ``window_mask`` op. None for anything else."""
    for data, const in ((x, y), (y, x)):
        mask = cx.value(const)
        if mask is None or cx.value(data) is not None or not cx.type(data).dtype.is_float:
            continue
        kind = causal_kind(mask, cx.shape(data))
        if kind == "zero":
            return data
        if kind == "causal":
            return cx.op("causal_mask", data)
        window = sliding_window(mask, cx.shape(data))
        if window is not None:
            return cx.op("window_mask", data, window=window)
    return None


def _max_reduction(cx: Context, node, a, name: str):
    """``max(x)`` and ``max(x, dim)`` (values, indices): the values are a ``max`` reduction,
    the indices an opaque node (argmax has no IR op)."""
    if name == "min":
        raise Unmapped("min as a reduction has no IR op")
    x, dim = a["self"], a.get("dim")
    rank = len(cx.shape(x))
    if dim is None:
        return cx.op("max", x)
    val = node.meta["val"]
    values = cx.reshape(cx.op("max", x, axes=(dim % rank,)), tuple(val[0].shape))
    if not any(len(u.args) > 1 and u.args[1] == 1 and u.users for u in node.users):
        return values, None  # the indices are not used
    return values, cx.opaque(node, a, "argmax (the indices of max) has no IR op", val=val[1])


def _number(v: Any) -> float | int | bool:
    if isinstance(v, bool | int | float):
        return v
    raise Unmapped(f"operand {v!r} is not a Python number")


for _k in _BINARY:
    handler(_k, f"{_k}_")(_binary(_k))


@handler("rsub")
def _rsub(cx: Context, node, a):
    x, y, alpha = a["self"], a["other"], a.get("alpha", 1) or 1
    if isinstance(y, Ref):
        return cx.op("sub", y, cx.op("scale", x, factor=float(alpha)) if alpha != 1 else x)
    return cx.op("scalar_op", cx.op("scale", x, factor=float(alpha)) if alpha != 1 else x,
                 fn="rsub", value=_number(y))  # fmt: skip


@handler("where")
def _where(cx: Context, node, a):
    c, x, y = a["condition"], a.get("self"), a.get("other")
    if not isinstance(c, Ref):
        raise Unmapped("where without a condition tensor")
    dt = cx.dtype(node.meta["val"].dtype)
    x = x if isinstance(x, Ref) else cx.full(_number(x), (), dt)
    y = y if isinstance(y, Ref) else cx.full(_number(y), (), dt)
    return cx.op("where", c, x, y)


@handler("masked_fill", "masked_fill_")
def _masked_fill(cx: Context, node, a):
    x, mask, v = a["self"], a["mask"], a["value"]
    v = v if isinstance(v, Ref) else cx.full(_number(v), (), cx.type(x).dtype)
    return cx.op("where", mask, v, x)


# --- movement -----------------------------------------------------------------------------


@handler("view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze",
         "view_as", "reshape_as", "squeeze_", "unsqueeze_", "_reshape_alias")  # fmt: skip
def _reshape(cx: Context, node, a):
    return cx.reshape(a["self"], tuple(node.meta["val"].shape))


@handler("expand", "expand_as", "broadcast_to")
def _expand(cx: Context, node, a):
    x, shape = a["self"], tuple(int(d) for d in node.meta["val"].shape)
    if math.prod(cx.shape(x)) == math.prod(shape):
        return cx.reshape(x, shape)
    src = cx.shape(x)
    if len(src) < len(shape):  # new leading dims: add them as size 1 first
        x = cx.reshape(x, (1,) * (len(shape) - len(src)) + src)
    grown = tuple(k for k, (s, d) in enumerate(zip(cx.shape(x), shape, strict=True)) if s != d)
    return cx.op("expand", x, shape=shape, axes=grown)


@handler("transpose", "swapaxes", "swapdims")
def _transpose(cx: Context, node, a):
    x = a["self"]
    rank = len(cx.shape(x))
    d0, d1 = (a.get("dim0", a.get("axis0")) % rank, a.get("dim1", a.get("axis1")) % rank)
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute_to(cx, x, tuple(perm))


def _permute_to(cx: Context, x: Ref, perm: tuple[int, ...]) -> Ref:
    if perm == tuple(range(len(perm))):
        return x
    shape = cx.shape(x)
    if [p for p in perm if shape[p] != 1] == [p for p in range(len(shape)) if shape[p] != 1]:
        # only size-1 dims move: a reshape says the same and keeps every letter
        return cx.reshape(x, tuple(shape[p] for p in perm))
    return cx.op("transpose", x, perm=perm)


@handler("permute")
def _permute(cx: Context, node, a):
    x = a["self"]
    rank = len(cx.shape(x))
    return _permute_to(cx, x, tuple(d % rank for d in a["dims"]))


@handler("t", "numpy_T")
def _t(cx: Context, node, a):
    x = a["self"]
    return _permute_to(cx, x, tuple(reversed(range(len(cx.shape(x))))))


@handler("slice")
def _slice(cx: Context, node, a):
    x = a["self"]
    shape = cx.shape(x)
    dim = a["dim"] % len(shape)
    start, end, step = a["start"] or 0, a["end"], a["step"] or 1
    size = shape[dim]
    start = max(0, min(size, start + size if start < 0 else start))
    end = size if end is None else max(0, min(size, end + size if end < 0 else end))
    if (start, end, step) == (0, size, 1):
        return x
    return cx.op("slice", x, axis=dim, start=start, stop=max(start, end), step=step)


@handler("select")
def _select(cx: Context, node, a):
    x = a["self"]
    shape = cx.shape(x)
    dim = a["dim"] % len(shape)
    i = a["index"] % shape[dim]
    part = cx.op("slice", x, axis=dim, start=i, stop=i + 1)
    return cx.reshape(part, shape[:dim] + shape[dim + 1 :])


def _spliced(cx: Context, base: Ref, part: Ref, dim: int, start: int, stop: int) -> Ref:
    """``base`` with positions ``start:stop`` of ``dim`` replaced by ``part``: the slices
    before and after, concatenated around it."""
    size = cx.shape(base)[dim]
    pieces = []
    if start > 0:
        pieces.append(cx.op("slice", base, axis=dim, start=0, stop=start))
    pieces.append(part)
    if stop < size:
        pieces.append(cx.op("slice", base, axis=dim, start=stop, stop=size))
    return pieces[0] if len(pieces) == 1 else cx.op("cat", *pieces, axis=dim)


def _like(cx: Context, src: Ref, shape: tuple[int, ...], dtype: DType) -> Ref:
    """``src`` broadcast to ``shape`` and cast to ``dtype`` (what a copy into a tensor of
    that shape writes)."""
    if cx.shape(src) != shape:
        n = len(shape) - len(cx.shape(src))
        if n > 0:
            src = cx.reshape(src, (1,) * n + cx.shape(src))
        grown = tuple(k for k, (s, d) in enumerate(zip(cx.shape(src), shape, strict=True))
                      if s != d)  # fmt: skip
        if grown:
            src = cx.op("expand", src, shape=shape, axes=grown)
    return cx.cast(src, dtype)


@handler("slice_scatter")
def _slice_scatter(cx: Context, node, a):
    """A write through a slice (``y[:, 1:3] = v``, functionalized): the base's other
    positions around the new part."""
    base, src = a["self"], a["src"]
    shape = cx.shape(base)
    dim = a.get("dim", 0) % len(shape)
    step = a.get("step") or 1
    if step != 1:
        raise Unmapped(f"a write through a strided slice (step {step}) has no IR op")
    size = shape[dim]
    start, end = a.get("start") or 0, a.get("end")
    start = max(0, min(size, start + size if start < 0 else start))
    end = size if end is None else max(0, min(size, end + size if end < 0 else end))
    part_shape = shape[:dim] + (end - start,) + shape[dim + 1 :]
    part = _like(cx, src, part_shape, cx.dtype(node.meta["val"].dtype))
    return _spliced(cx, base, part, dim, start, end)


@handler("select_scatter")
def _select_scatter(cx: Context, node, a):
    """A write at one index (``y[0] = v``, functionalized)."""
    base, src = a["self"], a["src"]
    shape = cx.shape(base)
    dim = a["dim"] % len(shape)
    i = a["index"] % shape[dim]
    part_shape = shape[:dim] + (1,) + shape[dim + 1 :]
    row = _like(cx, src, shape[:dim] + shape[dim + 1 :], cx.dtype(node.meta["val"].dtype))
    return _spliced(cx, base, cx.reshape(row, part_shape), dim, i, i + 1)


@handler("copy")
def _copy(cx: Context, node, a):
    """``copy(self, src)``: ``src`` broadcast to ``self``'s shape and dtype."""
    return _like(cx, a["src"], cx.shape(a["self"]), cx.dtype(node.meta["val"].dtype))


@handler("fill")
def _fill_tensor(cx: Context, node, a):
    """``fill(self, value)`` with a tensor value (``y[0] = t`` of a 0-d tensor)."""
    v = a.get("value")
    shape = tuple(int(d) for d in node.meta["val"].shape)
    if not isinstance(v, Ref):
        return cx.op("fill", kind="full", shape=shape, value=_number(v),
                     dtype=cx.dtype(node.meta["val"].dtype).value)  # fmt: skip
    return _like(cx, v, shape, cx.dtype(node.meta["val"].dtype))


@handler("split", "split_with_sizes", "chunk", "tensor_split", "unbind")
def _split(cx: Context, node, a):
    x = a["self"]
    shape = cx.shape(x)
    dim = (a.get("dim") or 0) % len(shape)
    outs, start = [], 0
    unbind = str(node.target).startswith("aten.unbind")
    for val in node.meta["val"]:
        n = 1 if unbind else int(val.shape[dim])
        if unbind:
            part = cx.op("slice", x, axis=dim, start=start, stop=start + 1)
            outs.append(cx.reshape(part, tuple(int(d) for d in val.shape)))
        elif (start, n) == (0, shape[dim]):
            outs.append(x)
        else:
            outs.append(cx.op("slice", x, axis=dim, start=start, stop=start + n))
        start += n
    return tuple(outs)


@handler("cat", "concat", "concatenate")
def _cat(cx: Context, node, a):
    xs = [t for t in a["tensors"] if isinstance(t, Ref) and math.prod(cx.shape(t)) > 0]
    if len(xs) == 1:
        return xs[0]
    dim = a.get("dim", a.get("axis", 0))
    return cx.op("cat", *xs, axis=dim % len(cx.shape(xs[0])))


@handler("stack")
def _stack(cx: Context, node, a):
    xs = a["tensors"]
    dim = a.get("dim", 0) % (len(cx.shape(xs[0])) + 1)
    parts = []
    for t in xs:
        s = list(cx.shape(t))
        s.insert(dim, 1)
        parts.append(cx.reshape(t, tuple(s)))
    return parts[0] if len(parts) == 1 else cx.op("cat", *parts, axis=dim)


@handler("getitem", raw=True)
def _getitem(cx: Context, node, a):
    seq, i = a["_0"], a["_1"]
    if isinstance(seq, list | tuple):
        return seq[i]
    raise Unmapped("indexing a value that is not a tuple of results")


# --- reductions ---------------------------------------------------------------------------


def _reduce(op: str):
    def fn(cx: Context, node, a):
        x = a["self"]
        rank = len(cx.shape(x))
        dims = a.get("dim")
        if dims is None or dims == []:
            axes = tuple(range(rank))
        else:
            dims = dims if isinstance(dims, list | tuple) else [dims]
            axes = tuple(sorted(d % rank for d in dims))
        if a.get("dtype") is not None:
            x = cx.cast(x, cx.dtype(a["dtype"]))
        y = cx.op(op, x, axes=axes) if axes else x
        return cx.reshape(y, tuple(node.meta["val"].shape))

    return fn


handler("mean")(_reduce("mean"))
handler("sum")(_reduce("sum"))
handler("amax")(_reduce("max"))


# --- factories ----------------------------------------------------------------------------


@handler("arange")
def _arange(cx: Context, node, a):
    val = node.meta["val"]
    start = a["start"] if "start" in a else 0
    step = a.get("step", 1) or 1
    if not all(isinstance(v, int | float) for v in (start, step)):
        raise Unmapped("arange with tensor bounds")
    return cx.op("fill", kind="arange", shape=tuple(int(d) for d in val.shape),
                 dtype=cx.dtype(val.dtype).value, start=start, step=step)  # fmt: skip


@handler("full", "full_like", "new_full", "zeros", "zeros_like", "new_zeros", "ones",
         "ones_like", "new_ones", "empty", "empty_like", "new_empty", "scalar_tensor",
         "empty_strided", "new_empty_strided")  # fmt: skip
def _full(cx: Context, node, a):
    name = str(node.target).split(".")[1]
    val = node.meta["val"]
    if "ones" in name:
        value = 1
    elif "full" in name:
        value = a.get("fill_value")
    elif name == "scalar_tensor":
        value = a.get("s")
    else:
        value = 0
    if not isinstance(value, bool | int | float):
        raise Unmapped(f"fill value {value!r} is not a Python number")
    return cx.full(value, tuple(int(d) for d in val.shape), cx.dtype(val.dtype))


@handler("clamp", "clamp_", "clip")
def _clamp(cx: Context, node, a):
    """``min(max(x, lo), hi)`` with tensor or scalar bounds (None: unbounded)."""
    y = a["self"]
    for bound, op in ((a.get("min"), "maximum"), (a.get("max"), "minimum")):
        if isinstance(bound, Ref):
            y = cx.op(op, y, bound)
        elif bound is not None:
            y = cx.op("scalar_op", y, fn=op, value=_number(bound))
    return y


# --- scans and gathers --------------------------------------------------------------------


@handler("cumsum")
def _cumsum(cx: Context, node, a):
    x = a["self"]
    return cx.op("cumsum", x, axis=a["dim"] % len(cx.shape(x)))


@handler("gather")
def _gather(cx: Context, node, a):
    x, idx = a["self"], a["index"]
    if a.get("sparse_grad"):
        raise Unmapped("gather with sparse_grad")
    return cx.op("gather", x, idx, axis=a["dim"] % len(cx.shape(x)))


@handler("index")
def _index(cx: Context, node, a):
    """``x[..., idx, ...]`` with one index tensor whose values are known at trace time
    (`constants`: Falcon's ``[k]`` head picks) and step evenly: a ``slice``."""
    x, indices = a["self"], list(a["indices"] or ())
    used = [(k, i) for k, i in enumerate(indices) if i is not None]
    if len(used) != 1:
        raise Unmapped("indexing with more than one index tensor")
    axis, ref = used[0]
    idx = cx.value(ref)
    if idx is None or idx.ndim != 1 or idx.numel() == 0 or idx.dtype.is_floating_point:
        raise Unmapped("indexing by a tensor whose values depend on the inputs")
    size = cx.shape(x)[axis]
    vals = [int(v) % size for v in idx.tolist()]
    step = vals[1] - vals[0] if len(vals) > 1 else 1
    if step <= 0 or vals != list(range(vals[0], vals[0] + step * len(vals), step)):
        raise Unmapped(f"indexing by constant indices {vals[:8]} that are not a strided range")
    return cx.op("slice", x, axis=axis, start=vals[0], stop=vals[-1] + 1, step=step)


# --- repeats ------------------------------------------------------------------------------


@handler("repeat")
def _repeat(cx: Context, node, a):
    """``x.repeat(*reps)``: extra leading counts add size-1 dims first (as torch does); all
    counts 1 is a reshape, else a ``repeat`` op (a copy, unlike ``expand``)."""
    x, reps = a["self"], [int(r) for r in a["repeats"]]
    src = cx.shape(x)
    if len(reps) < len(src) or any(r < 1 for r in reps):
        raise Unmapped(f"repeat by {reps} of a rank-{len(src)} tensor")
    x = cx.reshape(x, (1,) * (len(reps) - len(src)) + src)
    if all(r == 1 for r in reps):
        return x
    return cx.op("repeat", x, repeats=tuple(reps))


@handler("repeat_interleave")
def _repeat_interleave(cx: Context, node, a):
    """``repeat_interleave(x, r, dim)`` with one count for every element (an int, or a
    tensor whose values are known at trace time and all equal); no dim flattens first.
    Per-element counts and the index-only overload (``repeat_interleave(counts)``) stay
    opaque: their output size depends on values."""
    x, reps = a.get("self"), a.get("repeats")
    if not isinstance(x, Ref):
        raise Unmapped("repeat_interleave of a counts tensor (an index list)")
    if isinstance(reps, Ref):
        known = cx.value(reps)
        if known is None or known.numel() == 0 or not bool((known == known.flatten()[0]).all()):
            raise Unmapped("repeat_interleave by per-element counts")
        reps = int(known.flatten()[0])
    if not is_int(reps, minimum=1):
        raise Unmapped(f"repeat_interleave by {reps!r}")
    dim = a.get("dim")
    if dim is None:
        x, dim = cx.reshape(x, (math.prod(cx.shape(x)),)), 0
    dim %= len(cx.shape(x))
    return x if reps == 1 else cx.op("repeat_interleave", x, repeats=reps, axis=dim)
