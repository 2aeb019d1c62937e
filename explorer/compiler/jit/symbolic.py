"""Symbolic dims: a dim declared symbolic is captured with a sentinel size (a prime, times
a modulus after some guards); binding a concrete size re-specialises the captured graph
without retracing (``rebind``).

What keeps one trace valid for many sizes:

* **Sizes computed in Python.** Inside a capture, ``x.shape`` returns ``SymInt`` values for
  symbolic dims: ints (the sentinel-level value, so every shape rule still runs) that carry
  an expression (``B // 2``, ``B % 3``, ``B + 1``, ``2 * B``). Each value they produce is
  recorded in a table, value -> expression, so an attribute (a reshape target, a slice
  bound, a ``zeros`` shape) equal to it is re-evaluated for the bound size. A Python scalar
  equal to such a value used as a tensor operand (``x + x.shape[0]``) becomes a graph input
  fed the evaluated size at every call (``SymContext.scalars``), not a frozen constant.
* **Sizes computed by shape rules** (``B*S`` after a reshape, ``-1`` resolved) are products
  of sentinels and are substituted factor by factor (``_sub``); see ``rebind`` for slice
  bounds, ratio floats (``1 / B``) and folded constants.
* **Small computed sizes** (under ``TRACKED_MIN``: ``B % 2``) would be confused with the
  constants of the graph, so their value is guarded instead (``B % 2 == 1``); two
  computations that agree at the sentinel but not for every size (``B - 1`` and
  ``2 * (B // 2)``) are guarded equal.
* **Python decisions on sizes** (``if x.shape[0] > 4``, ``d == 1`` in broadcasting) are
  taken at the sentinel level and recorded as ``ShapeGuard``s. A call whose sizes make a
  guard false compiles once more (``api._respecialise``): with another sentinel prime or a
  modulus that takes this call's decision (one compilation per class of sizes), else with
  the dim fixed to its size.

Limits: a literal constant equal to a tracked computed size (>= ``TRACKED_MIN``) is taken
for that size; a non-uniform constant whose shape depends on a symbolic dim (other than an
``arange``) makes the passes run again for each size (still no retrace).

>>> ctx = SymContext({"B": sentinel(0)})
>>> b = ctx.wrap(sentinel(0))
>>> h = b // 2
>>> show(ctx.table[int(h)], ctx.names)
'B // 2'
>>> evaluate(ctx.table[int(h)], {sentinel(0): 10})
5
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any

import numpy as np

from ..errors import CompilerArgumentError, CompilerError, GraphBreak, SymbolicZeroDivision

__all__ = [
    "PRIMES", "sentinel", "SymInt", "SymContext", "ShapeGuard", "evaluate", "show",
]  # fmt: skip

PRIMES = (7919, 7927, 7933, 7937, 7949, 7951)  # sizes no real model dim is a multiple of

TRACKED_MIN = 100
"""A size computed from symbolic dims is followed by value when it is at least this large;
a smaller one (``B % 2``, ``B // 128``) is held fixed by a guard instead."""

RATIO_NUMERATORS = 64
"""A float attribute or constant ``k / size`` (``k`` up to this) is re-evaluated."""

Expr = tuple  # ("sym", prime) | ("int", k) | (op, a, b) | ("neg", a)

_BIN = {
    "add": (lambda a, b: a + b, "+"),
    "sub": (lambda a, b: a - b, "-"),
    "mul": (lambda a, b: a * b, "*"),
    "floordiv": (lambda a, b: a // b, "//"),
    "mod": (lambda a, b: a % b, "%"),
    "truediv": (lambda a, b: a / b, "/"),
}
_CMP = {
    "eq": (lambda a, b: a == b, "=="),
    "ne": (lambda a, b: a != b, "!="),
    "lt": (lambda a, b: a < b, "<"),
    "le": (lambda a, b: a <= b, "<="),
    "gt": (lambda a, b: a > b, ">"),
    "ge": (lambda a, b: a >= b, ">="),
}


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    k = 2
    while k * k <= n:
        if n % k == 0:
            return False
        k += 1
    return True


MODULUS_BASE = 192
"""After a shape guard fails, a symbol can be captured again as a multiple of
``gcd(size, MODULUS_BASE)`` (so ``B // 2 * 2 == B`` for even sizes): one more compilation
per divisibility class instead of one per size."""


def sentinel(index: int) -> int:
    """The sentinel size of the ``index``-th symbolic dim: ``PRIMES`` first, then the next
    primes after them (any number of symbols)."""
    if index < 0:
        raise CompilerArgumentError(
            f"sentinel index {index} is negative; symbols are numbered from 0"
        )
    if index < len(PRIMES):
        return PRIMES[index]
    p, k = PRIMES[-1], len(PRIMES) - 1
    while k < index:
        p += 2
        if _is_prime(p):
            k += 1
    return p


# --- expressions --------------------------------------------------------------------------


def evaluate(e: Expr, sizes: dict[int, int]) -> int:
    """The value of ``e`` with each sentinel ``p`` bound to ``sizes[p]``."""
    kind = e[0]
    if kind == "sym":
        return sizes.get(e[1], e[1])
    if kind == "int":
        return e[1]
    if kind == "neg":
        return -evaluate(e[1], sizes)
    a, b = evaluate(e[1], sizes), evaluate(e[2], sizes)
    if kind in ("floordiv", "mod", "truediv") and b == 0:
        raise CompilerError(f"a symbolic size divides by zero ({show(e, {})}) for sizes {sizes}")
    return _BIN[kind][0](a, b)


def show(e: Expr, names: dict[int, str]) -> str:
    """``e`` as Python source, symbols by name (``B // 2``)."""
    kind = e[0]
    if kind == "sym":
        return names.get(e[1], str(e[1]))
    if kind == "int":
        return str(e[1])
    if kind == "neg":
        return f"-{_paren(e[1], names)}"
    return f"{_paren(e[1], names)} {_BIN[kind][1]} {_paren(e[2], names)}"


def _paren(e: Expr, names: dict[int, str]) -> str:
    s = show(e, names)
    return s if e[0] in ("sym", "int") else f"({s})"


def _symbols(e: Expr) -> set[int]:
    if e[0] == "sym":
        return {e[1]}
    if e[0] == "int":
        return set()
    return set().union(*(_symbols(x) for x in e[1:]))


@dataclasses.dataclass(frozen=True)
class ShapeGuard:
    """A Python decision taken on symbolic sizes during capture: ``left op right`` was
    ``outcome`` (at the sentinel sizes); the compiled graph is valid while it still is."""

    left: Expr
    op: str
    right: Expr
    outcome: bool
    text: str = ""  # the condition with symbol names, for messages

    def holds(self, sizes: dict[int, int]) -> bool:
        try:
            a, b = evaluate(self.left, sizes), evaluate(self.right, sizes)
        except CompilerError:
            return False
        return _CMP[self.op][0](a, b) == self.outcome

    @property
    def symbols(self) -> set[int]:
        return _symbols(self.left) | _symbols(self.right)

    def __str__(self) -> str:
        return self.text if self.outcome else f"not ({self.text})"


# --- capture-time context -------------------------------------------------------------------


class SymContext:
    """The symbolic state of one capture: sentinels by name, the value table, the guards
    recorded and the symbolic scalars fed as graph inputs. One per capture (a capture runs
    in one thread); its lock guards the tables against a stray second thread."""

    def __init__(self, symbols: dict[str, int], moduli: dict[str, int] | None = None) -> None:
        self.symbols = dict(symbols)  # name -> sentinel size (a prime times its modulus)
        self.names = {p: n for n, p in self.symbols.items()}
        self.table: dict[int, Expr | None] = {p: ("sym", p) for p in self.names}
        self.guards: dict[tuple, ShapeGuard] = {}
        self.scalars: list[tuple[str, Expr, np.dtype]] = []  # (input name, expr, dtype)
        self.floats: dict[float, Expr | None] = {}  # non-whole floats computed from sizes
        self._lock = threading.Lock()
        for n, m in (moduli or {}).items():  # captured as a multiple of m: valid while it is
            if m > 1 and n in self.symbols:
                self.guard(("mod", ("sym", self.symbols[n]), ("int", m)), "eq", ("int", 0), True)

    # value <-> expression
    def expr_of(self, v: int) -> Expr | None:
        """The expression of a sentinel-derived int (table, else a product of sentinels)."""
        if isinstance(v, SymInt) and v.ctx is self:
            return v.expr
        v = int(v)
        e = self.table.get(v)
        if e is not None:
            return e
        if v <= 0 or not self.names:
            return None
        rest, expr = v, None
        for p in self.names:
            while rest % p == 0:
                rest //= p
                expr = ("sym", p) if expr is None else ("mul", expr, ("sym", p))
        if expr is None:
            return None
        return expr if rest == 1 else ("mul", expr, ("int", rest))

    def register(self, v: int, e: Expr) -> None:
        """Record that the value ``v`` was computed as ``e``; a value reached by two
        expressions that differ for other sizes is ambiguous (never re-evaluated)."""
        if e[0] == "int":
            return
        if abs(v) < TRACKED_MIN:  # would collide with the small constants of every graph
            self.guard(e, "eq", ("int", v), True)
            return
        with self._lock:
            old = self.table.get(v, _MISSING)
            if old is _MISSING:
                self.table[v] = e
                return
        if old is not None and old != e and not self._same(old, e):
            # two computations agree at the sentinel but not for every size: the graph
            # holds while they agree (B - 1 and 2 * (B // 2): odd sizes)
            self.guard(old, "eq", e, True)

    def _same(self, a: Expr, b: Expr) -> bool:
        for shift in (3, 18):  # mixed parity: B - 1 and 2 * (B // 2) differ
            sizes = {p: shift + 2 * i for i, p in enumerate(self.names)}
            try:
                if evaluate(a, sizes) != evaluate(b, sizes):
                    return False
            except CompilerError:
                return False
        return True

    def wrap(self, v: int) -> int:
        """``v`` as a ``SymInt`` when it is sentinel-derived, else ``v``."""
        if isinstance(v, SymInt) or isinstance(v, bool):
            return v
        e = self.expr_of(v)
        return SymInt(int(v), e, self) if e is not None else v

    def dims(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.wrap(d) for d in shape)

    def guard(self, left: Expr, op: str, right: Expr, outcome: bool) -> None:
        if left == right:
            return
        g = ShapeGuard(left, op, right, outcome,
                       f"{show(left, self.names)} {_CMP[op][1]} {show(right, self.names)}")  # fmt: skip
        if not g.symbols:
            return
        with self._lock:
            self.guards.setdefault((left, op, right), g)

    def _fraction(self, v: float) -> Expr | None:
        """``size / k`` for a float ``v`` (``0.25 * B``, computed by Python's float ops, which
        a ``SymInt`` on the right does not see), ``k`` up to ``RATIO_NUMERATORS``."""
        for k in range(2, RATIO_NUMERATORS + 1):
            q = abs(v) * k
            n = round(q)
            if n >= TRACKED_MIN and abs(q - n) <= 1e-6 * n:
                e = self.expr_of(n)
                if e is not None:
                    e = ("truediv", e, ("int", k))
                    return e if v > 0 else ("neg", e)
        return None

    def register_float(self, v: float, e: Expr) -> None:
        """Record a non-whole float computed from sizes (also by its fp32 rounding)."""
        if not math.isfinite(v) or v == int(v) or not _symbols(e):
            return
        with self._lock:
            for key in (v, float(np.float32(v))):
                old = self.floats.get(key, _MISSING)
                if old is _MISSING:
                    self.floats[key] = e
                elif old is not None and old != e and not self._same(old, e):
                    self.floats[key] = None

    def scalar_expr(self, a: np.ndarray) -> Expr | None:
        """The expression of a 0-d array holding a sentinel-derived number."""
        if a.ndim != 0 or a.dtype.kind not in "iuf":
            return None
        v = a.item()
        if isinstance(v, float):
            if not math.isfinite(v):
                return None
            if v != int(v):
                return self.floats.get(v) or self._fraction(v)
            v = int(v)
        if abs(v) < TRACKED_MIN:
            return None
        return self.expr_of(abs(v)) if v > 0 else (
            None if self.expr_of(-v) is None else ("neg", self.expr_of(-v)))  # fmt: skip


_MISSING: Any = object()


def _operand(x: Any, ctx: SymContext) -> Expr | None:
    if isinstance(x, SymInt):
        return x.expr
    if isinstance(x, bool) or not isinstance(x, int | np.integer):
        return None
    return ctx.expr_of(int(x)) or ("int", int(x))


class SymInt(int):
    """An int computed from symbolic sizes during a capture: its value is the sentinel-level
    one (shape rules use it), ``expr`` says how it was computed (``rebind`` re-evaluates it),
    and comparisons record ``ShapeGuard``s."""

    expr: Expr
    ctx: SymContext

    def __new__(cls, value: int, expr: Expr, ctx: SymContext) -> SymInt:
        obj = super().__new__(cls, value)
        obj.expr, obj.ctx = expr, ctx
        return obj

    def _bin(self, other: Any, op: str, swap: bool = False):
        if isinstance(other, float) or op == "truediv":
            return self._float(other, op, swap)
        o = _operand(other, self.ctx)
        if o is None:
            return NotImplemented
        a, b = (o, self.expr) if swap else (self.expr, o)
        va, vb = (int(other), int(self)) if swap else (int(self), int(other))
        if op in ("floordiv", "mod") and vb == 0:
            raise SymbolicZeroDivision("integer division or modulo by zero (of a symbolic size)")
        v = _BIN[op][0](va, vb)
        e = (op, a, b)
        self.ctx.register(v, e)
        return SymInt(v, e, self.ctx)

    def _float(self, other: Any, op: str, swap: bool):
        """A float computed from a size (``1.0 / B``, ``B * 0.5``): a plain float, whose
        value is remembered so that a graph constant or attribute equal to it follows B."""
        if isinstance(other, bool) or not isinstance(other, int | float | np.integer):
            return NotImplemented
        o = other.expr if isinstance(other, SymInt) else ("int", other)
        a, b = (o, self.expr) if swap else (self.expr, o)
        va, vb = (other, int(self)) if swap else (int(self), other)
        v = _BIN[op][0](va, vb)  # ZeroDivisionError as Python raises it
        self.ctx.register_float(float(v), (op, a, b))
        return float(v)

    def __truediv__(self, o):
        return self._bin(o, "truediv")

    def __rtruediv__(self, o):
        return self._bin(o, "truediv", True)

    def __add__(self, o):
        return self._bin(o, "add")

    def __radd__(self, o):
        return self._bin(o, "add", True)

    def __sub__(self, o):
        return self._bin(o, "sub")

    def __rsub__(self, o):
        return self._bin(o, "sub", True)

    def __mul__(self, o):
        return self._bin(o, "mul")

    def __rmul__(self, o):
        return self._bin(o, "mul", True)

    def __floordiv__(self, o):
        return self._bin(o, "floordiv")

    def __rfloordiv__(self, o):
        return self._bin(o, "floordiv", True)

    def __mod__(self, o):
        return self._bin(o, "mod")

    def __rmod__(self, o):
        return self._bin(o, "mod", True)

    def __neg__(self):
        v, e = -int(self), ("neg", self.expr)
        self.ctx.register(v, e)
        return SymInt(v, e, self.ctx)

    def __pos__(self):
        return self

    def _cmp(self, other: Any, op: str):
        o = _operand(other, self.ctx)
        if o is None:
            return NotImplemented
        r = _CMP[op][0](int(self), int(other))
        self.ctx.guard(self.expr, op, o, r)
        return r

    def __eq__(self, o):
        return self._cmp(o, "eq")

    def __ne__(self, o):
        return self._cmp(o, "ne")

    def __lt__(self, o):
        return self._cmp(o, "lt")

    def __le__(self, o):
        return self._cmp(o, "le")

    def __gt__(self, o):
        return self._cmp(o, "gt")

    def __ge__(self, o):
        return self._cmp(o, "ge")

    __hash__ = int.__hash__

    def __bool__(self) -> bool:
        self.ctx.guard(self.expr, "ne", ("int", 0), int(self) != 0)
        return int(self) != 0

    def __float__(self) -> float:
        """``float(n)``, ``math.sqrt(n)``, ``math.log(n)``... of a symbolic size in user
        code: the result cannot follow the size (it would stay at the capture's placeholder
        value, silently wrong for every real size), so the graph breaks here, naming the fix.
        (The compiler's own arithmetic with sizes, ``x / n`` and ``x * n``, goes through
        ``int(n)`` and is followed.)"""
        raise GraphBreak(
            f"float() or a math function of a symbolic size ({show(self.expr, self.ctx.names)}):"
            " its value would be frozen at the capture's placeholder size",
            "compute it with size arithmetic the compiler follows (n * 0.5, 1.0 / n, n // 2), "
            "or drop that dim from dynamic= so each size compiles",
        )


# --- sentinel arithmetic ------------------------------------------------------------------


def _sub(d: int, mapping: dict[int, int]) -> int:
    """``d`` with every factor ``p`` of a sentinel replaced by its size ``mapping[p]``.

    The multiplicity of each sentinel is counted in ``d`` as captured, before anything is
    substituted, so a size that is itself a multiple of a sentinel (``_sub(7919, {7919:
    7919})``) or of another sentinel is never substituted again.
    """
    if not d:
        return d
    rest, factor = d, 1
    for p, v in mapping.items():
        while rest % p == 0:
            rest //= p
            factor *= v
    return rest * factor
