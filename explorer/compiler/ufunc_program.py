"""A fused elementwise expression compiled to numpy ufunc calls with ``out=``: the small-
array path of ``fused`` kernels.

numexpr pays tens of microseconds per call (thread hand-off, its virtual machine's setup)
and its ``exp`` is scalar code, so below a few hundred thousand elements a straight list
of ufunc calls is faster. The expression (numexpr's Python-syntax text) is parsed with
``ast``; repeated subexpressions are computed once (gelu repeats ``in0 + in1`` four
times); every intermediate has the kernel's output shape (fusion only absorbs producers
of the consumer's shape) and lives in a temporary allocated once, reused after its last
use. ``where(a > b, a, b)`` becomes ``maximum`` (and ``<`` ``minimum``).

>>> import numpy as np
>>> k = compile_expr("(in0 + in1) * k0", [np.float32, np.float32], [2.0], (2,), np.float32)
>>> k(np.ones(2, np.float32), np.ones(2, np.float32))
array([4., 4.], dtype=float32)
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["compile_expr", "UnsupportedExpr"]

_BINOP = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide,
          ast.Pow: np.power}  # fmt: skip
_CMP = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
        ast.Eq: np.equal, ast.NotEq: np.not_equal}  # fmt: skip
_CALL = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.absolute, "tanh": np.tanh}


class UnsupportedExpr(ValueError):
    """The expression uses something this path does not translate (numexpr runs it)."""


# A value of the program: ("in", i) an input, ("k", scalar) a constant, ("t", j) the
# result of step j.
Ref = tuple[str, object]


class _Builder:
    def __init__(self, in_dtypes: Sequence[type], consts: Sequence[float]) -> None:
        self.in_dtypes = list(in_dtypes)
        self.consts = [np.float32(c) for c in consts]
        self.steps: list[tuple[Callable, tuple[Ref, ...], bool]] = []  # ufunc, args, is_bool
        self.memo: dict[str, Ref] = {}

    def dtype_is_bool(self, r: Ref) -> bool:
        kind, v = r
        if kind == "in":
            return np.dtype(self.in_dtypes[v]) == np.bool_  # type: ignore[index]
        if kind == "t":
            return self.steps[v][2]  # type: ignore[index]
        return False

    def emit(self, uf: Callable, args: tuple[Ref, ...], is_bool: bool) -> Ref:
        self.steps.append((uf, args, is_bool))
        return ("t", len(self.steps) - 1)

    def visit(self, e: ast.expr) -> Ref:
        key = ast.dump(e)
        r = self.memo.get(key)
        if r is None:
            r = self._visit(e)
            self.memo[key] = r
        return r

    def _visit(self, e: ast.expr) -> Ref:
        if isinstance(e, ast.Name):
            if e.id.startswith("in"):
                return ("in", int(e.id[2:]))
            if e.id.startswith("k"):
                return ("k", self.consts[int(e.id[1:])])
        if isinstance(e, ast.Constant) and isinstance(e.value, int | float):
            return ("k", np.float32(e.value))
        if isinstance(e, ast.BinOp) and type(e.op) in _BINOP:
            args = (self.visit(e.left), self.visit(e.right))
            return self.emit(_BINOP[type(e.op)], args, False)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return self.emit(np.negative, (self.visit(e.operand),), False)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Invert):
            return self.emit(np.logical_not, (self.visit(e.operand),), True)
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _CMP:
            args = (self.visit(e.left), self.visit(e.comparators[0]))
            return self.emit(_CMP[type(e.ops[0])], args, True)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and not e.keywords:
            name = e.func.id
            if name in _CALL and len(e.args) == 1:
                return self.emit(_CALL[name], (self.visit(e.args[0]),), False)
            if name == "where" and len(e.args) == 3:
                return self._where(*e.args)
        raise UnsupportedExpr(ast.unparse(e))

    def _where(self, c: ast.expr, a: ast.expr, b: ast.expr) -> Ref:
        if isinstance(c, ast.Compare) and len(c.ops) == 1:
            pair = (ast.dump(c.left), ast.dump(c.comparators[0]))
            if (ast.dump(a), ast.dump(b)) == pair and type(c.ops[0]) in (ast.Gt, ast.Lt):
                uf = np.maximum if isinstance(c.ops[0], ast.Gt) else np.minimum
                return self.emit(uf, (self.visit(a), self.visit(b)), False)
        return self.emit(_select, (self.visit(c), self.visit(a), self.visit(b)), False)


def _select(c, a, b, out):
    """``where`` with ``out`` (``out`` is a fresh temporary, never one of the operands)."""
    np.copyto(out, b)
    np.copyto(out, a, where=c)
    return out


def compile_expr(expr: str, in_dtypes: Sequence[type], consts: Sequence[float],
                 shape: tuple[int, ...], dtype: type,
                 own_scratch: bool = True) -> Callable[..., np.ndarray]:  # fmt: skip
    """``kernel(*inputs, out=None, scratch=None)`` computing ``expr`` with ufuncs; raises
    ``UnsupportedExpr`` for what it does not translate.

    The temporaries are ``kernel.scratch`` (``(shape, dtype)`` each): allocated once with
    the kernel (``own_scratch``), or passed by the caller as ``scratch`` arrays (a blocked
    kernel allocates them per call, so they do not stay alive between calls)."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as e:
        raise UnsupportedExpr(expr) from e
    b = _Builder(in_dtypes, consts)
    root = b.visit(tree)
    if root[0] != "t":  # a bare input or constant: nothing to compute
        raise UnsupportedExpr(expr)
    steps = b.steps
    last_use = {}
    for j, (_, args, _) in enumerate(steps):
        for r in args:
            if r[0] == "t":
                last_use[r[1]] = j
    # temporaries: one buffer per live intermediate, reused once its value is dead;
    # the last step writes the output (unless it is a select: out may alias an input)
    slot_of: dict[int, int] = {}
    slots: list[tuple[tuple[int, ...], type]] = []
    free: dict[bool, list[int]] = {True: [], False: []}
    n = len(steps)
    for j, (uf, args, is_bool) in enumerate(steps):
        if j < n - 1 or uf is _select:
            pool = free[is_bool]
            if pool:
                slot_of[j] = pool.pop()
            else:
                slots.append((shape, np.bool_ if is_bool else dtype))
                slot_of[j] = len(slots) - 1
        for r in args:
            if r[0] == "t" and last_use[r[1]] == j:
                free[steps[r[1]][2]].append(slot_of[r[1]])
    # operands: 0 input i, 1 constant, 2 temporary
    prog: list[tuple[Callable, tuple[tuple[int, object], ...], int]] = []
    for j, (uf, args, _) in enumerate(steps):
        ops = []
        for kind, v in args:
            if kind == "in":
                ops.append((0, v))
            elif kind == "k":
                ops.append((1, v))
            else:
                ops.append((2, slot_of[v]))  # type: ignore[index]
        prog.append((uf, tuple(ops), slot_of.get(j, -1)))
    last_select = steps[-1][0] is _select
    final = prog[-1][2]
    own = [np.empty(sh, dt) for sh, dt in slots] if own_scratch else None
    k_ufuncs = _generate(prog, len(in_dtypes), len(slots), own, shape, dtype,
                         final if last_select else -1)  # fmt: skip
    k_ufuncs.scratch = tuple(slots)  # type: ignore[attr-defined]
    return k_ufuncs


