"""Trace figures in the manner of Perfetto: named slices on one track per run, colours per op
name with a legend, flows from each eager op to the kernel that absorbed it, the compilation
on its own track and time origin; the summary table; one compiler RewriteStep as a diff.

Builders draw what the core computed (``explorer.trace``: ``RepeatedRuns``, ``flows``,
``slice_names``; ``explorer.compiler.rewrite_diff``); the only arithmetic here is layout
geometry and the choice of a time unit for the axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.compiler import RewriteDiff, rewrite_diff
from explorer.trace import Comparison, RepeatedRuns, TraceEvent, flows

from ..colors import CHANGED, NEUTRAL, PALETTE
from ..format import fmt_bytes, fmt_number, fmt_seconds
from .style import base_layout

__all__ = [
    "trace_figure", "summary_figure", "summary_html", "rewrite_figure", "flow_lines", "time_unit",
    "name_colors", "speedup_text", "SUMMARY_ROWS", "TRACE_COMPILE", "TRACE_FLOWS",
    "TRACE_PICKED", "TRACE_OTHER", "FIRST_NAME", "EAGER_ROW", "STATIC_ROW", "COMPILE_ROW",
    "STATUS_COLORS", "RECOMPILE", "COMPILE",
]  # fmt: skip

# Trace order of trace_figure: fixed traces first, then one bar trace per slice name.
TRACE_COMPILE, TRACE_FLOWS, TRACE_PICKED, TRACE_OTHER, FIRST_NAME = range(5)
EAGER_ROW, STATIC_ROW, COMPILE_ROW = "eager", "static (@jit)", "compile"
COMPILE = "#FFA15A"
RECOMPILE = CHANGED  # red: a new input shape made @jit compile again
CACHE_HIT = "#B0B0B0"
OTHER = "#7F7F7F"
SUMMARY_ROWS = ("total_us", "ops", "op_us", "python_overhead_us", "peak_bytes", "flops",
                "compiles", "graph_breaks")  # fmt: skip
_SUMMARY_LABELS = {
    "total_us": "Total time",
    "ops": "Ops (eager) / kernels (static)",
    "op_us": "Time inside ops",
    "python_overhead_us": "Time outside ops (Python)",
    "peak_bytes": "Peak live memory",
    "flops": "FLOPs",
    "compiles": "Compilations in this run",
    "graph_breaks": "Graph breaks",
}


def time_unit(span_us: float) -> tuple[str, float]:
    """The axis unit for a span of ``span_us`` µs: ``("ms", 1e3)`` means divide µs by 1e3."""
    if span_us >= 2e6:
        return "s", 1e6
    if span_us >= 2e3:
        return "ms", 1e3
    return "µs", 1.0


def name_colors(names: Sequence[str]) -> dict[str, str]:
    """Colour per slice name: index in ``names`` (``explorer.trace.slice_names``, sorted) ->
    palette, so up to 20 names get 20 distinct colours and the same names the same colours."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def speedup_text(runs: RepeatedRuns | None, cmp: Comparison) -> str:
    """ "3.41x (median of 7 runs; min-max 2.90-3.80x, IQR 3.20-3.60x)" or the one-run ratio."""
    if runs is None:
        return f"{cmp.speedup:.2f}x (one run)"
    s = runs.speedup
    if len(s) == 1:
        return f"{s.median:.2f}x (one run: no spread)"
    return (f"{s.median:.2f}x (median of {len(s)} runs; min-max {s.low:.2f}-{s.high:.2f}x, "
            f"IQR {s.q1:.2f}-{s.q3:.2f}x)")  # fmt: skip


def _origin(events: Sequence[TraceEvent]) -> float:
    return min((e.start_us for e in events), default=0.0)


def _hover(e: TraceEvent, t0: float) -> str:
    rep = f" = {' + '.join(e.replaced)}" if e.replaced else ""
    shapes = " ".join(str(list(s)) for s in e.shapes)
    lines = [f"<b>{e.name}</b>{rep}", f"duration {fmt_seconds(e.dur_us * 1e-6)}",
             f"starts at {fmt_seconds((e.start_us - t0) * 1e-6)}"]  # fmt: skip
    if shapes:
        lines.append(f"shapes {shapes}")
    if e.flops:
        lines.append(f"{fmt_number(e.flops)} FLOP")
    return "<br>".join(lines)


