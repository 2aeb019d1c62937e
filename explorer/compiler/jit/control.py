"""Control flow at capture time: ``if_`` and ``loop`` build ``cond`` and ``loop`` nodes.

A test that is a Python value runs as plain Python (so branches on Python values are
resolved at compile time); a test that is a traced tensor becomes ``cond`` or ``loop``
nodes whose bodies are traced into subgraphs. While a gradient tape is recording, a tensor
``if`` stays a ``cond`` and its gradient is another ``cond`` that differentiates the branch
the test picks (``_differentiable_if``): neither pass runs both branches. ``while_`` (a Python loop, a ``loop`` node, or a differentiable one) is in
``loop_grad``, the layer above, because its gradient loop is built from ``loop``.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ...ir.ops_tensor import Subgraph
from .. import functional as F
from ..autodiff import VJP, Tape, backward
from ..errors import JitSyntaxError, ShapeError, SourceLocation, user_location
from ..tensor import Tensor
from ..trace_stack import capturing, no_tapes, tapes, tracing
from .capture import Tracer

__all__ = ["ld", "if_", "loop", "as_tensor", "is_symbolic", "UNDEFINED"]

_IDS = itertools.count(1)


class _Undefined:
    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Any = _Undefined()


def ld(thunk: Callable[[], Any]) -> Any:
    """The current value of a variable, or ``UNDEFINED`` if it is not bound yet."""
    try:
        return thunk()
    except NameError:
        return UNDEFINED


def is_symbolic(x: Any) -> bool:
    """A traced tensor of an abstract capture (its value is not known)."""
    return isinstance(x, Tensor) and x.tracer is not None and x.data is None


def _loc(line: int) -> SourceLocation | None:
    here = user_location(3)
    return SourceLocation(here.filename, line, "") if here else None


def as_tensor(v: Any) -> Tensor:
    if isinstance(v, Tensor):
        return v
    if isinstance(v, bool | np.bool_):
        return F.constant(np.asarray(v))
    if isinstance(v, numbers.Integral):
        return F.constant(np.asarray(v, np.int64))
    return F.constant(np.asarray(v, np.float32))


def _merge(name: str, a: Any, b: Any, line: int, what: str):
    """(python value, None) when both sides agree on a Python value, else (None, (ta, tb))."""
    if a is UNDEFINED and b is UNDEFINED:
        return UNDEFINED, None
    if a is UNDEFINED or b is UNDEFINED:
        raise JitSyntaxError(
            f"variable {name!r} assigned in only one branch of an if on a tensor", _loc(line),
            f"give {name!r} a value before the if, or assign it in both branches",
        )  # fmt: skip
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        same = a is b or (type(a) is type(b) and a == b)
        if same:
            return a, None
        if not isinstance(a, numbers.Number) or not isinstance(b, numbers.Number):
            raise JitSyntaxError(
                f"variable {name!r} set to different Python values in the branches of {what}",
                _loc(line), "make it a tensor or compute it outside the if",
            )  # fmt: skip
    return None, (a, b)


def if_(test: Any, then_fn, else_fn, init: tuple, names: tuple[str, ...], line: int):
    """A converted ``if``."""
    if not is_symbolic(test):
        return then_fn(*init) if test else else_fn(*init)
    if test.size != 1:
        raise ShapeError(
            f"`if` on a tensor of shape {test.shape} (needs one value); use F.where for an "
            "elementwise choice", _loc(line),
        )  # fmt: skip
    if tapes():
        return _differentiable_if(test, then_fn, else_fn, init, names, line)
    return _cond(test, then_fn, else_fn, init, names, line)[0]


def _cond(test: Tensor, then_fn, else_fn, init: tuple, names: tuple[str, ...], line: int):
    """``cond`` nodes for an ``if`` on a tensor: (the values after the if, the outer
    tensors the branches capture)."""
    tracer = capturing()
    subs, results = [], []
    for label, fn in (("then", then_fn), ("else", else_fn)):
        sub = Tracer(f"{tracer.name}.{label}{line}", tracer, mode=tracer.mode)
        with tracing(sub):
            results.append(tuple(fn(*init)))
        subs.append(sub)
    merged: list[Any] = []
    pairs: list[tuple[int, Tensor, Tensor]] = []
    for k, (n, a, b) in enumerate(zip(names, results[0], results[1], strict=True)):
        val, pair = _merge(n, a, b, line, "an if on a tensor")
        merged.append(val)
        if pair is None:
            continue
        with tracing(subs[0]):
            ta = as_tensor(pair[0])
        with tracing(subs[1]):
            tb = as_tensor(pair[1])
        if ta.type != tb.type:
            raise ShapeError(
                f"variable {n!r} is {ta.type} after the then-branch and {tb.type} after the "
                "else-branch of an if on a tensor; both branches must give the same type",
                _loc(line),
            )  # fmt: skip
        pairs.append((k, ta, tb))
    if not pairs:
        return tuple(merged), []
    graphs = [sub.build([p[1 + i] for p in pairs]) for i, sub in enumerate(subs)]
    caps0, caps1 = subs[0].captures, subs[1].captures
    attrs = {
        "then_": Subgraph(graphs[0]), "else_": Subgraph(graphs[1]),
        "then_args": tuple(range(len(caps0))),
        "else_args": tuple(range(len(caps0), len(caps0) + len(caps1))),
        "group": f"cond{next(_IDS)}",
    }  # fmt: skip
    inputs = (test, *caps0, *caps1)
    for i, (k, _, _) in enumerate(pairs):
        merged[k] = tracer.add_node("cond", inputs, dict(attrs, index=i), f"cond.{names[k]}")
    return tuple(merged), [*caps0, *caps1]


def _differentiable_if(test: Tensor, then_fn, else_fn, init: tuple, names, line: int):
    """``cond`` nodes, and tape entries whose gradient is a ``cond`` too: the backward
    runs the VJP of the branch the forward took, never both branches."""
    with no_tapes() as outer:  # the branches are subgraphs: not ops of the outer tapes
        merged, caps = _cond(test, then_fn, else_fn, init, names, line)
    uniq: dict[int, Tensor] = {}
    for t in caps:
        uniq.setdefault(id(t), t)
    inputs = tuple(uniq.values())
    plan = _CondBackward(test, then_fn, else_fn, init, names, line, inputs)
    for k, v in enumerate(merged):
        if isinstance(v, Tensor) and v.dtype.is_float and v.tracer is capturing():
            for tape in outer:
                tape.push("cond_branch", inputs, {"vjp": plan, "k": k}, v)
    return merged


class _CondBackward:
    """Builds the backward ``cond`` of one forward ``if``, for the cotangent of output k:
    each branch is traced again under a tape and differentiated; only the branch the
    test picks runs."""

    def __init__(self, test, then_fn, else_fn, init, names, line, inputs) -> None:
        self.test, self.fns, self.init = test, (then_fn, else_fn), init
        self.names, self.line, self.inputs = names, line, inputs
        self.wrt = [i for i, t in enumerate(inputs) if t.dtype.is_float]

    def _branch(self, fn, g: Tensor, k: int):
        def run():
            wrt = [self.inputs[i] for i in self.wrt]
            with Tape() as tape:
                for t in wrt:
                    tape.watch(t)
                y = as_tensor(tuple(fn(*self.init))[k])
                total = F.sum(F.mul(y, g) if y.dtype.is_float else F.zeros_like(g), None)
            grads = backward(tape, total, wrt)
            return tuple(F.cast(d, w.dtype) if d.dtype != w.dtype else d
                         for d, w in zip(grads, wrt, strict=True))  # fmt: skip

        return run

    def __call__(self, g: Tensor, k: int) -> list[Tensor | None]:
        out: list[Tensor | None] = [None] * len(self.inputs)
        if not self.wrt:
            return out
        names = tuple(f"__jit_d{self.names[k]}_{i}" for i in range(len(self.wrt)))
        then_, else_ = (self._branch(fn, g, k) for fn in self.fns)
        if tapes():  # a gradient of this gradient: the backward cond is taped too
            grads = _differentiable_if(self.test, then_, else_, (), names, self.line)
        else:
            grads, _ = _cond(self.test, then_, else_, (), names, self.line)
        for i, d in zip(self.wrt, grads, strict=True):
            out[i] = d
        return out


def _cond_branch_vjp(g, inputs, out, attrs):
    return attrs["vjp"](g, attrs["k"])


VJP["cond_branch"] = _cond_branch_vjp


def loop(cond_fn, body_fn, vals: tuple, names: tuple[str, ...], line: int):
    """A ``loop`` node for a while whose test is a tensor: (the values after the loop, the
    state positions, the outer tensors the bodies capture)."""
    tracer = capturing()
    state_idx = [k for k, v in enumerate(vals) if v is not UNDEFINED and (
        isinstance(v, Tensor) or (isinstance(v, numbers.Number) and not isinstance(v, bool)))]  # fmt: skip
    vals = tuple(as_tensor(v) if k in state_idx else v for k, v in enumerate(vals))
    state = [vals[k] for k in state_idx]
    subs = []
    outs: list[Any] = []
    for label, fn in (("cond", cond_fn), ("body", body_fn)):
        sub = Tracer(f"{tracer.name}.while{line}.{label}", tracer, mode=tracer.mode)
        args = list(vals)
        for k in state_idx:
            args[k] = sub.input(names[k], vals[k].type)
        with tracing(sub):
            r = fn(*args)
            if label == "cond":
                outs.append([as_tensor(r)])
            else:
                r = tuple(r)
                new = []
                for k, (n, v0, v1) in enumerate(zip(names, vals, r, strict=True)):
                    if k in state_idx:
                        t1 = as_tensor(v1)
                        if t1.type != v0.type:
                            raise ShapeError(
                                f"loop variable {n!r} enters the while loop as {v0.type} and "
                                f"leaves an iteration as {t1.type}; it must keep its shape and "
                                "dtype (start it as a tensor of the right dtype)", _loc(line),
                            )  # fmt: skip
                        new.append(t1)
                    elif v1 is not v0 and v1 != v0:
                        raise JitSyntaxError(
                            f"the Python value {n!r} changes inside a while loop on a tensor",
                            _loc(line), "make it a tensor (it is then carried by the loop)",
                        )  # fmt: skip
                outs.append(new)
        subs.append(sub)
    n = len(state)
    graphs = [sub.build(o) for sub, o in zip(subs, outs, strict=True)]
    cc, bc = subs[0].captures, subs[1].captures
    attrs = {
        "cond": Subgraph(graphs[0]), "body": Subgraph(graphs[1]), "n_state": n,
        "cond_args": tuple(range(n)) + tuple(range(n, n + len(cc))),
        "body_args": tuple(range(n)) + tuple(range(n + len(cc), n + len(cc) + len(bc))),
        "group": f"loop{next(_IDS)}",
    }  # fmt: skip
    inputs = (*state, *cc, *bc)
    result = list(vals)
    for i, k in enumerate(state_idx):
        result[k] = tracer.add_node("loop", inputs, dict(attrs, index=i), f"loop.{names[k]}")
    return tuple(result), state_idx, [*cc, *bc]
