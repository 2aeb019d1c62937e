"""Source transformation (MindSpore/AutoGraph style): parse a function with ``ast`` and
rewrite its control flow into calls the capture can turn into graph nodes.

``if test: A else: B`` becomes::

    def __then_1(x, y): A; return (x, y)
    def __else_1(x, y): B; return (x, y)
    (x, y) = __explorer_jit__.if_(test, __then_1, __else_1, (ld(x), ld(y)), ('x', 'y'), line)

``while test: body`` becomes a ``cond``/``body`` function pair passed to ``while_``; a
call ``f(a)`` becomes ``call(f, a)`` so that called functions are converted too. Both
decide at capture time: a Python value runs as Python (a ``for`` over ``range`` unrolls), a
tensor becomes a ``cond`` or ``loop`` node. ``check`` lists the constructs strict mode
rejects, each with its file, line and a hint.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from ...memo import Memo
from ..errors import JitSyntaxError, SourceLocation

__all__ = ["convert", "check", "Issue", "RUNTIME_NAME"]

RUNTIME_NAME = "__explorer_jit__"

_UNSUPPORTED: dict[type, tuple[str, str]] = {
    ast.Try: ("a try statement", "move error handling outside the compiled function"),
    ast.With: ("a with statement", "enter the context outside the compiled function"),
    ast.Global: ("a global statement", "pass the value as an argument and return results"),
    ast.Nonlocal: ("a nonlocal statement", "return the value instead of rebinding it"),
    ast.Delete: ("a del statement", "let the name go out of scope instead"),
    ast.Yield: ("a yield expression", "return a tuple instead of a generator"),
    ast.YieldFrom: ("a yield from expression", "return a tuple instead of a generator"),
    ast.Await: ("an await expression", "compiled functions are synchronous"),
    ast.AsyncFunctionDef: ("an async function", "compiled functions are synchronous"),
    ast.ClassDef: ("a class definition", "define the class outside the compiled function"),
    ast.Match: ("a match statement", "use if/elif on Python values"),
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = _UNSUPPORTED[ast.Try]


@dataclass(frozen=True)
class Issue:
    """An unsupported construct found in the source."""

    construct: str
    location: SourceLocation
    hint: str

    def error(self) -> JitSyntaxError:
        return JitSyntaxError(self.construct, self.location, self.hint)


def _source(fn) -> tuple[ast.FunctionDef, str, list[str]]:
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise JitSyntaxError(
            f"{getattr(fn, '__qualname__', fn)!r} (its source is not available: {e})", None,
            'define it in a file, or use jit(..., capture="trace")',
        ) from None  # fmt: skip
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise JitSyntaxError(f"{type(fdef).__name__} (a lambda or non-function)", None,
                             'write a def, or use jit(..., capture="trace")')  # fmt: skip
    return fdef, filename, lines


def _stored_names(nodes: list[ast.stmt]) -> list[str]:
    """Names assigned in these statements (not inside nested functions), first-seen order."""
    out: dict[str, None] = {}
    stack: list[ast.AST] = list(reversed(nodes))
    while stack:
        n = stack.pop()
        if isinstance(n, ast.FunctionDef | ast.Lambda | ast.ClassDef):
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("__jit_"):
                out.setdefault(n.name, None)
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            if not n.id.startswith("__jit_"):
                out.setdefault(n.id, None)
        stack.extend(reversed(list(ast.iter_child_nodes(n))))
    return list(out)


def _has_jump(nodes: list[ast.stmt]) -> bool:
    """A return, break or continue among the statements (nested functions aside)."""
    stack: list[ast.AST] = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.FunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(n, ast.Return | ast.Break | ast.Continue):
            return True
        stack.extend(ast.iter_child_nodes(n))
    return False


_JUMPS = {ast.Return: "a return", ast.Break: "a break", ast.Continue: "a continue"}


def _jump_kind(nodes: list[ast.stmt], loops: bool) -> str:
    """The first return/break/continue among the statements, named (``a break``); with
    ``loops`` false, a break or continue of a loop nested in them does not count."""
    stack: list[ast.AST] = list(reversed(nodes))
    while stack:
        n = stack.pop()
        if isinstance(n, ast.FunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if type(n) in _JUMPS:
            return _JUMPS[type(n)]
        kids = list(ast.iter_child_nodes(n))
        if isinstance(n, ast.For | ast.While) and not loops:  # its own break/continue
            kids = [k for k in kids if not isinstance(k, ast.Break | ast.Continue)]
        stack.extend(reversed(kids))
    return "a jump"


def _static_test(test: ast.expr, construct: str, hint: str) -> ast.expr:
    """``test`` checked to be a Python value at run time (``runtime.python_test``)."""
    call = ast.Call(_rt("python_test"), [test, ast.Constant(construct), ast.Constant(hint)], [])
    return ast.copy_location(call, test)


def _rt(attr: str) -> ast.expr:
    return ast.Attribute(ast.Name(RUNTIME_NAME, ast.Load()), attr, ast.Load())


def _ld(name: str) -> ast.expr:
    lam = ast.Lambda(ast.arguments([], [], None, [], [], None, []), ast.Name(name, ast.Load()))
    return ast.Call(_rt("ld"), [lam], [])


def _tuple(names: list[str], ctx) -> ast.expr:
    return ast.Tuple([ast.Name(n, ctx()) for n in names], ctx())


def _def(name: str, params: list[str], body: list[ast.stmt], ret: ast.expr) -> ast.FunctionDef:
    args = ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, [])
    return ast.FunctionDef(name, args, body + [ast.Return(ret)], [], None, None)


class _Converter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.k = 0

    def _next(self) -> int:
        self.k += 1
        return self.k

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.decorator_list = []
        self.generic_visit(node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id == "range":  # refuses a symbolic size by name
            return ast.copy_location(ast.Call(_rt("range_"), node.args, node.keywords), node)
        if isinstance(f, ast.Name) and f.id in ("super", "len", "isinstance", "print"):
            return node
        new = ast.Call(_rt("call"), [f] + node.args, node.keywords)
        return ast.copy_location(new, node)

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        if _has_jump(node.body + node.orelse):  # stays Python: a tensor test is an error
            jump = _jump_kind(node.body + node.orelse, loops=True)
            node.test = _static_test(
                node.test, f"{jump} inside an `if` on a tensor (line {node.lineno})",
                "assign the result to the same variables in both branches and return (or "
                "leave the loop) after the if; a tensor `if` becomes a cond node only without "
                "return/break/continue in it",
            )  # fmt: skip
            ast.fix_missing_locations(node)
            return node
        names = _stored_names(node.body + node.orelse)
        k = self._next()
        then_ = _def(f"__jit_then_{k}", names, node.body, _tuple(names, ast.Load))
        else_ = _def(f"__jit_else_{k}", names, node.orelse or [ast.Pass()],
                     _tuple(names, ast.Load))  # fmt: skip
        call = ast.Call(_rt("if_"), [
            node.test, ast.Name(then_.name, ast.Load()), ast.Name(else_.name, ast.Load()),
            ast.Tuple([_ld(n) for n in names], ast.Load()),
            ast.Tuple([ast.Constant(n) for n in names], ast.Load()), ast.Constant(node.lineno),
        ], [])  # fmt: skip
        stmt = ast.Assign([_tuple(names, ast.Store)], call) if names else ast.Expr(call)
        out = [then_, else_, stmt]
        for s in out:
            ast.copy_location(s, node)
            ast.fix_missing_locations(s)
        return out

    def visit_While(self, node: ast.While) -> Any:
        self.generic_visit(node)
        if node.orelse or _has_jump(node.body):
            what = "an else clause" if node.orelse else _jump_kind(node.body, loops=False)
            node.test = _static_test(
                node.test, f"{what} in a `while` on a tensor (line {node.lineno})",
                "carry a 0/1 `go` tensor in the loop state, set it with F.where in the body "
                "and loop `while go > 0`; a tensor `while` becomes a loop node only without "
                "return/break/continue/else",
            )  # fmt: skip
            ast.fix_missing_locations(node)
            return node
        names = _stored_names(node.body)
        k = self._next()
        cond = _def(f"__jit_cond_{k}", names, [], node.test)
        body = _def(f"__jit_body_{k}", names, node.body, _tuple(names, ast.Load))
        call = ast.Call(_rt("while_"), [
            ast.Name(cond.name, ast.Load()), ast.Name(body.name, ast.Load()),
            ast.Tuple([_ld(n) for n in names], ast.Load()),
            ast.Tuple([ast.Constant(n) for n in names], ast.Load()), ast.Constant(node.lineno),
        ], [])  # fmt: skip
        stmt = ast.Assign([_tuple(names, ast.Store)], call) if names else ast.Expr(call)
        out = [cond, body, stmt]
        for s in out:
            ast.copy_location(s, node)
            ast.fix_missing_locations(s)
        return out


def check(fn) -> list[Issue]:
    """Unsupported constructs and Python side effects in ``fn``'s source, in line order."""
    fdef, filename, _ = _source(fn)
    issues: list[Issue] = []
    params = {a.arg for a in fdef.args.args + fdef.args.kwonlyargs}
    local = set(_stored_names(fdef.body))

    def loc(n: ast.AST) -> SourceLocation:
        return SourceLocation(filename, n.lineno, linecache.getline(filename, n.lineno))

    def root_name(e: ast.expr) -> str | None:
        while isinstance(e, ast.Attribute | ast.Subscript):
            e = e.value
        return e.id if isinstance(e, ast.Name) else None

    for n in ast.walk(fdef):
        if n is fdef:
            continue
        if type(n) in _UNSUPPORTED:
            what, hint = _UNSUPPORTED[type(n)]
            issues.append(Issue(what, loc(n), hint))
        elif isinstance(n, ast.While) and n.orelse:
            issues.append(Issue("a while ... else", loc(n), "move the else part after the loop"))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print":
            issues.append(Issue(
                "a print() call (a Python side effect: it would run once, at compile time)",
                loc(n), "return the value and print it outside, or use syntax=\"lax\"",
            ))  # fmt: skip
        elif isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if isinstance(t, ast.Attribute | ast.Subscript):
                    r = root_name(t)
                    if r is None or r in params or r not in local:
                        issues.append(Issue(
                            f"an assignment to {ast.unparse(t)} (a Python side effect on an "
                            "object outside the function)", loc(n),
                            "return the new value instead of storing it",
                        ))  # fmt: skip
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr in ("append", "extend", "insert", "pop", "update", "add",
                                  "clear", "setdefault")):  # fmt: skip
            r = root_name(n.func.value)
            if r is None or r in params or r not in local:
                issues.append(Issue(
                    f"a call to {ast.unparse(n.func)}() (mutates an object outside the "
                    "function: done once at compile time)", loc(n),
                    "build a new value and return it",
                ))  # fmt: skip
    issues.sort(key=lambda i: i.location.lineno)
    return issues


