"""``graph_figure``: the graph as nested groups (model > layer > block > op), coloured by one
attribute, with a legend for every colouring, arrows, and labels that show when they fit."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal, get_args

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from explorer.ir import CHANGE_THRESHOLD, ROOT, Graph, format_bytes, hierarchy

from ..colors import (
    CHANGED,
    COST_COLORSCALE,
    GROUP_COLORS,
    NEUTRAL,
    SELECTED,
    group_color,
    stage_color,
)
from ..format import fmt_number, fmt_percent, fmt_seconds, human_label
from .errors import ViewError
from .layout import BOX_H, BOX_PREFIX, GraphLayout, graph_layout
from .style import base_layout

__all__ = [
    "graph_figure", "graph_figure_spec", "graph_height", "label_px", "ColorBy", "COLOR_BY", "unit_colors", "unit_hover", "node_hover",
    "unit_labels", "legend_text", "strategy_colors", "STRATEGY_PALETTE",
    "TRACE_EDGES", "TRACE_NODES", "TRACE_CHANGED", "TRACE_SELECTED", "TRACE_GROUPS",
    "TRACE_FRAMES", "TRACE_BOXES", "changed_marks",
    "OPEN_PREFIX", "PLOT_PX",
]  # fmt: skip

ColorBy = Literal["group", "strategy", "cost", "communication", "stage"]
COLOR_BY: tuple[str, ...] = get_args(ColorBy)
# Trace order is fixed: views update traces by these indices inside batch_update().
# Frames and boxes are bar traces (rectangles in data units, one colour each, clickable).
TRACE_EDGES, TRACE_NODES, TRACE_CHANGED, TRACE_SELECTED, TRACE_GROUPS = range(5)
TRACE_FRAMES, TRACE_BOXES = 5, 6
BOX_COLOR = "#8FA8C8"  # a closed group under the op-group colouring
FRAME_FILL, FRAME_LINE = "rgba(120,140,175,0.07)", "#9AA7BF"
OPEN_PREFIX = "open:"  # the customdata of an open group's label (a click closes it)
PLOT_PX = 1000  # the width the figure is planned for (a laptop's notebook column)
CHAR_PX = 7.0  # one character of a 10 px label, with room to spare between neighbours
BOX_CHAR_PX = 5.5  # inside a box the name only has to fit its own box
BOX_LINE_PX = 11.0  # one line of a box label (10 px text)
# Ten hues no two of which are alike (Tableau 10 without its grey): strategies are told apart
# at a glance. A strategy keeps its colour from run to run (by hash, then the next free one).
STRATEGY_PALETTE: tuple[str, ...] = (
    "#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#B07AA1", "#76B7B2", "#EDC948", "#9C755F",
    "#FF9DA7", "#17BECF",
)  # fmt: skip
OTHER = "#C7C7C7"


def _fmt_flops(f: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if f >= scale:
            return f"{f / scale:.3g} {unit}"
    return f"{f:.0f} FLOP"


def _fmt_cost(value: float, unit: str) -> str:
    return fmt_seconds(value) if unit == "seconds" else format_bytes(value) + " (weighted)"


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
        comm = ", ".join(f"{k} {_fmt_cost(v, c.unit)}" for k, v in c.communication if v)
        lines.append(f"cost {_fmt_cost(c.total, c.unit)}: compute {_fmt_cost(c.compute, c.unit)}"
                     f", communication {comm or 'none'}")  # fmt: skip
        lines.append(f"memory {format_bytes(c.memory_bytes)}")
    return "<br>".join(lines)


def _group_hover(graph: Graph, path: str, plan, closed: bool) -> str:
    g = hierarchy(graph).group(path)
    lines = [f"<b>{g.label}</b> ({g.kind}) — click to {'open' if closed else 'close'}",
             f"{g.num_nodes} nodes, {g.num_ops} ops, {_fmt_flops(g.flops)}, "
             f"{fmt_number(g.params)} parameters"]  # fmt: skip
    if plan is not None:
        members = hierarchy(graph).members(path)
        ops = [m for m in members if not graph.node(m).is_source]
        top = Counter(plan.assignment[m].name for m in ops).most_common(3)
        lines.append("strategies " + ", ".join(f"{k} x{v}" for k, v in top))
        unit = plan.cost.unit
        total = sum(plan.node_cost(m).total for m in members)
        lines.append(f"cost {_fmt_cost(total, unit)}")
    return "<br>".join(lines)


def unit_hover(graph: Graph, lay: GraphLayout, unit: str, plan=None) -> str:
    if unit.startswith(BOX_PREFIX):
        return _group_hover(graph, unit[len(BOX_PREFIX) :], plan, closed=True)
    return node_hover(graph, unit, plan)


def strategy_colors(counts: Mapping[str, int]) -> dict[str, str]:
    """A distinct colour per strategy name: the most used first take the colour their name
    hashes to (or the next free one); beyond ten strategies the rarest share grey."""
    out: dict[str, str] = {}
    taken: set[int] = set()
    for name in sorted(counts, key=lambda k: (-counts[k], k)):
        if len(taken) == len(STRATEGY_PALETTE):
            out[name] = OTHER
            continue
        k = int.from_bytes(hashlib.md5(name.encode()).digest()[:4], "little")
        k %= len(STRATEGY_PALETTE)
        while k in taken:
            k = (k + 1) % len(STRATEGY_PALETTE)
        taken.add(k)
        out[name] = STRATEGY_PALETTE[k]
    return out


def _unit_strategy(graph: Graph, lay: GraphLayout, plan) -> list[str]:
    out = []
    for u in lay.units:
        ms = lay.members[u]
        names = [plan.assignment[m].name for m in ms if not graph.node(m).is_source]
        out.append(Counter(names or [plan.assignment[ms[0]].name]).most_common(1)[0][0])
    return out


def _node_value(name: str, plan, color_by: str) -> float:
    c = plan.node_cost(name)
    if color_by == "cost":
        return c.total
    return c.communication_total + c.gradient


def unit_colors(
    graph: Graph, lay: GraphLayout, color_by: ColorBy = "group", plan=None,
    stages: Mapping[str, int] | None = None,
) -> tuple[list[str] | np.ndarray, bool]:  # fmt: skip
    """Per unit: a colour string, or (for ``cost``/``communication``) log10 of the value to
    map through ``COST_COLORSCALE``; the flag says which."""
    if color_by not in COLOR_BY:
        raise ViewError(f"color_by={color_by!r}; expected one of {', '.join(COLOR_BY)}")
    if color_by == "group":
        return [
            BOX_COLOR if b else group_color(graph.group(lay.members[u][0]).value)
            for u, b in zip(lay.units, lay.is_box, strict=True)
        ], False
    if color_by == "stage":
        if stages is None:
            raise ViewError(
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
        names = _unit_strategy(graph, lay, plan)
        palette = strategy_colors(Counter(names))
        return [palette[n] for n in names], False
    vals = np.array(
        [sum(_node_value(m, plan, color_by) for m in lay.members[u]) for u in lay.units]
    )
    return np.log10(np.maximum(vals, 1e-12)), True


def _swatch(color: str, text: str, symbol: str = "■") -> str:
    return f"<span style='color:{color}'>{symbol}</span> {text}"


def legend_text(
    graph: Graph, lay: GraphLayout, color_by: ColorBy, plan=None,
    stages: Mapping[str, int] | None = None, change_threshold: float = CHANGE_THRESHOLD,
) -> str:  # fmt: skip
    """The legend of the colouring (one line of swatches) and of the rings."""
    parts: list[str] = []
    if color_by == "group":
        shown = Counter(graph.group(lay.members[u][0]).value for u, b in
                        zip(lay.units, lay.is_box, strict=True) if not b)  # fmt: skip
        parts = [_swatch(c, human_label(g)) for g, c in GROUP_COLORS.items() if g in shown]
        if lay.is_box.any():
            parts.append(_swatch(BOX_COLOR, "closed group (click to open)"))
        title = "op group"
    elif color_by == "stage":
        st = sorted({s for s in (stages or {}).values()})
        parts = [_swatch(stage_color(s), f"stage {s}") for s in st[:16]]
        title = "pipeline stage"
    elif plan is None:
        parts, title = [_swatch(NEUTRAL, "no plan yet")], human_label(color_by)
    elif color_by == "strategy":
        counts = Counter(_unit_strategy(graph, lay, plan))
        palette = strategy_colors(counts)
        named = [n for n in sorted(counts, key=lambda k: (-counts[k], k)) if palette[n] != OTHER]
        parts = [_swatch(palette[n], f"{n} ({counts[n]})") for n in named]
        if len(named) < len(counts):
            parts.append(_swatch(OTHER, f"{len(counts) - len(named)} other strategies"))
        title = "strategy (boxes: most ops)"
    else:
        unit = "s" if plan.cost.unit == "seconds" else "B weighted"
        title = f"{human_label(color_by)}: colour bar = log10 of the cost in {unit}"
    rings = (
        _swatch(CHANGED, f"strategy changed and cost moved ≥ {fmt_percent(change_threshold)}",
                "○") + " · " + _swatch(SELECTED, "selected", "○")
    )  # fmt: skip
    return "<br>".join([*_wrap(f"<b>{title}</b>:", parts), rings])


LEGEND_LINE_CHARS = 120  # visible characters per legend line (~12 px font in ~900 px)
_TAG = re.compile(r"<[^>]+>")


def _wrap(head: str, parts: list[str], width: int = LEGEND_LINE_CHARS) -> list[str]:
    """The legend's swatches in lines of at most ``width`` visible characters (a plotly
    annotation does not wrap: a long line ran past the plot's right edge)."""
    lines, line = [], head
    for part in parts:
        if len(_TAG.sub("", line)) + 2 + len(_TAG.sub("", part)) > width and line != head:
            lines.append(line)
            line = part
        else:
            line = f"{line}  {part}"
    return [*lines, line]


