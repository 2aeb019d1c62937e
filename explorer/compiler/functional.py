"""``ex.F``: tensor functions. Each is one registry op (or a few), so eager runs, captured
graphs and gradients all see the same ops as ``explorer.models`` builders. This module also
installs ``Tensor``'s operators and methods (``x + y`` is ``F.add(x, y)``).

>>> import explorer as ex, numpy as np
>>> x = ex.tensor(np.array([[1.0, 2.0, 3.0]]))
>>> ex.F.softmax(x).numpy().round(3)
array([[0.09 , 0.245, 0.665]], dtype=float32)
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..checks import is_int, is_number
from ..ir import DType
from .errors import JitSyntaxError, ShapeError, TensorIndexError, user_location
from .tensor import Tensor, check_array_dtype
from .trace_stack import apply, current

__all__ = [
    "add", "sub", "mul", "div", "pow", "neg", "matmul", "einsum", "scale", "relu", "gelu",
    "silu", "exp", "log", "tanh", "sqrt", "abs", "sigmoid", "softmax", "layer_norm",
    "rms_norm", "embedding", "dropout", "cross_entropy", "where", "maximum", "minimum",
    "causal_mask", "reshape", "transpose", "broadcast_to", "sum", "mean", "max", "getitem",
    "compare", "cast", "constant", "zeros_like", "ones_like", "concat",
]  # fmt: skip


def constant(value: Any, dtype: DType | str | None = None) -> Tensor:
    """A constant tensor: a plain array eagerly, a ``constant`` node inside ``@jit``."""
    a = check_array_dtype(value)
    if dtype is not None:
        a = a.astype(DType.parse(dtype).numpy)
    elif a.dtype == np.float64:
        a = a.astype(np.float32)
    return current().constant(a)


def _t(x: Any, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, numbers.Number) and not isinstance(x, numbers.Real):
        raise _bad(f"{x!r} is a {type(x).__name__}; tensors hold bool, int and float values")
    if isinstance(x, numbers.Number) and like is not None:
        if like.dtype.is_float or isinstance(x, float):
            return constant(np.float32(_real(x)) if like.dtype.is_float else x)
        return constant(np.asarray(x, like.dtype.numpy))
    return constant(x)


def _op(op: str, *inputs: Tensor, **attrs: Any) -> Tensor:
    return apply(op, inputs, attrs)


def _bad(message: str) -> ShapeError:
    return ShapeError(message, user_location())


def _axis(x: Tensor, axis: Any, op: str) -> int:
    """``axis`` as an index in ``[0, x.ndim)``; negative axes count from the end."""
    if not is_int(axis, numpy=True):
        raise _bad(f"{op}: axis={axis!r} is not an int; pass an int in [{-x.ndim}, {x.ndim})")
    a = int(axis)
    if not -x.ndim <= a < x.ndim:
        raise _bad(
            f"{op}: axis={a} is out of range for a tensor with ndim={x.ndim} ({x.type}); "
            f"pass an axis in [{-x.ndim}, {x.ndim})"
        )
    return a % x.ndim


def _binary(op: str, a: Any, b: Any) -> Tensor:
    like = a if isinstance(a, Tensor) else b
    return _op(op, _t(a, like), _t(b, like))


def add(a, b) -> Tensor:
    return _binary("add", a, b)


def sub(a, b) -> Tensor:
    return _binary("sub", a, b)


def _is_scalar(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _real(x) -> float:
    """A Python number as a float; an int (a symbolic size under @jit included, whose own
    ``float()`` refuses) through ``int()`` so the compiler can follow it."""
    return float(int(x)) if isinstance(x, int) else float(x)


def mul(a, b) -> Tensor:
    """``a * b``; a float tensor times a Python number is the ``scale`` op."""
    if _is_scalar(b) and isinstance(a, Tensor) and a.dtype.is_float:
        return scale(a, _real(b))
    if _is_scalar(a) and isinstance(b, Tensor) and b.dtype.is_float:
        return scale(b, _real(a))
    return _binary("mul", a, b)


def div(a, b) -> Tensor:
    """``a / b``; dividing a float tensor by a Python number is ``scale(a, 1/b)``."""
    if _is_scalar(b) and isinstance(a, Tensor) and a.dtype.is_float and b != 0:
        return scale(a, 1.0 / _real(b))
    return _binary("div", a, b)


def pow(a, b) -> Tensor:  # noqa: A001  (mirrors the operator)
    return _binary("pow", a, b)


def maximum(a, b) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    return _binary("minimum", a, b)


def compare(op: str, a, b) -> Tensor:
    """``lt le gt ge eq ne``: a bool tensor."""
    return _binary(op, a, b)


def scale(x: Tensor, factor: float) -> Tensor:
    return _op("scale", x, factor=_real(factor))


def neg(x: Tensor) -> Tensor:
    return _op("neg", x)


def _unary(name: str):
    def f(x: Tensor) -> Tensor:
        return _op(name, _t(x))

    f.__name__ = name
    f.__doc__ = f"Elementwise {name}."
    return f


relu = _unary("relu")
gelu = _unary("gelu")
silu = _unary("silu")
exp = _unary("exp")
log = _unary("log")
tanh = _unary("tanh")
sqrt = _unary("sqrt")
abs = _unary("abs")  # noqa: A001


def sigmoid(x: Tensor) -> Tensor:
    return div(1.0, add(exp(neg(x)), 1.0))


def where(cond, a, b) -> Tensor:
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    return _op("where", _t(cond), _t(a, like), _t(b, like))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b``: ``matmul`` with a 2-D right side (a linear layer), else ``bmm``."""
    return _op("matmul" if b.ndim == 2 else "bmm", a, b)


