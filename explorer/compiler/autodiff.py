"""Reverse-mode autodiff: a tape of applied ops and one vector-Jacobian rule per op.

The rules are written with ``ex.F`` ops, so the same code computes gradients eagerly (the
tape replays backwards at once) and, under ``@jit``, emits the backward graph into the IR.

>>> import explorer as ex, numpy as np
>>> dx = ex.grad(lambda x: (x * x).sum())(ex.tensor(np.array([1.0, 2.0])))
>>> dx.numpy()
array([2., 4.], dtype=float32)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import functional as F
from .errors import CompilerArgumentError, NoGradientRule
from .nn import Cell
from .tensor import Tensor, tensor
from .trace_stack import apply, current, taping

__all__ = ["Tape", "grad", "value_and_grad", "VJP", "backward"]


class Tape:
    """Records every op whose inputs depend on a watched tensor."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, tuple[Tensor, ...], dict[str, Any], Tensor]] = []
        self.watched: set[int] = set()
        self._keep: list[Tensor] = []  # keeps ids valid while the tape lives
        self._active: list = []  # the trace_stack.taping blocks this tape is inside

    def watch(self, t: Tensor) -> None:
        self.watched.add(id(t))
        self._keep.append(t)

    def push(self, op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any], out: Tensor):
        if any(id(t) in self.watched for t in inputs):
            self.entries.append((op, inputs, attrs, out))
            self.watch(out)

    def __enter__(self) -> Tape:
        self._active.append(taping(self))
        return self._active[-1].__enter__()

    def __exit__(self, *exc) -> None:
        self._active.pop().__exit__(*exc)


# --- vector-Jacobian rules ----------------------------------------------------------------

Rule = Callable[[Tensor, tuple[Tensor, ...], Tensor, dict[str, Any]], Sequence[Tensor | None]]
VJP: dict[str, Rule] = {}


def _rule(*names: str):
    def deco(fn: Rule) -> Rule:
        for n in names:
            VJP[n] = fn
        return fn

    return deco


def unbroadcast(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``g`` over the dims that broadcasting added or stretched, back to ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, d in enumerate(shape) if d == 1 and g.shape[i + lead] != 1
    )
    s = F.sum(g, axes) if axes else g
    return F.reshape(s, shape) if s.shape != shape else s


def _op(op: str, *xs: Tensor, **attrs: Any) -> Tensor:
    return apply(op, xs, attrs)


@_rule("add")
def _add(g, ins, out, attrs):
    return unbroadcast(g, ins[0].shape), unbroadcast(g, ins[1].shape)


@_rule("sub")
def _sub(g, ins, out, attrs):
    return unbroadcast(g, ins[0].shape), unbroadcast(F.neg(g), ins[1].shape)


@_rule("mul")
def _mul(g, ins, out, attrs):
    a, b = ins
    return unbroadcast(F.mul(g, b), a.shape), unbroadcast(F.mul(g, a), b.shape)


@_rule("div")
def _div(g, ins, out, attrs):
    a, b = ins
    return unbroadcast(F.div(g, b), a.shape), unbroadcast(F.neg(F.div(F.mul(g, out), b)), b.shape)


@_rule("pow")
def _pow(g, ins, out, attrs):
    a, b = ins
    da = F.mul(g, F.mul(b, F.pow(a, F.sub(b, 1.0))))
    db = F.mul(g, F.mul(out, F.log(F.abs(a)))) if b.dtype.is_float else None
    return unbroadcast(da, a.shape), (unbroadcast(db, b.shape) if db is not None else None)


@_rule("neg")
def _neg(g, ins, out, attrs):
    return (F.neg(g),)


@_rule("scale")
def _scale(g, ins, out, attrs):
    return (F.scale(g, attrs["factor"]),)


@_rule("exp")
def _exp(g, ins, out, attrs):
    return (F.mul(g, out),)


@_rule("log")
def _log(g, ins, out, attrs):
    return (F.div(g, ins[0]),)


@_rule("tanh")
def _tanh(g, ins, out, attrs):
    return (F.mul(g, F.sub(1.0, F.mul(out, out))),)


@_rule("sqrt")
def _sqrt(g, ins, out, attrs):
    return (F.scale(F.div(g, out), 0.5),)


@_rule("abs")
def _abs(g, ins, out, attrs):
    return (F.where(F.compare("ge", ins[0], 0.0), g, F.neg(g)),)


@_rule("relu")
def _relu(g, ins, out, attrs):
    return (F.where(F.compare("gt", ins[0], 0.0), g, 0.0),)


@_rule("gelu")
def _gelu(g, ins, out, attrs):
    return (_op("gelu_grad", ins[0], g),)