def _short(path_or_node: str, parent: str) -> str:
    return path_or_node[len(parent) + 1 :] if parent and path_or_node.startswith(parent + ".") \
        else path_or_node  # fmt: skip


def _box_labels(h, path: str, two_lines: bool) -> list[str]:
    """A closed group's texts, longest first: name and node count (on one line, or on two
    when the box is tall enough), name, last part."""
    name = path.rsplit(".", 2)[-2] + "." + path.rsplit(".", 1)[-1] if path.count(".") > 1 \
        else path  # fmt: skip
    last = path.rsplit(".", 1)[-1]
    out = [name]
    if path in h:
        n = h.group(path).num_nodes
        out = [f"{name} · {n}"] + ([f"{name}<br>{n} nodes"] if two_lines else []) + [name]
    return out + ([last] if last != name else [])


def _text_px(text: str) -> float:
    """Width of a box label: its longest line."""
    return max(len(line) for line in text.split("<br>")) * BOX_CHAR_PX


def unit_labels(graph: Graph, lay: GraphLayout, span: float | None = None,
                px: float = PLOT_PX) -> list[str]:  # fmt: skip
    """The text on each unit for an x-axis ``span`` (data units) over ``px`` pixels: a
    closed group's name when it fits in its box (else on every k-th box, so neighbours do
    not overlap), an op's short name only once zoomed in far enough for it to fit."""
    x0, x1, _, _ = lay.extent
    span = (x1 - x0) if span is None else span
    scale = px / max(span, 1e-9)  # pixels per data unit
    h = hierarchy(graph)
    out: list[str] = []
    boxes = [i for i, b in enumerate(lay.is_box) if b]
    # a closed group says its size where it fits ("layers.1 · 41": its nodes at every level
    # below), else its name, else its last part ("1"); only when not even that fits in a
    # box is every k-th box labelled (126 layers seen whole), and the hover says the rest
    box_text: dict[int, str] = {}
    every = 1
    for i in boxes:
        room = scale * lay.w[i]
        two_lines = scale * BOX_H >= 2 * BOX_LINE_PX
        options = _box_labels(h, lay.units[i][len(BOX_PREFIX) :], two_lines)
        fit = next((t for t in options if _text_px(t) <= room), None)
        box_text[i] = fit if fit is not None else options[-1]
        if fit is None:
            need = _text_px(options[-1]) / max(room, 1e-9)
            every = max(every, int(np.ceil(need)))
    k = 0
    for i, (u, kind, w) in enumerate(zip(lay.units, lay.kind, lay.w, strict=True)):
        if kind == "box":
            out.append(box_text[i] if k % every == 0 else "")
            k += 1
            continue
        label = _short(u, h.node_group.get(u, ROOT))
        room = scale * (w + 1.0) if kind == "op" else scale * w
        out.append(label if room >= CHAR_PX * len(label) else "")
    return _without_collisions(lay, out, scale)


