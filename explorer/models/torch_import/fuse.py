"""Rewrites of the converted nodes before the graph is built: the rotary embedding and
fused projections.

transformers writes ``q * cos + rotate_half(q) * sin`` with ``rotate_half(x) =
cat(-x[..., d/2:], x[..., :d/2])``: traced, seven nodes per tensor (two slices, a
negation, a concatenation, two multiplies and an add). `fuse_rope` replaces each such
group by one ``rope`` node (same name, scope and type as the add) when the slices, the
negation, the concatenation and the multiplies feed nothing else.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ...ir import opdef
from ...ir.node import Node

__all__ = ["fuse_rope", "split_fused_projections"]


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


def split_fused_projections(nodes: list[Node]) -> tuple[list[Node], int]:
    """Fused projections (GPT-2's ``c_attn``, Phi-3's ``qkv_proj``/``gate_up_proj``) split
    into one projection per block: ``x @ W (+ b)`` whose only users are slices of the last
    axis covering it in contiguous blocks becomes ``x @ W[block] (+ b[block])`` per block.

    The weight blocks are parameters of their own, named ``W.name[start:stop]``, so each
    projection's output columns can be split (tensor parallel) the way the separate q, k,
    v weights of the builders are; the element count is unchanged. A relayout of the
    stored weight at load time (as Megatron does) makes this the computation that runs.
    """
    by_name = {n.name: n for n in nodes}
    users: dict[str, list[str]] = {}
    for n in nodes:
        for a in n.inputs:
            users.setdefault(a, []).append(n.name)
    new_at: dict[str, list[Node]] = {}
    dead: set[str] = set()
    count = 0
    for w in nodes:
        if w.op != "param" or w.type.rank != 2 or len(users.get(w.name, [])) != 1:
            continue
        mm = by_name[users[w.name][0]]
        axis = _weight_out_axis(mm, w.name)
        if axis is None or mm.name in dead:
            continue
        y, bias = mm, None
        after = users.get(mm.name, [])
        if len(after) == 1 and by_name[after[0]].op == "add":
            add = by_name[after[0]]
            other = add.inputs[1] if add.inputs[0] == mm.name else add.inputs[0]
            b = by_name[other]
            if b.op == "param" and b.type.shape == (w.type.shape[axis],) and len(
                users.get(b.name, [])
            ) == 1:  # fmt: skip
                y, bias = add, b
        blocks = _blocks(by_name, users, y)
        if blocks is None:
            continue
        out = []
        for s, (start, stop) in blocks:
            shape = list(w.type.shape)
            shape[axis] = stop - start
            wb = replace(w, name=f"{w.name}[{start}:{stop}]", type=w.type.with_shape(tuple(shape)))
            out.append(wb)
            ins = tuple(wb.name if a == w.name else a for a in mm.inputs)
            proj_name = s.name if bias is None else f"{s.name}.proj"
            proj_t = mm.type.with_shape(mm.type.shape[:-1] + (stop - start,))
            out.append(replace(mm, name=proj_name, inputs=ins, type=proj_t, scope=mm.scope))
            if bias is not None:
                bb = replace(bias, name=f"{bias.name}[{start}:{stop}]",
                             type=bias.type.with_shape((stop - start,)))  # fmt: skip
                out.insert(-1, bb)
                add_ins = tuple(proj_name if a == mm.name else bb.name for a in y.inputs)
                out.append(replace(y, name=s.name, inputs=add_ins, type=s.type))
        new_at[mm.name] = out
        dead.update({w.name, mm.name, y.name} | {s.name for s, _ in blocks})
        if bias is not None:
            dead.add(bias.name)
        count += 1
    kept: list[Node] = []
    for n in nodes:
        if n.name in new_at:
            kept.extend(new_at[n.name])
        elif n.name not in dead:
            kept.append(n)
    return kept, count


def _weight_out_axis(mm: Node, w: str) -> int | None:
    """The weight axis that becomes the output's last axis: 1 for ``x @ W`` (matmul), the
    position of the output's last letter in the weight's spec for a two-operand einsum."""
    if mm.op == "matmul" and mm.inputs[1] == w and mm.inputs[0] != w:
        return 1
    if mm.op == "einsum" and len(mm.inputs) == 2 and mm.inputs[1] == w and mm.inputs[0] != w:
        eq = mm.attr("eq")
        lhs, out = eq.split("->")
        spec = lhs.split(",")[1]
        if out and out[-1] in spec and out[-1] not in lhs.split(",")[0] and len(spec) == 2:
            return spec.index(out[-1])
    return None


def _blocks(by_name, users, y: Node):
    """[(slice node, (start, stop))] when every user of ``y`` is a unit-step slice of its
    last axis and the slices tile it; else None."""
    last = y.type.rank - 1
    found = []
    for u in users.get(y.name, []):
        s = by_name[u]
        a = s.attr_dict
        if s.op != "slice" or a["axis"] != last or a.get("step", 1) != 1:
            return None
        found.append((s, (a["start"], a["stop"])))
    found.sort(key=lambda t: t[1])
    edges = [r for _, r in found]
    if len(found) < 2 or edges[0][0] != 0 or edges[-1][1] != y.type.shape[-1]:
        return None
    if any(a[1] != b[0] for a, b in zip(edges, edges[1:], strict=False)):
        return None
    return found
