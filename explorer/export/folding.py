"""MoE parallel folding on one JAX mesh: the attention layers' axes ``(dp, cp, tp)`` and the
expert layers' ``(edp, ep, etp)`` of one pipeline stage, each a tuple of the axes of one
finer mesh over the same devices.

Megatron-Core lays the expert layers of a stage out on their own rank order
(`explorer.training.step_model.placement`: ``etp`` innermost, then ``ep``, then ``edp``;
unfolded, ``ep`` carved out of ``dp`` beside ``cp``). A ``jax.sharding.Mesh`` holds one
device array, so both layouts fit on it when they cut the stage's devices at strides that
nest (every stride of one divides the next stride of the other): the finer mesh cuts at all
of them, and each logical axis is the tuple of finer axes it spans, as a ``PartitionSpec``
entry takes it. Qwen3-235B's TP2 x DP16 with EP32, ETP1:

>>> from explorer.training import ParallelConfig
>>> f = folded_mesh(ParallelConfig(dp=16, tp=2, pp=8, ep=32, etp=1))
>>> print(f.mesh)
Mesh(dp_ep=16, tp_ep=2)
>>> f.spec("ep", None, "etp"), f.spec("dp", None, "tp")  # expert gate/up weight, activations
((('dp_ep', 'tp_ep'), None, None), (('dp_ep',), None, ('tp_ep',)))

Strides that do not nest (``tp=2`` with ``etp=3``) have no single mesh: `folded_mesh` raises
`ExportError` naming them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from ..hardware import Mesh
from ..training import ParallelConfig
from .errors import ExportError

__all__ = ["FoldedMesh", "folded_mesh", "EXPERT_WEIGHT_SPECS"]

#: Logical specs of the routed experts' weights ``[experts, in, out]``: experts over ``ep``;
#: gate/up column-parallel and down row-parallel over ``etp`` (Megatron-Core's grouped GEMM).
EXPERT_WEIGHT_SPECS: dict[str, tuple[str | None, ...]] = {
    "gate_up": ("ep", None, "etp"),
    "down": ("ep", "etp", None),
}

_LOGICAL = ("dp", "cp", "tp", "edp", "ep", "etp")


@dataclass(frozen=True)
class FoldedMesh:
    """One stage's devices as a finer `Mesh` (device order, outermost first) and, for each
    logical axis (``dp``, ``cp``, ``tp``, ``edp``, ``ep``, ``etp``), the finer axes it spans
    (outermost first; ``()`` for a size-1 axis)."""

    mesh: Mesh
    axes: tuple[tuple[str, tuple[str, ...]], ...]

    def axis(self, name: str) -> tuple[str, ...]:
        """The finer axes of logical axis ``name``."""
        for n, finer in self.axes:
            if n == name:
                return finer
        raise ExportError(f"unknown logical axis {name!r}; expected one of {', '.join(_LOGICAL)}")

    def spec(self, *dims: str | None) -> tuple[tuple[str, ...] | None, ...]:
        """A ``PartitionSpec``'s entries for tensor dims split over the logical axes
        ``dims`` (None: not split): ``jax.sharding.PartitionSpec(*f.spec(...))``."""
        return tuple(None if d is None else (self.axis(d) or None) for d in dims)

    def groups(self, name: str) -> tuple[tuple[int, ...], ...]:
        """The stage-local device groups along logical axis ``name`` (`Mesh.groups`)."""
        finer = self.axis(name)
        if not finer:
            return tuple((d,) for d in range(self.mesh.size))
        return self.mesh.groups(finer)


def folded_mesh(plan, hardware=None) -> FoldedMesh:
    """The `FoldedMesh` of one pipeline stage of a ParallelConfig (or TrainingPlan): the
    attention layers' ``dp x cp x tp`` (as `stage_mesh`) and the expert layers' ``edp x ep
    x etp`` on one finer mesh; `ExportError` when their strides do not nest.

    >>> from explorer.training import ParallelConfig
    >>> f = folded_mesh(ParallelConfig(dp=4, tp=2, ep=2))  # unfolded: ep carved out of dp
    >>> f.axis("ep"), f.axis("dp"), f.axis("etp")
    (('dp_ep',), ('dp_edp', 'dp_ep'), ('tp_etp',))
    """
    par = getattr(plan, "config", plan)
    if not isinstance(par, ParallelConfig):
        raise ExportError(f"expected a ParallelConfig or a TrainingPlan, got {type(plan).__name__}")
    attention = [("tp", par.tp), ("cp", par.cp), ("dp", par.dp)]  # innermost first
    if par.experts_folded:
        experts = [("etp", par.expert_tp), ("ep", par.ep), ("edp", par.edp)]
    else:  # placement's unfolded order: (dp / ep, ep, cp, tp), edp = (dp / ep, cp)
        experts = [("etp", par.tp), ("edp", par.cp), ("ep", par.ep), ("edp", par.dp // par.ep)]
    cuts = sorted(set(_strides(attention)) | set(_strides(experts)))
    for lo, hi in pairwise(cuts):
        if hi % lo:
            raise ExportError(
                f"{par}: the attention layers cut a stage's {par.tp * par.cp * par.dp} devices "
                f"at strides {_strides(attention)[:-1]} (tp, tp*cp) and the expert layers at "
                f"{_strides(experts)[:-1]} (etp, etp*ep); {lo} does not divide {hi}, so no "
                "single jax.sharding.Mesh holds both layouts; choose an etp and ep whose "
                "strides nest with tp and tp*cp (etp dividing tp or a multiple of it), or run "
                "the expert layers under their own Mesh"
            )
    finer: list[tuple[str, int]] = []  # innermost first
    spans: dict[str, list[str]] = {n: [] for n in _LOGICAL}
    lo = 1
    for hi in cuts:
        if hi == lo:
            continue
        a, e = _owner(attention, lo), _owner(experts, lo)
        name = f"{a}_{e}"
        finer.append((name, hi // lo))
        spans[a].append(name)
        spans[e].append(name)
        lo = hi
    mesh = Mesh(tuple(reversed(finer)) or (("dp_edp", 1),), hardware=hardware)
    return FoldedMesh(mesh, tuple((n, tuple(reversed(spans[n]))) for n in _LOGICAL))


def _strides(factors: list[tuple[str, int]]) -> list[int]:
    """Cumulative products of ``factors`` (innermost first), the whole size last."""
    out, acc = [], 1
    for _, size in factors:
        acc *= size
        out.append(acc)
    return out


def _owner(factors: list[tuple[str, int]], lo: int) -> str:
    """The factor whose stride range ``[inner, inner * size)`` holds ``lo`` (``lo`` is
    below the product of the sizes: the cuts are these strides)."""
    inner = 1
    for name, size in factors:
        inner *= size
        if lo < inner:
            return name
    return factors[-1][0]
