"""Constant folding: a node whose inputs are all constants becomes a constant."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node, OpGroup, opdef
from ...ir.ops_tensor import Const
from .rewrite import Context, Rewrite, RewriteStep, Rule, run_rules

__all__ = ["fold", "RULES", "FOLD_MAX_ELEMENTS"]

FOLD_MAX_ELEMENTS = 1 << 16  # larger results stay computed: a constant that big costs memory
_NO_FOLD = ("cond", "loop")


def _fold(n: Node, ctx: Context) -> Rewrite | None:
    if n.op in _NO_FOLD or not n.inputs or n.type.numel > FOLD_MAX_ELEMENTS:
        return None
    vals = [ctx.const(a) for a in n.inputs]
    if any(v is None for v in vals):
        return None
    op = opdef.get(n.op)
    if op.group is OpGroup.SOURCE:
        return None
    out = np.asarray(op.impl(*vals, **op.full_attrs(dict(n.attrs))))
    out = out.astype(n.type.dtype.numpy, copy=False)
    node = dataclasses.replace(n, op="constant", inputs=(), attrs=(("value", Const(out)),))
    return Rewrite((node,), n.name)


RULES = (Rule("fold_constants", _fold),)


def fold(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    """Evaluate every op whose inputs are constants (up to ``FOLD_MAX_ELEMENTS``)."""
    return run_rules(graph, RULES, "fold")
