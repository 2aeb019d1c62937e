"""Ops that traced PyTorch programs need beyond the builders' set (see
``explorer.models.torch_import``): more unary maths, ops with a Python scalar operand,
concatenation, tensor factories, grouped expert matmuls and the ``opaque`` op that stands
for any aten op without a mapping.

``opaque`` keeps an unmapped op in the graph instead of dropping it: its signature gives
every input and output dim a letter of its own, so the only strategy is the replicated one
(input letters are contracted by a non-linear op, output letters appear on no input), it
does no FLOPs and is costed by the bytes it reads and writes.

>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("demo")
>>> x = b.input("x", (2, 4))
>>> y = b.op("opaque", x, target="aten.cumsum.default", shape=(2, 4), dtype="fp32")
>>> g = b.build([y]); g.signature("opaque"), g.node_flops("opaque"), g.node_bytes("opaque")
('ab->cd', 0, (32, 32))
"""

from __future__ import annotations

import math
import string

import numpy as np

from .dtype import DType
from .errors import IRError
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__ = ["SCALAR_FNS", "UNARY_FLOPS"]

_LETTERS = string.ascii_letters

#: FLOPs per element of the unary ops below (a transcendental counts as one, as for exp).
UNARY_FLOPS = {"rsqrt": 2, "sin": 1, "cos": 1, "sigmoid": 4, "reciprocal": 1, "erf": 1}


def _erf(x):
    from scipy.special import erf

    return erf(x).astype(x.dtype)


_UNARY = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "reciprocal": lambda x: 1.0 / x, "erf": _erf,
}  # fmt: skip
for _name, _fn in _UNARY.items():
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...->...", 1, UNARY_FLOPS[_name], _fn,
                   doc=f"elementwise {_name}"))  # fmt: skip


def _bool(in_types, attrs) -> DType:
    return DType.BOOL


for _name, _fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or)):
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...,...->...", 2, 1, _fn, dtype_rule=_bool,
                   doc=f"broadcasting {_name} (bool result)"))  # fmt: skip

#: ``scalar_op`` functions: ``fn(x, value)``; the ``r`` forms put the scalar first.
SCALAR_FNS = {
    "add": np.add, "sub": np.subtract, "rsub": lambda x, v: v - x, "mul": np.multiply,
    "div": np.divide, "rdiv": lambda x, v: v / x, "pow": np.power,
    "rpow": lambda x, v: np.power(v, x), "maximum": np.maximum, "minimum": np.minimum,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "floordiv": np.floor_divide, "remainder": np.remainder,
}  # fmt: skip
_COMPARE = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})


def _scalar_impl(x, fn, value):
    out = SCALAR_FNS[fn](x, value)
    return np.asarray(out, dtype=np.bool_ if fn in _COMPARE else x.dtype)


def _scalar_dtype(in_types, attrs) -> DType:
    if attrs["fn"] not in SCALAR_FNS:
        raise IRError(f"scalar_op fn={attrs['fn']!r} is unknown; use one of {sorted(SCALAR_FNS)}")
    return DType.BOOL if attrs["fn"] in _COMPARE else in_types[0].dtype


register(OpDef("scalar_op", OpGroup.ELEMENTWISE, "...->...", 1, 1, _scalar_impl,
               attrs={"fn": REQUIRED, "value": REQUIRED}, dtype_rule=_scalar_dtype,
               doc="x (fn) a Python scalar, e.g. fn='add', value=1e-6"))  # fmt: skip

# --- concatenation ------------------------------------------------------------------------


def _cat_check(in_types, attrs) -> int:
    if not in_types:
        raise IRError("cat needs at least one input")
    rank = in_types[0].rank
    axis = attrs["axis"]
    if not -rank <= axis < rank:
        raise IRError(f"cat axis {axis} is out of range for rank {rank}")
    axis %= rank
    for t in in_types[1:]:
        if t.rank != rank or any(
            a != b
            for k, (a, b) in enumerate(zip(t.shape, in_types[0].shape, strict=True))
            if k != axis
        ):
            raise IRError(f"cat inputs {in_types} differ outside axis {axis}")
    return axis


