"""``cost_figure``: a plan's CostBreakdown before vs after a change, as grouped bars."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.ir import format_bytes
from explorer.search import CostBreakdown

from ..colors import collective_color

__all__ = ["cost_figure", "cost_rows", "cost_title", "memory_text", "TRACE_BEFORE", "TRACE_AFTER"]

TRACE_BEFORE, TRACE_AFTER = range(2)
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv")


def cost_rows(cost: CostBreakdown) -> dict[str, float]:
    """The bars: compute, every collective kind, gradient, memory term, total."""
    rows = {"compute": cost.compute}
    for k in KINDS:
        rows[k] = cost.comm(k)
    rows.update(gradient=cost.gradient, memory=cost.memory, total=cost.total)
    return rows


def cost_title(after: CostBreakdown, before: CostBreakdown | None, changed: int | None) -> str:
    u = "s" if after.unit == "seconds" else "B"
    if before is not None and before.unit == after.unit:
        delta = (after.total - before.total) / before.total if before.total else 0.0
        title = f"total {before.total:.4g} {u} → {after.total:.4g} {u} ({delta:+.1%})"
    else:
        title = f"total {after.total:.4g} {u}"
    if changed is not None:
        title += f", {changed} ops changed strategy"
    return title


def memory_text(after: CostBreakdown) -> str:
    return f"memory per device {format_bytes(after.memory_bytes)}"


def cost_figure(
    after: CostBreakdown, before: CostBreakdown | None = None, *, changed: int | None = None,
    title: str = "",
) -> go.Figure:  # fmt: skip
    """Grouped bars of ``before`` (grey) and ``after`` (coloured by category).

    A ``before`` in another unit (seconds vs bytes, after a preset switch) is not drawn.

    >>> from explorer.search import CostBreakdown
    >>> fig = cost_figure(CostBreakdown(compute=2.0), CostBreakdown(compute=1.0), changed=3)
    >>> fig.data[1].y[0], fig.layout.title.text
    (2.0, 'total 1 s → 2 s (+100.0%), 3 ops changed strategy')
    """
    rows = cost_rows(after)
    cats = list(rows)
    u = "s" if after.unit == "seconds" else "B"
    comparable = before is not None and before.unit == after.unit
    before_y = list(cost_rows(before).values()) if comparable else [None] * len(cats)
    colors = ["#636EFA"] + [collective_color(k) for k in KINDS] + ["#FFA15A", "#B6E880", "#444"]
    fig = go.Figure([
        go.Bar(x=cats, y=before_y, name="before", marker_color="#C8C8C8",
               hovertemplate="%{x}: %{y:.4g}<extra>before</extra>"),
        go.Bar(x=cats, y=list(rows.values()), name="after", marker_color=colors,
               hovertemplate="%{x}: %{y:.4g}<extra>after</extra>"),
    ])  # fmt: skip
    title = title or cost_title(after, before, changed)
    fig.update_layout(
        title=title, barmode="group", height=340, showlegend=True,
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        yaxis={"title": f"cost ({u}, weighted)"}, margin={"l": 10, "r": 10, "t": 70, "b": 30},
        annotations=[{"text": memory_text(after),
                      "xref": "paper", "yref": "paper", "x": 0.99, "y": 0.98, "showarrow": False,
                      "xanchor": "right", "yanchor": "top", "font": {"size": 11},
                      "bgcolor": "rgba(255,255,255,0.8)"}],
    )  # fmt: skip
    return fig
