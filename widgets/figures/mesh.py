"""Mesh figures: the device grid (which block each device holds, node boundaries, the
groups of a collective), the tensor cut into blocks (as ``jax.debug.visualize_array_sharding``)
and the ring teaching figure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from explorer.hardware import Mesh
from explorer.ir import TensorType
from explorer.sharding import Layout, shard_slices

from ..colors import NEUTRAL, PALETTE, collective_color
from .ring import RingStep

__all__ = [
    "mesh_grid", "device_blocks", "mesh_figure", "sharding_figure", "ring_figure",
    "TRACE_CELLS", "TRACE_GROUPS",
]  # fmt: skip

TRACE_CELLS, TRACE_GROUPS = range(2)


def mesh_grid(mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
    """Per device id: (row, column) in the drawing. The last axis runs along columns; the
    others, flattened row-major, down the rows."""
    ids = np.arange(mesh.size)
    cols = mesh.shape[-1]
    return ids // cols, ids % cols


def device_blocks(
    shape: tuple[int, ...], layout: Layout, mesh: Mesh
) -> tuple[dict[int, tuple[slice, ...]], dict[int, int]]:
    """(device -> global slice, device -> block index); replicas share a block index, and
    blocks are numbered by their first device (a stable colour per block)."""
    slices = shard_slices(shape, layout, mesh)
    block_of: dict[tuple, int] = {}
    index: dict[int, int] = {}
    for d in range(mesh.size):
        key = tuple((s.start, s.stop) for s in slices[d])
        index[d] = block_of.setdefault(key, len(block_of))
    return slices, index


def _slice_text(sl: tuple[slice, ...], shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(":" if (s.start, s.stop) == (0, n) else f"{s.start}:{s.stop}"
                           for s, n in zip(sl, shape, strict=True)) + "]"  # fmt: skip


def _axis_title(mesh: Mesh, names: Sequence[str]) -> str:
    parts = []
    for a in names:
        link = f" [{mesh.link(a)}]" if mesh.hardware is not None else ""
        parts.append(f"{a}={mesh.axis_size(a)}{link}")
    return " x ".join(parts)


def _discrete_scale(k: int) -> list[list]:
    if k <= 1:
        return [[0, PALETTE[0]], [1, PALETTE[0]]]
    scale = []
    for i in range(k):
        c = PALETTE[i % len(PALETTE)]
        scale += [[i / k, c], [(i + 1) / k, c]]
    return scale


def mesh_figure(
    mesh: Mesh, layout: Layout | None = None, ttype: TensorType | None = None, *,
    tensor: str = "", groups_axes: tuple[str, ...] = (), collective: str = "",
    selected_device: int | None = None,
) -> go.Figure:  # fmt: skip
    """The device grid. With ``layout``/``ttype``: each cell shows its device id and the block
    it holds (replicas share a colour; ``Σ`` marks a pending partial sum). With
    ``groups_axes``: the device groups communicating over those axes, drawn as rings.

    Traces: cells (a heatmap; ``customdata`` = device id), groups (ring lines).

    >>> fig = mesh_figure(Mesh({"dp": 2, "tp": 4}))
    >>> fig.data[0].z.shape
    (2, 4)
    """
    rows, cols = mesh_grid(mesh)
    nr, nc = int(rows.max()) + 1, int(cols.max()) + 1
    z = np.zeros((nr, nc))
    text = np.empty((nr, nc), dtype=object)
    hover = np.empty((nr, nc), dtype=object)
    devs = np.zeros((nr, nc), dtype=np.int64)
    nblocks = 1
    if layout is not None and ttype is not None:
        layout.validate(ttype, mesh, tensor)
        slices, block = device_blocks(ttype.shape, layout, mesh)
        nblocks = max(block.values()) + 1
        reps = mesh.size // nblocks
    for d in range(mesh.size):
        r, c = rows[d], cols[d]
        devs[r, c] = d
        coords = ", ".join(f"{a}={i}" for a, i in zip(mesh.axis_names, mesh.coords(d), strict=True))
        if layout is not None and ttype is not None:
            z[r, c] = block[d]
            part = f"<br>Σ {','.join(layout.partial)}" if layout.partial else ""
            rep = f"<br>x{reps} replica" if reps > 1 else ""
            text[r, c] = f"<b>{d}</b><br>{_slice_text(slices[d], ttype.shape)}{part}"
            hover[r, c] = (f"device {d} ({coords})<br>block {block[d]} "
                           f"{_slice_text(slices[d], ttype.shape)}{rep}{part}")  # fmt: skip
        else:
            text[r, c] = f"<b>{d}</b>"
            hover[r, c] = f"device {d} ({coords})"
    cells = go.Heatmap(
        z=z, text=text, hovertext=hover, texttemplate="%{text}", hoverinfo="text",
        customdata=devs, colorscale=_discrete_scale(nblocks) if layout is not None else
        [[0, NEUTRAL], [1, NEUTRAL]], zmin=-0.5, zmax=nblocks - 0.5, showscale=False,
        xgap=3, ygap=3, name="cells",
    )  # fmt: skip
    gx: list[float | None] = []
    gy: list[float | None] = []
    if groups_axes:
        for g in mesh.groups(groups_axes):
            ring = list(g) + [g[0]]
            gx += [float(cols[d]) for d in ring] + [None]
            gy += [float(rows[d]) for d in ring] + [None]
    color = collective_color(collective) if collective else "#E4002B"
    groups = go.Scatter(x=gx, y=gy, mode="lines+markers", name="groups", hoverinfo="skip",
                        line={"width": 3, "color": color}, marker={"size": 6, "color": color})  # fmt: skip
    fig = go.Figure([cells, groups])
    shapes = []
    cpn = mesh.hardware.chips_per_node if mesh.hardware is not None else None
    if cpn and cpn < mesh.size:  # node boundaries: chips_per_node consecutive ids per node
        for k in range(mesh.size // cpn):
            ds = range(k * cpn, (k + 1) * cpn)
            r0, r1 = min(rows[d] for d in ds), max(rows[d] for d in ds)
            c0, c1 = min(cols[d] for d in ds), max(cols[d] for d in ds)
            shapes.append({"type": "rect", "x0": c0 - 0.5, "x1": c1 + 0.5, "y0": r0 - 0.5,
                           "y1": r1 + 0.5, "line": {"width": 2, "dash": "dot", "color": "#333"}})  # fmt: skip
    if selected_device is not None:
        r, c = rows[selected_device], cols[selected_device]
        shapes.append({"type": "rect", "x0": c - 0.5, "x1": c + 0.5, "y0": r - 0.5, "y1": r + 0.5,
                       "line": {"width": 4, "color": "#111"}})  # fmt: skip
    last = mesh.axis_names[-1]
    title = f"{mesh}"
    if layout is not None and ttype is not None:
        title = f"%{tensor} {layout.format(ttype)} on {_axis_title(mesh, mesh.axis_names)}"
    if collective:
        title += f" — {collective} over {','.join(groups_axes)}"
    row_labels = []
    for r in range(nr):
        d = int(devs[r, 0])
        row_labels.append(", ".join(f"{a}={i}" for a, i in
                                    zip(mesh.axis_names[:-1], mesh.coords(d)[:-1], strict=True)))  # fmt: skip
    fig.update_layout(
        title=title, shapes=shapes, showlegend=False, plot_bgcolor="white",
        height=120 + 70 * nr, margin={"l": 10, "r": 10, "t": 40, "b": 30},
        xaxis={"tickvals": list(range(nc)), "ticktext": [f"{last}={i}" for i in range(nc)],
               "title": _axis_title(mesh, [last]), "showgrid": False, "zeroline": False},
        yaxis={"tickvals": list(range(nr)), "ticktext": row_labels or [""],
               "title": _axis_title(mesh, mesh.axis_names[:-1]) if len(mesh.shape) > 1 else "",
               "autorange": "reversed", "showgrid": False, "zeroline": False},
    )  # fmt: skip
    return fig


def sharding_figure(ttype: TensorType, layout: Layout, mesh: Mesh, tensor: str = "") -> go.Figure:
    """The tensor cut into blocks, each labelled with the devices holding it.

    Two dims are drawn (the split ones first); a rank-1 tensor is one row.

    >>> fig = sharding_figure(TensorType((8, 16), "fp32"), Layout((("dp",), ("tp",))),
    ...                       Mesh({"dp": 2, "tp": 4}))
    >>> len(fig.layout.shapes)
    8
    """
    layout.validate(ttype, mesh, tensor)
    shape = ttype.shape
    split = [i for i in range(len(shape)) if layout.dims[i]]
    rest = sorted((i for i in range(len(shape)) if i not in split), key=lambda i: -shape[i])
    dims = sorted((split + rest)[:2])
    slices, block = device_blocks(shape, layout, mesh)
    holders: dict[int, list[int]] = {}
    for d, b in block.items():
        holders.setdefault(b, []).append(d)
    shapes, xs, ys, labels = [], [], [], []
    for b, ds in sorted(holders.items()):
        sl = slices[ds[0]]
        if len(dims) == 2:
            (y0, y1), (x0, x1) = ((sl[dims[0]].start, sl[dims[0]].stop),
                                  (sl[dims[1]].start, sl[dims[1]].stop))  # fmt: skip
        elif len(dims) == 1:
            (x0, x1), (y0, y1) = (sl[dims[0]].start, sl[dims[0]].stop), (0, 1)
        else:
            (x0, x1), (y0, y1) = (0, 1), (0, 1)
        color = PALETTE[b % len(PALETTE)]
        shapes.append({"type": "rect", "x0": x0, "x1": x1, "y0": y0, "y1": y1,
                       "fillcolor": color, "opacity": 0.75, "line": {"color": "white", "width": 2}})  # fmt: skip
        xs.append((x0 + x1) / 2)
        ys.append((y0 + y1) / 2)
        labels.append(",".join(str(d) for d in ds))
    letters = "".join(chr(ord("A") + i) for i in range(len(shape)))
    fig = go.Figure(go.Scatter(x=xs, y=ys, text=labels, mode="text", name="blocks",
                               hovertext=[f"devices {t}" for t in labels], hoverinfo="text"))  # fmt: skip
    xdim = dims[-1] if dims else None
    ydim = dims[0] if len(dims) == 2 else None
    fig.update_layout(
        title=f"%{tensor} {layout.format(ttype)}: which devices hold each block" if tensor
        else f"{layout.format(ttype)}",
        shapes=shapes, showlegend=False, plot_bgcolor="white", height=300,
        margin={"l": 10, "r": 10, "t": 40, "b": 30},
        xaxis={"title": f"dim {xdim} ({letters[xdim]}, {shape[xdim]})" if xdim is not None else "",
               "showgrid": False, "zeroline": False},
        yaxis={"title": f"dim {ydim} ({letters[ydim]}, {shape[ydim]})" if ydim is not None else "",
               "autorange": "reversed", "showgrid": False, "zeroline": False},
    )  # fmt: skip
    return fig


def ring_figure(step: RingStep, kind: str, devices: Sequence[int], total_steps: int) -> go.Figure:
    """One state of the ring: ranks (devices) x chunks, the contributions each copy sums,
    with this step's sends as arrows.

    >>> from widgets.figures.ring import ring_steps
    >>> fig = ring_figure(ring_steps("all-gather", 4)[1], "all-gather", [0, 1, 2, 3], 4)
    >>> len(fig.layout.annotations)
    4
    """
    n = len(devices)
    counts = step.counts
    text = [[f"{counts[r, c]}/{n}" for c in range(n)] for r in range(n)]
    heat = go.Heatmap(
        z=counts, text=text, texttemplate="%{text}", zmin=0, zmax=n, colorscale="Blues",
        showscale=False, xgap=2, ygap=2, hoverinfo="skip", name="chunks",
    )  # fmt: skip
    fig = go.Figure(heat)
    annotations = []
    for src, dst, c in step.sends:
        annotations.append({"x": c, "y": dst, "ax": c, "ay": src, "xref": "x", "yref": "y",
                            "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 2,
                            "arrowwidth": 2, "arrowcolor": collective_color(kind), "text": ""})  # fmt: skip
    fig.update_layout(
        title=f"ring {kind} over devices {list(devices)}: step {step.index}/{total_steps - 1}"
        f" ({step.phase})", annotations=annotations, height=140 + 45 * n,
        margin={"l": 10, "r": 10, "t": 40, "b": 30}, plot_bgcolor="white",
        xaxis={"tickvals": list(range(n)), "ticktext": [f"chunk {c}" for c in range(n)]},
        yaxis={"tickvals": list(range(n)), "ticktext": [f"device {d}" for d in devices],
               "autorange": "reversed"},
    )  # fmt: skip
    return fig