def einsum(eq: str, *xs: Tensor) -> Tensor:
    """A contraction, e.g. ``einsum("bsnd,btnd->bnst", q, k)``."""
    return _op("einsum", *xs, eq=eq)


def causal_mask(scores: Tensor, offset: int = 0) -> Tensor:
    """-inf above the diagonal of the last two dims."""
    return _op("causal_mask", scores, offset=offset)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    if x.ndim == 0:
        raise _bad(f"softmax of a 0-d tensor ({x.type}): it needs at least one axis")
    axis = _axis(x, axis, "softmax")
    if axis != x.ndim - 1:
        perm = list(range(x.ndim))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        return transpose(softmax(transpose(x, perm)), perm)
    return _op("softmax", x)


def _eps(op: str, eps: Any) -> float:
    if not is_number(eps, above=0, numpy=True):
        raise _bad(f"{op}: eps={eps!r} must be a finite number > 0 (e.g. 1e-5)")
    return float(eps)


def _float(op: str, *xs: Tensor) -> None:
    for x in xs:
        if not x.dtype.is_float:
            raise _bad(f"{op}: got {x.type}; it needs float tensors (cast with .astype('fp32'))")


def _check_ids(op: str, what: str, ids: Tensor, n: int) -> None:
    """Integer ``ids`` in ``[0, n)``; checked where their data is known."""
    if ids.dtype.is_float or ids.dtype == DType.BOOL:
        raise _bad(f"{op}: {what} are {ids.type}; they must be integers (cast with .astype)")
    if ids.data is not None and ids.size:  # concrete, or traced with its first data
        bad = ids.data[(ids.data < 0) | (ids.data >= n)]
        if bad.size:
            raise _bad(
                f"{op}: {what[:-1]} {int(bad.flat[0])} is outside [0, {n}) ({bad.size} "
                f"bad {what}); clip or remap the {what} first"
            )


