"""``CostBreakdown``: compute, communication by collective kind, gradients, memory, total."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .costmodel import KINDS, CostModel
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


def _factors(p: CostParams):
    fwd_bwd = 1 + (p.backward_compute_ratio if p.training else 0)
    comm_x = 1 + (p.backward_comm_ratio if p.training else 0)
    grad_w = p.gamma_param_comm * (1 - p.grad_comm_overlap) if p.training else 0.0
    return fwd_bwd, comm_x, grad_w


def _comm(times, nbytes, kinds, p: CostParams) -> tuple[dict[str, float], float]:
    out: dict[str, float] = {}
    vals = times / p.bandwidth_efficiency if p.unit == "seconds" else CostModel._adjust(nbytes, p)
    for v, k in zip(np.ravel(vals), np.ravel(kinds), strict=True):
        if k >= 0:
            name = KINDS[int(k)].value
            out[name] = out.get(name, 0.0) + float(v)
    return out, float(np.sum(nbytes))


def node_breakdown(
    model: CostModel, p: CostParams, i: int, k: int, scale: bool = True
) -> CostBreakdown:
    """The cost of node ``i`` under strategy ``k`` (times its multiplicity when ``scale``)."""
    nt = model.nodes[i]
    fwd_bwd, comm_x, _ = _factors(p)
    if p.unit == "seconds":
        comp = max(nt.flops[k] / (nt.peak_flops * p.compute_efficiency),
                   nt.rw_bytes[k] / (nt.mem_bw * p.bandwidth_efficiency))  # fmt: skip
    else:
        comp = nt.read_bytes[k]
    comm, nbytes = _comm(nt.coll_time[k], nt.coll_bytes[k], nt.coll_kind[k], p)
    m = nt.multiplicity if scale else 1
    w = p.beta_communication * comm_x * m
    return CostBreakdown(
        compute=float(p.alpha_compute * fwd_bwd * comp * m),
        communication=tuple(sorted((kk, v * w) for kk, v in comm.items())),
        memory_bytes=float(nt.mem_bytes[k] * m),
        memory=float(p.memory_weight_per_byte * nt.mem_bytes[k] * m),
        unit=p.unit, comm_bytes=nbytes * m,
    )  # fmt: skip


def edge_breakdown(model: CostModel, p: CostParams, e: int, ku: int, kv: int) -> CostBreakdown:
    et = model.edges[e]
    _, comm_x, grad_w = _factors(p)
    comm, nbytes = _comm(et.time[ku, kv], et.nbytes[ku, kv], et.kind[ku, kv], p)
    g = et.grad_time[ku, kv] / p.bandwidth_efficiency if p.unit == "seconds" else float(
        CostModel._adjust(np.array(et.grad_bytes[ku, kv]), p))  # fmt: skip
    m = et.multiplicity
    w = p.beta_communication * comm_x * m
    return CostBreakdown(
        communication=tuple(sorted((kk, v * w) for kk, v in comm.items())),
        gradient=float(grad_w * g * m), unit=p.unit,
        comm_bytes=(nbytes + float(et.grad_bytes[ku, kv])) * m,
    )  # fmt: skip


def plan_breakdown(model: CostModel, p: CostParams, choice: list[int]) -> CostBreakdown:
    total = CostBreakdown(unit=p.unit)
    for i, k in enumerate(choice):
        total = total + node_breakdown(model, p, i, k)
    for e, et in enumerate(model.edges):
        total = total + edge_breakdown(model, p, e, choice[model.index[et.src]],
                                       choice[model.index[et.dst]])  # fmt: skip
    return total
