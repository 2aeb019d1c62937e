"""Kernels of the ops that models imported from PyTorch use beyond the framework's own:
rotary embeddings, the unary ops of transformers' activations and norms, scalar
arithmetic, casts, concatenation, slices and broadcasts, sliding-window masks, gathers,
cumulative sums, tiles, fills, and the whole-module ops (MoE routing and experts, MLA attention).

Each builder has the signature of ``kernels.BUILDERS``' (node, input types, full attrs)
and returns ``kernel(*arrays, out=None)``; ``kernels`` merges `IMPORTED_BUILDERS` into its
table. The op-name sets below say which of them fill ``out`` (`WRITES_OUT_IMPORTED`), may
write over an input (`IN_PLACE_IMPORTED`) or return a view (`ALIASES_IMPORTED`): memory
planning reads them through ``kernels``.

>>> import numpy as np
>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("g"); x = b.input("x", (2, 4))
>>> g = b.build([b.op("rsqrt", x)])
>>> from explorer.compiler.kernels import make_kernel
>>> k = make_kernel(g.node(g.outputs[0]), (g.node("x").type,))
>>> k(np.full((2, 4), 4.0, np.float32))[0, 0]
np.float32(0.5)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import DType, Node, TensorType, opdef
from ..ir.ops_aten import SCALAR_FNS
from ..ir.ops_mask import window_keep

__all__ = [
    "IMPORTED_BUILDERS", "WRITES_OUT_IMPORTED", "IN_PLACE_IMPORTED", "ALIASES_IMPORTED",
]  # fmt: skip

Kernel = Callable[..., np.ndarray]

# ufuncs over one array: same-shape in place is safe (each element read before written)
_UNARY = {"sin": np.sin, "cos": np.cos}
_SCALAR_UFUNCS = frozenset({"add", "sub", "mul", "div", "pow", "maximum", "minimum", "lt",
                            "le", "gt", "ge", "eq", "ne", "floordiv", "remainder"})  # fmt: skip

IN_PLACE_IMPORTED = frozenset(
    {*_UNARY, "erf", "rsqrt", "reciprocal", "sigmoid", "scalar_op", "cast", "window_mask"}
)
WRITES_OUT_IMPORTED = IN_PLACE_IMPORTED | {"cat", "cumsum", "rope"}
# write_slice returns its first input, written in place (a donated input: passes/donate.py)
ALIASES_IMPORTED = frozenset({"slice", "expand", "write_slice"})


def _np(t: TensorType):
    return t.dtype.numpy


def _unary(uf) -> Callable:
    def build(node, in_types, attrs) -> Kernel:
        def k_unary(x, out=None):
            return uf(x, out=out) if out is not None else uf(x)

        return k_unary

    return build


def _erf(node, in_types, attrs) -> Kernel:
    from scipy.special import erf  # a ufunc: fills out, keeps float32

    dt = _np(node.type)

    def k_erf(x, out=None):
        return erf(x, out=out) if out is not None else erf(x).astype(dt, copy=False)

    return k_erf


def _rsqrt(node, in_types, attrs) -> Kernel:
    dt = _np(node.type)
    one = dt.type(1.0)

    def k_rsqrt(x, out=None):
        o = np.sqrt(x, out=out) if out is not None else np.sqrt(x)
        return np.divide(one, o, out=o)

    return k_rsqrt


def _reciprocal(node, in_types, attrs) -> Kernel:
    one = _np(node.type).type(1.0)

    def k_reciprocal(x, out=None):
        return np.divide(one, x, out=out) if out is not None else np.divide(one, x)

    return k_reciprocal


def _sigmoid(node, in_types, attrs) -> Kernel:
    """``1 / (1 + exp(-x))`` in three passes over one array."""
    shape, dt = node.type.shape, _np(node.type)
    one = dt.type(1.0)

    def k_sigmoid(x, out=None):
        o = np.negative(x, out=np.empty(shape, dt) if out is None else out)
        np.exp(o, out=o)
        o += one
        return np.divide(one, o, out=o)

    return k_sigmoid


def _scalar_op(node, in_types, attrs) -> Kernel:
    fn, value = attrs["fn"], attrs["value"]
    dt = _np(node.type)
    if in_types[0].dtype.is_float and not isinstance(value, bool):
        # a Python float must not promote float32 to float64
        value = in_types[0].dtype.numpy.type(value)
    if fn in _SCALAR_UFUNCS:
        uf = SCALAR_FNS[fn]

        def k_scalar(x, out=None):
            if out is not None:
                return uf(x, value, out=out)
            return np.asarray(uf(x, value), dtype=dt)

        return k_scalar
    f = SCALAR_FNS[fn]

    def k_scalar_other(x, out=None):  # rsub, rdiv, rpow: value on the left
        res = np.asarray(f(x, value), dtype=dt)
        if out is None:
            return res
        np.copyto(out, res)
        return out

    return k_scalar_other


def _cast(node, in_types, attrs) -> Kernel:
    dt = DType.parse(attrs["dtype"]).numpy

    def k_cast(x, out=None):
        if out is None:
            return x.astype(dt)
        np.copyto(out, x, casting="unsafe")
        return out

    return k_cast


def _window_mask(node, in_types, attrs) -> Kernel:
    t = node.type
    drop = ~window_keep(t.shape, attrs["window"], attrs["offset"])
    ninf = np.asarray(-np.inf, _np(t))

    def k_window(x, out=None):
        o = np.empty(t.shape, _np(t)) if out is None else out
        if o is not x:
            np.copyto(o, x)
        np.copyto(o, ninf, where=drop)
        return o

    return k_window


def _write_slice(node, in_types, attrs) -> Kernel:
    """Writes the part into the donated ``x`` (`explorer.compiler.passes.donate`) and
    returns ``x``; a read-only ``x`` (a caller's constant) is copied first."""
    rank, axis, start = in_types[0].rank, attrs["axis"], attrs["start"]
    where = ((slice(None),) * axis + (slice(start, start + in_types[1].shape[axis]),)
             + (slice(None),) * (rank - axis - 1))  # fmt: skip

    def k_write_slice(x, part, out=None):
        if not x.flags.writeable:
            x = x.copy()
        x[where] = part
        return x

    return k_write_slice


def _cat(node, in_types, attrs) -> Kernel:
    axis = attrs["axis"]

    def k_cat(*xs, out=None):
        return np.concatenate(xs, axis=axis, out=out)

    return k_cat


def _cumsum(node, in_types, attrs) -> Kernel:
    axis, dt = attrs["axis"], _np(node.type)

    def k_cumsum(x, out=None):
        return np.cumsum(x, axis=axis, dtype=dt, out=out)

    return k_cumsum


def _rope(node, in_types, attrs) -> Kernel:
    """``x * cos + rotate_half(x) * sin``, writing each half of ``out`` once: out may not
    be ``x`` (the second half reads the first)."""
    shape, dt = node.type.shape, _np(node.type)
    half = shape[-1] // 2

    def k_rope(x, cos, sin, out=None):
        o = np.multiply(x, cos, out=np.empty(shape, dt) if out is None else out)
        lo, hi = o[..., :half], o[..., half:]
        lo -= x[..., half:] * sin[..., :half]
        hi += x[..., :half] * sin[..., half:]
        return o

    return k_rope


def _slice(node, in_types, attrs) -> Kernel:
    index = [slice(None)] * in_types[0].rank
    index[attrs["axis"]] = slice(attrs["start"], attrs["stop"], attrs["step"])
    idx = tuple(index)
    return lambda x, out=None: x[idx]


def _expand(node, in_types, attrs) -> Kernel:
    target = list(in_types[0].shape)
    for k in attrs["axes"]:
        target[k] = attrs["shape"][k]
    shape = tuple(target)
    return lambda x, out=None: np.broadcast_to(x, shape)


def _broadcast_to(node, in_types, attrs) -> Kernel:
    shape = tuple(attrs["shape"])
    return lambda x, out=None: np.broadcast_to(x, shape)


def _gather(node, in_types, attrs) -> Kernel:
    axis = attrs["axis"]
    return lambda x, idx, out=None: np.take_along_axis(x, idx.astype(np.int64, copy=False),
                                                       axis=axis)  # fmt: skip


def _repeat_interleave(node, in_types, attrs) -> Kernel:
    repeats, axis = attrs["repeats"], attrs["axis"]
    return lambda x, out=None: np.repeat(x, repeats, axis=axis)


def _repeat(node, in_types, attrs) -> Kernel:
    reps = tuple(attrs["repeats"])
    return lambda x, out=None: np.tile(x, reps)


def _fill(node, in_types, attrs) -> Kernel:
    """A fill has no inputs: computed once, returned read-only at every call (no kernel
    writes into an unplanned value, and a caller gets a copy of a read-only output)."""
    value = np.asarray(opdef.get("fill").impl(**attrs))
    value.flags.writeable = False
    return lambda out=None: value


def _whole_module(node, in_types, attrs) -> Kernel:
    """MoE routing, dispatch, experts and combine, MLA attention: the registry impl with its
    attributes bound once (these ops run a module's whole computation; a result that may
    share memory with an input is copied, as for any op memory planning does not know)."""
    impl = opdef.get(node.op).impl
    kw = dict(attrs)

    def k_module(*xs, out=None):
        res = impl(*xs, **kw)
        if isinstance(res, tuple):
            return res
        res = np.asarray(res)
        if res.base is not None and any(np.may_share_memory(res, x) for x in xs):
            return res.copy()
        return res

    return k_module


IMPORTED_BUILDERS: dict[str, Callable[[Node, tuple[TensorType, ...], dict], Kernel]] = {
    **{op: _unary(uf) for op, uf in _UNARY.items()},
    "erf": _erf, "rsqrt": _rsqrt, "reciprocal": _reciprocal, "sigmoid": _sigmoid,
    "scalar_op": _scalar_op, "cast": _cast, "window_mask": _window_mask, "cat": _cat,
    "write_slice": _write_slice,
    "cumsum": _cumsum, "rope": _rope, "slice": _slice, "expand": _expand,
    "broadcast_to": _broadcast_to, "gather": _gather, "repeat_interleave": _repeat_interleave,
    "repeat": _repeat, "fill": _fill,
    **{op: _whole_module for op in ("moe_router", "moe_dispatch_grouped", "moe_experts",
                                    "moe_combine_grouped", "mla_attention")},
}  # fmt: skip
