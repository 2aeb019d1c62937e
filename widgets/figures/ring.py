"""Ring collectives chunk by chunk, as data (what the MeshView's teaching mode steps).

A ring of ``n`` ranks splits the buffer into ``n`` chunks. Reduce-scatter: at step ``s``
rank ``r`` sends chunk ``(r - s) mod n`` to rank ``r + 1``, which adds it to its own copy;
after ``n - 1`` steps rank ``r`` holds the full sum of chunk ``(r + 1) mod n``. All-gather
passes complete chunks on the same way; all-reduce is reduce-scatter then all-gather
(``2 (n - 1)`` steps: the ``2(n-1)/n * S`` bytes of the cost model)::

    all-reduce, n = 3     step 0      step 2 (scattered)   step 4 (done)
    rank 0 chunks         1 1 1       1 3 2                3 3 3
    rank 1                1 1 1       2 1 3                3 3 3
    rank 2                1 1 1       3 2 1                3 3 3

Each number is how many ranks' contributions that copy of the chunk sums (``n`` = complete).
This is an illustration of the algorithm, not a cost: bytes and times come from
``explorer.hardware`` (``bytes_sent_per_device``, ``ring_time``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import plotly.graph_objects as go

from ..colors import collective_color
from .errors import ViewError
from .style import base_layout

__all__ = [
    "RingStep", "ring_steps", "TeachKind", "TEACH_KINDS", "ring_rounds_figure", "TRACE_RING",
    "TRACE_CHUNKS", "TRACE_DEVICES", "TRACE_SENDS", "TRACE_RING_LABELS",
]  # fmt: skip

TeachKind = Literal["all-reduce", "all-gather", "reduce-scatter"]
TEACH_KINDS: tuple[str, ...] = get_args(TeachKind)


@dataclass(frozen=True)
class RingStep:
    """The state after a step: ``counts[rank, chunk]`` contributions held, and the sends
    ``(src rank, dst rank, chunk)`` of the step that produced it (none for step 0)."""

    index: int
    phase: str
    sends: tuple[tuple[int, int, int], ...]
    counts: np.ndarray


def ring_steps(kind: TeachKind, n: int) -> tuple[RingStep, ...]:
    """Every state of a ring ``kind`` over ``n`` ranks, initial state first.

    >>> steps = ring_steps("all-reduce", 3)
    >>> len(steps), int(steps[-1].counts.min())
    (5, 3)
    >>> steps[1].sends
    ((0, 1, 0), (1, 2, 1), (2, 0, 2))
    """
    if kind not in TEACH_KINDS:
        raise ViewError(f"kind={kind!r}; the ring teaching mode steps {', '.join(TEACH_KINDS)}")
    if n < 2:
        raise ViewError(f"a ring needs at least 2 ranks, got n={n}; pick a larger mesh axis")
    if kind == "all-gather":
        counts = np.zeros((n, n), dtype=np.int64)
        counts[np.arange(n), np.arange(n)] = n
    else:
        counts = np.ones((n, n), dtype=np.int64)
    out = [RingStep(0, "start", (), counts.copy())]
    if kind in ("reduce-scatter", "all-reduce"):
        for s in range(n - 1):
            sends = tuple((r, (r + 1) % n, (r - s) % n) for r in range(n))
            new = counts.copy()
            for src, dst, c in sends:
                new[dst, c] = counts[dst, c] + counts[src, c]
            counts = new
            out.append(RingStep(len(out), "reduce-scatter", sends, counts.copy()))
    if kind in ("all-gather", "all-reduce"):
        # all-gather: rank r starts owning chunk r; after a reduce-scatter, chunk r + 1.
        first = 0 if kind == "all-gather" else 1
        for s in range(n - 1):
            sends = tuple((r, (r + 1) % n, (r + first - s) % n) for r in range(n))
            new = counts.copy()
            for src, dst, c in sends:
                new[dst, c] = counts[src, c]
            counts = new
            out.append(RingStep(len(out), "all-gather", sends, counts.copy()))
    return tuple(out)


# --- the ring drawn on its devices ----------------------------------------------------------
TRACE_RING, TRACE_CHUNKS, TRACE_DEVICES, TRACE_SENDS, TRACE_RING_LABELS = range(5)
_CHUNK_STEP = 0.36  # data units between chunk squares (the ring radius follows)
_PX_PER_UNIT = 42  # figure height per data unit, so that squares do not overlap


def _positions(n: int, k: int) -> tuple[float, list[tuple[float, float]]]:
    """Radius and device centres of ring ``k`` (clockwise from the top); rings sit side by
    side with room for the chunk rows of their left and right devices."""
    radius = max(0.9, 0.55 * n)
    pitch = 2 * (radius + _row_extent(n)) + 0.8
    cx = k * pitch
    pts = [(cx + radius * math.sin(2 * math.pi * i / n), radius * math.cos(2 * math.pi * i / n))
           for i in range(n)]  # fmt: skip
    return radius, pts


def _row_half(n: int) -> float:
    return (n - 1) / 2 * _CHUNK_STEP + 0.2


def _row_extent(n: int) -> float:
    """How far a left or right device's chunk row reaches beyond the device's centre."""
    return 0.62 + 2 * _row_half(n)


def ring_rounds_figure(
    coll, round_index: int, *, rings: Sequence[int] | None = None,
    hover: Mapping[int, str] | None = None, active: bool = True, note: str = "",
) -> go.Figure:  # fmt: skip
    """A ring collective (`explorer.sharding.lesson.LessonCollective`) drawn on its devices.

    Each ring is a circle of devices in ring order; next to every device a row of squares,
    its buffer cut into one chunk per ring member (chunk 0 on the left), shaded and numbered
    by how many devices' contributions that chunk holds (the ring size = complete; blank =
    not received yet, in an all-gather). Arrows are the sends of round ``round_index``
    (0 = before the first round), labelled with the chunk they carry.

    Args:
        rings: indices into ``coll.rings`` to draw (default all).
        hover: device -> extra hover text (e.g. its numbers).
        active: False draws the rings without sends (a step without communication).
        note: a line under the title.

    Traces: ring lines, chunks, devices, send labels, ring labels (fixed pool).

    >>> from explorer.hardware import Mesh
    >>> from explorer.sharding import ring_collective
    >>> c = ring_collective("all-reduce", Mesh({"tp": 4}), ("tp",))
    >>> fig = ring_rounds_figure(c, 1)
    >>> len(fig.layout.annotations), fig.data[TRACE_SENDS].text[0]
    (4, 'chunk 3 (add)')
    """
    n = coll.ring_size
    if not 0 <= round_index <= len(coll.rounds):
        raise ViewError(f"round {round_index} is outside 0..{len(coll.rounds)} of {coll.kind}")
    picked = list(range(len(coll.rings))) if rings is None else list(rings)
    counts = coll.start if round_index == 0 else coll.rounds[round_index - 1].counts
    moves = coll.rounds[round_index - 1].moves if round_index and active else ()
    gather = coll.kind == "all-gather"
    a2a = coll.kind == "all-to-all"  # one round: block j of every member goes to member j
    where: dict[int, tuple[float, float]] = {}
    rx: list[float | None] = []
    ry: list[float | None] = []
    cx, cy, cz, ct, chover = [], [], [], [], []
    dx, dy, dtext, dhover = [], [], [], []
    lx, ly, ltext = [], [], []
    radius = 0.75
    for k, ring_no in enumerate(picked):
        ring = coll.rings[ring_no]
        radius, pts = _positions(n, k)
        for d, p in zip(ring, pts, strict=True):
            where[d] = p
        rx += [p[0] for p in pts] + [pts[0][0], None]
        ry += [p[1] for p in pts] + [pts[0][1], None]
        centre = sum(p[0] for p in pts) / n
        lx.append(centre)
        ly.append(-radius - 1.25)
        ltext.append("group " + ", ".join(str(d) for d in ring) if a2a else
                     "ring " + " → ".join(str(d) for d in ring) + f" → {ring[0]}")  # fmt: skip
        for d, (px, py) in zip(ring, pts, strict=True):
            dx.append(px)
            dy.append(py)
            dtext.append(str(d))
            dhover.append(f"device {d}" + (f"<br>{hover[d]}" if hover and d in hover else ""))
            # the chunk row sits outside the circle, centred on the device's radial line
            ux, uy = (px - centre) / radius, py / radius
            out = 0.62 + abs(ux) * _row_half(n)  # clear of the device marker
            ox, oy = px + ux * out, py + uy * out
            for c in range(n):
                cx.append(ox + (c - (n - 1) / 2) * _CHUNK_STEP)
                cy.append(oy)
                have = counts[d][c]
                cz.append(have if not (gather or a2a) else have * n)
                ct.append(str(c) if a2a else "" if gather or have == 0 else str(have))
                if a2a:
                    state = (f"for device {ring[c]}" if round_index == 0 else
                             f"from device {ring[c]}")  # fmt: skip
                else:
                    state = ("held" if have else "not received yet") if gather else \
                        f"sums {have} of {n} devices' contributions"  # fmt: skip
                chover.append(f"device {d}, {'block' if a2a else 'chunk'} {c}: {state}")
    sx, sy, stext, annotations = [], [], [], []
    color = collective_color(coll.kind)
    for m in moves:
        if m.src not in where or m.dst not in where:
            continue
        (x0, y0), (x1, y1) = where[m.src], where[m.dst]
        if a2a:  # both directions of a pair: each arrow on its own side, its label by its tail
            length = math.hypot(x1 - x0, y1 - y0)
            px, py = -(y1 - y0) / length * 0.09, (x1 - x0) / length * 0.09
            x0, y0, x1, y1 = x0 + px, y0 + py, x1 + px, y1 + py
            annotations.append({"x": x1, "y": y1, "ax": x0, "ay": y0, "xref": "x", "yref": "y",
                                "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 3,
                                "arrowsize": 1.1, "arrowwidth": 2, "arrowcolor": color,
                                "standoff": 14, "startstandoff": 14, "text": ""})  # fmt: skip
            sx.append(x0 + 0.32 * (x1 - x0) + px * 1.6)
            sy.append(y0 + 0.32 * (y1 - y0) + py * 1.6)
            stext.append(str(m.chunk))
            continue
        annotations.append({"x": x1, "y": y1, "ax": x0, "ay": y0, "xref": "x", "yref": "y",
                            "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 3,
                            "arrowsize": 1.2, "arrowwidth": 2.5, "arrowcolor": color,
                            "standoff": 14, "startstandoff": 14, "text": ""})  # fmt: skip
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        ox = _ring_centre(where, m.src, coll)
        vx, vy = mx - ox, my
        norm = math.hypot(vx, vy)
        if norm < 1e-9:  # a ring of two: the chord runs through the centre
            vx, vy, norm = (y1 - y0), -(x1 - x0), math.hypot(x1 - x0, y1 - y0)
        # the label sits just outside the ring, between the two devices
        sx.append(ox + vx / norm * (radius + 0.45))
        sy.append(vy / norm * (radius + 0.45))
        stext.append(f"chunk {m.chunk} ({'add' if m.reduce else 'copy'})")
    phase = coll.rounds[round_index - 1].phase if round_index else "start"
    where_axes = ",".join(coll.axes)
    if round_index and active:
        title = (f"ring {coll.kind} over {where_axes}: round {round_index} of "
                 f"{len(coll.rounds)} ({phase})")  # fmt: skip
    elif active:
        title = f"ring {coll.kind} over {where_axes}: before round 1 of {len(coll.rounds)}"
    else:
        title = f"the devices of the {coll.kind} over {where_axes} (no communication now)"
    if a2a and active:
        title = (f"all-to-all over {where_axes}: every device sends block j to member j of its "
                 "group" + ("" if round_index else " (before)"))  # fmt: skip
    legend = (f"squares: each device's buffer cut into {n} blocks, block j for member j "
              "(afterwards: from member j)<br>arrows: the sends, each numbered by its tail with "
              "the block it carries; each device keeps its own block") if a2a else (
              f"squares: each device's buffer cut into {n} chunks (chunk 0 left); "
              + ("green = held, blank = not received yet" if gather else
                 f"number = devices' contributions summed, green = complete ({n})")
              + "<br>arrows: this round's sends, labelled with the chunk they carry")  # fmt: skip
    lines = [title, *(f"<span style='font-size:11px'>{x}</span>" for x in legend.split("<br>"))]
    if note:
        lines.append(f"<span style='font-size:11px'>{note}</span>")
    zmax = n
    # light to mid blue while a chunk is being summed, green once complete
    scale = [[0, "#FFFFFF"], [1 / (2 * n), "#E3ECF9"], [(n - 0.5) / n, "#8FB3E8"],
             [(n - 0.5) / n + 1e-9, "#5CB85C"], [1, "#5CB85C"]]  # fmt: skip
    traces = [
        go.Scatter(x=rx, y=ry, mode="lines", line={"color": "#B8B8B8", "width": 2},
                   hoverinfo="skip", name="ring", showlegend=False),
        go.Scatter(x=cx, y=cy, mode="markers+text", text=ct, hovertext=chover,
                   hoverinfo="text", name="chunks", showlegend=False,
                   textfont={"size": 9, "color": "#111"},
                   marker={"symbol": "square", "size": 14, "color": cz, "cmin": 0, "cmax": zmax,
                           "colorscale": scale, "line": {"color": "#555", "width": 1}}),
        go.Scatter(x=dx, y=dy, mode="markers+text", text=dtext, hovertext=dhover,
                   hoverinfo="text", name="devices", showlegend=False,
                   textfont={"color": "white", "size": 12},
                   marker={"size": 30, "color": "#3A3A3A", "line": {"color": color, "width": 2}}),
        go.Scatter(x=sx, y=sy, mode="text", text=stext, hoverinfo="skip", name="sends",
                   showlegend=False, visible=bool(sx), textfont={"size": 10, "color": color}),
        go.Scatter(x=lx, y=ly, mode="text", text=ltext, hoverinfo="skip", name="rings",
                   showlegend=False, textfont={"size": 11, "color": "#444"}),
    ]  # fmt: skip
    fig = go.Figure(traces)
    span = radius + 1.1
    side = _row_extent(n) + 0.3
    layout = base_layout("<br>".join(lines), legend=False, title_lines=len(lines))
    plot_px = (2 * span + 0.6) * _PX_PER_UNIT
    layout["height"] = int(plot_px + layout["margin"]["t"] + layout["margin"]["b"])
    fig.update_layout(layout)
    # an empty list is dropped from the layout's JSON, and a FigureWidget updated from it
    # would keep the previous round's arrows: an invisible stand-in clears them
    annotations = annotations or [{"visible": False, "text": "", "showarrow": False}]
    fig.update_layout(
        annotations=annotations, plot_bgcolor="white", dragmode=False,
        xaxis={"visible": False, "range": [min(dx) - side, max(dx) + side]},
        yaxis={"visible": False, "range": [-span - 0.6, span], "scaleanchor": "x",
               "scaleratio": 1},
    )  # fmt: skip
    return fig


def _ring_centre(where: Mapping[int, tuple[float, float]], device: int, coll) -> float:
    """The x of the centre of the ring holding ``device`` (labels sit inside the ring)."""
    ring = next(r for r in coll.rings if device in r)
    xs = [where[d][0] for d in ring if d in where]
    return sum(xs) / len(xs)