def _without_collisions(lay: GraphLayout, labels: list[str], scale: float) -> list[str]:
    """Hide the labels under units (ops, inputs) that would touch a label already placed
    on the same line, left to right ("tokens" beside "tokens", "scores scale mask probs"
    run together at a narrow width); a hidden label is in the unit's hover and shows when
    zoomed in."""
    out = list(labels)
    placed: dict[float, float] = {}  # line (y) -> right edge (px) of its last label
    order = sorted((i for i, t in enumerate(labels) if t and lay.kind[i] != "box"),
                   key=lambda i: (round(float(lay.y[i]), 3), float(lay.x[i])))  # fmt: skip
    for i in order:
        line = round(float(lay.y[i]), 3)
        half = len(labels[i]) * CHAR_PX / 2
        centre = float(lay.x[i]) * scale
        if centre - half < placed.get(line, -np.inf):
            out[i] = ""
            continue
        placed[line] = centre + half
    return out


def _bars(lay: GraphLayout, colors, hovertext) -> tuple[dict, dict]:
    """The open groups' frames and the closed groups' boxes as rectangles in data units
    (bars with a base and a width: one trace each, whatever their number)."""
    f = lay.frames
    frames = dict(  # noqa: C408  (a trace spec reads best as keywords)
        type="bar",
        x=[(a.x0 + a.x1) / 2 for a in f], width=[a.x1 - a.x0 for a in f],
        base=[a.y0 for a in f], y=[a.y1 - a.y0 for a in f], name="frames", hoverinfo="skip",
        marker={"color": FRAME_FILL, "line": {"color": FRAME_LINE, "width": 1}},
        showlegend=False,
    )  # fmt: skip
    b = np.flatnonzero(lay.is_box)
    boxes = dict(  # noqa: C408
        type="bar",
        x=lay.x[b], width=lay.w[b], base=lay.y[b] - lay.h[b] / 2, y=lay.h[b], name="boxes",
        customdata=[lay.units[i] for i in b], marker={
            "color": [colors[i] for i in b], "opacity": 0.6,
            "line": {"color": "#5B6B85", "width": 1}},
        hovertext=[hovertext[i] for i in b] if hovertext else None,
        hoverinfo="text" if hovertext else "skip", showlegend=False,
    )  # fmt: skip
    return frames, boxes


