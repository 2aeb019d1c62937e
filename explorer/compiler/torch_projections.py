"""Fused projections run as one matmul: the weight blocks the importer split out of one
stored weight (``W[start:stop]``: GPT-2's q, k, v columns of ``c_attn``, Phi-3's
``qkv_proj`` and ``gate_up_proj``) are merged back for the compiled program.

The importer splits ``x @ W (+ b)`` into one projection per block so that the planner can
shard each block's columns (`split_fused_projections`). Run as written, that is three
matrix-vector products and three bias adds where one of each does, and each block of
GPT-2's ``(768, 2304)`` ``c_attn`` weight is a strided column block that the program
copies out (85 MB of copies for GPT-2 small). `merge_projections` puts back
``y = x @ W (+ b)`` over the module's own weight and turns each block's result into a
slice of ``y`` (a view), so nothing is copied.

Merged only when the blocks tile the stored weight along its output axis, each block is
read by one projection of the same input (and, for the bias, by one add of a bias block
of one stored bias that the blocks tile too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..ir import Graph, Node
from ..ir.node import freeze_attrs
from ..models.torch_import.fuse import _weight_out_axis
from .torch_io import _BLOCK

__all__ = ["merge_projections"]


def merge_projections(graph: Graph, stored_shape: Callable[[str], tuple[int, ...] | None]
                      ) -> tuple[Graph, int]:  # fmt: skip
    """(the graph with each split projection merged, how many were merged);
    ``stored_shape(name)``: the shape of the module's weight or buffer ``name`` (None if
    it has none)."""
    nodes = {n.name: n for n in graph.nodes}
    blocks: dict[str, list[tuple[int, int, Node]]] = {}
    for n in graph.nodes:
        m = _BLOCK.match(n.name) if n.op == "param" else None
        if m is not None:
            blocks.setdefault(m["name"], []).append((int(m["start"]), int(m["stop"]), n))
    swap: dict[str, list[Node]] = {}  # node name -> what replaces it
    gone: set[str] = set()
    merged = 0
    for base, parts in blocks.items():
        plan = _merge(graph, nodes, base, sorted(parts, key=lambda t: t[0]), stored_shape)
        if plan is None:
            continue
        new, dropped = plan
        first_param, first_op = dropped[0], dropped[1]
        swap[first_param] = new[0]
        swap[first_op] = new[1]
        gone.update(dropped)
        merged += 1
    if not merged:
        return graph, 0
    out: list[Node] = []
    for n in graph.nodes:
        if n.name in swap:
            out += swap[n.name]
        elif n.name not in gone:
            out.append(n)
    return Graph(tuple(out), graph.outputs, graph.name), merged


def _merge(graph: Graph, nodes: dict[str, Node], base: str, parts: list[tuple[int, int, Node]],
           stored_shape: Callable[[str], tuple[int, ...] | None]
           ) -> tuple[tuple[list[Node], list[Node]], list[str]] | None:  # fmt: skip
    """((new params, new ops), names dropped: first param, first op, then the rest) for
    one stored weight's blocks, or None when they do not merge."""
    full = stored_shape(base)
    outputs = set(graph.outputs)
    if full is None or len(parts) < 2 or len(full) != 2 or base in nodes:
        return None
    projs = []
    for _, _, p in parts:
        users = graph.consumers(p.name)
        if len(users) != 1 or p.name in outputs:
            return None
        mm = nodes[users[0]]
        axis = _weight_out_axis(mm, p.name)
        if axis is None or mm.name in outputs:
            return None
        projs.append((mm, axis))
    mm0, axis = projs[0]
    same = all(mm.op == mm0.op and mm.attrs == mm0.attrs and mm.inputs[0] == mm0.inputs[0]
               and a == axis for mm, a in projs)  # fmt: skip
    tiles = parts[0][0] == 0 and parts[-1][1] == full[axis] and all(
        a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))  # fmt: skip
    if not same or not tiles or any(p.type.shape[1 - axis] != full[1 - axis] for *_, p in parts):
        return None
    n_out = full[axis]
    tops = [mm for mm, _ in projs]
    bias = _bias(graph, nodes, parts, tops, stored_shape, n_out)
    module = base.rsplit(".", 1)[0]
    w = dataclasses.replace(parts[0][2], name=base, type=parts[0][2].type.with_shape(full))
    y_type = mm0.type.with_shape(mm0.type.shape[:-1] + (n_out,))
    y = dataclasses.replace(mm0, name=f"{module}.merged", type=y_type,
                            inputs=(mm0.inputs[0], base))  # fmt: skip
    params, ops, dropped = [w], [y], [parts[0][2].name, mm0.name]
    dropped += [p.name for *_, p in parts[1:]] + [mm.name for mm in tops[1:]]
    if bias is not None:
        b_name, adds, b_params = bias
        b = dataclasses.replace(
            b_params[0], name=b_name, type=b_params[0].type.with_shape((n_out,))
        )
        ins = tuple(y.name if a == mm0.name else b_name for a in adds[0].inputs)
        top = dataclasses.replace(adds[0], name=f"{module}.merged_bias", inputs=ins, type=y_type)
        params.append(b)
        ops.append(top)
        dropped += [a.name for a in adds] + [p.name for p in b_params]
        ends = adds
    else:
        top, ends = y, tops
    if any(n in nodes for n in (y.name, top.name)):
        return None
    rank = y_type.rank
    for (start, stop, _), end in zip(parts, ends, strict=True):
        attrs = {"axis": rank - 1, "start": start, "stop": stop, "step": 1}
        ops.append(dataclasses.replace(end, op="slice", inputs=(top.name,),
                                       attrs=freeze_attrs(attrs)))  # fmt: skip
    return (params, ops), dropped


def _bias(graph: Graph, nodes: dict[str, Node], parts: list[tuple[int, int, Node]],
          tops: list[Node], stored_shape: Callable[[str], tuple[int, ...] | None], n_out: int
          ) -> tuple[str, list[Node], list[Node]] | None:  # fmt: skip
    """(stored bias name, the adds, the bias block params) when every projection's only
    reader adds a block ``b[start:stop]`` of one stored bias that the blocks tile."""
    adds, params, names = [], [], set()
    for (start, stop, _), mm in zip(parts, tops, strict=True):
        users = graph.consumers(mm.name)
        if len(users) != 1 or nodes[users[0]].op != "add":
            return None
        add = nodes[users[0]]
        other = [a for a in add.inputs if a != mm.name]
        if len(other) != 1:
            return None
        b = nodes[other[0]]
        m = _BLOCK.match(b.name) if b.op == "param" else None
        if (m is None or (int(m["start"]), int(m["stop"])) != (start, stop)
                or len(graph.consumers(b.name)) != 1 or add.type != mm.type):  # fmt: skip
            return None
        adds.append(add)
        params.append(b)
        names.add(m["name"])
    if len(names) != 1:
        return None
    name = names.pop()
    if stored_shape(name) != (n_out,) or name in nodes:
        return None
    return name, adds, params