@_rule("silu")
def _silu(g, ins, out, attrs):
    return (_op("silu_grad", ins[0], g),)


@_rule("maximum", "minimum")
def _minmax(g, ins, out, attrs):
    a, b = ins
    pick_a = F.compare("eq", out, a)
    return (unbroadcast(F.where(pick_a, g, 0.0), a.shape),
            unbroadcast(F.where(pick_a, 0.0, g), b.shape))  # fmt: skip


@_rule("where")
def _where(g, ins, out, attrs):
    c, a, b = ins
    return None, unbroadcast(F.where(c, g, 0.0), a.shape), unbroadcast(F.where(c, 0.0, g), b.shape)


@_rule("lt", "le", "gt", "ge", "eq", "ne", "logical_not")
def _nograd(g, ins, out, attrs):
    return (None,) * len(ins)


@_rule("cast")
def _cast(g, ins, out, attrs):
    return (F.cast(g, ins[0].dtype),)


@_rule("causal_mask")
def _causal(g, ins, out, attrs):
    return (_op("causal_mask_grad", g, offset=attrs.get("offset", 0)),)


@_rule("window_mask")
def _window(g, ins, out, attrs):
    return (_op("window_mask_grad", g, window=attrs["window"], offset=attrs.get("offset", 0)),)


@_rule("dropout")
def _dropout(g, ins, out, attrs):
    return (_op("dropout", g, **attrs),)


@_rule("softmax")
def _softmax(g, ins, out, attrs):
    return (_op("softmax_grad", out, g),)


@_rule("layernorm")
def _layernorm(g, ins, out, attrs):
    x, gain, _ = ins
    eps = attrs.get("eps", 1e-5)
    return tuple(_op("layernorm_grad", x, gain, g, wrt=k, eps=eps) for k in range(3))


@_rule("rmsnorm")
def _rmsnorm(g, ins, out, attrs):
    x, gain = ins
    eps = attrs.get("eps", 1e-6)
    return tuple(_op("rmsnorm_grad", x, gain, g, wrt=k, eps=eps) for k in range(2))


@_rule("cross_entropy")
def _xent(g, ins, out, attrs):
    return _op("cross_entropy_grad", ins[0], ins[1], g), None


@_rule("embedding")
def _embedding(g, ins, out, attrs):
    ids, table = ins
    return None, _op("embedding_grad", ids, g, vocab=table.shape[0])


def _swap(x: Tensor) -> Tensor:
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return F.transpose(x, perm)


@_rule("matmul")
def _matmul(g, ins, out, attrs):
    a, w = ins
    da = F.matmul(g, F.transpose(w))
    a2 = F.reshape(a, (-1, a.shape[-1])) if a.ndim != 2 else a
    g2 = F.reshape(g, (-1, g.shape[-1])) if g.ndim != 2 else g
    return da, F.matmul(F.transpose(a2), g2)


@_rule("bmm")
def _bmm(g, ins, out, attrs):
    a, b = ins
    return unbroadcast(F.matmul(g, _swap(b)), a.shape), unbroadcast(F.matmul(_swap(a), g), b.shape)


@_rule("einsum")
def _einsum(g, ins, out, attrs):
    eq = attrs["eq"].replace(" ", "")
    lhs, res = eq.split("->")
    specs = lhs.split(",")
    if len(specs) != 2 or "..." in eq:
        raise NoGradientRule(f"grad of einsum {eq!r}: only two explicit operands")
    grads = []
    for i in (0, 1):
        other = specs[1 - i]
        missing = set(specs[i]) - set(res) - set(other)
        if missing:
            raise NoGradientRule(
                f"grad of einsum {eq!r}: letters {sorted(missing)} appear in one operand only"
            )
        grads.append(F.einsum(f"{res},{other}->{specs[i]}", g, ins[1 - i]))
    return tuple(grads)


def _keepdims_shape(x: Tensor, axes) -> tuple[int, ...]:
    axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


@_rule("sum")
def _sum(g, ins, out, attrs):
    x = ins[0]
    return (F.broadcast_to(F.reshape(g, _keepdims_shape(x, attrs.get("axes"))), x.shape),)


@_rule("mean")
def _mean(g, ins, out, attrs):
    x = ins[0]
    gb = F.broadcast_to(F.reshape(g, _keepdims_shape(x, attrs.get("axes"))), x.shape)
    return (F.scale(gb, out.size / max(x.size, 1)),)


