"""Mesh figures: the device grid (which block each device holds, node boundaries, the
groups of a collective), the tensor cut into blocks (as ``jax.debug.visualize_array_sharding``)
and the ring teaching figure."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from explorer.hardware import Mesh
from explorer.ir import TensorType
from explorer.sharding import Layout, shard_slices

from ..colors import NEUTRAL, PALETTE, collective_color
from .errors import ViewError
from .ring import RingStep
from .style import base_layout

__all__ = [
    "mesh_grid", "device_blocks", "mesh_figure", "sharding_figure", "ring_figure",
    "TRACE_CELLS", "TRACE_GROUPS", "lesson_blocks_figure", "device_ranges", "default_dims", "TRACE_BLOCKS",
    "TRACE_TENSORS", "matrix_text", "levels_text",
]  # fmt: skip

TRACE_CELLS, TRACE_GROUPS = range(2)


MAX_ROWS = 8  # a taller grid is folded into groups of columns side by side


def _fold(mesh: Mesh, max_rows: int = MAX_ROWS) -> tuple[int, int]:
    """(folds, rows per fold): how many row groups of the grid sit side by side."""
    cols = mesh.shape[-1]
    total = mesh.size // cols
    folds = max(1, math.ceil(total / max_rows))
    while folds > 1 and cols * folds > 16:  # keep cells wide enough for their labels
        folds -= 1
    return folds, math.ceil(total / folds)


def mesh_grid(mesh: Mesh, max_rows: int = MAX_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Per device id: (row, column) in the drawing. The last axis runs along columns; the
    others, flattened row-major, down the rows. More than ``max_rows`` rows are folded:
    rows ``r``, ``r + R``, ``r + 2R``... sit side by side (``R`` rows per fold), so a
    64-device ``dp=32 x tp=2`` mesh draws as 8 x 8 cells instead of a 32-row strip.

    >>> rows, cols = mesh_grid(Mesh({"dp": 32, "tp": 2}))
    >>> int(rows.max()) + 1, int(cols.max()) + 1, (int(rows[17]), int(cols[17]))
    (8, 8, (0, 3))
    """
    ids = np.arange(mesh.size)
    cols = mesh.shape[-1]
    _, per = _fold(mesh, max_rows)
    flat_row = ids // cols
    return flat_row % per, (flat_row // per) * cols + ids % cols


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


def levels_text(mesh: Mesh) -> str:
    """One line naming the link levels each axis's rings cross and the bandwidth each ring
    gets (core: `Mesh.axis_link`); "" for a logical mesh.

    >>> from explorer.hardware import Mesh
    >>> levels_text(Mesh({"dp": 4, "tp": 8}, hardware="a100-80g"))
    'links: dp=4: inter-node, 25 GB/s per ring (8 rings share the links out of each node) · tp=8: intra-node, 300 GB/s per ring'
    """
    if mesh.hardware is None:
        return ""
    parts = []
    for name, size in mesh.axes:
        if size == 1:
            continue
        link = mesh.axis_link(name)
        text = f"{name}={size}: {' + '.join(link.levels)}, "
        text += f"{link.bandwidth_bytes_per_s / 1e9:.3g} GB/s per ring"
        top, flows = link.levels[-1], link.flows[-1]
        names = [lv.name for lv in mesh.hardware.levels]
        i = names.index(top)
        if flows > 1:
            below = mesh.hardware.levels[i - 1] if i else None
            if below is None:
                child = "chip"
            elif below.group_size == mesh.hardware.chips_per_node:
                child = "node"
            else:
                child = f"{below.name} group"
            text += f" ({flows} rings share the links out of each {child})"
        parts.append(text)
    return "links: " + " · ".join(parts) if parts else ""


def _discrete_scale(k: int) -> list[list]:
    if k <= 1:
        return [[0, PALETTE[0]], [1, PALETTE[0]]]
    scale = []
    for i in range(k):
        c = PALETTE[i % len(PALETTE)]
        scale += [[i / k, c], [(i + 1) / k, c]]
    return scale


def dim_letters(ttype: TensorType, letters: str | None) -> str:
    """The letters that name a tensor's dims: the op signature's (``bsh`` for x of
    ``bsh,hf->bsf``, upper-cased as the layout notation writes them, the same letters the
    strategy names use), else A, B, C... when the tensor has no op signature."""
    if letters is not None and len(letters) == ttype.rank and len(set(letters)) == ttype.rank:
        return letters.upper()
    return "".join(chr(ord("A") + i) for i in range(ttype.rank))


def mesh_figure(
    mesh: Mesh, layout: Layout | None = None, ttype: TensorType | None = None, *,
    tensor: str = "", groups_axes: tuple[str, ...] = (), collective: str = "",
    selected_device: int | None = None, letters: str | None = None,
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
    folds, per = _fold(mesh)
    nr, nc = int(rows.max()) + 1, int(cols.max()) + 1
    z = np.full((nr, nc), np.nan)  # cells of a folded grid's last group may stay empty
    text = np.full((nr, nc), "", dtype=object)
    hover = np.full((nr, nc), "", dtype=object)
    devs = np.full((nr, nc), -1, dtype=np.int64)
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
            z[r, c] = 0
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
                        visible=bool(gx),
                        line={"width": 3, "color": color}, marker={"size": 6, "color": color})  # fmt: skip
    fig = go.Figure([cells, groups])
    shapes = []
    cpn = mesh.hardware.chips_per_node if mesh.hardware is not None else None
    if cpn and cpn < mesh.size:  # node boundaries: chips_per_node consecutive ids per node
        for k in range(mesh.size // cpn):
            pieces: dict[int, list[int]] = {}  # a node may continue in the next fold
            for d in range(k * cpn, (k + 1) * cpn):
                pieces.setdefault(int(cols[d]) // mesh.shape[-1], []).append(d)
            for ds in pieces.values():
                r0, r1 = min(rows[d] for d in ds), max(rows[d] for d in ds)
                c0, c1 = min(cols[d] for d in ds), max(cols[d] for d in ds)
                shapes.append({"type": "rect", "x0": c0 - 0.5, "x1": c1 + 0.5, "y0": r0 - 0.5,
                               "y1": r1 + 0.5,
                               "line": {"width": 2, "dash": "dot", "color": "#333"}})  # fmt: skip
    for f in range(1, folds):  # a gap line between the folded groups of rows
        x = f * mesh.shape[-1] - 0.5
        shapes.append({"type": "line", "x0": x, "x1": x, "y0": -0.5, "y1": nr - 0.5,
                       "line": {"width": 3, "color": "#888"}})  # fmt: skip
    if selected_device is not None:
        r, c = rows[selected_device], cols[selected_device]
        shapes.append({"type": "rect", "x0": c - 0.5, "x1": c + 0.5, "y0": r - 0.5, "y1": r + 0.5,
                       "line": {"width": 4, "color": "#111"}})  # fmt: skip
    if not shapes:  # an empty list would leave the previous selection's box on screen
        shapes.append({"type": "rect", "visible": False, "x0": 0, "x1": 0, "y0": 0, "y1": 0})
    last = mesh.axis_names[-1]
    title = f"{mesh}"
    if layout is not None and ttype is not None:
        title = (f"%{tensor} {layout.format(ttype, dim_letters(ttype, letters))} on "
                 f"{_axis_title(mesh, mesh.axis_names)}")  # fmt: skip
    if collective:
        title += f" — {collective} over {','.join(groups_axes)}"
    row_labels = []
    others = mesh.axis_names[:-1]
    for r in range(nr):
        firsts = [int(devs[r, f * mesh.shape[-1]]) for f in range(folds)]
        parts = []
        for d in firsts:
            if d >= 0:
                parts.append(", ".join(f"{a}={i}" for a, i in
                                       zip(others, mesh.coords(d)[:-1], strict=True)))  # fmt: skip
        row_labels.append(" | ".join(parts) if len(others) == 1 or folds == 1 else parts[0])
    xtitle = _axis_title(mesh, [last])
    if folds > 1:
        xtitle += (f"; rows folded: {folds} groups of {per} rows side by side "
                   f"(hover a cell for its coordinates)")  # fmt: skip
    fig.update_layout(base_layout(title, height=150 + 70 * nr, legend=False))
    fig.update_layout(
        shapes=shapes, plot_bgcolor="white",
        xaxis={"tickvals": list(range(nc)),
               "ticktext": [f"{last}={i % mesh.shape[-1]}" for i in range(nc)],
               "title": xtitle, "showgrid": False, "zeroline": False},
        yaxis={"tickvals": list(range(nr)), "ticktext": row_labels or [""],
               "title": _axis_title(mesh, mesh.axis_names[:-1]) if len(mesh.shape) > 1 else "",
               "autorange": "reversed", "showgrid": False, "zeroline": False},
    )  # fmt: skip
    return fig


def default_dims(ttype: TensorType, layout: Layout) -> tuple[int, ...]:
    """The dims drawn by default: split ones first, then the largest, in dim order."""
    shape = ttype.shape
    split = [i for i in range(len(shape)) if layout.dims[i]]
    rest = sorted((i for i in range(len(shape)) if i not in split), key=lambda i: -shape[i])
    return tuple(sorted((split + rest)[:2]))


def sharding_figure(
    ttype: TensorType, layout: Layout, mesh: Mesh, tensor: str = "",
    dims: tuple[int, ...] | None = None, letters: str | None = None,
) -> go.Figure:  # fmt: skip
    """The tensor cut into blocks, each labelled with the devices holding it.

    ``dims``: the one or two dims drawn (rows, columns); default `default_dims`. A split dim
    not drawn makes several device blocks fall on one drawn block: its label lists every
    device of those pieces, and the title says which dims are hidden.

    >>> fig = sharding_figure(TensorType((8, 16), "fp32"), Layout((("dp",), ("tp",))),
    ...                       Mesh({"dp": 2, "tp": 4}))
    >>> len(fig.layout.shapes)
    8
    >>> t3 = TensorType((4, 8, 16), "fp32")
    >>> fig = sharding_figure(t3, Layout((("dp",), (), ("tp",))), Mesh({"dp": 2, "tp": 4}),
    ...                       dims=(1, 2))
    >>> len(fig.layout.shapes), fig.data[0].text[0]
    (4, '0,4')
    """
    layout.validate(ttype, mesh, tensor)
    shape = ttype.shape
    dims = tuple(dims) if dims is not None else default_dims(ttype, layout)
    for d in dims:
        if not 0 <= d < len(shape):
            raise ViewError(f"dim {d} is outside tensor {ttype} of rank {len(shape)}; "
                             f"pick dims in 0..{len(shape) - 1}")  # fmt: skip
    slices, _ = device_blocks(shape, layout, mesh)
    rects: dict[tuple, list[int]] = {}
    for d in range(mesh.size):
        sl = slices[d]
        if len(dims) == 2:
            key = (sl[dims[1]].start, sl[dims[1]].stop, sl[dims[0]].start, sl[dims[0]].stop)
        elif len(dims) == 1:
            key = (sl[dims[0]].start, sl[dims[0]].stop, 0, 1)
        else:
            key = (0, 1, 0, 1)
        rects.setdefault(key, []).append(d)
    shapes, xs, ys, labels = [], [], [], []
    for b, ((x0, x1, y0, y1), ds) in enumerate(rects.items()):
        color = PALETTE[b % len(PALETTE)]
        shapes.append({"type": "rect", "x0": x0, "x1": x1, "y0": y0, "y1": y1,
                       "fillcolor": color, "opacity": 0.75, "line": {"color": "white", "width": 2}})  # fmt: skip
        xs.append((x0 + x1) / 2)
        ys.append((y0 + y1) / 2)
        labels.append(",".join(str(d) for d in ds))
    letters = dim_letters(ttype, letters)
    hidden = [i for i in range(len(shape)) if i not in dims and layout.dims[i]]
    fig = go.Figure(go.Scatter(x=xs, y=ys, text=labels, mode="text", name="blocks",
                               textfont={"color": "#111"},
                               hovertext=[f"devices {t}" for t in labels], hoverinfo="text"))  # fmt: skip
    xdim = dims[-1] if dims else None
    ydim = dims[0] if len(dims) == 2 else None
    title = (f"%{tensor} {layout.format(ttype, letters)}: which devices hold each block"
             if tensor else f"{layout.format(ttype, letters)}")  # fmt: skip
    if hidden:
        title += (", dims " + ", ".join(f"{i} ({letters[i]})" for i in hidden) + " split but "
                  "not drawn: a block lists the devices of all its pieces")  # fmt: skip
    fig.update_layout(base_layout(title, height=300, legend=False))
    fig.update_layout(
        shapes=shapes, plot_bgcolor="white",
        xaxis={"title": f"dim {xdim} ({letters[xdim]}, size {shape[xdim]})" if xdim is not None
               else "", "showgrid": False, "zeroline": False},
        yaxis={"title": f"dim {ydim} ({letters[ydim]}, size {shape[ydim]})" if ydim is not None
               else "", "autorange": "reversed", "showgrid": False, "zeroline": False},
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


# --- lesson steps: every tensor of a step cut into its device blocks -------------------------
TRACE_BLOCKS, TRACE_TENSORS = range(2)
_GAP = 0.35  # between tensors, as a fraction of the widest one


def device_ranges(devices: Sequence[int]) -> str:
    """``0-3,6`` for devices 0, 1, 2, 3, 6 (compact block labels).

    >>> device_ranges([0, 1, 2, 3, 6])
    '0-3,6'
    """
    out, run = [], [devices[0]]
    for d in devices[1:]:
        if d == run[-1] + 1:
            run.append(d)
        else:
            out.append(run)
            run = [d]
    out.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


def matrix_text(values: np.ndarray) -> str:
    """A small array as rows of numbers (``·`` for a value not received yet)."""
    rows = np.atleast_2d(values)
    return "<br>".join(" ".join("·" if np.isnan(v) else f"{v:5.2f}" for v in row) for row in rows)


def lesson_blocks_figure(step, *, title: str = "") -> go.Figure:
    """The tensors of a lesson step (`explorer.sharding.lesson.LessonStep`) side by side, each
    cut into the blocks the devices hold (as ``jax.debug.visualize_array_sharding``): a block
    is labelled with its devices and its global slice; blocks held as pending partial sums
    (``{U_axes}``) are dashed and marked ``Σ``; hover shows a holder's numbers.

    Traces: block labels (``customdata`` = first holder), tensor captions.

    >>> from explorer.hardware import Mesh
    >>> from explorer.sharding import lesson
    >>> fig = lesson_blocks_figure(lesson("tensor", Mesh({"dp": 2, "tp": 4}))[2])
    >>> [t.split(":")[0] for t in fig.data[TRACE_TENSORS].text]
    ['h', 'W2', 'y']
    """
    widths = [t.ttype.shape[-1] / max(t.ttype.shape) for t in step.tensors]
    heights = [(t.ttype.shape[0] if t.ttype.rank > 1 else 1) / max(t.ttype.shape)
               for t in step.tensors]  # fmt: skip
    shapes, bx, by, btext, bhover, bdev = [], [], [], [], [], []
    tx, ty, ttext = [], [], []
    x = 0.0
    for k, t in enumerate(step.tensors):
        rows = t.ttype.shape[0] if t.ttype.rank > 1 else 1
        cols = t.ttype.shape[-1]
        sx, sy = widths[k] / cols, heights[k] / rows
        holders: dict[tuple, list[int]] = {}
        for d, span in enumerate(t.slices):
            holders.setdefault(span, []).append(d)
        for b, (span, ds) in enumerate(holders.items()):
            (r0, r1) = span[0] if t.ttype.rank > 1 else (0, 1)
            (c0, c1) = span[-1]
            x0, x1, y0, y1 = x + c0 * sx, x + c1 * sx, r0 * sy, r1 * sy
            partial = t.is_partial
            shapes.append({"type": "rect", "x0": x0, "x1": x1, "y0": y0, "y1": y1, "layer": "below",
                           "fillcolor": PALETTE[b % len(PALETTE)], "opacity": 0.55 if partial
                           else 0.8, "line": {"color": "#B00020" if partial else "white",
                                              "width": 2.5 if partial else 2,
                                              "dash": "dash" if partial else "solid"}})  # fmt: skip
            where = _slice_text(tuple(slice(a, z) for a, z in span), t.ttype.shape)
            mark = "Σ " if partial else ""
            bx.append((x0 + x1) / 2)
            by.append((y0 + y1) / 2)
            # a narrow block (4+ across) gets its slice one dim per line
            shown = where.replace(", ", ",<br>") if cols // (c1 - c0) >= 4 else where
            btext.append(f"{mark}<b>{device_ranges(ds)}</b><br>{shown}")
            what = (f"partial sum over {','.join(t.layout.partial)}: device {ds[0]}'s addend"
                    if partial else f"device {ds[0]}'s block")  # fmt: skip
            bhover.append(f"{t.name}{where} on devices {device_ranges(ds)}<br>{what}:<br>"
                          f"{matrix_text(t.values[ds[0]])}")  # fmt: skip
            bdev.append(ds[0])
        tx.append(x + widths[k] / 2)
        ty.append(-0.06)
        state = " (in the ring)" if t.chunks is not None else ""
        ttext.append(f"{t.name}: {t.notation}{state}")
        x += widths[k] + _GAP
    fig = go.Figure([
        go.Scatter(x=bx, y=by, text=btext, mode="text", hovertext=bhover, hoverinfo="text",
                   customdata=bdev, name="blocks", textfont={"size": 10, "color": "#111"},
                   showlegend=False),
        go.Scatter(x=tx, y=ty, text=ttext, mode="text", hoverinfo="skip", name="tensors",
                   textfont={"size": 12}, showlegend=False),
    ])  # fmt: skip
    fig.update_layout(base_layout(title or f"step {step.index}: {step.op}", height=330,
                                  legend=False))  # fmt: skip
    fig.update_layout(
        shapes=shapes, plot_bgcolor="white", dragmode=False,
        xaxis={"visible": False, "range": [-0.05, x - _GAP + 0.05]},
        yaxis={"visible": False, "range": [1.04, -0.14]},
        margin={"l": 8, "r": 8, "b": 8},
    )  # fmt: skip
    return fig
