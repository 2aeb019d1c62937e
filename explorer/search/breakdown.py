"""``CostBreakdown``: compute, communication by collective kind, gradients, memory, total."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .costmodel import KINDS, CostModel, edge_terms, node_terms
from .params import CostParams

__all__ = ["CostBreakdown", "node_breakdown", "edge_breakdown", "plan_breakdown"]


@dataclass(frozen=True)
class CostBreakdown:
    """A cost in the params' unit (seconds or weighted bytes), never a bare float.

    Args:
        compute: weighted computation.
        communication: weighted communication per collective kind (``"all-reduce"``, ...),
            activations and in-op statistics.
        gradient: weighted parameter-gradient communication.
        memory_bytes: device memory kept by the strategies (not weighted).
        memory: the memory term of the objective (``memory_weight_per_byte`` x bytes).
        unit: ``"seconds"`` or ``"bytes"``.
    """

    compute: float = 0.0
    communication: tuple[tuple[str, float], ...] = ()
    gradient: float = 0.0
    memory_bytes: float = 0.0
    memory: float = 0.0
    unit: str = "seconds"
    comm_bytes: float = field(default=0.0, compare=False)

    @property
    def communication_total(self) -> float:
        return sum(v for _, v in self.communication)

    @property
    def total(self) -> float:
        return self.compute + self.communication_total + self.gradient + self.memory

    def comm(self, kind: str) -> float:
        return dict(self.communication).get(kind, 0.0)

    def __add__(self, other: CostBreakdown) -> CostBreakdown:
        comm = dict(self.communication)
        for k, v in other.communication:
            comm[k] = comm.get(k, 0.0) + v
        return CostBreakdown(
            self.compute + other.compute, tuple(sorted(comm.items())),
            self.gradient + other.gradient, self.memory_bytes + other.memory_bytes,
            self.memory + other.memory, self.unit, self.comm_bytes + other.comm_bytes,
        )  # fmt: skip

    def __sub__(self, other: CostBreakdown) -> CostBreakdown:
        neg = CostBreakdown(
            -other.compute, tuple((k, -v) for k, v in other.communication), -other.gradient,
            -other.memory_bytes, -other.memory, other.unit, -other.comm_bytes,
        )  # fmt: skip
        return self + neg

    def as_dict(self) -> dict[str, float]:
        d = {"compute": self.compute}
        d.update({f"comm:{k}": v for k, v in self.communication})
        d.update(gradient=self.gradient, memory=self.memory, total=self.total,
                 memory_bytes=self.memory_bytes, comm_bytes=self.comm_bytes)  # fmt: skip
        return d

    def __str__(self) -> str:
        u = "s" if self.unit == "seconds" else "B"
        comm = ", ".join(f"{k} {v:.4g}" for k, v in self.communication if v) or "none"
        return (
            f"total {self.total:.4g} {u} = compute {self.compute:.4g} + comm {self.communication_total:.4g} "
            f"({comm}) + grad {self.gradient:.4g} + memory {self.memory:.4g}"
        )


def _by_kind(values, kinds) -> dict[str, float]:
    out: dict[str, float] = {}
    for v, k in zip(np.ravel(values), np.ravel(kinds), strict=True):
        if k >= 0:
            name = KINDS[int(k)].value
            out[name] = out.get(name, 0.0) + float(v)
    return out


def node_breakdown(model: CostModel, p: CostParams, i: int, k: int) -> CostBreakdown:
    """The cost of node ``i`` under strategy ``k``: ``node_terms``, the solver's own terms."""
    nt = model.nodes[i]
    compute, comm, memory = node_terms(nt, p, k)
    m = nt.multiplicity
    return CostBreakdown(
        compute=float(compute), communication=tuple(sorted(_by_kind(comm, nt.coll_kind[k]).items())),
        memory_bytes=float(nt.mem_bytes[k] * m), memory=float(memory), unit=p.unit,
        comm_bytes=float(np.sum(nt.coll_bytes[k])) * m,
    )  # fmt: skip


def edge_breakdown(model: CostModel, p: CostParams, e: int, ku: int, kv: int) -> CostBreakdown:
    """The cost of edge ``e`` under strategies ``(ku, kv)``: ``edge_terms``."""
    et = model.edges[e]
    comm, grad = edge_terms(et, p, ku, kv)
    return CostBreakdown(
        communication=tuple(sorted(_by_kind(comm, et.kind[ku, kv]).items())),
        gradient=float(grad), unit=p.unit,
        comm_bytes=float(np.sum(et.nbytes[ku, kv]) + et.grad_bytes[ku, kv]) * et.multiplicity,
    )  # fmt: skip


def plan_breakdown(model: CostModel, p: CostParams, choice: list[int]) -> CostBreakdown:
    """The whole plan: every node and every edge, summed term by term."""
    # Copies of a repeated layer share their tables' arrays: each distinct (table, choice)
    # is broken down once per call.
    seen: dict[tuple, CostBreakdown] = {}
    parts = []
    for i, k in enumerate(choice):
        nt = model.nodes[i]
        key = ("n", id(nt.flops), id(nt.coll_time), nt.multiplicity, k)
        if key not in seen:
            seen[key] = node_breakdown(model, p, i, k)
        parts.append(seen[key])
    for e, et in enumerate(model.edges):
        ku, kv = choice[model.index[et.src]], choice[model.index[et.dst]]
        key = ("e", id(et.time), id(et.grad_time), et.multiplicity, ku, kv)
        if key not in seen:
            seen[key] = edge_breakdown(model, p, e, ku, kv)
        parts.append(seen[key])
    comm: dict[str, float] = {}
    for b in parts:
        for kind, v in b.communication:
            comm[kind] = comm.get(kind, 0.0) + v
    return CostBreakdown(
        compute=math.fsum(b.compute for b in parts), communication=tuple(sorted(comm.items())),
        gradient=math.fsum(b.gradient for b in parts),
        memory_bytes=math.fsum(b.memory_bytes for b in parts),
        memory=math.fsum(b.memory for b in parts), unit=p.unit,
        comm_bytes=math.fsum(b.comm_bytes for b in parts),
    )  # fmt: skip