def flow_lines(
    cmp: Comparison, kernel: int | None = None, fused_only: bool = True, scale: float = 1.0
) -> tuple[list, list]:
    """Line segments (x, y with None breaks) from each eager op to its kernel: for kernel
    index ``kernel`` only, or all (``None``); ``fused_only`` keeps kernels that absorbed 2+."""
    t_e = _origin(cmp.eager.compute_events)
    t_s = _origin(cmp.static.compute_events)
    xs: list[float | None] = []
    ys: list[str | None] = []
    for f in flows(cmp):
        if kernel is not None and f.kernel_index != kernel:
            continue
        if fused_only and not f.fused:
            continue
        xe = (f.eager.start_us - t_e + f.eager.dur_us / 2) / scale
        xk = (f.kernel.start_us - t_s + f.kernel.dur_us / 2) / scale
        xs += [xe, xk, None]
        ys += [EAGER_ROW, STATIC_ROW, None]
    return xs, ys


def trace_figure(
    cmp: Comparison,
    names: Sequence[str],
    *,
    runs: RepeatedRuns | None = None,
    compile_events: Sequence[TraceEvent] = (),
    picked: int | None = None,
    all_flows: bool = True,
    level: str = "",
) -> go.Figure:
    """Two tracks of the steady-state runs (eager, static), each from 0, and above them the
    compilation of the first call with this input shape on its own time origin.

    Args:
        cmp: the aligned representative runs (``RepeatedRuns.comparison()``).
        names: slice names with their own colour and legend entry (``slice_names``); other
            names share one grey "other" trace.
        runs: the repeated runs behind the headline speed-up (median and spread).
        compile_events: ``compile``/``recompile`` events of the first call (none: a cache
            hit, drawn as a grey bar saying so), and the ``guard failed`` notes before them
            (a recompile after one is labelled as caused by a failed shape guard).
        picked: index of a static kernel whose flows are drawn bold.
        all_flows: draw the flows of every fused kernel (thin).
        level: the ``@jit`` level, for the title.

    Traces: compile, flows, picked, other, then one per name (fixed count for a view).
    """
    eager, static = cmp.eager.compute_events, cmp.static.compute_events
    t_e, t_s = _origin(eager), _origin(static)
    span = max([e.start_us - t_e + e.dur_us for e in eager]
               + [e.start_us - t_s + e.dur_us for e in static] + [1.0])  # fmt: skip
    unit, scale = time_unit(span)
    colors = name_colors(names)
    fig = make_subplots(
        rows=2, cols=1, row_heights=[0.2, 0.8], vertical_spacing=0.2,
        subplot_titles=("Compilation: the first call with this input shape (its own time "
                        "origin)", "Steady state: the median eager and static runs, each from 0"),
    )  # fmt: skip

    # --- compile track --------------------------------------------------------------------
    comp = [e for e in compile_events if e.kind in ("compile", "recompile")]
    # a recompile caused by a failed shape guard follows its "guard failed" note
    guard_of: dict[int, TraceEvent] = {}
    last_guard: TraceEvent | None = None
    for e in compile_events:
        if e.kind == "note" and e.name == "guard failed":
            last_guard = e
        elif e.kind == "recompile" and last_guard is not None:
            guard_of[id(e)] = last_guard
            last_guard = None
    c0 = _origin(comp)
    c_unit, c_scale = time_unit(max([e.start_us - c0 + e.dur_us for e in comp] + [1.0]))
    if comp:
        cx = [max(e.dur_us, 1e-3) / c_scale for e in comp]
        cbase = [(e.start_us - c0) / c_scale for e in comp]
        ccol = [RECOMPILE if e.kind == "recompile" else COMPILE for e in comp]
        ctext = [f"<b>{e.kind}</b> {fmt_seconds(e.dur_us * 1e-6)}"
                 + (f": {e.detail}" if e.kind == "recompile" and e.detail else "")
                 for e in comp]  # fmt: skip
        chover = [f"<b>{e.kind}</b> of {e.name}: {fmt_seconds(e.dur_us * 1e-6)}"
                  + (f"<br>reason: {e.detail}" if e.detail else "")
                  + (f"<br><b>guard failed</b>: {guard_of[id(e)].detail}" if id(e) in guard_of
                     else "") for e in comp]  # fmt: skip
        ctext = [(t.replace("<b>recompile</b>", "<b>recompile (shape guard failed)</b>", 1)
                  if id(e) in guard_of else t) for e, t in zip(comp, ctext, strict=True)]  # fmt: skip
    else:
        cx, cbase, ccol = [1.0], [0.0], [CACHE_HIT]
        ctext = ["<b>cache hit</b>: this input shape was compiled before, no compilation"]
        chover = ctext
    fig.add_trace(go.Bar(
        y=[COMPILE_ROW] * len(cx), x=cx, base=cbase, orientation="h", name="compilation",
        marker={"color": ccol, "line": {"width": 0}}, text=ctext, textposition="inside",
        insidetextanchor="start", textangle=0, textfont={"color": "white"},
        hovertext=chover, hoverinfo="text", showlegend=False,
    ), 1, 1)  # fmt: skip

    # --- flows ----------------------------------------------------------------------------
    fx, fy = flow_lines(cmp, None, fused_only=True, scale=scale)
    fig.add_trace(go.Scatter(
        x=fx, y=fy, mode="lines", name="flow: eager op → fused kernel", hoverinfo="skip",
        line={"width": 1, "color": "rgba(60,60,60,0.45)"}, visible=bool(fx) and all_flows,
    ), 2, 1)  # fmt: skip
    px, py = flow_lines(cmp, picked, fused_only=False, scale=scale) if picked is not None else (
        [], [])  # fmt: skip
    fig.add_trace(go.Scatter(
        x=px, y=py, mode="lines+markers", name="picked kernel's flows", hoverinfo="skip",
        line={"width": 3, "color": "#111111"},
        marker={"symbol": "arrow", "angleref": "previous", "size": 12, "color": "#111111"},
        visible=bool(px),
    ), 2, 1)  # fmt: skip

    # --- slices, one trace per name (plus "other") ----------------------------------------
    # the kernel each slice belongs to: a click on either end picks that kernel's flows
    kernel_of = {id(k): i for i, k in enumerate(static)}
    kernel_of.update({id(f.eager): f.kernel_index for f in flows(cmp)})

    def bars(label: str, color: str, picked_names: set[str] | None) -> go.Bar:
        rows = [(EAGER_ROW, e, t_e) for e in eager] + [(STATIC_ROW, e, t_s) for e in static]
        keep = [
            (r, e, t0)
            for r, e, t0 in rows
            if (e.name not in colors if picked_names is None else e.name in picked_names)
        ]
        return go.Bar(
            y=[r for r, _, _ in keep], x=[max(e.dur_us, 1e-3) / scale for _, e, _ in keep],
            base=[(e.start_us - t0) / scale for _, e, t0 in keep], orientation="h",
            name=label, legendgroup=label, visible=bool(keep),
            marker={"color": color, "line": {"color": "#111111",
                    "width": [1.5 if len(e.replaced) > 1 else 0 for _, e, _ in keep]}},
            text=[e.name for _, e, _ in keep], textposition="inside",
            insidetextanchor="middle", textangle=0,
            customdata=[[r, e.name, kernel_of.get(id(e), -1)] for r, e, _ in keep],
            hovertext=[_hover(e, t0) for _, e, t0 in keep], hoverinfo="text",
        )  # fmt: skip

    fig.add_trace(bars("other", OTHER, None), 2, 1)
    for n in names:
        fig.add_trace(bars(n, colors[n], {n}), 2, 1)

    title = f"@jit {level + ' ' if level else ''}vs eager: {speedup_text(runs, cmp)}"
    layout = base_layout(title, height=470, legend=True)
    layout["legend"] = {"orientation": "h", "x": 0.0, "xanchor": "left", "y": -0.22,
                        "yanchor": "top", "font": {"size": 11}}  # fmt: skip
    layout["margin"] = dict(layout["margin"], t=layout["margin"]["t"] - 24 + 10, b=130)
    fig.update_layout(
        **layout, barmode="overlay", bargap=0.25, uniformtext={"mode": "hide", "minsize": 9},
        plot_bgcolor="white", hovermode="closest",
    )  # fmt: skip
    fig.update_annotations(font_size=12, x=0.0, xanchor="left")  # the two track titles
    fig.update_xaxes(title_text=f"time from the compilation's start ({c_unit})", row=1, col=1,
                     showticklabels=bool(comp), rangemode="tozero", gridcolor="#EEE")  # fmt: skip
    fig.update_xaxes(title_text=f"time from the run's start ({unit})", row=2, col=1,
                     range=[0, 1.02 * span / scale], gridcolor="#EEE")  # fmt: skip
    fig.update_yaxes(categoryorder="array", categoryarray=[STATIC_ROW, EAGER_ROW], row=2, col=1)
    return fig