def _cat_sig(in_types, attrs) -> str:
    axis = _cat_check(in_types, attrs)
    rank = in_types[0].rank
    shared = _LETTERS[:rank]
    fresh = iter(_LETTERS[rank:])
    ins = []
    for _ in in_types:
        ins.append(shared[:axis] + next(fresh) + shared[axis + 1 :])
    out = shared[:axis] + next(fresh) + shared[axis + 1 :]
    return ",".join(ins) + "->" + out


def _cat_shape(in_types, attrs) -> tuple[int, ...]:
    axis = _cat_check(in_types, attrs)
    shape = list(in_types[0].shape)
    shape[axis] = sum(t.shape[axis] for t in in_types)
    return tuple(shape)


register(OpDef("cat", OpGroup.MOVEMENT, None, None, 0,
               lambda *xs, axis: np.concatenate(xs, axis=axis), attrs={"axis": REQUIRED},
               signature_rule=_cat_sig, shape_rule=_cat_shape,
               doc="concatenate along one axis (the other dims may be split)"))  # fmt: skip

# --- tensor factories ---------------------------------------------------------------------


def _fill_impl(kind, shape, dtype, value=0, start=0, step=1):
    dt = DType.parse(dtype).numpy
    if kind == "arange":
        return (start + step * np.arange(math.prod(shape))).reshape(shape).astype(dt)
    return np.full(shape, value, dtype=dt)


register(OpDef("fill", OpGroup.SOURCE, "->", 0, 0, _fill_impl,
               attrs={"kind": "full", "shape": REQUIRED, "dtype": REQUIRED, "value": 0,
                      "start": 0, "step": 1},
               shape_rule=lambda i, a: tuple(a["shape"]),
               dtype_rule=lambda i, a: DType.parse(a["dtype"]),
               doc="a tensor made from its attributes: kind 'full' (value) or 'arange' "
                   "(start + step * i)"))  # fmt: skip

# --- grouped expert matmul ----------------------------------------------------------------


def _grouped_mm(x, w, offsets):
    out = np.zeros((x.shape[0], w.shape[2]), dtype=x.dtype)
    start = 0
    for e, stop in enumerate(np.asarray(offsets).astype(np.int64)):
        out[start:stop] = x[start:stop] @ w[e]
        start = int(stop)
    return out


# The row letter is "t" on the input and "u" on the output, so it is never split: offsets
# count global rows. Only the weight's output columns "n" may be split.
register(OpDef("grouped_mm", OpGroup.CONTRACTION, "tk,ekn,e->un", 3, 2, _grouped_mm,
               shape_rule=lambda i, a: (i[0].shape[0], i[1].shape[2]),
               flops_rule=lambda i, o, a: 2 * i[0].shape[0] * i[0].shape[1] * o.shape[1],
               doc="rows of x sorted by expert, each block times its expert's [k, n] weight; "
                   "offsets[e] ends expert e's rows"))  # fmt: skip

# --- opaque -------------------------------------------------------------------------------


def _opaque_sig(in_types, attrs) -> str:
    pool = iter(_LETTERS)
    ins = ["".join(next(pool) for _ in t.shape) for t in in_types]
    out = "".join(next(pool) for _ in attrs["shape"])
    return ",".join(ins) + "->" + out


def _opaque_impl(*xs, target, shape, dtype):
    raise IRError(
        f"opaque op {target!r} has no numpy implementation: it stands for a traced op the "
        "importer does not map (see the graph's import report); map it in "
        "explorer.models.torch_import.aten to execute the graph"
    )


