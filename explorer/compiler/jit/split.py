"""Splitting a function at a graph break (lax mode): the top-level statements before the
statement that broke are compiled (the head), the rest runs eagerly (the tail).

For ``def f(x): s1; s2; s3`` breaking in ``s2``, the head is ``f`` cut after ``s1`` and
returning the names ``s1`` assigns (``transform.convert(fn, upto=1)``); the tail is::

    def f__tail(x, <names s1 assigns>):
        s2; s3

compiled from the same source lines (so errors point at the user's file), with the same
globals and closure. A function is not split when the break is in its first statement,
when the head contains a ``return`` (the tail might never run), or when its parameters
are not plain positional-or-keyword ones.
"""

from __future__ import annotations

import ast
import copy
import inspect
import types
from dataclasses import dataclass
from typing import Any

from ..errors import GraphBreak
from .transform import RUNTIME_NAME, _has_jump, _source, _stored_names

__all__ = ["Split", "plan_split"]


@dataclass(frozen=True)
class Split:
    """Where a function is cut: ``upto`` statements are compiled; from ``line`` on, eager."""

    upto: int
    line: int
    params: tuple[str, ...]
    carried: tuple[str, ...]  # names the head assigns, in the order the head returns them
    tail: Any  # the eager rest: tail(*params, *extra carried names)

    def tail_args(self, arguments: dict[str, Any], values: tuple) -> list[Any]:
        """Arguments of ``tail``: parameters (as the head left them), then the other names."""
        got = dict(zip(self.carried, values, strict=True))
        args = [got.get(p, arguments[p]) for p in self.params]
        return args + [got[n] for n in self.carried if n not in self.params]


def _break_line(gb: GraphBreak, filename: str, lo: int, hi: int) -> int | None:
    """The line of ``fn`` (lines ``lo..hi`` of ``filename``) executing when ``gb`` was raised:
    the outermost frame of the converted function on the traceback, else the location."""
    tb = gb.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == filename and lo <= tb.tb_lineno <= hi:
            return tb.tb_lineno
        tb = tb.tb_next
    loc = gb.location
    if loc is not None and loc.filename == filename and lo <= loc.lineno <= hi:
        return loc.lineno
    return None


def plan_split(fn: Any, gb: GraphBreak, runtime: Any) -> Split | None:
    """How to split ``fn`` at the break ``gb``, or None when it cannot be split cleanly."""
    if not isinstance(fn, types.FunctionType):
        return None
    try:
        fdef, filename, _ = _source(fn)
    except Exception:  # noqa: BLE001  (no source: no split, the whole function runs eagerly)
        return None
    sig = inspect.signature(fn)
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in sig.parameters.values()):
        return None
    line = _break_line(gb, filename, fdef.lineno, fdef.end_lineno or fdef.lineno)
    if line is None:
        return None
    upto = next((i for i, s in enumerate(fdef.body)
                 if s.lineno <= line <= (s.end_lineno or s.lineno)), None)  # fmt: skip
    if not upto or _has_jump(fdef.body[:upto]):
        return None
    params = tuple(sig.parameters)
    carried = tuple(_stored_names(fdef.body[:upto]))
    extra = [n for n in carried if n not in params]
    tail = _tail(fn, fdef, filename, upto, list(params) + extra, extra, runtime)
    return Split(upto, fdef.body[upto].lineno, params, carried, tail)


def _tail(fn, fdef: ast.FunctionDef, filename: str, upto: int, args: list[str],
          maybe_unbound: list[str], runtime: Any):  # fmt: skip
    body = fdef.body[upto:]
    # The head's top-level imports bind names the tail may use (``import math`` before the
    # statement that broke): they are not values the compiled head returns, so the tail
    # runs them again (an import of a loaded module is a dict lookup).
    prologue: list[ast.stmt] = [
        copy.deepcopy(s) for s in fdef.body[:upto] if isinstance(s, ast.Import | ast.ImportFrom)
    ]
    for n in maybe_unbound:  # a name the head left unassigned is unbound again here
        test = ast.Compare(ast.Name(n, ast.Load()), [ast.Is()], [
            ast.Attribute(ast.Name(RUNTIME_NAME, ast.Load()), "UNDEFINED", ast.Load())])  # fmt: skip
        prologue.append(ast.If(test, [ast.Delete([ast.Name(n, ast.Del())])], []))
    for s in prologue:
        ast.copy_location(s, body[0])
    params = ast.arguments([], [ast.arg(a) for a in args], None, [], [], None, [])
    tail = ast.FunctionDef(f"{fdef.name}__tail", params, prologue + body, [], None, None)
    ast.copy_location(tail, body[0])
    freevars = list(fn.__code__.co_freevars)
    wrapper = ast.FunctionDef("__jit_tail_factory",
                              ast.arguments([], [ast.arg(v) for v in freevars], None, [], [],
                                            None, []),
                              [tail, ast.Return(ast.Name(tail.name, ast.Load()))], [], None,
                              None)  # fmt: skip
    wrapper.lineno = 1
    mod = ast.Module([wrapper], [])
    ast.fix_missing_locations(mod)
    fn.__globals__.setdefault(RUNTIME_NAME, runtime)
    ns: dict[str, Any] = {}
    exec(compile(mod, filename, "exec"), fn.__globals__, ns)  # noqa: S102  (the user's own lines)
    return ns["__jit_tail_factory"](*[c.cell_contents for c in (fn.__closure__ or ())])