def layer_norm(x: Tensor, gain: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    eps = _eps("layer_norm", eps)
    _float("layer_norm", x, gain, bias)
    return _op("layernorm", x, gain, bias, eps=eps)


def rms_norm(x: Tensor, gain: Tensor, eps: float = 1e-6) -> Tensor:
    eps = _eps("rms_norm", eps)
    _float("rms_norm", x, gain)
    return _op("rmsnorm", x, gain, eps=eps)


def embedding(ids: Tensor, table: Tensor) -> Tensor:
    """Rows of ``table`` picked by integer ``ids`` in ``[0, vocab)``."""
    ids, table = _t(ids), _t(table)
    if table.ndim != 2:
        raise _bad(f"embedding: the table is {table.type}; it must be 2-D [vocab, dim]")
    _check_ids("embedding", "ids", ids, table.shape[0])
    return _op("embedding", ids, table)


def dropout(x: Tensor, p: float = 0.1, seed: int = 0, training: bool = True) -> Tensor:
    """Inverted dropout with a mask that is a pure function of the shape and ``seed``;
    ``p`` is the drop probability, in ``[0, 1)``."""
    if not is_number(p, minimum=0, numpy=True) or not p < 1:
        raise _bad(f"dropout: p={p!r} must be a number in [0, 1) (the fraction dropped)")
    if not is_int(seed, numpy=True):
        raise _bad(f"dropout: seed={seed!r} must be an int")
    if not training or p == 0:
        return x
    return _op("dropout", x, p=float(p), seed=int(seed))


def cross_entropy(logits: Tensor, labels: Tensor, reduction: str = "mean") -> Tensor:
    """Loss of ``logits [..., V]`` against integer ``labels [...]``; ``reduction`` is
    ``"mean"`` (one scalar) or ``"none"`` (per token)."""
    labels = _t(labels)
    if logits.ndim == 0:
        raise _bad(f"cross_entropy: logits are {logits.type}; they need a class axis [..., V]")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise _bad(
            f"cross_entropy: labels are {labels.type} but logits {logits.type} need labels of "
            f"shape {tuple(logits.shape[:-1])} (one class id per row of logits)"
        )
    _check_ids("cross_entropy", "labels", labels, logits.shape[-1])
    losses = _op("cross_entropy", logits, labels)
    if reduction == "none":
        return losses
    if reduction != "mean":
        raise _bad(f"reduction={reduction!r}; expected 'mean' or 'none'")
    return mean(losses)


def cast(x: Tensor, dtype: DType | str) -> Tensor:
    return _op("cast", x, dtype=DType.parse(dtype).value)


def reshape(x: Tensor, shape) -> Tensor:
    shape = list(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise _bad(f"reshape to {tuple(shape)}: at most one dim can be -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        shape[shape.index(-1)] = x.size // known if known else 0
    shape = tuple(shape)
    # the registry's reshape pairs runs of dims, which a rank-0 side does not have
    if x.ndim == 0 and x.size == int(np.prod(shape)):
        return broadcast_to(x, shape)
    if shape == () and x.size == 1:
        return _op("getitem", x, index=(0,) * x.ndim)
    return _op("reshape", x, shape=shape)


def transpose(x: Tensor, perm=None) -> Tensor:
    if perm is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        perm = tuple(_axis(x, p, "transpose") for p in perm)
        if sorted(perm) != list(range(x.ndim)):
            raise _bad(
                f"transpose: perm={perm} is not a permutation of the {x.ndim} axes of "
                f"{x.type}; name each axis in range({x.ndim}) exactly once"
            )
    return _op("transpose", x, perm=perm)


def broadcast_to(x: Tensor, shape) -> Tensor:
    return _op("broadcast_to", x, shape=tuple(int(d) for d in shape))


def _axes(x: Tensor, axis, op: str) -> tuple[int, ...] | None:
    if axis is None:
        return None
    axis = axis if isinstance(axis, tuple | list) else (axis,)
    axes = [_axis(x, a, op) for a in axis]
    if len(set(axes)) != len(axes):
        raise _bad(f"{op}: axis={tuple(axis)} names an axis twice ({x.type}); name each once")
    return tuple(sorted(axes))


def _reduce(op: str, x: Tensor, axis, keepdims: bool) -> Tensor:
    axes = _axes(x, axis, op)
    y = _op(op, x, axes=axes)
    if keepdims:
        keep = axes if axes is not None else tuple(range(x.ndim))
        y = reshape(y, tuple(1 if i in keep else d for i, d in enumerate(x.shape)))
    return y


def sum(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("sum", x, axis, keepdims)


def mean(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return _reduce("mean", x, axis, keepdims)


def max(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("max", x, axis, keepdims)


def getitem(x: Tensor, index) -> Tensor:
    """Basic indexing: ints, slices and one ``...``.

    A boolean mask (``x[x > 2]``) is refused: its result's shape depends on the data, which
    a compiled graph cannot have; ``where(mask, x, 0)`` keeps the shape.
    """
    index = index if isinstance(index, tuple) else (index,)
    for e in index:
        if isinstance(e, Tensor) or isinstance(e, np.ndarray | list):
            hint = (
                "keep the shape with ex.F.where(mask, x, 0.0) (or sum(where(...)) for a "
                "masked total); outside @jit, x.numpy()[mask.numpy()] selects the elements"
            )
            what = (
                "boolean-mask" if getattr(e, "dtype", None) in (DType.BOOL, np.bool_) else "array"
            )
            if isinstance(e, Tensor) and e.tracer is not None or x.tracer is not None:
                raise JitSyntaxError(
                    f"{what} indexing x[index]: the result's shape depends on the data",
                    user_location(),
                    hint,
                )
            raise _bad(
                f"{what} indexing of {x.type} is not supported: the result's shape would "
                f"depend on the data; {hint}"
            )
    if [e is Ellipsis for e in index].count(True) > 1:
        raise _bad(f"index {index}: at most one ... is allowed")
    if any(e is Ellipsis for e in index):
        k = index.index(Ellipsis)
        fill = (slice(None),) * (x.ndim - len(index) + 1)
        index = index[:k] + fill + index[k + 1 :]
    if len(index) > x.ndim:
        raise TensorIndexError(
            f"index {index} has more entries than the {x.ndim} dims of {x.type}", user_location()
        )
    norm: list[Any] = []
    for e, d in zip(index, x.shape, strict=False):
        if isinstance(e, slice):
            norm.append(e.indices(d))
        elif isinstance(e, numbers.Integral) and not isinstance(e, bool):
            i = int(e)
            if not -d <= i < d:
                raise TensorIndexError(
                    f"index {i} is out of range for a dim of size {d} ({x.type}); "
                    f"use an index in [{-d}, {d})",
                    user_location(),
                )
            norm.append(i % d)
        else:
            raise _bad(f"index entry {e!r}: only ints, slices and ... are supported")
    return _op("getitem", x, index=tuple(norm))


def concat(xs, axis: int = 0) -> Tensor:
    """Join tensors along ``axis`` (each placed into its slice of the result: a sum of
    ``getitem_grad`` scatters, so it differentiates and follows symbolic dims under @jit).

    >>> import numpy as np, explorer as ex
    >>> concat([ex.tensor(np.ones((1, 2))), ex.tensor(np.zeros((2, 2)))]).shape
    (3, 2)
    """
    xs = [_t(x) for x in xs]
    if not xs:
        raise _bad("concat of no tensors; pass at least one")
    first = xs[0]
    axis = _axis(first, axis, "concat")
    for x in xs[1:]:
        same = x.ndim == first.ndim and x.dtype == first.dtype
        if not same or any(a != b for k, (a, b) in enumerate(zip(x.shape, first.shape, strict=True))
                           if k != axis):  # fmt: skip
            raise _bad(
                f"concat along axis {axis}: {x.type} does not match {first.type} outside that "
                "axis (rank, dtype and the other dims must agree); reshape or cast it first"
            )
    if len(xs) == 1:
        return first
    total = xs[0].shape[axis]
    for x in xs[1:]:
        total = total + x.shape[axis]
    shape = tuple(total if k == axis else d for k, d in enumerate(first.shape))
    out, start = None, 0
    for x in xs:
        stop = start + x.shape[axis]
        index = tuple((0, d, 1) if k != axis else (start, stop, 1)
                      for k, d in enumerate(shape))  # fmt: skip
        part = _op("getitem_grad", x, shape=shape, index=index)
        out = part if out is None else add(out, part)
        start = stop
    return out


def zeros_like(x: Tensor) -> Tensor:
    return constant(np.zeros(x.shape, x.dtype.numpy))


def ones_like(x: Tensor) -> Tensor:
    return constant(np.ones(x.shape, x.dtype.numpy))


def _install_methods() -> None:
    """Give ``Tensor`` its operators and op methods, each one of the functions above."""

    def _reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def _transpose(self, *perm):
        if len(perm) == 1 and isinstance(perm[0], tuple | list):
            perm = tuple(perm[0])
        return transpose(self, perm or None)

    methods = {
        "__add__": lambda s, o: add(s, o), "__radd__": lambda s, o: add(o, s),
        "__sub__": lambda s, o: sub(s, o), "__rsub__": lambda s, o: sub(o, s),
        "__mul__": lambda s, o: mul(s, o), "__rmul__": lambda s, o: mul(o, s),
        "__truediv__": lambda s, o: div(s, o), "__rtruediv__": lambda s, o: div(o, s),
        "__pow__": lambda s, o: pow(s, o), "__matmul__": lambda s, o: matmul(s, o),
        "__neg__": lambda s: neg(s),
        "__lt__": lambda s, o: compare("lt", s, o), "__le__": lambda s, o: compare("le", s, o),
        "__gt__": lambda s, o: compare("gt", s, o), "__ge__": lambda s, o: compare("ge", s, o),
        "__eq__": lambda s, o: compare("eq", s, o), "__ne__": lambda s, o: compare("ne", s, o),
        "__getitem__": lambda s, index: getitem(s, index),
        "reshape": _reshape, "transpose": _transpose, "T": property(lambda s: transpose(s)),
        "sum": lambda s, axis=None, keepdims=False: sum(s, axis, keepdims),
        "mean": lambda s, axis=None, keepdims=False: mean(s, axis, keepdims),
        "max": lambda s, axis=None, keepdims=False: max(s, axis, keepdims),
        "astype": lambda s, dtype: cast(s, dtype),
    }  # fmt: skip
    for name, fn in methods.items():
        setattr(Tensor, name, fn)


_install_methods()