# converted functions: key = (code object, upto, the globals it runs in); bounded, locked
_FACTORIES: Memo[Any] = Memo("compiler.converted_functions", maxsize=512)


def _factory(fn, runtime: Any, upto: int | None):
    """Compile the converted source of ``fn`` into a factory taking its closure values."""
    code = fn.__code__
    fdef, filename, _ = _source(fn)
    ret = None
    if upto is not None:
        head = fdef.body[:upto]
        ret = ast.Tuple([_ld(n) for n in _stored_names(head)], ast.Load())
        ret = ast.copy_location(ast.Return(ret), head[-1])
        fdef.body = head
    fdef = _Converter().visit(fdef)
    if ret is not None:
        fdef.body.append(ret)
    freevars = list(code.co_freevars)
    args = ast.arguments([], [ast.arg(v) for v in freevars], None, [], [], None, [])
    wrapper = ast.FunctionDef("__jit_factory", args, [fdef, ast.Return(
        ast.Name(fdef.name, ast.Load()))], [], None, None)  # fmt: skip
    wrapper.lineno = 1
    mod = ast.Module([wrapper], [])
    ast.fix_missing_locations(mod)
    compiled = compile(mod, filename, "exec")
    fn.__globals__.setdefault(RUNTIME_NAME, runtime)
    ns: dict[str, Any] = {}
    exec(compiled, fn.__globals__, ns)  # noqa: S102  (our own transformed source)
    return ns["__jit_factory"]


def convert(fn, runtime: Any, upto: int | None = None) -> types.FunctionType:
    """The converted function (cached per code object; closures re-bound on every call).

    ``upto``: keep only the first ``upto`` top-level statements and return the values of
    the names they assign, in ``_stored_names`` order (the compiled head of a function split
    at a graph break; see ``split``)."""
    key = (fn.__code__, upto, id(fn.__globals__))
    factory = _FACTORIES.get(key, lambda: _factory(fn, runtime, upto))
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    new = factory(*cells)
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    return new
