"""Elementwise fusion: a chain of elementwise ops becomes one ``fused`` node whose numexpr
expression makes a single pass over memory (no temporaries between the ops). The executor
runs small fused kernels as numpy ufunc calls instead (``ufunc_program``: faster below
~10^5 elements, where numexpr's per-call cost dominates), large ones as blocked ufunc calls;
with ``backend="numba"`` the ``codegen`` pass turns the fused nodes its cost model picks
into generated numba kernels (``explorer.compiler.codegen``).

A producer joins its consumer's kernel when it is fusible, has that single use, is not a
graph output and has the consumer's shape (so nothing is recomputed per element of a
broadcast). Scalar constants are inlined as fp32 constants of the expression.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ...ir import DType, Graph, Node
from ...ir.activations import gelu_expression
from ...ir.node import freeze_attrs
from .rewrite import RewriteStep

__all__ = ["fuse", "TEMPLATES", "MAX_EXPR_CHARS", "MAX_OPERANDS"]

MAX_EXPR_CHARS = 600  # keeps expressions with repeated arguments (gelu) from blowing up
MAX_OPERANDS = 24  # numexpr (numpy's iterator) takes a bounded number of operands

K = Callable[[float], str]
_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "lt": "<", "le": "<=",
        "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}  # fmt: skip


_SCALAR = {"add": "({x} + {k})", "sub": "({x} - {k})", "rsub": "({k} - {x})",
           "mul": "({x} * {k})", "div": "({x} / {k})", "rdiv": "({k} / {x})",
           "pow": "({x} ** {k})"}  # fmt: skip


def _binary(sym: str) -> Callable[[list[str], K, Node], str]:
    def template(a: list[str], k: K, n: Node) -> str:
        return f"({a[0]} {sym} {a[1]})"

    return template


TEMPLATES: dict[str, Callable[[list[str], K, Node], str]] = {
    **{op: _binary(sym) for op, sym in _BIN.items()},
    "neg": lambda a, k, n: f"(-{a[0]})",
    "exp": lambda a, k, n: f"exp({a[0]})",
    "log": lambda a, k, n: f"log({a[0]})",
    # tanh itself: 2 / (1 + exp(-2u)) - 1 (half the time in numexpr) cancels near 0, 7% off
    # at u = 1e-6 in fp32. GELU needs no tanh (gelu_expression multiplies by x: no cancelling).
    "tanh": lambda a, k, n: f"tanh({a[0]})",
    "sqrt": lambda a, k, n: f"sqrt({a[0]})",
    "abs": lambda a, k, n: f"abs({a[0]})",
    "logical_not": lambda a, k, n: f"(~{a[0]})",
    "maximum": lambda a, k, n: f"where({a[0]} > {a[1]}, {a[0]}, {a[1]})",
    "minimum": lambda a, k, n: f"where({a[0]} < {a[1]}, {a[0]}, {a[1]})",
    "where": lambda a, k, n: f"where({a[0]}, {a[1]}, {a[2]})",
    "relu": lambda a, k, n: f"where({a[0]} > 0, {a[0]}, 0)",
    "scale": lambda a, k, n: f"({a[0]} * {k(n.attr('factor'))})",
    "silu": lambda a, k, n: f"({a[0]} / ({k(1.0)} + exp(-{a[0]})))",
    "gelu": lambda a, k, n: gelu_expression(a[0], k),  # explorer.ir's one GELU
    # the unary ops and scalar arithmetic of imported models (transformers' activations,
    # norms and score scaling; ``scalar_op`` with an arithmetic fn only, see `_fusible`)
    "scalar_op": lambda a, k, n: _SCALAR[n.attr("fn")].format(x=a[0], k=k(n.attr("value"))),
    "sigmoid": lambda a, k, n: f"({k(1.0)} / ({k(1.0)} + exp(-{a[0]})))",
    "rsqrt": lambda a, k, n: f"({k(1.0)} / sqrt({a[0]}))",
    "reciprocal": lambda a, k, n: f"({k(1.0)} / {a[0]})",
}
_ARITH = set(TEMPLATES) - {"lt", "le", "gt", "ge", "eq", "ne", "where", "logical_not"}


@dataclass
class _Expr:
    text: str
    inputs: list[str] = field(default_factory=list)
    consts: list[float] = field(default_factory=list)
    members: list[str] = field(default_factory=list)


def _fusible(n: Node, types: dict) -> bool:
    if n.op not in TEMPLATES or n.type.dtype not in (DType.FP32, DType.BOOL):
        return False
    ins = [types[a] for a in n.inputs]
    if n.op == "where":
        return ins[0] is DType.BOOL and ins[1] is DType.FP32 and ins[2] is DType.FP32
    if n.op == "logical_not":
        return ins[0] is DType.BOOL
    if n.op == "scalar_op":
        v = n.attr("value")
        if n.attr("fn") not in _SCALAR or isinstance(v, bool) or not isinstance(v, int | float):
            return False
    if n.op in _ARITH:
        return all(t is DType.FP32 for t in ins)
    return all(t is DType.FP32 for t in ins)  # comparisons of floats


def fuse(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    """Replace chains of fusible elementwise ops by ``fused`` numexpr kernels."""
    nodes = {n.name: n for n in graph.nodes}
    types = {n.name: n.type.dtype for n in graph.nodes}
    outputs = set(graph.outputs)
    exprs: dict[str, _Expr] = {}
    absorbed: set[str] = set()
    for n in graph.nodes:
        if not _fusible(n, types):
            continue
        e = _Expr("")
        args: list[str] = []

        def k(value: float, e: _Expr = e) -> str:
            e.consts.append(float(value))
            return f"\x03{float(value)!r}\x04"

        for a in n.inputs:
            src = nodes[a]
            sub = exprs.get(a)
            if (sub is not None and len(graph.consumers(a)) == 1 and a not in outputs
                    and src.type.shape == n.type.shape and len(sub.text) < MAX_EXPR_CHARS
                    and len(set(e.inputs + sub.inputs)) < MAX_OPERANDS):  # fmt: skip
                args.append(sub.text)
                e.inputs += [x for x in sub.inputs if x not in e.inputs]
                e.consts += sub.consts
                e.members += sub.members
                absorbed.add(a)
            elif src.op == "constant" and src.type.numel == 1 and src.type.dtype is DType.FP32:
                args.append(k(float(src.attr("value").array.reshape(()))))
            else:
                if a not in e.inputs:
                    e.inputs.append(a)
                args.append(f"\x01{a}\x02")
        e.text = TEMPLATES[n.op](args, k, n)
        e.members.append(n.name)
        exprs[n.name] = e
    if not absorbed:
        return graph, []
    out: list[Node] = []
    fused: list[str] = []
    for n in graph.nodes:
        if n.name in absorbed:
            continue
        e = exprs.get(n.name)
        if e is None or len(e.members) < 2:
            out.append(n)
            continue
        out.append(_fused_node(n, e, graph))
        fused.append(n.name)
    new = Graph(tuple(out), graph.outputs, graph.name)
    detail = f"{len(absorbed) + len(fused)} ops -> {len(fused)} kernels"
    return new, [RewriteStep("fuse", "elementwise_chain", tuple(fused), graph, new, detail)]


def _fused_node(root: Node, e: _Expr, graph: Graph) -> Node:
    names = {a: f"in{i}" for i, a in enumerate(e.inputs)}
    consts: list[float] = []
    for c in e.consts:
        if c not in consts:
            consts.append(c)
    text = re.sub("\x01(.*?)\x02", lambda m: names[m.group(1)], e.text)
    text = re.sub("\x03(.*?)\x04", lambda m: f"k{consts.index(float(m.group(1)))}", text)
    members = tuple(e.members)
    attrs = {
        "expr": text, "consts": tuple(consts), "members": members,
        "ops": tuple(graph.node(m).op for m in members), "dtype": root.type.dtype.value,
        "flops": sum(graph.node_flops(m) for m in members),
    }  # fmt: skip
    return dataclasses.replace(root, op="fused", inputs=tuple(e.inputs), attrs=freeze_attrs(attrs))
