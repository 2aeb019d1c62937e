"""The one pure map from a layout to the global block each device holds.

The mesh view and the SPMD executor both use it.

>>> from explorer.hardware import Mesh
>>> from explorer.sharding.layout import Layout
>>> mesh = Mesh({"dp": 2, "tp": 2})
>>> shard_slices((4, 6), Layout((("dp",), ())), mesh)[2]
(slice(2, 4, None), slice(0, 6, None))
>>> replica_groups((4, 6), Layout((("dp",), ())), mesh)
((0, 1), (2, 3))
"""

from __future__ import annotations

from ..hardware import Mesh
from .layout import Layout

__all__ = ["shard_slices", "replica_groups", "axes_index"]


def axes_index(mesh: Mesh, device: int, axes: tuple[str, ...]) -> int:
    """The device's position along ``axes`` taken together (first axis most significant)."""
    coords = mesh.coords(device)
    idx = 0
    for a in axes:
        k = mesh.axis_names.index(a)
        idx = idx * mesh.shape[k] + coords[k]
    return idx


def _sizes(mesh: Mesh, axes: tuple[str, ...]) -> int:
    n = 1
    for a in axes:
        n *= mesh.axis_size(a)
    return n


def shard_slices(
    shape: tuple[int, ...], layout: Layout, mesh: Mesh
) -> dict[int, tuple[slice, ...]]:
    """Device id -> the global slice it holds (partial axes do not change the block)."""
    out: dict[int, tuple[slice, ...]] = {}
    counts = [_sizes(mesh, axes) for axes in layout.dims]
    for dev in range(mesh.size):
        sl = []
        for size, axes, n in zip(shape, layout.dims, counts, strict=True):
            step = size // n
            k = axes_index(mesh, dev, axes)
            sl.append(slice(k * step, (k + 1) * step))
        out[dev] = tuple(sl)
    return out


def replica_groups(
    shape: tuple[int, ...], layout: Layout, mesh: Mesh
) -> tuple[tuple[int, ...], ...]:
    """Groups of devices holding the same block, ordered by first device.

    For a partial layout the members of a group hold different addends of that block.
    """
    groups: dict[tuple, list[int]] = {}
    for dev, sl in shard_slices(shape, layout, mesh).items():
        groups.setdefault(tuple((s.start, s.stop) for s in sl), []).append(dev)
    return tuple(sorted(tuple(g) for g in groups.values()))
