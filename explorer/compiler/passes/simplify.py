"""Algebraic simplification: identities (``x+0``, ``x*1``, ``scale 1``, ``--x``), merged
``scale``/``reshape``/``transpose`` chains, and multiplication by a scalar constant
written as ``scale``. Every rule keeps the value's type (no silent broadcasting change) and
the value itself, bit for bit, for every input including inf and nan (a division becomes a
``scale`` only by an exact reciprocal)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node
from ...ir.node import freeze_attrs
from .rewrite import Context, Rewrite, RewriteStep, Rule, run_rules

__all__ = ["simplify", "RULES"]


def _is(ctx: Context, name: str, value: float) -> bool:
    c = ctx.const(name)
    return c is not None and c.dtype.kind in "fiu" and bool(np.all(c == value))


def _same_type(ctx: Context, name: str, n: Node) -> bool:
    return ctx.node(name).type == n.type


def _identity(n: Node, ctx: Context) -> Rewrite | None:
    a = n.inputs[0] if n.inputs else None
    b = n.inputs[1] if len(n.inputs) > 1 else None
    pick = None
    if n.op == "add":
        pick = a if _is(ctx, b, 0) else b if _is(ctx, a, 0) else None
    elif n.op == "sub" and _is(ctx, b, 0):
        pick = a
    elif n.op == "mul":
        pick = a if _is(ctx, b, 1) else b if _is(ctx, a, 1) else None
    elif n.op == "div" and _is(ctx, b, 1):
        pick = a
    elif n.op == "scale" and n.attr("factor") == 1.0:
        pick = a
    elif n.op == "reshape" and ctx.node(a).type.shape == n.type.shape:
        pick = a
    elif n.op == "transpose" and tuple(n.attr("perm")) == tuple(range(n.type.rank)):
        pick = a
    elif n.op == "neg" and ctx.node(a).op == "neg":
        pick = ctx.node(a).inputs[0]
    if pick is not None and _same_type(ctx, pick, n):
        return Rewrite((), pick)
    return None


def _replace(n: Node, op: str, inputs: tuple[str, ...], **attrs) -> Rewrite:
    return Rewrite(
        (dataclasses.replace(n, op=op, inputs=inputs, attrs=freeze_attrs(attrs)),), n.name
    )


def _merge_chain(n: Node, ctx: Context) -> Rewrite | None:
    if not n.inputs:
        return None
    src = ctx.node(n.inputs[0])
    if n.op == "scale" and src.op == "scale":
        return _replace(n, "scale", src.inputs, factor=n.attr("factor") * src.attr("factor"))
    if n.op == "reshape" and src.op == "reshape":
        return _replace(n, "reshape", src.inputs, shape=n.attr("shape"))
    if n.op == "transpose" and src.op == "transpose":
        inner, outer = src.attr("perm"), n.attr("perm")
        return _replace(n, "transpose", src.inputs, perm=tuple(inner[p] for p in outer))
    return None


def _exact_reciprocal(c: float) -> float | None:
    """``1/c`` when multiplying by it rounds exactly like dividing by ``c`` (``c`` a finite
    power of two whose reciprocal is finite), else None. Division by 0 stays a division:
    it gives inf or nan as eager does, never a ZeroDivisionError at compile time."""
    if c == 0.0 or not np.isfinite(c):
        return None
    mantissa, _ = np.frexp(c)
    if abs(float(mantissa)) != 0.5:
        return None
    r = float(np.float32(1.0) / np.float32(c))
    return r if np.isfinite(r) and r != 0.0 else None


def _scalar_mul(n: Node, ctx: Context) -> Rewrite | None:
    if n.op not in ("mul", "div") or not n.type.dtype.is_float:
        return None
    a, b = n.inputs
    for x, c in ((a, b), (b, a)) if n.op == "mul" else ((a, b),):
        v = ctx.const(c)
        if v is not None and v.size == 1 and v.dtype.kind == "f" and _same_type(ctx, x, n):
            k = float(v.reshape(()))
            f = k if n.op == "mul" else _exact_reciprocal(k)
            if f is not None and np.isfinite(f):
                return _replace(n, "scale", (x,), factor=f)
    return None


RULES = (
    Rule("identity", _identity),
    Rule("merge_chain", _merge_chain),
    Rule("scalar_mul_to_scale", _scalar_mul),
)


def simplify(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    return run_rules(graph, RULES, "simplify")
