"""``cost_figure``: a plan's CostBreakdown against the pinned baseline's, as bars on a log
scale (grouped by category) or stacked (one bar per plan), so that communication stays
visible next to a compute term 100x larger; ``change_rows``: the ops whose strategy changed,
ranked by how much their cost moved.

Every trace exists in every mode (the stacked traces are hidden while grouped and the other
way round), so a mode switch only changes visibility and the axis type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import plotly.graph_objects as go

from explorer.search import CostBreakdown

from ..colors import collective_color
from ..format import fmt_bytes, fmt_percent, fmt_seconds
from .errors import ViewError
from .style import base_layout

__all__ = [
    "cost_figure", "cost_rows", "cost_title", "memory_text", "fmt_cost", "change_rows",
    "changes_html", "Change", "TRACE_BEFORE", "TRACE_AFTER", "TRACE_STACK", "KINDS", "LABELS",
    "SCALES", "Scale",
]  # fmt: skip

TRACE_BEFORE, TRACE_AFTER, TRACE_STACK = 0, 1, 2  # stacked traces: TRACE_STACK + category
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv")
Scale = Literal["log", "linear", "stacked"]
SCALES: tuple[str, ...] = ("log", "linear", "stacked")
LABELS = {
    "compute": "Compute", "all-reduce": "All-reduce", "all-gather": "All-gather",
    "reduce-scatter": "Reduce-scatter", "all-to-all": "All-to-all", "send/recv": "Send/recv",
    "gradient": "Gradient comm", "memory": "Memory term", "total": "Total",
}  # fmt: skip
COLORS = {"compute": "#4C72B0", **{k: collective_color(k) for k in KINDS},
          "gradient": "#DD8452", "memory": "#8C8C8C"}  # fmt: skip
BASELINE_COLOR, CURRENT_COLOR = "#BDBDBD", "#2A6FDB"


def fmt_cost(value: float | None, unit: str) -> str:
    """A cost in its unit: seconds as ms/us/s, MindSpore's weighted bytes as B/KiB/GiB."""
    if value is None:
        return "none"
    return fmt_seconds(value) if unit == "seconds" else fmt_bytes(value)


def cost_rows(cost: CostBreakdown) -> dict[str, float]:
    """The bars: compute, every collective kind, gradient, memory term, total."""
    rows = {"compute": cost.compute}
    for k in KINDS:
        rows[k] = cost.comm(k)
    rows.update(gradient=cost.gradient, memory=cost.memory, total=cost.total)
    return rows


def _comparable(after: CostBreakdown, before: CostBreakdown | None) -> bool:
    return before is not None and before.unit == after.unit


def cost_title(after: CostBreakdown, before: CostBreakdown | None, changed: int | None) -> str:
    """``total 12.4 ms (baseline 13.0 ms, -4.6%), 8 ops changed strategy``."""
    u = after.unit
    if _comparable(after, before):
        delta = (after.total - before.total) / before.total if before.total else 0.0
        sign = "+" if delta >= 0 else "−"
        title = (
            f"total {fmt_cost(after.total, u)} (baseline {fmt_cost(before.total, u)}, "
            f"{sign}{fmt_percent(abs(delta))})"
        )
    else:
        title = f"total {fmt_cost(after.total, u)}"
        if before is not None:
            title += " (baseline in another unit: not compared)"
    if changed is not None:
        title += f", {changed} ops changed strategy vs the baseline"
    return title


def memory_text(after: CostBreakdown) -> str:
    return f"memory per device {fmt_bytes(after.memory_bytes)}"


def _axis(unit: str, scale: str) -> dict:
    word = "time" if unit == "seconds" else "weighted bytes"
    axis = {"title": {"text": f"cost ({word})"}, "tickformat": "~s",
            "ticksuffix": "s" if unit == "seconds" else "B",
            "type": "log" if scale == "log" else "linear"}  # fmt: skip
    if scale == "log":  # ticks at powers of ten only: plotly drops the unit on the 2s and 5s
        axis["dtick"] = 1
    return axis


