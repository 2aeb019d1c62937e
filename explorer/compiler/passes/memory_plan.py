"""Memory planning: liveness-based buffer reuse and in-place updates.

Every value a kernel can write into a buffer gets one of a few buffers, reused once the
values in it are dead; an elementwise kernel whose input dies at it writes over that input
(in place). Views (reshape, transpose, slices) keep their source's buffer alive. Values
that leave the function are never planned: they are fresh arrays the caller owns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import Graph, TensorType
from ..kernels import ALIASES, IN_PLACE, WRITES_OUT
from .rewrite import RewriteStep

__all__ = ["MemoryPlan", "plan_memory", "memory_plan", "host_bytes"]


@dataclass(frozen=True)
class MemoryPlan:
    """Buffer of each planned value, the buffers' sizes, and what that saves.

    ``naive_bytes``: every planned value in its own allocation (sum of sizes);
    ``planned_bytes``: the buffers (sum of capacities); ``in_place``: values written over
    an input.
    """

    buffer_of: tuple[tuple[str, int], ...]
    buffer_bytes: tuple[int, ...]
    in_place: tuple[str, ...]
    naive_bytes: int

    @property
    def planned_bytes(self) -> int:
        return sum(self.buffer_bytes)

    def buffers(self) -> dict[str, int]:
        return dict(self.buffer_of)

    def __str__(self) -> str:
        return (f"{len(self.buffer_of)} values in {len(self.buffer_bytes)} buffers: "
                f"{self.planned_bytes} B instead of {self.naive_bytes} B, "
                f"{len(self.in_place)} in place")  # fmt: skip


def host_bytes(t: TensorType) -> int:
    """Bytes of a value of type ``t`` as the executor holds it: bf16, fp16 and fp8 values
    are numpy float32 arrays (``DType.numpy``), twice or four times ``t.nbytes``."""
    return t.numel * np.dtype(t.dtype.numpy).itemsize


def plan_memory(graph: Graph) -> MemoryPlan:
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    root: dict[str, str] = {}
    for n in graph.nodes:
        root[n.name] = root[n.inputs[0]] if n.op in ALIASES and n.inputs else n.name
    last: dict[str, int] = {}
    escapes: set[str] = set()
    end = len(graph.nodes)
    for n in graph.nodes:
        for a in n.inputs:
            r = root[a]
            last[r] = max(last.get(r, -1), pos[n.name])
    for o in graph.outputs:
        escapes.add(root[o])
        last[root[o]] = end
    planned = {
        n.name for n in graph.nodes
        if n.op in WRITES_OUT and n.name not in escapes and host_bytes(n.type) > 0
    }  # fmt: skip
    buf_of: dict[str, int] = {}
    caps: list[int] = []
    free: list[int] = []
    in_place: list[str] = []
    dying: dict[int, list[str]] = {}
    for v in planned:
        dying.setdefault(last.get(v, pos[v]), []).append(v)
    for n in graph.nodes:
        i = pos[n.name]
        if n.name in planned:
            need = host_bytes(n.type)
            chosen = None
            if n.op in IN_PLACE:
                for a in n.inputs:
                    src = graph.node(a)
                    if (a in planned and root[a] == a and last.get(a) == i
                            and src.type == n.type and a in buf_of):  # fmt: skip
                        chosen = buf_of[a]
                        in_place.append(n.name)
                        dying[i].remove(a)  # its buffer now holds this value
                        break
            if chosen is None:
                fits = [b for b in free if caps[b] >= need]
                if fits:
                    chosen = min(fits, key=lambda b: caps[b])
                elif free:
                    chosen = max(free, key=lambda b: caps[b])
                    caps[chosen] = need
                else:
                    chosen = len(caps)
                    caps.append(need)
                if chosen in free:
                    free.remove(chosen)
            buf_of[n.name] = chosen
        for v in dying.get(i, ()):
            if v in buf_of and v != n.name:
                free.append(buf_of[v])
    naive = sum(host_bytes(graph.node(v).type) for v in planned)
    order = tuple((n.name, buf_of[n.name]) for n in graph.nodes if n.name in buf_of)
    return MemoryPlan(order, tuple(caps), tuple(in_place), naive)


def memory_plan(graph: Graph) -> tuple[Graph, list[RewriteStep], MemoryPlan]:
    """The plan; the graph is unchanged (the plan travels beside it to the executor)."""
    plan = plan_memory(graph)
    step = RewriteStep("memory_plan", "reuse_buffers", plan.in_place, graph, graph, str(plan))
    return graph, [step], plan
