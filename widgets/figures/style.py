"""One look for every figure: full width, the title clear of the toolbar, human legends.

Plotly draws its toolbar (modebar) in the top-right corner over the plot area; a title placed
in the default top margin runs under it. Every builder calls :func:`base_layout`, which keeps
the title left-aligned in a top margin tall enough for a two-line title, puts the toolbar
above the plot area's right side, and lets the figure take the width of its output
(``autosize``, no fixed width), so the views use the whole notebook column on a laptop.

>>> import plotly.graph_objects as go
>>> fig = go.Figure(layout=base_layout("memory per device", height=360))
>>> fig.layout.autosize, fig.layout.width, fig.layout.title.x
(True, None, 0.0)
"""

from __future__ import annotations

from typing import Any

__all__ = ["base_layout", "FONT", "TITLE_SIZE", "wrap_title"]

FONT = {"family": "Inter, system-ui, -apple-system, Segoe UI, Helvetica, Arial", "size": 12}
TITLE_SIZE = 14
TITLE_LINE_PX = 20  # one line of a 14 px title with its leading
TOOLBAR_PX = 28  # plotly's modebar height


def wrap_title(text: str, width: int = 90) -> str:
    """Break a long title into lines of at most ``width`` characters (plotly's ``<br>``),
    at ", " or " — " boundaries, so the result part is never cut off at the right edge."""
    if len(text) <= width or "<br>" in text:
        return text
    parts, line, out = text.replace(" — ", ", — ").split(", "), "", []
    for part in parts:
        piece = part if not line else f"{line}, {part}"
        if len(piece) > width and line:
            out.append(line)
            line = part
        else:
            line = piece
    out.append(line)
    return "<br>".join(s.replace(", —", " —") for s in out)


def base_layout(
    title: str = "",
    *,
    height: int = 380,
    legend: bool = True,
    title_lines: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The layout dict every builder starts from (update it with the figure's own keys).

    Args:
        title: the figure's title; long ones are wrapped (see :func:`wrap_title`).
        height: pixels; the width follows the page.
        legend: show the legend (horizontal, under the title, clear of the toolbar).
        title_lines: lines reserved for the title (default: as many as it has).
    """
    text = wrap_title(title)
    lines = title_lines or (text.count("<br>") + 1 if text else 0)
    top = TOOLBAR_PX + 8 + lines * TITLE_LINE_PX + (24 if legend else 0)
    layout: dict[str, Any] = {
        "title": {"text": text, "x": 0.0, "xanchor": "left", "y": 1.0, "yanchor": "top",
                  "yref": "container", "pad": {"t": TOOLBAR_PX + 4, "l": 8},
                  "font": {"size": TITLE_SIZE}},
        "autosize": True,
        "height": height,
        "font": FONT,
        "margin": {"l": 56, "r": 16, "t": top, "b": 44, "autoexpand": True},
        "showlegend": legend,
        "modebar": {"orientation": "h"},
    }  # fmt: skip
    if legend:
        layout["legend"] = {"orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.0,
                            "yanchor": "bottom", "font": {"size": 11}}  # fmt: skip
    layout.update(extra)
    return layout
