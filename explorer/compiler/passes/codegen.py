"""The ``codegen`` pass: regions the cost model gives to numba become ``generated`` nodes
carrying their kernel's source; the rest stay on the numpy path. Each generated kernel is
one RewriteStep whose ``source`` is the module numba compiles; the regions left to numpy
are one RewriteStep saying why (numba missing, or too small to pay).

>>> import explorer as ex
>>> b = ex.GraphBuilder("g"); x = b.input("x", (256, 256))
>>> g = b.build([b.op("softmax", b.op("scale", x, factor=0.5))])
>>> from explorer.compiler.passes import fuse_softmax
>>> g2, steps = codegen(fuse_softmax(g)[0], numba_ok=False)
>>> steps[0].rule, [n.op for n in g2.ops]
('numpy_fallback', ['masked_softmax'])
"""

from __future__ import annotations

import dataclasses

from ...ir import DType, Graph, Node, TensorType
from ...ir.node import freeze_attrs
from ..codegen import cost
from ..codegen.build import numba_available, numba_threads
from ..codegen.cost import Choice, choose
from ..codegen.op import GENERATED, KernelSource
from ..codegen.source import (
    UnsupportedRegion,
    attention_source,
    broadcast_split,
    elementwise_source,
    norm_source,
    softmax_source,
)
from .rewrite import RewriteStep

__all__ = ["codegen", "REGIONS"]

REGIONS = {"fused": "elementwise", "masked_softmax": "softmax", "softmax": "softmax",
           "layernorm": "layernorm", "rmsnorm": "rmsnorm", "decode_attention": "attention"}  # fmt: skip
# numpy calls the unfused kernels make (what the cost model counts for row-wise regions)
_ROW_OPS = {"softmax": 6, "layernorm": 9, "rmsnorm": 7, "attention": 9}


def _region(n: Node, in_types: tuple[TensorType, ...], parallel: bool) -> dict:
    """The generated node's attributes (raises UnsupportedRegion)."""
    kind = REGIONS[n.op]
    attrs = dict(n.attrs)
    out = n.type
    if kind == "elementwise":
        names = [t.dtype.numpy.name for t in in_types]
        split = broadcast_split(out.shape, [t.shape for t in in_types])
        if split is None:
            raise UnsupportedRegion(f"broadcast of {[t.shape for t in in_types]} into {out.shape}")
        p, kinds = split
        src = elementwise_source("fused_kernel", attrs["expr"], names, attrs.get("consts", ()),
                                 kinds, out.dtype.numpy.name, parallel)  # fmt: skip
        return {"source": src, "entry": "fused_kernel", "split": p, "kinds": kinds,
                "ops": attrs.get("ops", ()), "members": attrs.get("members", ())}  # fmt: skip
    if any(t.dtype is not DType.FP32 for t in in_types) or out.rank == 0:
        raise UnsupportedRegion(f"{n.op} of {[t.dtype.value for t in in_types]}")
    if kind == "attention":  # one query row: b x h x keys scores, never on threads
        return {"source": attention_source("attention_kernel"), "entry": "attention_kernel",
                "ops": attrs["ops"], "members": attrs["members"]}  # fmt: skip
    if kind == "softmax":
        causal = bool(attrs.get("causal", False))
        if causal and out.rank < 2:
            raise UnsupportedRegion("causal softmax of rank < 2")
        src = softmax_source("softmax_kernel", parallel)
        return {"source": src, "entry": "softmax_kernel",
                "ops": attrs.get("ops", (n.op,)), "members": attrs.get("members", (n.name,))}  # fmt: skip
    if any(t.shape != (out.shape[-1],) for t in in_types[1:]):
        raise UnsupportedRegion(f"{n.op} with gain/bias shapes {[t.shape for t in in_types]}")
    src = norm_source(f"{kind}_kernel", kind == "layernorm", parallel)
    return {"source": src, "entry": f"{kind}_kernel", "ops": (n.op,), "members": (n.name,)}


def codegen(graph: Graph, numba_ok: bool | None = None) -> tuple[Graph, list[RewriteStep]]:
    """Rewrite the regions worth a numba kernel into ``generated`` nodes.

    ``numba_ok``: whether numba may be used (default: ``numba_available()``); False takes
    the numpy fallback for every region, as on a machine without numba.
    """
    ok = numba_available() if numba_ok is None else numba_ok
    new_nodes: list[Node] = []
    made: list[tuple[str, Choice, str]] = []
    kept: list[tuple[str, str]] = []
    for n in graph.nodes:
        kind = REGIONS.get(n.op)
        if kind is None:
            new_nodes.append(n)
            continue
        n_ops = len(n.attr("ops", ())) if kind == "elementwise" else _ROW_OPS[kind]
        ops = tuple(n.attr("ops", ())) if kind == "elementwise" else (n.op,)
        # numba is imported (for its thread count) only for a region large enough for threads
        numel = n.type.numel
        if kind == "attention":  # its work is its scores (batch x heads x keys), one thread
            numel = numel // n.type.shape[-1] * graph.node(n.inputs[1]).type.shape[2]
        threads = numba_threads() if ok and numel >= cost.PARALLEL_MIN_NUMEL else 1
        threads = 1 if kind == "attention" else threads
        choice = choose(kind, numel, n_ops, ok, threads, ops)  # type: ignore[arg-type]
        if choice.backend == "numpy":
            kept.append((n.name, choice.reason))
            new_nodes.append(n)
            continue
        in_types = graph.input_types(n.name)
        try:
            region = _region(n, in_types, choice.parallel)
        except UnsupportedRegion as e:
            kept.append((n.name, f"not generated: {e}"))
            new_nodes.append(n)
            continue
        attrs = {**region, "source": KernelSource(region["source"]), "origin": n.op,
                 "origin_attrs": tuple(n.attrs),
                 "parallel": choice.parallel, "dtype": n.type.dtype.value,
                 "flops": graph.node_flops(n.name)}  # fmt: skip
        new_nodes.append(dataclasses.replace(n, op=GENERATED, attrs=freeze_attrs(attrs)))
        made.append((n.name, choice, region["source"]))
    new = Graph(tuple(new_nodes), graph.outputs, graph.name) if made else graph
    steps = [RewriteStep("codegen", "numba_kernel", (name,), graph, new, choice.reason, src)
             for name, choice, src in made]  # fmt: skip
    if kept:
        detail = "; ".join(f"%{name}: {why}" for name, why in kept)
        steps.append(RewriteStep("codegen", "numpy_fallback", tuple(k for k, _ in kept), graph,
                                 new, detail))  # fmt: skip
    return new, steps
