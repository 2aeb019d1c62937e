"""Attention of one query against a key/value cache as one kernel: ``einsum(softmax(
einsum(q, transpose(k)) * scale + mask), v)`` with a single query row becomes
``decode_attention(q, k, v, mask)``.

A decoding step (``torch_decode.step_module``) runs, per layer, two batched matmuls of one
row per head, the scale and the additive mask of the empty cache slots, and a softmax:
five kernel calls and four scratch arrays for a few hundred thousand flops. Inside a step
whose weights stream from memory, each call finds its operands evicted, so the calls cost
more than their arithmetic: GPT-2 small after 128 tokens, 12 layers, 106-108 us a layer
for those calls (one BLAS thread, measured under load). The fused kernel reads each cached
key and value once (numba: a generated loop per head, ``codegen``; numpy: the same five
steps in one call over preallocated scratch).

The rewrite needs: the scores' einsum a batched matmul of one query row, its key operand a
``transpose`` of the cache's last two dims, the scale and mask one ``fused`` region
``((in0 * k0) + in1)``, a softmax over the keys, and each intermediate read only by the
next. The mask's shape is ``[b or 1, h or 1, 1, keys]``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node
from ...ir.node import freeze_attrs
from ...ir.opdef import REGISTRY, REQUIRED, OpDef, OpGroup, register
from .grouped_attention import _batched_matmul_eq
from .rewrite import RewriteStep

__all__ = ["decode_attention", "decode_attention_impl"]


def decode_attention_impl(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray,
                          scale: float, **_) -> np.ndarray:  # fmt: skip
    """Reference: ``softmax(q kT * scale + mask) v`` (float32, as the unfused kernels)."""
    dt = q.dtype.type
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * dt(scale) + mask
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v).astype(q.dtype)


if "decode_attention" not in REGISTRY:
    register(OpDef("decode_attention", OpGroup.CONTRACTION, None, 4, 0, decode_attention_impl,
                   attrs={"scale": REQUIRED, "members": (), "ops": (), "flops": 0},
                   signature_rule=lambda i, a: "bhqd,bhtd,bhte,xyqt->bhqe",  # mask: x, y = b or 1, h or 1
                   flops_rule=lambda i, o, a: a["flops"],
                   shape_rule=lambda i, a: i[0].shape[:3] + (i[2].shape[3],),
                   doc="softmax(q kT * scale + mask) v for one query row"))  # fmt: skip

_SCALE_ADD = "((in0 * k0) + in1)"


def decode_attention(graph: Graph) -> tuple[Graph, list[RewriteStep]]:
    """Rewrite single-query attention over a cache into ``decode_attention`` nodes (see
    the module)."""
    nodes = {n.name: n for n in graph.nodes}
    outputs = set(graph.outputs)

    def single(name: str) -> bool:
        return len(graph.consumers(name)) == 1 and name not in outputs

    def matmul(n: Node) -> bool:
        return n.op == "einsum" and len(n.inputs) == 2 and _batched_matmul_eq(n.attr("eq", ""))

    absorbed: set[str] = set()
    fused: dict[str, Node] = {}
    for n in graph.nodes:
        if not matmul(n) or n.type.shape[2] != 1:
            continue
        sm = nodes[n.inputs[0]]
        if sm.op != "softmax" or sm.attr("axis", -1) not in (-1, 3) or not single(sm.name):
            continue
        f = nodes[sm.inputs[0]]
        if (f.op != "fused" or f.attr("expr") != _SCALE_ADD or len(f.inputs) != 2
                or len(f.attr("consts", ())) != 1 or not single(f.name)):  # fmt: skip
            continue
        qk, mask = nodes[f.inputs[0]], nodes[f.inputs[1]]
        if not matmul(qk) or not single(qk.name):
            continue
        kt = nodes[qk.inputs[1]]
        if kt.op != "transpose" or tuple(kt.attr("perm", ())) != (0, 1, 3, 2):
            continue
        b, h, _, keys = qk.type.shape
        ms = mask.type.shape
        if (len(ms) != 4 or ms[2:] != (1, keys) or ms[0] not in (1, b) or ms[1] not in (1, h)
                or len({qk.type.dtype, n.type.dtype, mask.type.dtype}) != 1):  # fmt: skip
            continue
        members = (qk.name, f.name, sm.name, n.name)
        attrs = {"scale": float(f.attr("consts")[0]), "members": members,
                 "ops": (qk.op, *f.attr("ops", ()), sm.op, n.op),
                 "flops": sum(graph.node_flops(m) for m in members)}  # fmt: skip
        fused[n.name] = dataclasses.replace(
            n, op="decode_attention", inputs=(qk.inputs[0], kt.inputs[0], n.inputs[1], mask.name),
            attrs=freeze_attrs(attrs))  # fmt: skip
        absorbed.update(members[:3])
        if single(kt.name):
            absorbed.add(kt.name)
    if not fused:
        return graph, []
    out = tuple(fused.get(n.name, n) for n in graph.nodes if n.name not in absorbed)
    new = Graph(out, graph.outputs, graph.name)
    return new, [RewriteStep("decode_attention", "single_query_attention", tuple(fused),
                             graph, new, f"{len(fused)} single-query attentions in one kernel")]  # fmt: skip
