"""Reverse mode through a ``while`` on a tensor under ``@jit`` (by recomputation).

The forward pass is a ``loop`` node that also counts its trips ``n``. Its gradient is a
second loop running ``k = n-1 .. 0``; each trip recomputes the state entering iteration
``k`` from the initial state (an inner loop of ``k`` trips: no per-iteration storage,
which a static graph cannot size, at the price of O(n^2) body evaluations) and applies
the body's vector-Jacobian product there, traced with a tape of its own::

    cot = dL/d(state after the loop); gcap = 0
    for k in n-1 .. 0:
        s_k = body^k(state_0)
        cot, dcap = vjp(body, s_k)(cot)
        gcap += dcap
    dL/d(state_0) = cot; dL/d(captured tensors) = gcap

The tape sees one entry per float output of the loop, whose rule builds that loop.
``while_`` (what a converted ``while`` calls) lives here because the gradient loop is
itself built with ``while_``.
"""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..autodiff import VJP, Tape, backward
from ..tensor import Tensor
from ..trace_stack import no_tapes, tapes
from .control import as_tensor, is_symbolic, loop

__all__ = ["while_", "differentiable_loop"]

TRIPS = "__jit_trips"


def _float(t: Any) -> bool:
    return isinstance(t, Tensor) and t.dtype.is_float


def while_(cond_fn, body_fn, init: tuple, names: tuple[str, ...], line: int):
    """A converted ``while``: Python loop while the test is a Python value; a ``loop``
    node from the first iteration whose test is a tensor (differentiable while a gradient
    tape records: ``differentiable_loop``)."""
    vals = tuple(init)
    c = cond_fn(*vals)
    while not is_symbolic(c):
        if not c:
            return vals
        vals = tuple(body_fn(*vals))
        c = cond_fn(*vals)
    if tapes():
        return differentiable_loop(cond_fn, body_fn, vals, names, line)
    return loop(cond_fn, body_fn, vals, names, line)[0]


def differentiable_loop(cond_fn, body_fn, vals: tuple, names: tuple[str, ...], line: int):
    """A ``loop`` node (with a trip counter) and tape entries that differentiate it."""
    # the bodies are subgraphs: their ops are not ops of the outer tapes
    with no_tapes() as outer:
        out, state_idx, caps = loop(
            lambda *a: cond_fn(*a[:-1]),
            lambda *a: (*body_fn(*a[:-1]), a[-1] + 1),
            (*vals, 0), (*names, TRIPS), line,
        )  # fmt: skip
    state_idx = [k for k in state_idx if k < len(vals)]
    result, trips = out[:-1], out[-1]
    init = [as_tensor(vals[k]) for k in state_idx]
    inputs = (*init, *caps)
    plan = _Backward(body_fn, vals, state_idx, init, list(caps), trips, names, line)
    for i, k in enumerate(state_idx):
        if _float(result[k]):
            for tape in outer:
                tape.push("while_loop", inputs, {"vjp": plan, "index": i}, result[k])
    return result


class _Backward:
    """Builds the gradient loop of one forward loop, for the cotangent of one output."""

    def __init__(self, body_fn, vals, state_idx, init, caps, trips, names, line) -> None:
        self.body_fn, self.vals, self.state_idx = body_fn, vals, state_idx
        self.init, self.caps, self.trips = init, caps, trips
        self.names, self.line = names, line
        self.fs = [i for i, t in enumerate(init) if _float(t)]  # differentiable states
        self.fc = [i for i, t in enumerate(caps) if _float(t)]  # differentiable captures

    def _body(self, state: list[Any]) -> list[Any]:
        full = list(self.vals)
        for k, v in zip(self.state_idx, state, strict=True):
            full[k] = v
        out = self.body_fn(*full)
        return [out[k] for k in self.state_idx]

    def _recompute(self, k: Tensor) -> list[Any]:
        """The state entering iteration ``k``: ``k`` trips of the body from the start."""
        names = (TRIPS, *(self.names[j] for j in self.state_idx))
        out = while_(
            lambda j, *s: j < k, lambda j, *s: (j + 1, *self._body(list(s))),
            (0, *self.init), names, self.line,
        )  # fmt: skip
        return list(out[1:])

    def _step(self, k: Tensor, cot: list[Tensor], gcap: list[Tensor]):
        state = self._recompute(k)
        wrt = [state[i] for i in self.fs] + [self.caps[i] for i in self.fc]
        with Tape() as tape:
            for t in wrt:
                tape.watch(t)
            new = self._body(state)
            total = None
            for i, c in zip(self.fs, cot, strict=True):
                term = F.sum(F.mul(new[i], c), None)
                total = term if total is None else F.add(total, term)
        grads = backward(tape, total, wrt) if total is not None else []
        n = len(self.fs)
        return k - 1, *grads[:n], *[F.add(a, b) for a, b in zip(gcap, grads[n:], strict=True)]

    def __call__(self, g: Tensor, index: int) -> list[Tensor | None]:
        cot = [g if i == index else F.zeros_like(self.init[i]) for i in self.fs]
        gcap = [F.zeros_like(self.caps[i]) for i in self.fc]
        n, m = len(self.fs), len(self.fc)
        names = ("__jit_k", *(f"__jit_dstate{i}" for i in range(n)),
                 *(f"__jit_dcap{i}" for i in range(m)))  # fmt: skip
        out = while_(
            lambda k, *rest: k >= 0,
            lambda k, *rest: self._step(k, list(rest[:n]), list(rest[n:])),
            (self.trips - 1, *cot, *gcap), names, self.line,
        )  # fmt: skip
        grads: list[Tensor | None] = [None] * (len(self.init) + len(self.caps))
        for j, i in enumerate(self.fs):
            grads[i] = out[1 + j]
        for j, i in enumerate(self.fc):
            grads[len(self.init) + i] = out[1 + n + j]
        return grads


def _while_loop_vjp(g, inputs, out, attrs):
    return attrs["vjp"](g, attrs["index"])


VJP["while_loop"] = _while_loop_vjp
