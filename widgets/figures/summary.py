"""``figure_summary``: a figure in words, for screen readers (and a quick text check).

Generated from the figure the view draws (its title, axes and every visible trace), so it
says what is on screen and cannot drift from it. Each view puts it, visually hidden, after
its plots (``widgets.base.View``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import islice
from typing import Any

import numpy as np
import plotly.graph_objects as go

__all__ = ["figure_summary", "MAX_TRACES", "MAX_LABELS"]

MAX_TRACES = 8  # traces named one by one; the rest are counted
MAX_LABELS = 6  # text labels quoted per trace
_TAG = re.compile(r"<[^>]*>")  # an HTML tag in a plotly title or label


def _text(value: Any) -> str:
    return " ".join(str(value or "").replace("<br>", " ").split())


def _strip_tags(text: str) -> str:
    return _TAG.sub("", text)


def _numbers(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0)
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        return np.zeros(0)
    return arr[np.isfinite(arr)]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _label(value: Any) -> str:
    """A text label as read out: a number (a numeric text array, such as the microbatch
    numbers on a pipeline's boxes) as ``_fmt`` writes it, 0 included."""
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        return _fmt(float(value))
    return _strip_tags(_text(value))


def _axis_title(layout: Any, axis: str) -> str:
    try:
        return _strip_tags(_text(layout[axis].title.text))
    except (KeyError, ValueError, AttributeError):
        return ""


def _axis_shown(layout: Any, axis: str) -> bool:
    """An axis with tick labels on screen (a graph's hidden layout axes carry positions)."""
    try:
        ax = layout[axis]
    except (KeyError, ValueError):
        return True
    return ax.visible is not False and ax.showticklabels is not False


def _trace(t: Any, layout: Any) -> str | None:
    kind = t.type
    if kind in ("heatmap", "surface"):
        z = np.asarray(t.z if t.z is not None else [], dtype=object)
        rows, cols = (z.shape + (0, 0))[:2] if z.ndim >= 2 else (len(z), 0)
        if not z.size:
            return None  # an empty grid draws nothing
        meta = t.meta if isinstance(t.meta, dict) else {}
        if "boxes" in meta:  # an overview standing for boxes
            cells = _numbers(t.z).size
            return (f"{_strip_tags(_text(t.name)) or kind}: {meta['boxes']} boxes drawn as "
                    f"{cells} cells (an overview: zoom in for each box)")  # fmt: skip
        vals = _numbers(list(np.ravel(z)))
        rng = f", values {_fmt(vals.min())} to {_fmt(vals.max())}" if vals.size else ""
        return f"{_strip_tags(_text(t.name)) or kind}: a {rows} x {cols} grid{rng}"
    xs = getattr(t, "x", None)
    ys = getattr(t, "y", None)
    n = len(xs) if xs is not None else len(ys) if ys is not None else 0
    if kind == "bar" and t.orientation == "h" and n and not _numbers(xs).any():
        return None  # a Gantt's boxes of zero length draw nothing (a legend's placeholder)
    if n == 0:
        return None
    name = _strip_tags(_text(t.name)) or kind
    what = ("bar" if kind == "bar" else "point") + ("" if n == 1 else "s")
    parts = [f"{name}: {n} {what}"]
    across = kind == "bar" and getattr(t, "orientation", None) == "h"  # values on x
    ref = (getattr(t, "xaxis", None) or "x") if across else (getattr(t, "yaxis", None) or "y")
    axis = ("xaxis" if across else "yaxis") + ref[1:]
    values = _numbers(xs if across else ys)
    lines = kind == "bar" or (kind == "scatter" and "lines" in str(t.mode or "lines"))
    shown_axis = _axis_shown(layout, axis)
    if values.size and lines and shown_axis:
        what = _axis_title(layout, axis) or ("x" if across else "y")
        lo, hi = _fmt(values.min()), _fmt(values.max())
        parts.append(f"{what} {lo}" if lo == hi else f"{what} from {lo} to {hi}")
    labels = getattr(t, "text", None)
    if isinstance(labels, Sequence | np.ndarray) and not isinstance(labels, str):
        # the first few only (a Gantt chart's boxes carry thousands of numbers)
        shown = list(islice((x for x in map(_label, labels) if x), MAX_LABELS))
        if shown:
            more = ", ..." if len(labels) > len(shown) else ""
            parts.append("labelled " + ", ".join(shown) + more)
    return "; ".join(parts)


def figure_summary(fig: go.Figure | go.FigureWidget | dict) -> str:
    """One paragraph: the title, the axes and every visible trace with data.

    >>> fig = go.Figure(go.Bar(x=["a", "b"], y=[1.0, 3.0], name="step"),
    ...                 layout={"title": {"text": "time"}, "yaxis": {"title": {"text": "s"}}})
    >>> figure_summary(fig)
    'Figure: time. Axes: y s. step: 2 bars; s from 1 to 3.'
    """
    if isinstance(fig, dict):
        fig = go.Figure(fig)
    layout = fig.layout
    title = _strip_tags(_text(layout.title.text))
    axes = []
    for key in sorted(k for k in layout if k.startswith(("xaxis", "yaxis"))):
        name = _axis_title(layout, key)
        if name:
            axes.append(f"{key[0]} {name}")
    traces = []
    for t in fig.data:
        if t.visible is False:
            continue
        line = _trace(t, layout)
        if line:
            traces.append(line)
    out = [f"Figure: {title or 'untitled'}."]
    if axes:
        out.append("Axes: " + ", ".join(axes) + ".")
    for line in traces[:MAX_TRACES]:
        out.append(line + ".")
    if len(traces) > MAX_TRACES:
        out.append(f"{len(traces) - MAX_TRACES} more series.")
    if not traces:
        out.append("Nothing drawn yet.")
    return " ".join(out)
