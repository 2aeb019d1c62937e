"""Collectives performed literally on per-device numpy arrays, counting bytes sent.

Bytes are counted per device from the chunks it actually sends (ring all-reduce: a
reduce-scatter then an all-gather phase, each sending every chunk but one; all-gather: its
block to every peer; all-to-all: every chunk but its own) in the tensor's storage dtype, and
averaged over the devices of the mesh. They equal `explorer.hardware.bytes_sent_per_device`
whenever the sizes divide, which the tests check.
"""

from __future__ import annotations

import numpy as np

from ..hardware import CollectiveKind, Mesh
from .redistribute import SLICE, Move
from .slices import axes_index

__all__ = ["all_reduce", "apply_move"]

Arrays = list[np.ndarray]


def _groups(mesh: Mesh, axes: tuple[str, ...]) -> list[list[int]]:
    """Device groups along ``axes``, each ordered by the devices' index along ``axes``."""
    return [sorted(g, key=lambda d: axes_index(mesh, d, axes)) for g in mesh.groups(axes)]


def _chunk_bytes(numel: int, n: int, itemsize: int) -> list[int]:
    base, extra = divmod(numel, n)
    return [(base + (i < extra)) * itemsize for i in range(n)]


def all_reduce(arrays: Arrays, axes: tuple[str, ...], mesh: Mesh, itemsize: int,
               op: str = "sum") -> tuple[Arrays, float]:  # fmt: skip
    """Sum (or max) over each group; returns the new arrays and mean bytes sent per device."""
    out = list(arrays)
    sent = 0
    fn = np.maximum if op == "max" else np.add
    for g in _groups(mesh, axes):
        total = arrays[g[0]]
        for d in g[1:]:
            total = fn(total, arrays[d])
        n = len(g)
        chunks = _chunk_bytes(arrays[g[0]].size, n, itemsize)
        for i, d in enumerate(g):
            out[d] = total.copy()
            if n > 1:  # each ring phase sends every chunk but one
                sent += 2 * (sum(chunks) - chunks[(i + 1) % n])
    return out, sent / mesh.size


def apply_move(move: Move, arrays: Arrays, mesh: Mesh, itemsize: int) -> tuple[Arrays, float]:
    """Perform one redistribution move; returns new arrays and mean bytes sent per device."""
    out = list(arrays)
    sent = 0
    if move.op == SLICE:
        n = mesh.axis_size(move.axes[0])
        for d in range(mesh.size):
            k = axes_index(mesh, d, move.axes)
            out[d] = np.split(arrays[d], n, axis=move.dim)[k]
        return out, 0.0
    kind = CollectiveKind(move.op)
    if kind is CollectiveKind.SEND_RECV:
        return out, float(sum(a.size * itemsize for a in arrays) / mesh.size)
    if kind is CollectiveKind.ALL_REDUCE:
        return all_reduce(arrays, move.axes, mesh, itemsize)
    for g in _groups(mesh, move.axes):
        n = len(g)
        if kind is CollectiveKind.ALL_GATHER:
            full = np.concatenate([arrays[d] for d in g], axis=move.dim)
            for d in g:
                out[d] = full
                sent += (n - 1) * arrays[d].size * itemsize
        elif kind is CollectiveKind.REDUCE_SCATTER:
            total = sum(arrays[d] for d in g)
            parts = np.split(total, n, axis=move.dim)
            chunks = [p.size * itemsize for p in parts]
            for i, d in enumerate(g):
                out[d] = parts[i]
                sent += sum(chunks) - chunks[i]
        else:  # all-to-all: chunk m of every sender goes to member m, stacked on ``dim``
            pieces = [np.split(arrays[d], n, axis=move.to_dim) for d in g]
            for i, d in enumerate(g):
                out[d] = np.concatenate([pieces[m][i] for m in range(n)], axis=move.dim)
                sent += sum(p.size for p in pieces[i]) * itemsize - pieces[i][i].size * itemsize
    return out, sent / mesh.size