def _summary_rows(cmp: Comparison, runs: RepeatedRuns | None) -> list[tuple[str, str, str, str]]:
    """(label, eager, static, ratio) per SUMMARY_ROWS, in human units; the total time is the
    median over ``runs`` with its min-max (other rows: the representative runs)."""
    e, s = cmp.eager.summary(), cmp.static.summary()

    def cell(k: str, v, timing=None) -> str:
        if timing is not None and len(timing) > 1:
            lo, hi = fmt_seconds(timing.low * 1e-6), fmt_seconds(timing.high * 1e-6)
            return f"{fmt_seconds(timing.median * 1e-6)} (median; {lo} - {hi})"
        if k.endswith("_us"):
            return fmt_seconds(v * 1e-6)
        if k.endswith("bytes"):
            return fmt_bytes(v)
        if k == "flops":
            return fmt_number(v)
        return f"{v:,}"

    et = runs.eager_time if runs is not None else None
    st = runs.static_time if runs is not None else None
    rows = []
    for k in SUMMARY_ROWS:
        if k == "total_us" and runs is not None:
            ratio = f"{runs.speedup.median:.2f}x (median of ratios)"
        elif s[k] and k not in ("compiles", "graph_breaks"):
            ratio = f"{e[k] / s[k]:.2f}x"
        else:
            ratio = "-"
        rows.append((_SUMMARY_LABELS[k], cell(k, e[k], et if k == "total_us" else None),
                     cell(k, s[k], st if k == "total_us" else None), ratio))  # fmt: skip
    return rows


