"""``graph_figure``: the computation graph as a layered DAG, coloured by one attribute."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal, get_args

import numpy as np
import plotly.graph_objects as go

from explorer.ir import Graph, format_bytes

from ..colors import (
    CHANGED,
    COST_COLORSCALE,
    NEUTRAL,
    SELECTED,
    color_for,
    group_color,
    stage_color,
)
from .layout import LARGE_GRAPH, GraphLayout, graph_layout

__all__ = [
    "graph_figure", "ColorBy", "COLOR_BY", "unit_colors", "unit_hover", "node_hover",
    "TRACE_EDGES", "TRACE_NODES", "TRACE_CHANGED", "TRACE_SELECTED",
]  # fmt: skip

ColorBy = Literal["group", "strategy", "cost", "communication", "stage"]
COLOR_BY: tuple[str, ...] = get_args(ColorBy)
# Trace order is fixed: views update traces by these indices inside batch_update().
TRACE_EDGES, TRACE_NODES, TRACE_CHANGED, TRACE_SELECTED = range(4)
BOX_COLOR = "#8FA8C8"


def _fmt_flops(f: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if f >= scale:
            return f"{f / scale:.3g} {unit}"
    return f"{f:.0f} FLOP"


def _letters(graph: Graph, name: str) -> tuple[list[str], str]:
    sig = graph.signature(name)
    ins, out = sig.split("->")
    return (ins.split(",") if ins else []), out


def node_hover(graph: Graph, name: str, plan=None) -> str:
    """Op, shapes, layouts, FLOPs and (with a plan) the cost breakdown of one node."""
    n = graph.node(name)
    lines = [f"<b>%{name}</b> = {n.op}", f"scope {n.scope or '-'}", f"out {n.type}"]
    ins = graph.input_types(name)
    if ins:
        lines.append("in " + ", ".join(str(t) for t in ins))
    lines.append(f"{graph.signature(name)}  {_fmt_flops(graph.node_flops(name))}")
    if plan is not None and name in plan.assignment:
        s = plan.assignment[name]
        in_letters, out_letters = _letters(graph, name)
        lines.append(f"strategy <b>{s.name}</b>")
        for k, (lay, t) in enumerate(zip(s.in_layouts, ins, strict=False)):
            lt = in_letters[k] if k < len(in_letters) and len(in_letters[k]) == t.rank else None
            lines.append(f"  in{k} {lay.format(t, lt)}")
        lo = out_letters if len(out_letters) == n.type.rank else None
        lines.append(f"  out {s.out_layout.format(n.type, lo)}")
        c = plan.node_cost(name)
        u = "s" if c.unit == "seconds" else "B"
        comm = ", ".join(f"{k} {v:.3g}" for k, v in c.communication if v) or "none"
        lines.append(f"cost {c.total:.3g} {u}: compute {c.compute:.3g}, comm {comm}")
        lines.append(f"memory {format_bytes(c.memory_bytes)}")
    return "<br>".join(lines)


def unit_hover(graph: Graph, lay: GraphLayout, unit: str, plan=None) -> str:
    members = lay.members[unit]
    if len(members) == 1 and not unit.startswith("scope:"):
        return node_hover(graph, members[0], plan)
    flops = graph.flops(members)
    lines = [f"<b>{unit[len('scope:'):]}</b> (collapsed, click to expand)",
             f"{len(members)} nodes, {_fmt_flops(flops)}"]  # fmt: skip
    if plan is not None:
        ops = [m for m in members if not graph.node(m).is_source]
        top = Counter(plan.assignment[m].name for m in ops).most_common(3)
        lines.append("strategies " + ", ".join(f"{k} x{v}" for k, v in top))
        total = sum(plan.node_cost(m).total for m in members)
        lines.append(f"cost {total:.3g}")
    return "<br>".join(lines)


def _node_value(graph: Graph, name: str, plan, color_by: str) -> float:
    c = plan.node_cost(name)
    if color_by == "cost":
        return c.total
    return c.communication_total + c.gradient


def unit_colors(
    graph: Graph, lay: GraphLayout, color_by: ColorBy = "group", plan=None,
    stages: Mapping[str, int] | None = None,
) -> tuple[list[str] | np.ndarray, bool]:  # fmt: skip
    """Per unit: a colour string, or (for ``cost``/``communication``) a number to map
    through ``COST_COLORSCALE``; the flag says which."""
    if color_by not in COLOR_BY:
        raise ValueError(f"color_by={color_by!r}; expected one of {', '.join(COLOR_BY)}")
    if color_by == "group":
        return [
            BOX_COLOR if b else group_color(graph.group(m[0]).value)
            for b, m in zip(lay.is_box, (lay.members[u] for u in lay.units), strict=True)
        ], False
    if color_by == "stage":
        if stages is None:
            raise ValueError(
                "color_by='stage' needs stages={node: pipeline stage} (from a TrainingPlan)"
            )
        out = []
        for u in lay.units:
            st = Counter(stages.get(m, -1) for m in lay.members[u]).most_common(1)[0][0]
            out.append(NEUTRAL if st < 0 else stage_color(st))
        return out, False
    if plan is None:
        return [NEUTRAL] * len(lay.units), False
    if color_by == "strategy":
        out = []
        for u in lay.units:
            names = [plan.assignment[m].name for m in lay.members[u]
                     if not graph.node(m).is_source] or [plan.assignment[lay.members[u][0]].name]  # fmt: skip
            out.append(color_for(Counter(names).most_common(1)[0][0]))
        return out, False
    vals = np.array(
        [sum(_node_value(graph, m, plan, color_by) for m in lay.members[u]) for u in lay.units]
    )
    return np.log10(np.maximum(vals, 1e-12)), True


def _edge_xy(lay: GraphLayout) -> tuple[np.ndarray, np.ndarray]:
    """Segments with NaN separators (one trace for every edge: fast for 3,000 edges)."""
    if not lay.edges:
        return np.array([]), np.array([])
    e = np.array(lay.edges)
    xs = np.full((len(e), 3), np.nan)
    ys = np.full((len(e), 3), np.nan)
    xs[:, 0], xs[:, 1] = lay.x[e[:, 0]], lay.x[e[:, 1]]
    ys[:, 0], ys[:, 1] = lay.y[e[:, 0]], lay.y[e[:, 1]]
    return xs.ravel(), ys.ravel()


def _marked(lay: GraphLayout, names: Iterable[str]) -> list[int]:
    names = set(names)
    if not names:
        return []
    return [i for i, u in enumerate(lay.units) if names.intersection(lay.members[u])]


def graph_figure(
    graph: Graph, plan=None, *, collapsed: Iterable[str] = (), color_by: ColorBy = "group",
    highlight: Iterable[str] = (), selected: str | None = None, webgl: bool | None = None,
    stages: Mapping[str, int] | None = None, layout: GraphLayout | None = None,
    hover: bool = True,
) -> go.Figure:  # fmt: skip
    """The layered DAG of ``graph`` (left to right by topological depth).

    Args:
        plan: a ShardingPlan: strategies, layouts and costs in the hover; needed by the
            ``strategy``/``cost``/``communication`` colourings.
        collapsed: layer scopes drawn as one box each (``layer_scopes(graph)``: all).
        color_by: ``group`` (op group), ``strategy``, ``cost``, ``communication`` (log10 of
            the node's cost in the plan's unit) or ``stage`` (needs ``stages``).
        highlight: node names ringed in red (ops whose strategy changed).
        selected: the selected node, ringed in black.
        webgl: Scattergl (default: for graphs of ``LARGE_GRAPH`` nodes or more).

    Traces, in this order: edges, nodes (``customdata`` = unit id), changed, selected.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> fig = graph_figure(g)
    >>> [t.name for t in fig.data], len(fig.data[1].x) == len(g.nodes)
    (['edges', 'nodes', 'changed', 'selected'], True)
    """
    lay = layout or graph_layout(graph, collapsed)
    webgl = len(graph) >= LARGE_GRAPH if webgl is None else webgl
    Scatter = go.Scattergl if webgl else go.Scatter
    ex_, ey = _edge_xy(lay)
    colors, numeric = unit_colors(graph, lay, color_by, plan, stages)
    # Boxes as wide as a column allows (48 layers side by side must not overlap), and a
    # label on every k-th box only, so that about a dozen labels show.
    ncols = len(np.unique(lay.x)) if len(lay.x) else 1
    box_size = int(np.clip(700 / ncols, 7, 22))
    nboxes = int(lay.is_box.sum())
    every = max(1, -(-nboxes // 12))
    marker: dict = {
        "size": np.where(lay.is_box, box_size, 9).tolist(),
        "symbol": ["square" if b else "circle" for b in lay.is_box],
        "line": {"width": 0.5, "color": "#444"},
    }
    if numeric:
        marker.update(color=colors, colorscale=COST_COLORSCALE, showscale=True,
                      colorbar={"title": f"log10 {color_by}", "thickness": 12})  # fmt: skip
    else:
        marker["color"] = colors
    labels, k = [], 0
    for u, b in zip(lay.units, lay.is_box, strict=True):
        labels.append(u[len("scope:") :] if b and k % every == 0 else "")
        k += bool(b)
    hovertext = [unit_hover(graph, lay, u, plan) for u in lay.units] if hover else None
    hi = _marked(lay, highlight)
    sel = _marked(lay, [selected] if selected else [])
    ring = {"symbol": "circle-open", "line": {"width": 2}}
    traces = [
        Scatter(x=ex_, y=ey, mode="lines", name="edges", hoverinfo="skip",
                line={"width": 0.7, "color": "#9A9A9A"}),
        Scatter(x=lay.x, y=lay.y, mode="markers+text" if lay.is_box.any() else "markers",
                name="nodes", marker=marker, customdata=list(lay.units), text=labels,
                textposition="top center", textfont={"size": 10}, hovertext=hovertext,
                hoverinfo="text" if hover else "skip"),
        Scatter(x=lay.x[hi], y=lay.y[hi], mode="markers", name="changed", hoverinfo="skip",
                marker={**ring, "size": 18, "color": CHANGED}),
        Scatter(x=lay.x[sel], y=lay.y[sel], mode="markers", name="selected", hoverinfo="skip",
                marker={**ring, "size": 26, "color": SELECTED, "line": {"width": 3}}),
    ]  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(
        title=f"{graph.name}: {len(graph)} nodes"
        + (f", {int(lay.is_box.sum())} collapsed layers" if lay.is_box.any() else "")
        + (f" — coloured by {color_by}" if color_by != "group" else ""),
        showlegend=False, hovermode="closest", dragmode="pan", height=420,
        margin={"l": 10, "r": 10, "t": 40, "b": 10}, plot_bgcolor="white",
        xaxis={"visible": False}, yaxis={"visible": False},
        uirevision=graph.name,  # keep zoom and pan across re-colourings
    )  # fmt: skip
    return fig