def _group_points(graph: Graph, lay: GraphLayout, plan, hover: bool):
    """The label (and close handle) of every open group, plus the model's own label."""
    x0, _, _, y1 = lay.extent
    h = hierarchy(graph)
    xs, ys, text, ids, tips = [x0], [y1 + 0.6], [], [OPEN_PREFIX + ROOT], []
    n_layers = len(h.layers())
    text.append(f"<b>{graph.name}</b>" + (f" · {n_layers} layers" if n_layers else ""))
    tips.append(f"<b>{graph.name}</b>: {len(graph)} nodes — click to close every group")
    for f in lay.frames:
        g = h.group(f.path)
        xs.append(f.x0 + 0.15)
        ys.append(f.y1 - 0.45)
        text.append("▾ " + _short(f.path, g.parent or ROOT))
        ids.append(OPEN_PREFIX + f.path)
        tips.append(_group_hover(graph, f.path, plan, closed=False) if hover else "")
    return xs, ys, text, ids, tips


def changed_marks(lay: GraphLayout, idx: list[int]) -> dict:
    """The "changed" trace's points for units ``idx``: a ring around an op (a small one
    around a weight), a red badge on a closed group's top-right corner (its name stays
    readable)."""
    idx = list(idx)
    box = lay.is_box[idx] if idx else np.zeros(0, dtype=bool)
    sat = lay.kind[idx] == "sat" if idx else np.zeros(0, dtype=bool)
    x = np.where(box, lay.x[idx] + lay.w[idx] / 2, lay.x[idx]) if idx else np.zeros(0)
    y = np.where(box, lay.y[idx] + lay.h[idx] / 2, lay.y[idx]) if idx else np.zeros(0)
    return {
        "x": x, "y": y,
        "marker": {"symbol": np.where(box, "circle", "circle-open").astype(object),
                   "size": np.where(box, 10, np.where(sat, 12, 19)), "color": CHANGED,
                   "line": {"width": 2.5, "color": CHANGED}},
    }  # fmt: skip


