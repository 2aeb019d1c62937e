"""Attention-score fusion: ``softmax(causal_mask(scale(x)))`` becomes one
``masked_softmax`` kernel (scale, mask, max, exp, sum, divide over one buffer).

Either of ``scale`` and ``causal_mask`` may be absent; each absorbed producer must have the
softmax as its only use and must not be a graph output. The backward graph is unaffected:
``softmax_grad`` reads the softmax's output, which the fused node still produces.

>>> import explorer as ex
>>> b = ex.GraphBuilder("g"); x = b.input("x", (2, 4, 4))
>>> g = b.build([b.op("softmax", b.op("causal_mask", b.op("scale", x, factor=0.5)))])
>>> [n.op for n in fuse_softmax(g)[0].ops]
['masked_softmax']
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node
from ...ir.node import freeze_attrs
from ...ir.opdef import REGISTRY, OpDef, OpGroup, register
from .rewrite import RewriteStep

__all__ = ["fuse_softmax", "masked_softmax"]


def masked_softmax(x: np.ndarray, scale: float = 1.0, causal: bool = False, offset: int = 0,
                   **_) -> np.ndarray:  # fmt: skip
    """Reference implementation: ``softmax(causal_mask(x * scale))`` over the last dim."""
    y = x * np.float32(scale)
    if causal:
        s, t = y.shape[-2], y.shape[-1]
        keep = np.arange(t)[None, :] <= (np.arange(s)[:, None] + offset)
        y = np.where(keep, y, np.float32(-np.inf))
    y = np.exp(y - y.max(axis=-1, keepdims=True))
    return (y / y.sum(axis=-1, keepdims=True)).astype(x.dtype)


if "masked_softmax" not in REGISTRY:
    register(OpDef("masked_softmax", OpGroup.REDUCE, "...d->...d", 1, 7, masked_softmax,
                   attrs={"scale": 1.0, "causal": False, "offset": 0, "ops": (),
                          "members": (), "flops": 0},
                   flops_rule=lambda i, o, a: a["flops"],
                   doc="softmax(causal_mask(scale x)) in one kernel (fused attention scores)"))  # fmt: skip


def _single_use(graph: Graph, name: str, outputs: set[str]) -> bool:
    return len(graph.consumers(name)) == 1 and name not in outputs


def fuse_softmax(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    """Fold a ``scale`` and a ``causal_mask`` feeding a ``softmax`` into that softmax."""
    nodes = {n.name: n for n in graph.nodes}
    outputs = set(graph.outputs)
    absorbed: set[str] = set()
    fused: dict[str, Node] = {}
    for n in graph.nodes:
        if n.op != "softmax":
            continue
        members = [n.name]
        attrs = {"scale": 1.0, "causal": False, "offset": 0}
        src = nodes[n.inputs[0]]
        if src.op == "causal_mask" and _single_use(graph, src.name, outputs):
            attrs.update(causal=True, offset=int(src.attr("offset", 0)))
            members.insert(0, src.name)
            src = nodes[src.inputs[0]]
        if src.op == "scale" and _single_use(graph, src.name, outputs) and src.type == n.type:
            attrs["scale"] = float(src.attr("factor"))
            members.insert(0, src.name)
            src = nodes[src.inputs[0]]
        if len(members) == 1:
            continue
        absorbed.update(members[:-1])
        attrs |= {
            "members": tuple(members), "ops": tuple(nodes[m].op for m in members),
            "flops": sum(graph.node_flops(m) for m in members),
        }  # fmt: skip
        fused[n.name] = dataclasses.replace(
            n, op="masked_softmax", inputs=(src.name,), attrs=freeze_attrs(attrs)
        )
    if not fused:
        return graph, []
    out = tuple(fused.get(n.name, n) for n in graph.nodes if n.name not in absorbed)
    new = Graph(out, graph.outputs, graph.name)
    detail = f"{len(absorbed) + len(fused)} ops -> {len(fused)} kernels"
    return new, [RewriteStep("fuse_softmax", "scale_mask_softmax", tuple(fused), graph, new,
                             detail)]  # fmt: skip