def _generate(prog: list, n_in: int, n_tmp: int, own: list[np.ndarray] | None,
              shape: tuple[int, ...], dtype: type, select_slot: int) -> Callable[..., np.ndarray]:  # fmt: skip
    """The program as one generated Python function: one line per ufunc call, operands
    and ``out`` passed positionally, constants and ufuncs bound as globals. A loop over
    the step list (the former kernel) re-decoded every operand at every call: a tanh-GELU
    of ``in0 + in1`` at shape (1, 128) took 22 us a call that way and 10 us generated
    (measured on the shared 2-core machine under load)."""
    ns: dict[str, object] = {"_own": own, "_empty": np.empty, "_shape": shape,
                             "_dtype": dtype, "_copyto": np.copyto}  # fmt: skip
    ins = [f"in{i}" for i in range(n_in)]
    lines = [f"def k_ufuncs({''.join(a + ', ' for a in ins)}out=None, scratch=None):",
             "    tmp = _own if scratch is None else scratch",
             "    if out is None:",
             "        out = _empty(_shape, _dtype)"]  # fmt: skip
    if n_tmp:
        lines.append(f"    {', '.join(f't{i}' for i in range(n_tmp))}, = tmp")
    for j, (uf, ops, dst) in enumerate(prog):
        ns[f"u{j}"] = uf
        args = []
        for q, (kind, v) in enumerate(ops):
            if kind == 0:
                args.append(f"in{v}")
            elif kind == 1:
                ns[f"c{j}_{q}"] = v
                args.append(f"c{j}_{q}")
            else:
                args.append(f"t{v}")
        dest = "out" if dst < 0 else f"t{dst}"
        # numpy 2.x deprecates a positional out for maximum and minimum (a third operand)
        args.append(f"out={dest}" if uf in (np.maximum, np.minimum) else dest)
        lines.append(f"    u{j}({', '.join(args)})")
    if select_slot >= 0:
        lines.append(f"    _copyto(out, t{select_slot})")
    lines.append("    return out")
    exec(compile("\n".join(lines) + "\n", "<fused ufunc kernel>", "exec"), ns)  # noqa: S102
    return ns["k_ufuncs"]  # type: ignore[return-value]