def _marked(lay: GraphLayout, names: Iterable[str]) -> list[int]:
    names = set(names)
    if not names:
        return []
    return sorted({lay.index(u) for n in names if (u := lay.unit_of(n)) is not None})


def _colors_rgb(colors, numeric: bool) -> list[str]:
    if not numeric:
        return list(colors)
    v = np.asarray(colors, dtype=float)
    lo, hi = (float(v.min()), float(v.max())) if len(v) else (0.0, 1.0)
    t = (v - lo) / (hi - lo) if hi > lo else np.zeros_like(v)
    return sample_colorscale(COST_COLORSCALE, list(t)) if len(v) else []


def graph_figure_spec(
    graph: Graph, plan=None, *, collapsed: Iterable[str] = (), color_by: ColorBy = "group",
    highlight: Iterable[str] = (), selected: str | None = None, webgl: bool | None = None,
    stages: Mapping[str, int] | None = None, layout: GraphLayout | None = None,
    hover: bool = True, expanded: Iterable[str] | None = None,
    change_threshold: float = CHANGE_THRESHOLD, span: float | None = None,
    hovertext: list[str] | None = None, px: float = PLOT_PX,
) -> dict:  # fmt: skip
    """The graph as nested groups, left to right (see ``layout.graph_layout``).

    Args:
        plan: a ShardingPlan: strategies, layouts and costs in the hover; needed by the
            ``strategy``/``cost``/``communication`` colourings.
        collapsed / expanded: which groups are drawn closed (see ``graph_layout``).
        color_by: ``group`` (op group), ``strategy``, ``cost``, ``communication`` (log10 of
            the node's cost in the plan's unit) or ``stage`` (needs ``stages``).
        highlight: node names ringed in red (ops whose cost changed materially).
        selected: the selected node, ringed in black.
        webgl: Scattergl for the nodes (default: SVG, which draws text labels sharply).
        change_threshold: what the legend says a red ring means.
        span: the x-axis span the labels are chosen for (default: everything).
        hovertext: the units' hover texts when the caller has them (a view caches them).
        px: the plot's width in pixels the labels are placed for (a view passes the width
            the page measured).

    Traces, in this order: edges (with arrow heads), nodes (``customdata`` = unit id),
    changed, selected, groups (the open groups' labels; ``customdata`` = ``open:<path>``),
    frames (the open groups), boxes (the closed groups; ``customdata`` = unit id).
    Plain dicts: a view applies them to its FigureWidget without building a second figure.

    >>> import explorer as ex
    >>> spec = graph_figure_spec(ex.models.build(ex.models.load("mlp-small"), batch=8))
    >>> [t["type"] for t in spec["data"]][:2], spec["layout"]["yaxis"]["scaleanchor"]
    (['scatter', 'scatter'], 'x')
    """
    lay = layout or graph_layout(graph, collapsed, expanded=expanded)
    kind_gl = "scattergl" if webgl else "scatter"
    colors, numeric = unit_colors(graph, lay, color_by, plan, stages)
    rgb = _colors_rgb(colors, numeric)
    kind = lay.kind
    size = np.where(kind == "box", 10, np.where(kind == "sat", 7, 13))
    marker: dict = {
        "size": size,
        "symbol": np.where(kind == "box", "square", "circle").astype(object),
        "line": {"width": 0.6, "color": "#444"},
        "opacity": np.where(kind == "box", 0.0, 1.0),
    }
    if numeric:
        unit = "s" if plan.cost.unit == "seconds" else "B"
        marker.update(color=colors, colorscale=COST_COLORSCALE, showscale=True,
                      colorbar={"title": {"text": f"log10 {color_by} ({unit})"},
                                "thickness": 12, "len": 0.8})  # fmt: skip
    else:
        marker["color"] = colors
    positions = np.where(kind == "box", "middle center", "bottom center").astype(object)
    if hovertext is None and hover:
        hovertext = [unit_hover(graph, lay, u, plan) for u in lay.units]
    hi = _marked(lay, highlight)
    sel = _marked(lay, [selected] if selected else [])
    gx, gy, gtext, gids, gtips = _group_points(graph, lay, plan, hover)
    tip_size = np.where(lay.edge_tip, 8, 0)
    traces = [
        dict(type=kind_gl, x=lay.edge_x, y=lay.edge_y, mode="lines+markers", name="edges",
                hoverinfo="skip", line={"width": 1, "color": "#8C8C8C"},
                marker={"symbol": "triangle-right", "size": tip_size, "color": "#6E6E6E"}),
        dict(type=kind_gl, x=lay.x, y=lay.y, mode="markers+text", name="nodes", marker=marker,
                customdata=np.array(lay.units, dtype=object), text=None, textposition=positions,
                textfont={"size": 10}, hovertext=hovertext,
                hoverinfo="text" if hover else "skip"),
        dict(type=kind_gl, **changed_marks(lay, hi), mode="markers", name="changed",
             hoverinfo="skip"),
        dict(type=kind_gl, x=lay.x[sel], y=lay.y[sel], mode="markers", name="selected", hoverinfo="skip",
                marker={"symbol": "circle-open", "size": 26, "color": SELECTED,
                        "line": {"width": 3}}),
        dict(type="scatter", x=gx, y=gy, mode="markers+text", name="groups", text=gtext,
                   textposition="middle right", textfont={"size": 10, "color": "#3B4A66"},
                   customdata=gids, hovertext=gtips, hoverinfo="text",
                   marker={"symbol": "square", "size": 7, "color": FRAME_LINE}),
    ]  # fmt: skip
    data = [*traces, *_bars(lay, rgb, hovertext)]
    ex0, ex1, ey0, ey1 = lay.extent
    n_boxes = int(lay.is_box.sum())
    title = (f"{graph.name}: {len(graph):,} nodes in {len(hierarchy(graph).groups) - 1} groups"
             + (f", {n_boxes} closed" if n_boxes else "")
             + (f" — coloured by {human_label(color_by).lower()}" if color_by != "group" else ""))  # fmt: skip
    base = base_layout(title, legend=False)
    legend = legend_text(graph, lay, color_by, plan, stages, change_threshold)
    legend_px = 17 * (legend.count("<br>") + 1)  # 11 px text, one line per <br>
    base["margin"] = {**base["margin"], "l": 10, "r": 10, "b": 10,
                      "t": base["margin"]["t"] + legend_px}  # fmt: skip
    m = base["margin"]
    height = base["height"] = graph_height(lay, px, m["t"] + m["b"])
    labels = unit_labels(graph, lay, span, label_px(lay, px, height, m["t"] + m["b"], span))
    data[TRACE_NODES]["text"] = np.array(labels, dtype=object)
    layout = dict(  # noqa: C408
        **base, hovermode="closest", dragmode="pan", plot_bgcolor="white",
        xaxis={"visible": False, "range": [ex0 - 0.5, ex1 + 0.5]},
        # a plot taller than the graph at 1:1 (the 200 px floor) shrinks the y axis and
        # keeps it under the legend, rather than padding the range above and below
        yaxis={"visible": False, "scaleanchor": "x", "scaleratio": 1,
               "range": [ey0 - 0.5, ey1 + 1.0], "constrain": "domain",
               "constraintoward": "top"},
        barmode="overlay",
        annotations=[{"text": legend,
                      "xref": "paper", "yref": "paper", "x": 0, "y": 1, "yshift": 8,
                      "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                      "align": "left", "font": {"size": 11}}],
        uirevision=graph.name,  # keep zoom and pan across re-colourings
    )  # fmt: skip
    return {"data": data, "layout": layout}


def label_px(lay: GraphLayout, px: float, height: float, margin_tb: float,
             span: float | None = None) -> float:  # fmt: skip
    """The pixels the labels' x ``span`` is drawn over in a ``px`` x ``height`` figure. Seen
    whole, the 1:1 aspect lets the height bind: a tall layout in a short plot is drawn
    narrower than the plot (GPT-2's four layers in the dashboard's tab: 680 of 972 px), and
    labels placed for the full width ran together. Zoomed in (``span`` under the layout's
    width), the view sets the y range to the aspect, so the width binds."""
    ex0, ex1, ey0, ey1 = lay.extent
    w = ex1 - ex0
    plot_w = max(px - 20.0, 1.0)  # the view's 10 px side margins
    if span is not None and span < w:
        return plot_w
    plot_h = max(height - margin_tb, 1.0)
    scale = min(plot_w / (w + 1.0), plot_h / (ey1 - ey0 + 1.5))  # the axes' padded ranges
    return scale * w


def graph_height(lay: GraphLayout, px: float = PLOT_PX, margin_tb: float = 150.0) -> int:
    """The figure height (px) that holds ``lay`` drawn ``px`` wide at its 1:1 aspect: the
    axes' padded ranges at the scale the width allows (as `label_px` computes it), plus the
    top and bottom margins ``margin_tb`` (title and legend), kept within 200-860 px. The
    plot then ends where the graph ends: no empty band under the legend or the graph."""
    ex0, ex1, ey0, ey1 = lay.extent
    w, h = ex1 - ex0 + 1.0, ey1 - ey0 + 1.5  # the axes' ranges (see graph_figure_spec)
    plot_w = max(px - 20.0, 1.0)  # the 10 px side margins
    scale = min(plot_w / w, 48.0)
    return int(np.clip(np.ceil(h * scale + margin_tb), 200, 860))


def graph_figure(graph: Graph, plan=None, **kwargs) -> go.Figure:
    """``graph_figure_spec`` as a ``go.Figure`` (the arguments are the same).

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> fig = graph_figure(g)
    >>> [t.name for t in fig.data], len(fig.data[1].x) == len(g.nodes)
    (['edges', 'nodes', 'changed', 'selected', 'groups', 'frames', 'boxes'], True)
    """
    return go.Figure(graph_figure_spec(graph, plan, **kwargs))
