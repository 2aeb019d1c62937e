"""Rewrites of the converted nodes before the graph is built: the rotary embedding.

transformers writes ``q * cos + rotate_half(q) * sin`` with ``rotate_half(x) =
cat(-x[..., d/2:], x[..., :d/2])``: traced, seven nodes per tensor (two slices, a
negation, a concatenation, two multiplies and an add). `fuse_rope` replaces each such
group by one ``rope`` node (same name, scope and type as the add) when the slices, the
negation, the concatenation and the multiplies feed nothing else.
"""

from __future__ import annotations

from collections import Counter

from ...ir import opdef
from ...ir.node import Node

__all__ = ["fuse_rope"]


def fuse_rope(nodes: list[Node]) -> tuple[list[Node], int]:
    """(the nodes with rotary groups fused, how many were fused)."""
    by_name = {n.name: n for n in nodes}
    uses = Counter(a for n in nodes for a in n.inputs)
    types = {n.name: n.type for n in nodes}
    replace: dict[str, Node] = {}
    dead: set[str] = set()
    for n in nodes:
        if n.op != "add" or len(n.inputs) != 2:
            continue
        for m1_name, m2_name in (n.inputs, n.inputs[::-1]):
            found = _match(by_name, uses, m1_name, m2_name)
            if found is None:
                continue
            x, cos, sin, group = found
            rope = opdef.get("rope")
            try:
                _, out = rope.infer((types[x], types[cos], types[sin]), {})
            except Exception:  # shapes the op does not take: leave the group as traced
                continue
            if out != n.type:
                continue
            replace[n.name] = Node(n.name, "rope", (x, cos, sin), n.type, (), n.scope)
            dead.update(group)
            break
    kept = [replace.get(n.name, n) for n in nodes if n.name not in dead]
    return kept, len(replace)


def _match(by_name, uses, m1_name: str, m2_name: str):
    """(x, cos, sin, inner node names) when m1 = x*cos and m2 = rotate_half(x)*sin."""
    m1, m2 = by_name.get(m1_name), by_name.get(m2_name)
    if m1 is None or m2 is None or m1.op != "mul" or m2.op != "mul":
        return None
    if uses[m1_name] != 1 or uses[m2_name] != 1:
        return None
    for cat_name, sin in (m2.inputs, m2.inputs[::-1]):
        cat = by_name.get(cat_name)
        if cat is None or cat.op != "cat" or len(cat.inputs) != 2 or uses[cat_name] != 1:
            continue
        neg, lo = (by_name.get(a) for a in cat.inputs)
        if neg is None or lo is None or neg.op != "neg" or lo.op != "slice":
            continue
        hi = by_name.get(neg.inputs[0])
        if hi is None or hi.op != "slice" or hi.inputs != lo.inputs:
            continue
        x = lo.inputs[0]
        d = by_name[x].type.shape[-1] if by_name[x].type.rank else 0
        axis = by_name[x].type.rank - 1
        a_lo, a_hi, a_cat = lo.attr_dict, hi.attr_dict, cat.attr_dict
        if (a_lo["axis"], a_lo["start"], a_lo["stop"], a_lo.get("step", 1)) != (axis, 0, d // 2, 1):
            continue
        if (a_hi["axis"], a_hi["start"], a_hi["stop"], a_hi.get("step", 1)) != (axis, d // 2, d, 1):
            continue
        if a_cat["axis"] != axis or any(uses[k] != 1 for k in (neg.name, cat_name)):
            continue
        if uses[lo.name] != 1 or uses[hi.name] != 1:
            continue
        if x not in m1.inputs:
            continue
        cos = m1.inputs[1] if m1.inputs[0] == x else m1.inputs[0]
        return x, cos, sin, (m1_name, m2_name, cat_name, neg.name, lo.name, hi.name)
    return None