register(OpDef("opaque", OpGroup.MOVEMENT, None, None, 0, _opaque_impl,
               attrs={"target": REQUIRED, "shape": REQUIRED, "dtype": REQUIRED},
               signature_rule=_opaque_sig, shape_rule=lambda i, a: tuple(a["shape"]),
               dtype_rule=lambda i, a: DType.parse(a["dtype"]),
               doc="a traced op without a mapping: replicated only, no FLOPs, costed by "
                   "bytes"))  # fmt: skip

# --- slicing and broadcasting that keep the other dims splittable -------------------------


def _slice_check(in_types, attrs) -> tuple[int, int, int, int]:
    shape = in_types[0].shape
    axis = attrs["axis"]
    if not 0 <= axis < len(shape):
        raise IRError(f"slice axis {axis} is out of range for shape {shape}")
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if step <= 0 or not 0 <= start <= stop <= shape[axis]:
        raise IRError(
            f"slice {start}:{stop}:{step} of axis {axis} (size {shape[axis]}) is invalid; "
            "expected 0 <= start <= stop <= size and step > 0"
        )
    return axis, start, stop, step


def _slice_shape(in_types, attrs) -> tuple[int, ...]:
    axis, start, stop, step = _slice_check(in_types, attrs)
    shape = list(in_types[0].shape)
    shape[axis] = len(range(start, stop, step))
    return tuple(shape)


def _slice_sig(in_types, attrs) -> str:
    axis = _slice_check(in_types, attrs)[0]
    rank = in_types[0].rank
    spec = _LETTERS[:rank]
    return f"{spec}->{spec[:axis]}{_LETTERS[rank]}{spec[axis + 1 :]}"


def _slice_impl(x, axis, start, stop, step):
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, stop, step)
    return x[tuple(index)]


register(OpDef("slice", OpGroup.MOVEMENT, None, 1, 0, _slice_impl,
               attrs={"axis": REQUIRED, "start": REQUIRED, "stop": REQUIRED, "step": 1},
               signature_rule=_slice_sig, shape_rule=_slice_shape,
               doc="x[..., start:stop:step, ...] on one axis; the other dims may be split"))  # fmt: skip


def _expand_sig(in_types, attrs) -> str:
    src, dst = in_types[0].shape, tuple(attrs["shape"])
    if len(src) != len(dst) or any(s != d and s != 1 for s, d in zip(src, dst, strict=True)):
        raise IRError(
            f"expand of {src} to {dst}: only size-1 dims grow and the ranks must match "
            "(add dims with reshape first)"
        )
    grown = tuple(k for k, (s, d) in enumerate(zip(src, dst, strict=True)) if s != d)
    if tuple(attrs["axes"]) != grown:
        raise IRError(f"expand of {src} to {dst}: axes={attrs['axes']!r}; expected {grown}")
    spec = _LETTERS[: len(src)]
    fresh = iter(_LETTERS[len(src) :])
    out = "".join(c if s == d else next(fresh) for c, s, d in zip(spec, src, dst, strict=True))
    return f"{spec}->{out}"


def _expand_impl(x, shape, axes):
    # only the grown axes take their size from the (global) shape: the others may be split
    target = list(x.shape)
    for k in axes:
        target[k] = shape[k]
    return np.broadcast_to(x, tuple(target))


register(OpDef("expand", OpGroup.MOVEMENT, None, 1, 0, _expand_impl,
               attrs={"shape": REQUIRED, "axes": REQUIRED},
               signature_rule=_expand_sig, shape_rule=lambda i, a: tuple(a["shape"]),
               doc="repeat size-1 dims (grouped-query heads); the kept dims may be split",
               view=True))  # fmt: skip

# --- rotary position embedding ------------------------------------------------------------


