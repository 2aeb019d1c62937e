"""Symbolic dims: a dim declared symbolic is captured with a sentinel prime as its size;
binding a concrete size re-specialises the captured graph without retracing.

Three mechanisms keep one trace valid for every size:

* **Sizes computed in Python.** Inside a capture, ``x.shape`` returns ``SymInt`` values for
  symbolic dims: ints (the sentinel-level value, so every shape rule still runs) that carry
  an expression (``B // 2``, ``B % 3``, ``B + 1``, ``2 * B``). Each value they produce is
  recorded in a table, value -> expression, so an attribute (a reshape target, a slice
  bound, a ``zeros`` shape) equal to it is re-evaluated for the bound size. A Python scalar
  equal to such a value used as a tensor operand (``x / x.shape[0]``) becomes a graph input
  fed the evaluated size at every call (``SymContext.scalar``), not a frozen constant.
* **Sizes computed by shape rules** (``B*S`` after a reshape, ``-1`` resolved) are products
  of sentinel primes and are substituted factor by factor (``_sub``); a slice bound or
  index near the end of a symbolic dim (``x[:-1]`` stores ``B - 1``) stays relative to its
  end; a float attribute that is a ratio of sizes (the ``1 / B`` of ``mean``'s gradient)
  is re-evaluated.
* **Small computed sizes** (under ``TRACKED_MIN``: ``B % 2``) would be confused with the
  constants of the graph, so their value is guarded instead (``B % 2 == 1``).
* **Python decisions on sizes** (``if x.shape[0] > 4``, ``d == 1`` in broadcasting) are
  taken at the sentinel level and recorded as ``ShapeGuard``s; a call whose sizes make a
  guard false is compiled again with those dims fixed to their sizes (see ``api``).

Types are re-inferred node by node from the re-specialised inputs and attributes
(``rebind``), so every op's own shape rule is the one that decides.

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

from ...ir import Graph, TensorType, opdef
from ...ir.opdef import OpGroup
from ...ir.ops_tensor import Const, Subgraph
from ..errors import CompilerError

__all__ = [
    "PRIMES", "sentinel", "rebind", "SymInt", "SymContext", "ShapeGuard", "evaluate", "show",
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
        raise ValueError(f"sentinel index {index} is negative; symbols are numbered from 0")
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
    if kind in ("floordiv", "mod") and b == 0:
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

    def scalar_expr(self, a: np.ndarray) -> Expr | None:
        """The expression of a 0-d array holding a sentinel-derived whole number."""
        if a.ndim != 0 or a.dtype.kind not in "iuf":
            return None
        v = a.item()
        if isinstance(v, float):
            if not math.isfinite(v) or v != int(v):
                return None
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
        o = _operand(other, self.ctx)
        if o is None:
            return NotImplemented
        a, b = (o, self.expr) if swap else (self.expr, o)
        va, vb = (int(other), int(self)) if swap else (int(self), int(other))
        if op in ("floordiv", "mod") and vb == 0:
            raise ZeroDivisionError("integer division or modulo by zero")
        v = _BIN[op][0](va, vb)
        e = (op, a, b)
        self.ctx.register(v, e)
        return SymInt(v, e, self.ctx)

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


# --- re-specialisation --------------------------------------------------------------------


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


class _Resolver:
    def __init__(self, mapping: dict[int, int], table: dict[int, Expr | None]) -> None:
        self.mapping, self.table = mapping, table

    def int(self, v: int) -> int:
        e = self.table.get(v, _MISSING)
        if e is None:
            raise CompilerError(
                f"the size {v} was computed two ways from symbolic dims that differ for other "
                "sizes; it cannot be re-specialised"
            )
        if e is not _MISSING:
            return evaluate(e, self.mapping)
        if v < 0:
            e = self.table.get(-v)
            if e is not None:
                return -evaluate(e, self.mapping)
            return v
        return _sub(v, self.mapping)

    def derived(self, v: int) -> bool:
        return self.table.get(abs(v)) is not None or _sub(abs(v), self.mapping) != abs(v)

    def float(self, f: float) -> float:
        """A ratio of sizes (``1/B``, ``S/(B*S)``) re-evaluated; other floats unchanged."""
        if f == 0 or not math.isfinite(f):
            return f
        for num in range(1, RATIO_NUMERATORS + 1):  # passes fold k / B (k small) together
            q = num / abs(f)
            k = round(q)
            if k >= 2 and abs(q - k) <= 1e-6 * k and self.derived(k):
                return math.copysign(num / self.int(k), f)
        return f

    def attr(self, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return self.int(v)
        if isinstance(v, float):
            return self.float(v)
        if isinstance(v, tuple):
            return tuple(self.attr(x) for x in v)
        return v

    def bound(self, b: Any, d0: int, d1: int) -> Any:
        """A slice bound or index into a dim of size ``d0`` captured, ``d1`` now."""
        if not isinstance(b, int) or isinstance(b, bool) or d0 == d1:
            return b
        if 0 < b and b in self.table:
            return self.int(b)
        if b == d0:
            return d1
        if b > 0 and _sub(b, self.mapping) != b:
            return _sub(b, self.mapping)
        if d0 // 2 < b < d0:  # captured as an offset from the end (x[:-1] stored B - 1)
            return max(d1 - (d0 - b), 0)
        return b

    def index(self, index: tuple, shape0: tuple, shape1: tuple) -> tuple:
        out = []
        for k, e in enumerate(index):
            d0, d1 = shape0[k], shape1[k]
            if isinstance(e, tuple):
                out.append(tuple(self.bound(b, d0, d1) for b in e))
            else:
                out.append(self.bound(e, d0, d1))
        return tuple(out)


def rebind(graph: Graph, mapping: dict[int, int], table: dict[int, Expr | None] | None = None,
           input_types: tuple[TensorType, ...] | None = None) -> Graph:  # fmt: skip
    """``graph`` with each sentinel prime ``p`` bound to ``mapping[p]``: attributes
    re-evaluated (``table``: the capture's value -> expression table), types re-inferred.

    ``input_types``: the types of the graph's ``input`` nodes, in order (for a body graph,
    given by its ``cond``/``loop`` node); otherwise they are substituted.
    """
    res = _Resolver(mapping, table or {})
    types: dict[str, TensorType] = {}
    nodes = []
    k_in = 0
    try:
        for n in graph.nodes:
            d = opdef.get(n.op)
            if d.group is OpGroup.SOURCE:
                if n.op == "input" and input_types is not None:
                    t = input_types[k_in]
                    k_in += 1
                else:
                    t = TensorType(tuple(res.int(x) for x in n.type.shape), n.type.dtype)
                attrs = n.attrs
                if n.op == "constant":
                    attrs = (("value", _refill(n.attr("value"), t.shape, n.name, res)),)
            else:
                ins = tuple(types[a] for a in n.inputs)
                ins0 = tuple(graph.node(a).type for a in n.inputs)
                attrs = _attrs(n, res, ins, ins0, mapping, table)
                if n.op == "reshape":
                    attrs = _reshape_rest(n, attrs, ins[0])
                _, t = d.infer(ins, d.full_attrs(dict(attrs)))
            types[n.name] = t
            nodes.append(dataclasses.replace(n, type=t, attrs=attrs))
        return Graph(tuple(nodes), graph.outputs, graph.name)
    except CompilerError:
        raise
    except Exception as e:  # noqa: BLE001  (any shape rule's complaint: named below)
        raise CompilerError(
            f"graph {graph.name!r} cannot be re-specialised for sizes {mapping}: {e}. A size "
            "was computed in a way the symbolic capture cannot follow; this call is compiled "
            "for its own sizes instead"
        ) from None


def _reshape_rest(n, attrs: tuple, src: TensorType) -> tuple:
    """A reshape whose target no longer has ``src``'s element count: the one dim that
    re-specialising left unchanged was the ``-1`` (computed in Python from ``x.size``)."""
    a = dict(attrs)
    new, old = tuple(a["shape"]), tuple(n.attr("shape"))
    if math.prod(new) == src.numel:
        return attrs
    same = [i for i, (x, y) in enumerate(zip(new, old, strict=True)) if x == y and y > 1]
    rest = math.prod(d for i, d in enumerate(new) if i not in same[:1])
    if len(same) != 1 or rest == 0 or src.numel % rest:
        return attrs  # the shape rule names the mismatch
    a["shape"] = tuple(src.numel // rest if i == same[0] else d for i, d in enumerate(new))
    return tuple((k, a[k]) for k, _ in attrs)


def _refill(value: Const, shape: tuple[int, ...], name: str, res: _Resolver) -> Const:
    """A constant re-specialised: a uniform one takes the new shape, a 1-D arithmetic
    progression (``arange(S)``) its new length, and a float one whose value is a ratio of
    sizes (passes fold ``1 / B`` into constants) is re-evaluated."""
    a = value.array
    uniform = a.size > 0 and bool(np.all(a == a.flat[0]))
    if uniform and a.dtype.kind == "f":
        v = res.float(float(a.flat[0]))
        if v != a.flat[0] or shape != a.shape:
            return Const(np.full(shape, v, a.dtype))
    if shape == a.shape:
        return value
    if uniform:
        return Const(np.full(shape, a.flat[0], a.dtype))
    if a.ndim == 1 and len(shape) == 1 and a.size >= 2:  # positions: arange(S) and the like
        step = a[1] - a[0]
        if np.array_equal(a, a[0] + step * np.arange(a.size, dtype=a.dtype)):
            return Const((a[0] + step * np.arange(shape[0], dtype=a.dtype)).astype(a.dtype))
    raise CompilerError(
        f"constant %{name} {a.shape} depends on a symbolic size and is not uniform; it cannot "
        "be re-specialised"
    )


def _attrs(n, res: _Resolver, ins, ins0, mapping, table) -> tuple:
    out = []
    for k, v in n.attrs:
        if isinstance(v, Subgraph):
            out.append((k, v))  # bodies after the plain attrs (their input types are known)
            continue
        if n.op == "getitem" and k == "index":
            v = res.index(v, ins0[0].shape, ins[0].shape)
        elif n.op == "getitem_grad" and k == "index":
            shape0 = dict(n.attrs)["shape"]
            v = res.index(v, shape0, tuple(res.int(x) for x in shape0))
        else:
            v = res.attr(v)
        out.append((k, v))
    a = dict(out)
    if n.op == "cond":
        args = ins[1:]
        for key, picks in (("then_", "then_args"), ("else_", "else_args")):
            body = a[key].graph
            a[key] = Subgraph(rebind(body, mapping, table, tuple(args[i] for i in a[picks])))
    elif n.op == "loop":
        for key, picks in (("cond", "cond_args"), ("body", "body_args")):
            body = a[key].graph
            a[key] = Subgraph(rebind(body, mapping, table, tuple(ins[i] for i in a[picks])))
    else:
        for key, v in a.items():
            if isinstance(v, Subgraph):
                a[key] = Subgraph(rebind(v.graph, mapping, table))
    return tuple((k, a[k]) for k, _ in out)
