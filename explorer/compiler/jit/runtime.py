"""What the converted source calls at capture time: ``if_``, ``while_``, ``call``, ``ld``.

``transform.convert`` rewrites a user function's ``if``/``while`` and call sites into calls
of this module (bound as ``__explorer_jit__`` in the function's globals). The control-flow
builders are ``control`` (``if_``, ``loop``, ``ld``) and ``loop_grad`` (``while_``); this
module adds ``call``/``maybe_convert``, which convert the user functions and cells a
compiled function calls (library code is traced as it is).
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from typing import Any

from ..errors import GraphBreak, user_location
from ..nn import Cell
from ..trace_stack import capturing
from . import transform
from .control import UNDEFINED, if_, is_symbolic, ld, loop
from .loop_grad import while_
from .symbolic import SymInt, show

__all__ = [
    "ld",
    "if_",
    "while_",
    "loop",
    "call",
    "maybe_convert",
    "python_test",
    "range_",
    "UNDEFINED",
]

_INTERNAL = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _user_function(f: Any) -> bool:
    if not isinstance(f, types.FunctionType):
        return False
    if getattr(f, "__explorer_wraps__", None) is not None:
        return False
    mod = sys.modules.get(f.__module__ or "")
    path = getattr(mod, "__file__", None) or f.__code__.co_filename
    return not os.path.abspath(path).startswith(_INTERNAL + os.sep) and "site-packages" not in path


def _convertible(f: types.FunctionType) -> bool:
    if f.__name__ == "<lambda>":
        return False
    try:
        inspect.getsourcelines(f)
    except (OSError, TypeError):
        return False
    return True


def maybe_convert(f: Any) -> Any:
    """``f`` with its control flow converted, when an AST capture is active and ``f`` is user
    code; otherwise ``f`` itself (library code, and a ``JitFunction``, which inlines its own
    converted function when called inside a capture)."""
    tracer = capturing()
    if tracer is None or tracer.mode != "ast":
        return f
    if isinstance(f, Cell) and _user_function(type(f).forward):
        fwd = maybe_convert(type(f).forward)
        cell = f

        def run_cell(*a, **k):
            return cell.run_in_scope(fwd, cell, *a, **k)

        return run_cell
    if isinstance(f, types.MethodType) and _user_function(f.__func__):
        return types.MethodType(maybe_convert(f.__func__), f.__self__)
    if _user_function(f) and _convertible(f):
        tracer.root.called.append(f)  # its globals are guarded (api: module-scope tensors)
        return transform.convert(f, sys.modules[__name__])
    return f


def call(f: Any, *args: Any, **kwargs: Any) -> Any:
    """A converted call site: converts user functions and cells on the way in."""
    return maybe_convert(f)(*args, **kwargs)


def python_test(test: Any, construct: str, hint: str) -> Any:
    """The test of an ``if``/``while`` the compiler left as Python (it holds a
    return/break/continue): a Python value passes; a tensor is a graph break naming it."""
    if is_symbolic(test):
        raise GraphBreak(construct, hint, user_location(2))
    return test


def range_(*args: Any) -> range:
    """``range`` in converted code: a bound computed from a symbolic dim is refused (the
    loop would be unrolled at the sentinel size, thousands of iterations)."""
    for a in args:
        if isinstance(a, SymInt):
            raise GraphBreak(
                f"a Python loop over range({show(a.expr, a.ctx.names)}), a symbolic size",
                "drop that dim from dynamic= (each size then compiles), or loop with a `while` "
                "on a tensor counter",
                user_location(2),
            )
    return range(*args)