def _rope_check(in_types) -> None:
    x, cos, sin = in_types
    d = x.shape[-1] if x.rank else 0
    if d % 2 or cos.shape != sin.shape or cos.rank > x.rank or cos.shape[-1:] != (d,):
        raise IRError(
            f"rope takes x [..., d] (d even) and cos, sin [..., d] of one shape that "
            f"broadcasts to x; got {x}, {cos}, {sin}"
        )
    for c, k in zip(reversed(cos.shape[:-1]), reversed(x.shape[:-1]), strict=False):
        if c not in (1, k):
            raise IRError(f"rope tables {cos} do not broadcast to {x}")


def _rope_sig(in_types, attrs) -> str:
    # the rotated (last) dim is "d" on the inputs and "e" on the output: never split
    _rope_check(in_types)
    x, cos = in_types[0], in_types[1]
    r = x.rank
    lead = _LETTERS[: r - 1]
    fresh = iter(_LETTERS[r + 1 :])
    d, e = _LETTERS[r - 1], _LETTERS[r]
    tab = ""
    for k, c in enumerate(cos.shape[:-1]):
        j = r - cos.rank + k
        tab += lead[j] if c == x.shape[j] else next(fresh)
    return f"{lead}{d},{tab}{d},{tab}{d}->{lead}{e}"


def _rope_impl(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rotated * sin).astype(x.dtype)


register(OpDef("rope", OpGroup.REDUCE, None, 3, 3, _rope_impl, signature_rule=_rope_sig,
               shape_rule=lambda i, a: (_rope_check(i), i[0].shape)[1],
               flops_rule=lambda i, o, a: 3 * o.numel,
               doc="rotary embedding x*cos + rotate_half(x)*sin; the rotated dim stays whole"))  # fmt: skip


def _axis_check(op: str, in_types, attrs) -> int:
    rank, axis = in_types[0].rank, attrs["axis"]
    if not 0 <= axis < rank:
        raise IRError(f"{op} axis={axis} is out of range for {in_types[0]}; expected 0..{rank - 1}")
    return axis


def _cumsum_sig(in_types, attrs) -> str:
    # the scanned axis has one letter in and another out: it is never split
    axis, rank = _axis_check("cumsum", in_types, attrs), in_types[0].rank
    spec = _LETTERS[:rank]
    return f"{spec}->{spec[:axis]}{_LETTERS[rank]}{spec[axis + 1 :]}"


register(OpDef("cumsum", OpGroup.REDUCE, None, 1, 1,
               lambda x, axis: np.cumsum(x, axis=axis, dtype=x.dtype),
               attrs={"axis": REQUIRED}, signature_rule=_cumsum_sig,
               shape_rule=lambda i, a: i[0].shape,
               doc="running sum along one axis (RoBERTa's position ids); that axis stays whole"))  # fmt: skip


def _gather_check(in_types, attrs) -> int:
    axis = _axis_check("gather", in_types, attrs)
    x, idx = in_types
    if idx.rank != x.rank or any(
        i != n for k, (i, n) in enumerate(zip(idx.shape, x.shape, strict=True)) if k != axis
    ):
        raise IRError(
            f"gather along axis {axis} takes an index of the input's shape but on that axis; "
            f"got {x} and {idx}"
        )
    return axis


def _gather_sig(in_types, attrs) -> str:
    axis, rank = _gather_check(in_types, attrs), in_types[0].rank
    spec = _LETTERS[:rank]
    src = spec[:axis] + _LETTERS[rank] + spec[axis + 1 :]
    return f"{src},{spec}->{spec}"


register(OpDef("gather", OpGroup.MOVEMENT, None, 2, 0,
               lambda x, idx, axis: np.take_along_axis(x, idx.astype(np.int64), axis=axis),
               attrs={"axis": REQUIRED}, signature_rule=_gather_sig,
               shape_rule=lambda i, a: (_gather_check(i, a), i[1].shape)[1],
               dtype_rule=lambda i, a: i[0].dtype,
               doc="out[..., j, ...] = x[..., idx[..., j, ...], ...] (torch.gather); the "
                   "gathered axis of x stays whole"))  # fmt: skip
