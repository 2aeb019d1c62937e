"""The one pure map from a layout to the global block each device holds.

The mesh view and the SPMD executor both use it.

>>> from explorer.hardware import Mesh
>>> from explorer.sharding.layout import Layout
>>> mesh = Mesh({"dp": 2, "tp": 2})
>>> shard_slices((4, 6), Layout((("dp",), ())), mesh)[2]
(slice(2, 4, None), slice(0, 6, None))
>>> replica_groups((4, 6), Layout((("dp",), ())), mesh)
((0, 1), (2, 3))

Uneven dims. A dim of size ``n`` cut into ``k`` shards gives shard ``i`` the elements
``[i * c, min((i + 1) * c, n))`` with ``c = ceil(n / k)``: the first shards get the
ceiling, the last ones the rest, possibly nothing. This is ``torch.chunk``, which PyTorch
DTensor's ``Shard`` placement uses (the tests compare with it), so a block drawn here is
the block DTensor would hold; every element is covered exactly once and none is dropped:

>>> [s[0] for s in shard_slices((5,), Layout((("dp",),)), Mesh({"dp": 2})).values()]
[slice(0, 3, None), slice(3, 5, None)]
>>> [s[0] for s in shard_slices((5,), Layout((("dp",),)), Mesh({"dp": 4})).values()]
[slice(0, 2, None), slice(2, 4, None), slice(4, 5, None), slice(5, 5, None)]

The map accepts uneven layouts so that views and exports can show them. The cost side,
the strategies and the SPMD executor keep requiring even splits (`Layout.validate`), as
JAX does (``NamedSharding.devices_indices_map`` raises ``IndivisibleError``): their byte
counts and per-device kernels (``mean``, ``reshape``) assume equal blocks.
`explorer.sharding.execute` and `verify` refuse an uneven layout up front with the tensor,
dim, size and axes in the message.
"""

from __future__ import annotations

from ..checks import is_int
from ..hardware import Mesh
from .errors import ShardingError
from .layout import Layout

__all__ = ["shard_slices", "replica_groups", "axes_index", "shard_bounds"]


def axes_index(mesh: Mesh, device: int, axes: tuple[str, ...]) -> int:
    """The device's position along ``axes`` taken together (first axis most significant)."""
    coords = mesh.coords(device)
    idx = 0
    for a in axes:
        k = mesh.axis_names.index(a)
        idx = idx * mesh.shape[k] + coords[k]
    return idx


def ring_groups(mesh: Mesh, axes: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """The device groups along ``axes``, each in `axes_index` order: the order a dim split
    over ``axes`` gives its blocks (a lesson's rings, an all-to-all's members)."""
    return tuple(tuple(sorted(g, key=lambda d: axes_index(mesh, d, axes)))
                 for g in mesh.groups(axes))  # fmt: skip


def _sizes(mesh: Mesh, axes: tuple[str, ...]) -> int:
    n = 1
    for a in axes:
        n *= mesh.axis_size(a)
    return n


def shard_bounds(size: int, shards: int, index: int) -> tuple[int, int]:
    """[start, stop) of shard ``index`` of ``shards`` along a dim of ``size`` (ceil first).

    >>> [shard_bounds(5, 2, i) for i in range(2)]
    [(0, 3), (3, 5)]
    """
    step = -(-size // shards)  # ceil: the first shards are full, as in JAX and torch.chunk
    return min(index * step, size), min((index + 1) * step, size)


def _check(shape: tuple[int, ...], layout: Layout, mesh: Mesh) -> None:
    if not isinstance(layout, Layout):
        raise ShardingError(
            f"expected a Layout, got {type(layout).__name__} {layout!r}; build one with "
            "explorer.sharding.Layout((('dp',), ()))"
        )
    if not isinstance(mesh, Mesh):
        raise ShardingError(
            f"expected a Mesh, got {type(mesh).__name__} {mesh!r}; build one with "
            "explorer.Mesh({'dp': 2})"
        )
    if not isinstance(shape, tuple | list):
        raise ShardingError(f"shape {shape!r} is not a tuple of ints; pass e.g. (8, 16)")
    if len(shape) != layout.rank:
        raise ShardingError(
            f"shape {tuple(shape)} has rank {len(shape)} but layout {layout} gives "
            f"{layout.rank} dims; give one tuple of axes per dim"
        )
    for i, size in enumerate(shape):
        if not is_int(size, minimum=0, numpy=True):
            raise ShardingError(
                f"dim {i} of shape {tuple(shape)} is {size!r}; sizes must be ints >= 0"
            )
    for a in layout.axes + layout.partial:
        if a not in mesh.axis_names:
            raise ShardingError(
                f"layout {layout} names mesh axis {a!r}, which {mesh} does not have; its axes "
                f"are {', '.join(mesh.axis_names)}"
            )


def shard_slices(
    shape: tuple[int, ...], layout: Layout, mesh: Mesh
) -> dict[int, tuple[slice, ...]]:
    """Device id -> the global slice it holds (partial axes do not change the block).

    Dims that do not divide are cut unevenly, ceiling first (see the module docstring).
    """
    _check(shape, layout, mesh)
    out: dict[int, tuple[slice, ...]] = {}
    counts = [_sizes(mesh, axes) for axes in layout.dims]
    for dev in range(mesh.size):
        sl = []
        for size, axes, n in zip(shape, layout.dims, counts, strict=True):
            start, stop = shard_bounds(size, n, axes_index(mesh, dev, axes))
            sl.append(slice(start, stop))
        out[dev] = tuple(sl)
    return out


def replica_groups(
    shape: tuple[int, ...], layout: Layout, mesh: Mesh
) -> tuple[tuple[int, ...], ...]:
    """Groups of devices holding the same block, ordered by first device.

    Devices are grouped by their shard index on every dim (so two empty shards of an
    uneven dim stay distinct blocks). For a partial layout the members of a group hold
    different addends of that block.
    """
    _check(shape, layout, mesh)
    groups: dict[tuple[int, ...], list[int]] = {}
    for dev in range(mesh.size):
        key = tuple(axes_index(mesh, dev, axes) for axes in layout.dims)
        groups.setdefault(key, []).append(dev)
    return tuple(sorted(tuple(g) for g in groups.values()))