def cost_figure(
    after: CostBreakdown, before: CostBreakdown | None = None, *, changed: int | None = None,
    title: str = "", scale: Scale = "log",
) -> go.Figure:  # fmt: skip
    """Bars of the baseline (grey) and the current plan (blue) per cost category.

    ``scale``: ``"log"`` or ``"linear"`` grouped bars per category, or ``"stacked"``: one bar
    per plan made of its categories. A ``before`` in another unit (seconds vs bytes, after a
    preset switch) is not drawn.

    >>> from explorer.search import CostBreakdown
    >>> fig = cost_figure(CostBreakdown(compute=2.0), CostBreakdown(compute=1.0), changed=3)
    >>> fig.data[1].y[0], fig.layout.title.text
    (2.0, 'total 2.00 s (baseline 1.00 s, +100.0%), 3 ops changed strategy vs the baseline')
    """
    if scale not in SCALES:
        raise ViewError(f"scale={scale!r}; expected one of {', '.join(SCALES)}")
    u = after.unit
    rows = cost_rows(after)
    cats = list(rows)
    labels = [LABELS[c] for c in cats]
    comparable = _comparable(after, before)
    base = cost_rows(before) if comparable else None
    before_y = [base[c] for c in cats] if base else [None] * len(cats)
    grouped = scale != "stacked"
    hover_before = [f"{lab}: {fmt_cost(v, u)}" for lab, v in zip(labels, before_y, strict=True)]
    hover_after = [f"{lab}: {fmt_cost(rows[c], u)}" for lab, c in zip(labels, cats, strict=True)]
    traces = [
        go.Bar(x=labels, y=before_y, name="baseline", marker_color=BASELINE_COLOR,
               visible=grouped and comparable,
               hovertemplate="%{hovertext}<extra>baseline</extra>",
               hovertext=hover_before),
        go.Bar(x=labels, y=list(rows.values()), name="current", marker_color=CURRENT_COLOR,
               visible=grouped, hovertemplate="%{hovertext}<extra>current</extra>",
               hovertext=hover_after),
    ]  # fmt: skip
    for c in cats[:-1]:  # every category but the total, stacked per plan
        ys = [base[c] if base else None, rows[c]]
        traces.append(go.Bar(
            x=["baseline", "current"], y=ys, name=LABELS[c], marker_color=COLORS[c],
            visible=not grouped, hovertemplate="%{hovertext}<extra></extra>",
            hovertext=[f"{LABELS[c]} ({p}): {fmt_cost(v, u)}"
                       for p, v in zip(("baseline", "current"), ys, strict=True)],
        ))  # fmt: skip
    fig = go.Figure(traces)
    layout = base_layout(title or cost_title(after, before, changed), height=360)
    layout.update(
        barmode="group" if grouped else "stack",
        yaxis=_axis(u, scale),
        xaxis={"automargin": True},
        annotations=[{"text": memory_text(after), "xref": "paper", "yref": "paper",
                      "x": 1.0, "y": 1.0, "showarrow": False, "xanchor": "right",
                      "yanchor": "bottom", "font": {"size": 11}}],
    )  # fmt: skip
    fig.update_layout(layout)
    return fig


@dataclass(frozen=True)
class Change:
    """One op whose strategy differs from the baseline, with its own cost in both plans."""

    node: str
    before: str
    after: str
    cost_before: float
    cost_after: float

    @property
    def delta(self) -> float:
        return self.cost_after - self.cost_before


def change_rows(baseline, plan, nodes: tuple[str, ...]) -> list[Change]:
    """``nodes`` (ops whose strategy changed) with their own cost in the baseline and in
    ``plan`` (``ShardingPlan.node_cost``), the largest absolute change first. Costs in two
    units (a preset switch) are not compared: the list keeps the graph order then."""
    same = baseline.cost.unit == plan.cost.unit
    out = []
    for n in nodes:
        b, a = baseline.node_cost(n).total, plan.node_cost(n).total
        out.append(Change(n, baseline.assignment[n].name, plan.assignment[n].name, b, a))
    if same:
        out.sort(key=lambda c: -abs(c.delta))
    return out


def changes_html(rows: list[Change], unit_before: str, unit: str, limit: int = 10) -> str:
    """The ranked changes as a small table (op, strategy before -> after, cost, delta)."""
    comparable = unit_before == unit
    if not rows:
        return "<i>no op changed strategy against the baseline</i>"
    head = f"<b>{len(rows)} ops changed strategy vs the baseline</b>" + (
        ", largest cost change first" if comparable else " (costs in two units)"
    )
    cells = []
    for c in rows[:limit]:
        delta = f"{'+' if c.delta >= 0 else '−'}{fmt_cost(abs(c.delta), unit)}"
        cells.append(
            f"<tr><td style='text-align:left'>%{_esc(c.node)}</td><td>{_esc(c.before)} → "
            f"{_esc(c.after)}</td><td>{fmt_cost(c.cost_before, unit_before)}</td>"
            f"<td>{fmt_cost(c.cost_after, unit)}</td><td>{delta if comparable else ''}</td></tr>"
        )
    more = f"<br>… and {len(rows) - limit} more" if len(rows) > limit else ""
    return (
        f"{head}<table style='font-size:12px;border-spacing:8px 0'><tr><th>op</th>"
        "<th>strategy (baseline → current)</th><th>cost before</th><th>after</th>"
        f"<th>Δ</th></tr>{''.join(cells)}</table>{more}"
    )


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
