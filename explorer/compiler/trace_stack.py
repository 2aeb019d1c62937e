"""The trace stack: which trace receives each op, and which gradient tapes watch it.

The pattern is JAX's: eager execution is the base of the stack (``eager.EVAL``, an
``EvalTrace`` that runs each op at once); a ``@jit`` capture pushes its ``Tracer`` on top
for the duration of the capture, and ``apply`` hands every op to the top trace. Gradient
tapes are a second stack beside it: every op is pushed on each active tape whichever trace
ran it, so ``grad`` works eagerly and under ``@jit`` alike.

Both stacks live in ``contextvars``: each thread (and each asyncio task) has its own, so a
function compiling in one thread never sees the eager ops of another, and vice versa.

A trace is any object with ``record(op, inputs, attrs) -> Tensor``, ``constant(array) ->
Tensor`` and ``convert(fn) -> fn`` (what a capture does to a user function it calls:
the eager base and trace-mode captures return it unchanged).

>>> from explorer.compiler import trace_stack
>>> trace_stack.capturing() is None  # eager: nothing is being captured
True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from .eager import EVAL
from .tensor import Tensor

__all__ = [
    "Trace", "TapeLike", "current", "capturing", "tracing", "tapes", "taping", "no_tapes",
    "apply",
]  # fmt: skip


class Trace(Protocol):
    """What the stack asks of a trace (``eager.EvalTrace``, ``jit.capture.Tracer``)."""

    def record(self, op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor: ...

    def constant(self, array: np.ndarray) -> Tensor: ...

    def convert(self, fn: Any) -> Any: ...


class TapeLike(Protocol):
    """What the stack asks of a gradient tape (``autodiff.Tape``)."""

    def push(self, op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any],
             out: Tensor) -> None: ...  # fmt: skip


_TOP: contextvars.ContextVar[Any] = contextvars.ContextVar("explorer_trace", default=EVAL)
_TAPES: contextvars.ContextVar[tuple[TapeLike, ...]] = contextvars.ContextVar(
    "explorer_tapes", default=()
)


def current() -> Trace:
    """The trace that receives ops in this thread: the innermost capture, else eager."""
    return _TOP.get()


def capturing() -> Any:
    """The innermost active capture (a ``Tracer``) of this thread, or None when eager."""
    top = _TOP.get()
    return None if top is EVAL else top


@contextlib.contextmanager
def tracing(trace: Trace) -> Iterator[Trace]:
    """Make ``trace`` the top of this thread's stack for the block."""
    token = _TOP.set(trace)
    try:
        yield trace
    finally:
        _TOP.reset(token)


def tapes() -> tuple[TapeLike, ...]:
    """The gradient tapes recording in this thread, outermost first."""
    return _TAPES.get()


@contextlib.contextmanager
def taping(tape: TapeLike) -> Iterator[TapeLike]:
    """Push ``tape`` for the block: every op applied inside is offered to it."""
    token = _TAPES.set((*_TAPES.get(), tape))
    try:
        yield tape
    finally:
        _TAPES.reset(token)


@contextlib.contextmanager
def no_tapes() -> Iterator[tuple[TapeLike, ...]]:
    """Hide the active tapes for the block (ops of a loop body's subgraph are not ops of the
    outer tape); yields the hidden tapes."""
    hidden = _TAPES.get()
    token = _TAPES.set(())
    try:
        yield hidden
    finally:
        _TAPES.reset(token)


def apply(op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor:
    """Run (eager) or record (capture) one op, and push it on every active tape."""
    out = _TOP.get().record(op, inputs, attrs)
    for tape in _TAPES.get():
        tape.push(op, inputs, attrs, out)
    return out
