"""Causal attention by blocks of queries: ``einsum(masked_softmax(einsum(q, kT)), v)`` with
a causal mask becomes one ``causal_attention`` kernel that, for each block of query rows,
computes the scores against only the keys the block may see.

A causal prefill of ``S`` tokens computes ``S x S`` scores of which the upper triangle is
masked to 0: both matmuls and the softmax do twice the work they need. By blocks of ``B``
rows, block ``i`` reads keys ``0 .. (i + 1) B``: at ``S = 512`` and ``B = 64`` the
kernel does 56% of the matmul and softmax work (``sum((i + 1) B) B / S^2``). The values
are the same up to rounding (each row's softmax and weighted sum cover the same keys; the
masked ones weigh exactly 0 either way). GPT-2 small prefilling 512 tokens (12 layers,
one BLAS thread, measured under load: other helpers running): the attention kernels of a
traced call 421 -> 297 ms; whole calls 2456 -> 2292 ms (medians of 5 interleaved calls,
noisy at that load); logits within 3.6e-6 of the whole-matrix program.

Only prefills of at least two blocks are rewritten; decoding steps (one query, the mask an
input) are left alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node
from ...ir.node import freeze_attrs
from ...ir.opdef import REGISTRY, REQUIRED, OpDef, OpGroup, register
from ..kernels import causal_blocks as blocks
from .fuse_softmax import masked_softmax
from .grouped_attention import _batched_matmul_eq
from .rewrite import RewriteStep

__all__ = ["causal_attention", "causal_attention_impl", "BLOCK", "blocks"]

#: Query rows per block (bench/jit.py row (g), GPT-2 small prefill of 512 tokens).
BLOCK = 64


def causal_attention_impl(q: np.ndarray, kt: np.ndarray, v: np.ndarray, scale: float,
                          offset: int, **_) -> np.ndarray:  # fmt: skip
    """Reference: ``softmax(causal_mask(scale q kT)) v`` over the whole score matrix."""
    p = masked_softmax(np.matmul(q, kt), scale=scale, causal=True, offset=offset)
    return np.matmul(p, v).astype(q.dtype)


def _sig(in_types, attrs) -> str:
    return "bhsd,bhdt,bhte->bhse"


if "causal_attention" not in REGISTRY:
    register(OpDef("causal_attention", OpGroup.CONTRACTION, None, 3, 0, causal_attention_impl,
                   attrs={"scale": REQUIRED, "offset": 0, "block": BLOCK, "members": (),
                          "ops": (), "flops": 0},
                   signature_rule=_sig, flops_rule=lambda i, o, a: a["flops"],
                   shape_rule=lambda i, a: i[0].shape[:3] + (i[2].shape[3],),
                   doc="softmax(causal_mask(scale q kT)) v by blocks of query rows"))  # fmt: skip


def causal_attention(graph: Graph, block: int = BLOCK) -> tuple[Graph, list[RewriteStep]]:
    """Rewrite causal attention of at least two blocks of ``block`` query rows (see the
    module)."""
    nodes = {n.name: n for n in graph.nodes}
    outputs = set(graph.outputs)

    def single(name: str) -> bool:
        return len(graph.consumers(name)) == 1 and name not in outputs

    absorbed: set[str] = set()
    fused: dict[str, Node] = {}
    for n in graph.nodes:
        if n.op != "einsum" or len(n.inputs) != 2 or not _batched_matmul_eq(n.attr("eq", "")):
            continue
        sm = nodes[n.inputs[0]]
        if sm.op != "masked_softmax" or not sm.attr("causal") or not single(sm.name):
            continue
        qk = nodes[sm.inputs[0]]
        if (qk.op != "einsum" or len(qk.inputs) != 2 or not single(qk.name)
                or not _batched_matmul_eq(qk.attr("eq", ""))):  # fmt: skip
            continue
        rows = qk.type.shape[2]
        if rows < 2 * block or n.type.dtype != qk.type.dtype:
            continue
        members = (qk.name, sm.name, n.name)
        attrs = {"scale": float(sm.attr("scale", 1.0)), "offset": int(sm.attr("offset", 0)),
                 "block": block, "members": members,
                 "ops": (qk.op, *sm.attr("ops", (sm.op,)), n.op),
                 "flops": sum(graph.node_flops(m) for m in members)}  # fmt: skip
        fused[n.name] = dataclasses.replace(n, op="causal_attention",
                                            inputs=(*qk.inputs, n.inputs[1]),
                                            attrs=freeze_attrs(attrs))  # fmt: skip
        absorbed.update(members[:2])
    if not fused:
        return graph, []
    out = tuple(fused.get(n.name, n) for n in graph.nodes if n.name not in absorbed)
    new = Graph(out, graph.outputs, graph.name)
    return new, [RewriteStep("causal_attention", "blocked_causal_attention", tuple(fused),
                             graph, new, f"{len(fused)} attentions by blocks of {block}")]  # fmt: skip
