"""Donated inputs: a call's input whose array the program may overwrite (JAX's
``donate_argnums``), so that appending to a key/value cache writes one slot in place
instead of copying the whole cache.

A decode step traced from transformers appends the new token's keys to the cache as
``cat(slice(%cache, stop=P), %new)``. When ``%cache`` is donated and holds ``P + 1`` slots
(the last one free), the rule `append_in_place` rewrites that into
``write_slice(%cache, %new, axis, start=P)``: the kernel writes ``%new`` into the free slot
and returns the cache itself (a view: no allocation). The registry's impl (what the IR
interpreter and the reference runs use) copies, so only the compiled run writes into the
caller's array, and only into the slot the model never reads.

GPT-2 small decoding one token after 128 (12 layers): the 24 concatenations copied 9.4 MB
per step (the step's peak RSS, 9.3 MiB, against torch eager's 0.43 MiB) and took 3 ms of
an 87 ms step (measured under load, other helpers running).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir import Graph, Node
from ...ir.node import freeze_attrs
from ...ir.opdef import REGISTRY, REQUIRED, OpDef, OpGroup, register
from .rewrite import Context, Rewrite, RewriteStep, Rule, run_rules

__all__ = ["WRITE_SLICE", "donate", "write_slice_impl"]

WRITE_SLICE = "write_slice"
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _index(rank: int, axis: int, start: int, size: int) -> tuple[slice, ...]:
    return (
        (slice(None),) * axis + (slice(start, start + size),) + (slice(None),) * (rank - axis - 1)
    )


def write_slice_impl(x: np.ndarray, part: np.ndarray, axis: int, start: int) -> np.ndarray:
    """``x`` with ``part`` written at ``start`` along ``axis`` (a new array: the reference;
    the compiled kernel writes into ``x``)."""
    out = np.array(x, copy=True)
    out[_index(x.ndim, axis, start, part.shape[axis])] = part
    return out


def _sig(in_types, attrs) -> str:
    rank, axis = in_types[0].rank, attrs["axis"]
    shared = _LETTERS[:rank]
    part = shared[:axis] + _LETTERS[rank] + shared[axis + 1 :]
    return f"{shared},{part}->{shared}"


if WRITE_SLICE not in REGISTRY:
    register(OpDef(WRITE_SLICE, OpGroup.MOVEMENT, None, 2, 0, write_slice_impl,
                   attrs={"axis": REQUIRED, "start": REQUIRED}, signature_rule=_sig,
                   shape_rule=lambda in_types, attrs: in_types[0].shape,
                   doc="x with a part written at start along axis (in place on a donated x)"))  # fmt: skip


def _append_rule(donated: frozenset[str]):
    def append_in_place(n: Node, ctx: Context) -> Rewrite | None:
        if n.op != "cat" or len(n.inputs) != 2:
            return None
        head, new = (ctx.node(a) for a in n.inputs)
        axis = n.attr("axis") % n.type.rank
        if head.op != "slice" or head.attr("axis") % head.type.rank != axis:
            return None
        cache = ctx.node(head.inputs[0])
        kept = head.type.shape[axis]
        if (cache.name not in donated or cache.type != n.type or head.attr("start") != 0
                or head.attr("step", 1) != 1 or ctx.uses(cache.name) != 1
                or kept + new.type.shape[axis] != cache.type.shape[axis]):  # fmt: skip
            return None  # the cache must be read only through this slice
        attrs = freeze_attrs({"axis": axis, "start": kept})
        node = Node(n.name, WRITE_SLICE, (cache.name, new.name), n.type, attrs, n.scope)
        return Rewrite((node,), n.name)

    return append_in_place


def donate(graph: Graph, names: Sequence[str]) -> tuple[Graph, list[RewriteStep]]:
    """Appends to the donated inputs ``names`` (graph input names) written in place."""
    known = {n.name for n in graph.inputs}
    donated = frozenset(n for n in names if n in known)
    if not donated:
        return graph, []
    return run_rules(graph, (Rule("append_in_place", _append_rule(donated)),), "donate")