def summary_figure(cmp: Comparison, runs: RepeatedRuns | None = None) -> go.Figure:
    """The summary as a plotly table (for static reports; the view shows ``summary_html``)."""
    rows = _summary_rows(cmp, runs)
    fig = go.Figure(go.Table(
        columnwidth=[3, 4, 4, 3],
        header={"values": ["", "eager", "static (@jit)", "eager / static"], "align": "left",
                "fill": {"color": "#F2F2F2"}},
        cells={"values": [list(c) for c in zip(*rows, strict=True)], "align": "left",
               "height": 24},
    ))  # fmt: skip
    fig.update_layout(**base_layout("", height=270, legend=False))
    fig.update_layout(margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return fig


def summary_html(cmp: Comparison, runs: RepeatedRuns | None = None) -> str:
    """The summary as an HTML table (wraps on a narrow column; no plot to size)."""
    head = "".join(f"<th style='text-align:left;padding:2px 10px'>{h}</th>"
                   for h in ("", "eager", "static (@jit)", "eager / static"))  # fmt: skip
    body = "".join(
        "<tr>" + "".join(f"<td style='padding:2px 10px'>{c}</td>" for c in row) + "</tr>"
        for row in _summary_rows(cmp, runs)
    )
    return (f"<table style='border-collapse:collapse;width:100%;font-size:13px'>"
            f"<thead style='background:#F2F2F2'><tr>{head}</tr></thead><tbody>{body}</tbody>"
            "</table>")  # fmt: skip


# --- one rewrite step as a diff -----------------------------------------------------------

STATUS_COLORS = {
    "removed": CHANGED,
    "added": "#2CA02C",
    "rewritten": "#FF7F0E",
    "matched": "#636EFA",
    "context": NEUTRAL,
}
_STATUS_LABEL = {
    "removed": "removed by the rule",
    "added": "added by the rule",
    "rewritten": "rewritten (op, inputs or attributes changed)",
    "matched": "matched, graph unchanged (e.g. buffer reused)",
    "context": "unchanged neighbour",
}


WRAP_COLUMNS = 8  # a long chain wraps into bands this many columns wide


def _drawn(step, diff: RewriteDiff, side: str) -> tuple[str, ...]:
    """The nodes drawn on ``side``: its focus without unchanged weights and inputs (they
    would crowd the picture; their consumers' hover names them)."""
    graph = getattr(step, side)
    return tuple(n for n in getattr(diff, f"{side}_focus")
                 if not (graph.node(n).is_source and diff.status(n, side) == "context"))  # fmt: skip


def _diff_positions(step, diff: RewriteDiff) -> dict[str, tuple[float, float]]:
    """Columns by dependency depth over both sides, wrapped into bands of WRAP_COLUMNS, rows
    in graph order; a node present on both sides sits at the same place in both panels, so
    only the changes differ between them."""
    before, after = _drawn(step, diff, "before"), _drawn(step, diff, "after")
    names = list(dict.fromkeys([*before, *after]))
    keep = set(names)
    inputs: dict[str, set[str]] = {n: set() for n in names}
    for graph, focus in ((step.before, before), (step.after, after)):
        for n in focus:
            inputs[n].update(i for i in graph.node(n).inputs if i in keep)
    depth = dict.fromkeys(names, 0)
    for _ in range(len(names)):  # longest path; graphs are DAGs, so this settles
        moved = False
        for n in names:
            d = 1 + max((depth[i] for i in inputs[n]), default=-1)
            if d > depth[n]:
                depth[n], moved = d, True
        if not moved:
            break
    row: dict[str, int] = {}
    count: dict[int, int] = {}
    for n in names:
        row[n] = count.get(depth[n], 0)
        count[depth[n]] = row[n] + 1
    bands = max(depth.values(), default=0) // WRAP_COLUMNS + 1
    height = [max((c for d, c in count.items() if d // WRAP_COLUMNS == b), default=1)
              for b in range(bands)]  # fmt: skip
    top = [sum(height[:b]) + 0.8 * b for b in range(bands)]
    return {n: (float(depth[n] % WRAP_COLUMNS), -(top[depth[n] // WRAP_COLUMNS] + row[n]))
            for n in names}  # fmt: skip


def rewrite_figure(step, diff: RewriteDiff | None = None, title: str = "") -> go.Figure:
    """One RewriteStep before and after: the nodes the rule removed (red), added (green),
    rewrote (orange) or matched (blue), with their unchanged neighbours (grey), labelled by
    op; an unchanged node keeps its place in both panels.

    Traces per panel (before, then after): edges, then one per status of STATUS_COLORS.
    ``step`` None gives the same traces, hidden (no pass ran).
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("before", "after"),
                        horizontal_spacing=0.04)  # fmt: skip
    if step is not None and diff is None:
        diff = rewrite_diff(step)
    pos = _diff_positions(step, diff) if step is not None else {}
    shown: set[str] = set()
    for col, side in ((1, "before"), (2, "after")):
        graph = getattr(step, side) if step is not None else None
        focus = _drawn(step, diff, side) if diff is not None else ()
        ex_, ey = [], []
        for n in focus:
            for i in graph.node(n).inputs:
                if i in pos and i in focus:
                    ex_ += [pos[i][0], pos[n][0], None]
                    ey += [pos[i][1], pos[n][1], None]
        fig.add_trace(go.Scatter(x=ex_, y=ey, mode="lines", name=f"{side} edges",
                                 hoverinfo="skip", showlegend=False, visible=bool(ex_),
                                 line={"width": 1, "color": "#9A9A9A"}), 1, col)  # fmt: skip
        for status, color in STATUS_COLORS.items():
            ns = [n for n in focus if diff.status(n, side) == status] if diff else []
            nodes = [graph.node(n) for n in ns]
            fig.add_trace(go.Scatter(
                x=[pos[n][0] for n in ns], y=[pos[n][1] for n in ns], mode="markers+text",
                name=_STATUS_LABEL[status], legendgroup=status,
                showlegend=bool(ns) and status not in shown, visible=bool(ns),
                marker={"size": 13, "color": color, "line": {"width": 1, "color": "#555"},
                        "symbol": "square" if status == "context" else "circle"},
                text=[n.op for n in nodes], textposition="top center", textfont={"size": 9},
                customdata=ns,
                hovertext=[f"%{n.name} = {n.op}({', '.join('%' + i for i in n.inputs)})"
                           f"<br>{n.type}<br>{_STATUS_LABEL[status]}" for n in nodes],
                hoverinfo="text",
            ), 1, col)  # fmt: skip
            if ns:
                shown.add(status)
    if diff is None:
        text = title or "no rewrite step (this level runs no pass)"
    else:
        more = f" — {diff.detail}" if diff.detail else ""
        cut = "; neighbours cut to fit" if diff.truncated else ""
        text = title or (f"pass {diff.pass_name}, rule {diff.rule}: {len(diff.removed)} removed, "
                         f"{len(diff.added)} added, {len(diff.rewritten)} rewritten, "
                         f"{len(diff.matched)} matched{more}{cut}")  # fmt: skip
    layout = base_layout(text, height=380, legend=True)
    layout["legend"] = {"orientation": "h", "x": 0.0, "xanchor": "left", "y": -0.04,
                        "yanchor": "top", "font": {"size": 11}}  # fmt: skip
    layout["margin"] = dict(layout["margin"], t=layout["margin"]["t"] - 24 + 8, b=60, l=16)
    fig.update_layout(**layout, plot_bgcolor="white")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig
