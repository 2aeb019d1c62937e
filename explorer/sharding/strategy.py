"""`Strategy` and their enumeration from each op's dim signature.

Generic rule (DTensor's einsum strategy generator): every mesh axis goes to at most one
letter of the signature (or to none: that axis replicates the op); a letter may take several
axes, in mesh order; every dim carrying that letter must be divisible by the product of
their sizes. Input layouts follow from the letters; a split contracted letter leaves the
output partial on its axes. Odd ops get hand rules in `rules`.

>>> import explorer as ex
>>> b = ex.GraphBuilder("mm"); x = b.input("x", (8, 16)); w = b.param("w", (16, 4))
>>> g = b.build([b.op("matmul", x, w, name="y")])
>>> mesh = ex.Mesh({"tp": 4})
>>> [s.name for s in strategies(g, mesh)["y"]]
['replicated', 'a=tp', 'k=tp', 'n=tp']
>>> print(strategies(g, mesh)["y"][2].out_layout)
[A, B]{U_tp}
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..hardware import Mesh
from ..ir import Graph, OpGroup, TensorType
from ..ir.opdef import get as get_opdef
from ..ir.signature import parse
from ..memo import Memo
from . import rules
from .collective import Collective
from .layout import Layout

__all__ = ["Strategy", "strategies", "node_strategies"]

LetterAxes = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Strategy:
    """How one node runs on the mesh.

    Args:
        node: node name.
        dim_axes: signature letter -> mesh axes, only split letters, in signature order.
        in_layouts: the layout each input must have (never partial).
        out_layout: the layout the output is produced in (partial after a split contraction).
        local_flops: FLOPs on one device.
        bytes_read, bytes_written: local input and output bytes of one device.
        memory_bytes: local output bytes plus local bytes of the parameter inputs (the
            weights this strategy keeps resident); for a source node its local size.
        collectives: communication inside the op (hand rules: normalisation statistics).
    """

    node: str
    dim_axes: LetterAxes
    in_layouts: tuple[Layout, ...]
    out_layout: Layout
    local_flops: int
    bytes_read: int
    bytes_written: int
    memory_bytes: int
    collectives: tuple[Collective, ...] = ()
    first_letter: str = ""

    @property
    def name(self) -> str:
        """``"b=dp,n=tp"``; several axes on one letter joined by ``+``; "replicated"."""
        if not self.dim_axes:
            return "replicated"
        return ",".join(f"{c}={'+'.join(axes)}" for c, axes in self.dim_axes)

    @property
    def is_data_parallel(self) -> bool:
        """Only the first (batch) letter of the first input (or of a source) is split."""
        return len(self.dim_axes) == 1 and self.dim_axes[0][0] == self.first_letter

    def __str__(self) -> str:
        return f"{self.node}: {self.name}"

    def _renamed(self, node: str) -> Strategy:
        # Templates are shared by identical nodes (24 equal layers); copying the field dict
        # is ~10x faster than dataclasses.replace and keeps the value immutable.
        new = object.__new__(Strategy)
        new.__dict__.update(self.__dict__)
        new.__dict__["node"] = node
        if self.collectives:  # the in-op collectives are labelled with their node too
            new.__dict__["collectives"] = tuple(
                c if c.tensor == node else dataclasses.replace(c, tensor=node)
                for c in self.collectives
            )
        return new


# Name-free templates (collectives unlabelled), shared by identical nodes; the key holds
# every input of the enumeration, and node_strategies labels each copy with its node.
_TEMPLATES: Memo[tuple[Strategy, ...]] = Memo("sharding.strategies", maxsize=4096)


def strategies(graph: Graph, mesh: Mesh) -> dict[str, tuple[Strategy, ...]]:
    """Every valid strategy of every node, in graph order (replicated first)."""
    return {n.name: node_strategies(graph, n.name, mesh) for n in graph.nodes}


def node_strategies(graph: Graph, name: str, mesh: Mesh) -> tuple[Strategy, ...]:
    """Every valid strategy of one node, in a deterministic order."""
    node = graph.node(name)
    in_types = graph.input_types(name)
    params = tuple(graph.node(a).op == "param" for a in node.inputs)
    key = (node.op, graph.signature(name), in_types, node.type, node.attrs, params, mesh)
    found = _TEMPLATES.get(key, lambda: tuple(_enumerate(graph, name, mesh, in_types, params)))
    return tuple(s._renamed(name) for s in found)


def _enumerate(graph: Graph, name: str, mesh: Mesh, in_types: tuple[TensorType, ...],
               params: tuple[bool, ...]):  # fmt: skip
    node = graph.node(name)
    out_t = node.type
    is_source = graph.group(name) is OpGroup.SOURCE
    sig, fixed = rules.rewrite_signature(
        node.op, graph.signature(name), tuple(t.shape for t in in_types), out_t.shape
    )
    ins, out = parse(sig)
    letters = list(dict.fromkeys("".join(ins) + out))
    if not is_source:
        fixed = (
            fixed
            | rules.fixed_letters(node.op, sig, node.attr_dict)
            | (set(out) - set("".join(ins)))
        )
    sizes: dict[str, list[int]] = {c: [] for c in letters}
    for spec, t in zip(ins + (out,), in_types + (out_t,), strict=True):
        for c, d in zip(spec, t.shape, strict=True):
            sizes[c].append(d)
    splittable = [c for c in letters if c not in fixed]
    contracted = set("".join(ins)) - set(out)
    mesh_axes = [a for a in mesh.axis_names if mesh.axis_size(a) > 1]
    flops = graph.node_flops(name)
    view = get_opdef(node.op).view
    first = ins[0][0] if ins and ins[0] else (out[:1] if is_source else "")
    for combo in _combos(mesh, mesh_axes, splittable, sizes):
        letter_axes: dict[str, tuple[str, ...]] = {}
        for axis, c in zip(mesh_axes, combo, strict=True):
            if c is not None:
                letter_axes[c] = letter_axes.get(c, ()) + (axis,)
        dim_axes = tuple((c, letter_axes[c]) for c in letters if c in letter_axes)
        in_layouts = tuple(Layout(tuple(letter_axes.get(c, ()) for c in s)) for s in ins)
        partial: tuple[str, ...] = ()
        if node.op not in rules.NO_PARTIAL:
            partial = tuple(a for c in letters if c in contracted for a in letter_axes.get(c, ()))
        out_layout = Layout(tuple(letter_axes.get(c, ()) for c in out), partial)
        split = math.prod(mesh.axis_size(a) for axes in letter_axes.values() for a in axes)
        local_in = [lay.local_shape(t.shape, mesh) for lay, t in zip(in_layouts, in_types,
                                                                   strict=True)]  # fmt: skip
        in_bytes = [math.prod(s) * t.dtype.itemsize for s, t in zip(local_in, in_types,
                                                                    strict=True)]  # fmt: skip
        local_out = out_layout.local_shape(out_t.shape, mesh)
        out_bytes = math.prod(local_out) * out_t.dtype.itemsize
        if view:  # a view moves no data and holds no memory (OpDef.view)
            in_bytes, out_bytes = [0] * len(in_bytes), 0
        coll = rules.internal_collectives(
            node.op,
            sig,
            letter_axes,
            local_out,
            in_types[0].dtype if in_types else out_t.dtype,
            mesh,
            "",  # a template: node_strategies labels the copies
        )
        yield Strategy(
            node="", dim_axes=dim_axes, in_layouts=in_layouts, out_layout=out_layout,
            local_flops=flops // split, bytes_read=sum(in_bytes), bytes_written=out_bytes,
            memory_bytes=out_bytes + sum(b for b, p in zip(in_bytes, params, strict=True) if p),
            collectives=coll, first_letter=first,
        )  # fmt: skip


def _combos(mesh: Mesh, axes: list[str], letters: list[str], sizes: dict[str, list[int]]):
    """Assignments axis -> letter or None, replicated first, pruned by divisibility."""
    out: list[tuple] = []
    shards = dict.fromkeys(letters, 1)

    def rec(i: int, acc: list) -> None:
        if i == len(axes):
            out.append(tuple(acc))
            return
        acc.append(None)
        rec(i + 1, acc)
        acc.pop()
        n = mesh.axis_size(axes[i])
        for c in letters:
            k = shards[c] * n
            if all(d % k == 0 for d in sizes[c]):
                shards[c] = k
                acc.append(c)
                rec(i + 1, acc)
                acc.pop()
                shards[c] = k // n

    rec(0, [])
    # Order: fewer split axes first, then by letter position, so "replicated" leads.
    pos = {c: i for i, c in enumerate(letters)}
    out.sort(key=lambda t: (sum(c is not None for c in t),
                            tuple(pos[c] if c is not None else -1 for c in t)))  # fmt: skip
    return out