@_rule("max")
def _max(g, ins, out, attrs):
    x = ins[0]
    keep = _keepdims_shape(x, attrs.get("axes"))
    gb = F.broadcast_to(F.reshape(g, keep), x.shape)
    hit = F.compare("eq", x, F.broadcast_to(F.reshape(out, keep), x.shape))
    return (F.where(hit, gb, 0.0),)


@_rule("reshape")
def _reshape(g, ins, out, attrs):
    return (F.reshape(g, ins[0].shape),)


@_rule("transpose")
def _transpose(g, ins, out, attrs):
    inv = tuple(int(i) for i in np.argsort(attrs["perm"]))
    return (F.transpose(g, inv),)


@_rule("broadcast_to")
def _broadcast(g, ins, out, attrs):
    return (unbroadcast(g, ins[0].shape),)


@_rule("getitem")
def _getitem(g, ins, out, attrs):
    return (_op("getitem_grad", g, shape=ins[0].shape, index=attrs["index"]),)


@_rule("getitem_grad")
def _getitem_grad(g, ins, out, attrs):
    return (_op("getitem", g, index=attrs["index"]),)


def backward(tape: Tape, out: Tensor, wrt: Sequence[Tensor]) -> list[Tensor]:
    """Gradients of the scalar ``out`` with respect to each of ``wrt`` (zeros if unused)."""
    if out.size != 1:
        raise CompilerArgumentError(
            f"grad needs a scalar output, got {out.type}; reduce it (e.g. .mean())"
        )
    grads: dict[int, Tensor] = {id(out): F.ones_like(out)}
    for op, inputs, attrs, res in reversed(tape.entries):
        g = grads.get(id(res))
        if g is None:
            continue
        rule = VJP.get(op)
        if rule is None:
            raise NoGradientRule(
                f"no gradient rule for op {op!r}; differentiate before fusion, or avoid it"
            )
        for t, gi in zip(inputs, rule(g, inputs, res, attrs), strict=True):
            if gi is None or id(t) not in tape.watched:
                continue
            prev = grads.get(id(t))
            grads[id(t)] = gi if prev is None else F.add(prev, gi)
    return [grads.get(id(w)) if id(w) in grads else F.zeros_like(w) for w in wrt]


def _targets(arg: Any) -> tuple[list[Tensor], Callable[[list[Tensor]], Any], Any]:
    """The tensors to differentiate for one argument, how to pack their grads, the arg."""
    if isinstance(arg, Cell):
        params = arg.parameters()
        return list(params.values()), lambda gs: dict(zip(params, gs, strict=True)), arg
    t = arg if isinstance(arg, Tensor) else tensor(arg)
    return [t], lambda gs: gs[0], t


def value_and_grad(fn: Callable[..., Tensor], argnums: int | Sequence[int] = 0):
    """``fn``'s value and its gradient with respect to the arguments ``argnums``.

    A ``Tensor`` argument gets a Tensor gradient; a ``Cell`` argument gets a dict of its
    parameters' gradients by name.
    """
    many = not isinstance(argnums, int)
    nums = tuple(argnums) if many else (argnums,)

    def wrapped(*args: Any):
        args = list(args)
        packs = []
        tape = Tape()
        for k in nums:
            ts, pack, arg = _targets(args[k])
            args[k] = arg
            for t in ts:
                tape.watch(t)
            packs.append((ts, pack))
        with tape:
            # under an AST capture the capture converts fn's control flow; eager: fn itself
            out = current().convert(fn)(*args)
        flat = [t for ts, _ in packs for t in ts]
        gs = backward(tape, out, flat)
        res, i = [], 0
        for ts, pack in packs:
            res.append(pack(gs[i : i + len(ts)]))
            i += len(ts)
        return out, (tuple(res) if many else res[0])

    wrapped.__name__ = f"value_and_grad({getattr(fn, '__name__', 'fn')})"
    wrapped.__explorer_wraps__ = fn
    _keep_signature(wrapped, fn)
    return wrapped


def _keep_signature(wrapped: Callable, fn: Callable) -> None:
    """Give ``wrapped(*args)`` ``fn``'s signature, so that ``jit`` binds tensor arguments
    by name and captures them as graph inputs (not as constants of one call)."""
    try:
        wrapped.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass


def grad(fn: Callable[..., Tensor], argnums: int | Sequence[int] = 0):
    """The gradient function of a scalar-valued ``fn`` (eager: a tape; under ``@jit``: a
    backward graph in the IR)."""
    vg = value_and_grad(fn, argnums)

    def wrapped(*args: Any):
        return vg(*args)[1]

    wrapped.__name__ = f"grad({getattr(fn, '__name__', 'fn')})"
    wrapped.__explorer_wraps__ = fn
    _keep_signature(wrapped, fn)
    return wrapped
