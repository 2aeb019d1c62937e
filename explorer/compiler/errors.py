"""Errors of the tensor framework; each names the user's own source line and a fix."""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

from ..errors import ExplorerError

__all__ = [
    "CompilerError", "JitSyntaxError", "ShapeError", "GraphBreak", "SourceLocation",
    "user_location", "TensorIndexError", "TorchCompileError",
]  # fmt: skip

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../explorer


@dataclass(frozen=True)
class SourceLocation:
    """A line of the user's code: file, line number and the line's text."""

    filename: str
    lineno: int
    code: str = ""

    def __str__(self) -> str:
        code = f": {self.code.strip()}" if self.code else ""
        return f"{self.filename}:{self.lineno}{code}"


def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PKG + os.sep) or filename.startswith("<")


def user_location(depth: int = 1) -> SourceLocation | None:
    """The innermost frame on the stack that is not inside ``explorer`` (the user's line)."""
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if not _is_internal(name):
            return SourceLocation(name, f.f_lineno, linecache.getline(name, f.f_lineno))
        f = f.f_back
    return None


def location_from_traceback(tb) -> SourceLocation | None:
    """The innermost user frame of a traceback (where an error really happened)."""
    found = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not _is_internal(name):
            found = SourceLocation(name, tb.tb_lineno, linecache.getline(name, tb.tb_lineno))
        tb = tb.tb_next
    return found


class CompilerError(ExplorerError):
    """Base of the compiler's errors."""


class CompilerArgumentError(CompilerError, ValueError):
    """A compiler entry point got an argument it cannot use (an unknown level or backend,
    a parameter value of the wrong shape, a gradient of a non-scalar)."""


class NoGradientRule(CompilerError, NotImplementedError):
    """An op (or an einsum form) has no gradient rule; the message says what to do instead."""


class UndefinedForward(CompilerError, NotImplementedError):
    """A ``Cell`` subclass called without a ``forward`` of its own."""


class LoopLimitExceeded(CompilerError, RuntimeError):
    """A compiled ``while`` loop ran past its ``max_iter``."""


class SymbolicZeroDivision(CompilerError, ZeroDivisionError):
    """``//`` or ``%`` by zero on a symbolic size (Python's ZeroDivisionError, named)."""


class JitSyntaxError(CompilerError):
    """A construct ``@jit`` cannot compile in strict mode.

    Args:
        construct: what was found (``try statement``, ``print() call``...).
        location: the user's file and line.
        hint: how to rewrite it (or ``syntax="lax"`` to let it run eagerly).
    """

    def __init__(self, construct: str, location: SourceLocation | None, hint: str) -> None:
        self.construct = construct
        self.location = location
        self.hint = hint
        where = f"{location}\n  " if location else ""
        super().__init__(f"{where}@jit (strict) cannot compile {construct}. Hint: {hint}")


class ShapeError(CompilerError, ValueError):
    """An op got inputs whose shapes or dtypes do not fit; names the user's line."""

    def __init__(self, message: str, location: SourceLocation | None) -> None:
        self.location = location
        where = f"{location}\n  " if location else ""
        super().__init__(f"{where}{message}")


class GraphBreak(CompilerError):
    """Raised during capture where the graph cannot continue (a ``.numpy()`` call, ``bool()``
    of a tensor outside a converted ``if``). Strict mode turns it into a ``JitSyntaxError``;
    lax mode compiles the function up to the statement that broke, runs the rest eagerly
    and records the break in the trace."""

    def __init__(self, construct: str, hint: str, location: SourceLocation | None = None):
        self.construct = construct
        self.hint = hint
        self.location = location if location is not None else user_location(2)
        super().__init__(f"{self.location}: {construct}")


class TensorIndexError(ShapeError, IndexError):
    """An index outside a tensor's dim; also an ``IndexError``, so ``for row in x`` ends."""


class TorchCompileError(CompilerError, ValueError):
    """``ex.compile`` cannot trace, build or call a PyTorch module or function: the message
    names the module, the value and the fix (torch.export's own error is summarised, never
    raised as is)."""
