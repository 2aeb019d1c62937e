"""The rank map: which global ranks form each parallel group, for a layout (dp, tp, pp, cp,
ep) and a launcher's rank order, which nodes each group spans, and the rank lists a user
passes to ``torch.distributed.new_group`` or ``DeviceMesh``.

A rank order lists the parallelisms from the fastest-varying to the slowest (Megatron-Core's
``order`` argument): with ``"tp-cp-ep-dp-pp"`` (Megatron-Core's default,
``initialize_model_parallel(order=...)`` in ``megatron/core/parallel_state.py``)::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

so a tensor-parallel group is ``tp`` consecutive ranks (one node, when tp divides the GPUs
per node) and a pipeline group strides over the whole machine. torchtitan builds its
``DeviceMesh`` row-major over ``["pp", "dp_replicate", "dp_shard", "cp", "tp"]``
(``torchtitan/distributed/parallel_dims.py``): the same order, slowest first.

Expert parallelism follows Megatron-Core's second ("expert") rank generator: the same order
with ``cp`` removed, expert tensor parallelism equal to ``tp``, and the expert data-parallel
size ``dp * cp / ep``: the ``ep`` group takes the fastest ranks of the data-parallel (with
context-parallel) ranks. torchtitan's ``dp_shard_in_ep`` x ``ep`` split (``etp == tp``) is the
same grid.

>>> m = rank_map(RankLayout(dp=2, tp=2, pp=2))
>>> m.groups["dp"], m.groups["pp"]
(((0, 2), (1, 3), (4, 6), (5, 7)), ((0, 4), (1, 5), (2, 6), (3, 7)))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..checks import is_int
from .errors import TeachError

__all__ = [
    "RankLayout", "RankMap", "rank_map", "Launcher", "LAUNCHERS", "GROUP_AXES", "MAX_RANKS",
]  # fmt: skip

Launcher = Literal["megatron", "megatron-pp-before-dp", "torchtitan"]
# Fastest-varying first, Megatron-Core's spelling. Sources: Megatron-Core
# initialize_model_parallel's default order (parallel_state.py, commit 00caa53a); its docstring
# allows the pipeline axis before the data axis; torchtitan's ParallelDims mesh
# ["pp", "dp_replicate", "dp_shard", "cp", "tp"] (parallel_dims.py, commit 0119de15), slowest first.
LAUNCHERS: dict[str, str] = {
    "megatron": "tp-cp-ep-dp-pp",
    "megatron-pp-before-dp": "tp-cp-ep-pp-dp",
    "torchtitan": "tp-cp-ep-dp-pp",
}
_TOKENS = ("tp", "cp", "ep", "dp", "pp")
MAX_RANKS = 2**17  # a map lists every rank of every group: beyond this it stops being a picture
# The groups a map lists: one per parallelism, the data-parallel group with the context-parallel
# ranks (what gradients are reduced over) and the expert data-parallel group.
GROUP_AXES = ("tp", "cp", "ep", "dp", "pp", "dp-cp", "edp", "fsdp", "replicate")
_DESCRIBE = {
    "tp": "tensor parallel", "cp": "context parallel", "ep": "expert parallel",
    "dp": "data parallel", "pp": "pipeline", "dp-cp": "gradient reduction (dp x cp)",
    "edp": "expert data parallel",
    "fsdp": "sharded states (dp_shard x cp)", "replicate": "replicas of the shards (HSDP)",
}  # fmt: skip


@dataclass(frozen=True)
class RankLayout:
    """How many ways each parallelism splits: ``dp * tp * pp * cp`` devices in all; ``ep``
    splits the experts over part of the ``dp * cp`` ranks (it must divide them).

    ``dp_replicate`` (HSDP) splits the data-parallel ranks into that many replicas of the
    sharded states: torchtitan's ``dp_replicate`` (its ``dp_shard`` is ``dp / dp_replicate``),
    Megatron-Core's ``num_distributed_optimizer_instances``. The ``fsdp`` groups (states
    sharded over ``dp_shard x cp`` ranks) and the ``replicate`` groups follow from it.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp_replicate: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "ep", "dp_replicate"):
            v = getattr(self, name)
            if not is_int(v, minimum=1, numpy=True):
                raise TeachError(f"RankLayout {name} must be an int >= 1, got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.world_size > MAX_RANKS:
            raise TeachError(
                f"RankLayout {self} has more than MAX_RANKS = {MAX_RANKS:,} ranks; a rank map "
                "lists every rank of every group: use smaller sizes (the groups repeat)"
            )
        if self.dp % self.dp_replicate:
            raise TeachError(
                f"RankLayout dp_replicate={self.dp_replicate} does not divide dp={self.dp}; "
                "the replicas split the data-parallel ranks: choose a divisor of dp"
            )
        if (self.dp * self.cp) % self.ep:
            raise TeachError(
                f"RankLayout ep={self.ep} does not divide dp * cp = {self.dp * self.cp}; "
                "expert parallelism takes its ranks from the data- and context-parallel ones: "
                "choose ep dividing dp * cp"
            )

    @classmethod
    def from_config(cls, par) -> RankLayout:
        """The rank layout of a `explorer.training.ParallelConfig`: its degrees, with
        ``dp_replicate`` from its HSDP ``dp_shard`` (1 without it).

        >>> from explorer.training import ParallelConfig
        >>> print(RankLayout.from_config(ParallelConfig(dp=8, tp=2, zero=3, dp_shard=4)))
        dp8 (2 replicas) x tp2 x pp1 = 16 ranks
        """
        try:
            return cls(dp=par.dp, tp=par.tp, pp=par.pp, cp=par.cp, ep=par.ep,
                       dp_replicate=par.dp_replicate)  # fmt: skip
        except AttributeError:
            raise TeachError(
                f"RankLayout.from_config expects a ParallelConfig, got {type(par).__name__}; "
                "pass explorer.training.ParallelConfig(...) or build RankLayout(dp=..., ...)"
            ) from None

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def size(self, axis: str) -> int:
        """The size of a parallelism (``edp``: expert data parallel, ``dp * cp / ep``)."""
        if axis == "edp":
            return self.dp * self.cp // self.ep
        if axis == "dp-cp":
            return self.dp * self.cp
        if axis == "fsdp":
            return self.dp * self.cp // self.dp_replicate
        if axis == "replicate":
            return self.dp_replicate
        return getattr(self, axis)

    def __str__(self) -> str:
        parts = [f"{a}{getattr(self, a)}" for a in ("dp", "tp", "pp", "cp", "ep")
                 if getattr(self, a) > 1 or a in ("dp", "tp", "pp")]  # fmt: skip
        if self.dp_replicate > 1:
            parts[0] += f" ({self.dp_replicate} replicas)"
        return " x ".join(parts) + f" = {self.world_size} ranks"


def _parse_order(order: str, layout: RankLayout) -> tuple[str, ...]:
    if order in LAUNCHERS:
        order = LAUNCHERS[order]
    tokens = tuple(t.strip() for t in order.lower().split("-"))
    unknown = [t for t in tokens if t not in _TOKENS]
    if unknown or len(set(tokens)) != len(tokens):
        raise TeachError(
            f"rank order {order!r} is not a '-'-joined list of distinct tokens from {_TOKENS} "
            f"(or a launcher: {', '.join(LAUNCHERS)}); write it like 'tp-cp-ep-dp-pp'"
        )
    missing = [t for t in _TOKENS if t not in tokens]
    for t in missing:  # as Megatron-Core: a parallelism of size 1 may be left out
        if layout.size(t) != 1:
            raise TeachError(
                f"rank order {order!r} leaves out {t!r}, whose size is {layout.size(t)}; "
                "name every parallelism larger than 1"
            )
    return tokens + tuple(missing)


def _grid_groups(sizes: dict[str, int], order: tuple[str, ...], members: tuple[str, ...]):
    """Groups of the ranks that differ only in the ``members`` axes: ranks laid out
    row-major with the slowest axis first (the reverse of ``order``)."""
    slow = tuple(reversed(order))
    ranks = np.arange(math.prod(sizes[a] for a in slow)).reshape([sizes[a] for a in slow])
    outer = [i for i, a in enumerate(slow) if a not in members]
    inner = [i for i, a in enumerate(slow) if a in members]
    size = math.prod(sizes[slow[i]] for i in inner)
    table = ranks.transpose(outer + inner).reshape(-1, size)
    return tuple(tuple(int(r) for r in row) for row in table)


@dataclass(frozen=True)
class RankMap:
    """Every group of every parallelism for one layout, rank order and node size.

    Args:
        layout: the parallel sizes.
        order: the rank order, fastest first (``"tp-cp-ep-dp-pp"``).
        launcher: the launcher named (or ``"custom"``).
        gpus_per_node: devices per node (rank r sits on node ``r // gpus_per_node``).
        group_table: ``(axis, groups)`` for each of `GROUP_AXES`.
    """

    layout: RankLayout
    order: str
    launcher: str
    gpus_per_node: int
    group_table: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = field(repr=False)

    @property
    def groups(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        """axis -> its groups, each a tuple of global ranks (the order Megatron-Core lists)."""
        return dict(self.group_table)

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def _axis(self, axis: str) -> tuple[tuple[int, ...], ...]:
        if axis not in GROUP_AXES:
            raise TeachError(f"group axis {axis!r} is unknown; use one of {', '.join(GROUP_AXES)}")
        return self.groups[axis]

    def group_of(self, rank: int, axis: str) -> tuple[int, ...]:
        """The ranks of ``rank``'s group on ``axis``."""
        if not is_int(rank, minimum=0, maximum=self.world_size - 1, numpy=True):
            raise TeachError(
                f"rank {rank!r} is outside 0..{self.world_size - 1}; pick a rank of this map"
            )
        return next(g for g in self._axis(axis) if rank in g)

    def index_of(self, rank: int, axis: str) -> int:
        """Which group of ``axis`` holds ``rank`` (its position in ``groups[axis]``)."""
        group = self.group_of(rank, axis)
        return self._axis(axis).index(group)

    def nodes_spanned(self, axis: str) -> tuple[tuple[int, ...], ...]:
        """For each group of ``axis``, the nodes its ranks sit on (sorted)."""
        return tuple(tuple(sorted({self.node_of(r) for r in g})) for g in self._axis(axis))

    def new_group_ranks(self, axis: str) -> list[list[int]]:
        """The rank lists to pass, one ``torch.distributed.new_group(ranks)`` call each (every
        process makes every call, in this order, and keeps the group holding its rank)."""
        return [list(g) for g in self._axis(axis)]

    def device_mesh(self) -> tuple[tuple[int, ...], tuple[str, ...], list]:
        """``(mesh_shape, mesh_dim_names, mesh)`` for ``init_device_mesh(device, mesh_shape,
        mesh_dim_names=...)`` or ``DeviceMesh(device, mesh, mesh_dim_names=...)``: the dense
        parallelisms of size > 1, slowest first (torchtitan's ``dp`` is ``dp_shard``)."""
        lay = self.layout
        sizes = {"pp": lay.pp, "cp": lay.cp, "tp": lay.tp, "dp_replicate": lay.dp_replicate,
                 "dp_shard": lay.dp // lay.dp_replicate}  # fmt: skip
        slow: list[str] = []
        for a in reversed(self.order.split("-")):
            if a == "dp":  # torchtitan's two data-parallel dims, the replicas outer
                slow += ["dp_replicate", "dp_shard"]
            elif a != "ep":
                slow.append(a)
        kept = [a for a in slow if sizes[a] > 1] or [slow[-1]]
        shape = tuple(sizes[a] for a in kept)
        if self.launcher != "torchtitan" and "dp_replicate" not in kept:
            kept = ["dp" if a == "dp_shard" else a for a in kept]
        return shape, tuple(kept), np.arange(self.world_size).reshape(shape).tolist()

    def describe(self, axis: str) -> str:
        """One line: how many groups of what size, and the nodes they span."""
        groups = self._axis(axis)
        spans = self.nodes_spanned(axis)
        widest = max(len(s) for s in spans)
        where = "each inside one node" if widest == 1 else f"each across up to {widest} nodes"
        first = list(groups[0])
        if len(first) > 8:  # a long group: its head and its last rank
            shown = "[" + ", ".join(map(str, first[:6])) + f", ..., {first[-1]}]"
        else:
            shown = str(first)
        return (
            f"{axis:9s} {_DESCRIBE[axis]}: {len(groups)} group(s) of {len(groups[0])}, "
            f"{where}; first {shown}"
        )

    def code(self, axis: str) -> str:
        """Python that creates ``axis``'s groups with ``torch.distributed.new_group``."""
        return (f"{axis.replace('-', '_')}_group = None\n"
                f"for ranks in {self.new_group_ranks(axis)}:\n"
                "    group = torch.distributed.new_group(ranks)  # every rank makes every call\n"
                "    if torch.distributed.get_rank() in ranks:\n"
                f"        {axis.replace('-', '_')}_group = group")  # fmt: skip

    def __str__(self) -> str:
        head = (f"rank map {self.layout}, order {self.order} ({self.launcher}), "
                f"{self.gpus_per_node} GPUs per node, {self.nodes} node(s)")  # fmt: skip
        alone = [a for a in GROUP_AXES if len(self.groups[a][0]) == 1]
        lines = [self.describe(a) for a in GROUP_AXES if a not in alone]
        if alone:
            lines.append(f"size 1 (each rank alone): {', '.join(alone)}")
        return "\n".join([head, *lines])


def rank_map(layout: RankLayout, order: str = "megatron", gpus_per_node: int = 8) -> RankMap:
    """The rank map of ``layout`` under ``order`` (a launcher of `LAUNCHERS` or a Megatron-Core
    order string, fastest first) on nodes of ``gpus_per_node`` devices.

    >>> m = rank_map(RankLayout(dp=2, tp=4, pp=2), gpus_per_node=8)
    >>> m.groups["tp"][:2], m.nodes_spanned("pp")[0]
    (((0, 1, 2, 3), (4, 5, 6, 7)), (0, 1))
    """
    if not isinstance(layout, RankLayout):
        raise TeachError(f"layout must be a RankLayout, got {type(layout).__name__}")
    if not is_int(gpus_per_node, minimum=1, numpy=True):
        raise TeachError(f"gpus_per_node must be an int >= 1, got {gpus_per_node!r}")
    launcher = order if order in LAUNCHERS else "custom"
    tokens = _parse_order(order, layout)
    given = LAUNCHERS.get(order, order).lower()
    if layout.pp > 1 and not given.endswith("pp") and layout.ep != layout.cp:
        # Megatron-Core asserts this: the expert grid's data-parallel size must equal the
        # dense grid's when the pipeline axis is not the slowest.
        raise TeachError(
            f"rank order {given} does not end with pp with ep={layout.ep} "
            f"!= cp={layout.cp}: Megatron-Core refuses it (expert and dense data-parallel sizes "
            "differ); put pp last or use ep = cp"
        )
    dense_order = tuple(t for t in tokens if t != "ep")
    dense = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    expert_order = tuple(t for t in tokens if t != "cp")
    expert = {"tp": layout.tp, "ep": layout.ep, "dp": layout.size("edp"), "pp": layout.pp}
    table = (
        ("tp", _grid_groups(dense, dense_order, ("tp",))),
        ("cp", _grid_groups(dense, dense_order, ("cp",))),
        ("ep", _grid_groups(expert, expert_order, ("ep",))),
        ("dp", _grid_groups(dense, dense_order, ("dp",))),
        ("pp", _grid_groups(dense, dense_order, ("pp",))),
        ("dp-cp", _grid_groups(dense, dense_order, ("dp", "cp"))),
        ("edp", _grid_groups(expert, expert_order, ("dp",))),
    )
    # HSDP: each gradient-reduction group splits into dp_replicate consecutive slices (as
    # Megatron-Core cuts its distributed-optimizer instances out of the dp x cp ranks); the
    # states are sharded inside a slice and replicated across slices.
    dp_cp = dict(table)["dp-cp"]
    n = layout.size("fsdp")
    fsdp = tuple(g[i * n : (i + 1) * n] for g in dp_cp for i in range(layout.dp_replicate))
    replicate = tuple(g[j::n] for g in dp_cp for j in range(n))
    table += (("fsdp", fsdp), ("replicate", replicate))
    return RankMap(layout, "-".join(tokens), launcher, int(gpus_per_node), table)
