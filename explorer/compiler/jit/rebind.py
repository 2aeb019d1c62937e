"""Re-specialising a graph captured with symbolic dims for concrete sizes (``rebind``):
attributes re-evaluated through the capture's value table (``symbolic.SymContext``), slice
bounds near a dim's end kept relative to it, ratio floats and folded constants re-evaluated,
types re-inferred node by node by each op's own shape rule, bodies of ``cond``/``loop``
nodes re-specialised with the types their node feeds them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ...ir import Graph, TensorType, opdef
from ...ir.opdef import OpGroup
from ...ir.ops_tensor import Const, Subgraph
from ..errors import CompilerError
from .symbolic import _MISSING, RATIO_NUMERATORS, Expr, _sub, evaluate

__all__ = ["rebind"]


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
        e = self.table.get(f)  # a float computed from sizes in Python (1.0 / B)
        if e is not None and f != int(f):
            return float(evaluate(e, self.mapping))
        for k in range(2, RATIO_NUMERATORS + 1):  # B / k (0.25 * B)
            q = abs(f) * k
            n = round(q)
            if n >= 2 and abs(q - n) <= 1e-6 * n and self.derived(n):
                return math.copysign(self.int(n) / k, f)
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
