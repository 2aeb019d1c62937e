"""Trace figures: eager vs static Gantt with fused kernels linked to the eager ops they
replaced, the summary table, and one compiler RewriteStep (graph before and after)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.trace import Comparison, TraceEvent

from ..colors import CHANGED, color_for
from .layout import graph_layout

__all__ = ["trace_figure", "summary_figure", "rewrite_figure", "kernel_links", "SUMMARY_ROWS",
           "TRACE_EAGER", "TRACE_STATIC", "TRACE_COMPILE", "TRACE_LINKS", "TRACE_PICKED"]  # fmt: skip

ROWS = ("compile", "static", "eager")
TRACE_EAGER, TRACE_STATIC, TRACE_COMPILE, TRACE_LINKS, TRACE_PICKED = range(5)
SUMMARY_ROWS = ("total_us", "ops", "op_us", "python_overhead_us", "peak_bytes", "flops",
                "compiles", "graph_breaks")  # fmt: skip


def _origin(events: tuple[TraceEvent, ...]) -> float:
    ops = [e.start_us for e in events if e.kind in ("op", "kernel")]
    return min(ops, default=0.0)


def kernel_links(cmp: Comparison, kernel: int, fused_only: bool = True) -> tuple[list, list]:
    """Line segments from static kernel ``kernel`` (its index among the static compute
    events) to the eager ops it stands for; ``fused_only`` skips one-to-one kernels."""
    t_e, t_s = _origin(cmp.eager.events), _origin(cmp.static.events)
    lx: list[float | None] = []
    ly: list[str | None] = []
    k_index = -1
    for ops, k in cmp.rows:
        if k is None:
            continue
        k_index += 1
        if kernel >= 0 and k_index != kernel:
            continue
        if fused_only and len(k.replaced) < 2:
            continue
        kx = k.start_us - t_s + k.dur_us / 2
        for e in ops:
            lx += [kx, e.start_us - t_e + e.dur_us / 2, None]
            ly += ["static", "eager", None]
    return lx, ly


def trace_figure(cmp: Comparison, title: str = "", picked: int | None = None) -> go.Figure:
    """Gantt rows ``eager`` and ``static`` (time from each run's first op, in µs) and
    ``compile`` (compilations end at 0: they happen before the run). Lines link each fused
    kernel to the eager ops it replaced.

    Traces: eager, static, compile (horizontal bars), links, picked (the links of the
    ``picked`` kernel, drawn bold).
    """
    t_e, t_s = _origin(cmp.eager.events), _origin(cmp.static.events)
    eager = cmp.eager.compute_events
    static = cmp.static.compute_events
    comp = [e for e in cmp.static.events if e.kind in ("compile", "recompile")]

    def bars(events, row: str, t0: float) -> go.Bar:
        return go.Bar(
            y=[row] * len(events), x=[max(e.dur_us, 0.01) for e in events],
            base=[e.start_us - t0 for e in events], orientation="h", name=row,
            marker={"color": [color_for(e.name) for e in events],
                    "line": {"width": [2 if len(e.replaced) > 1 else 0 for e in events],
                             "color": "#111"}},
            customdata=[e.name for e in events],
            hovertext=[f"{e.name}{' = ' + '+'.join(e.replaced) if e.replaced else ''}<br>"
                       f"{e.dur_us:.1f} µs<br>{' '.join(str(list(s)) for s in e.shapes)}"
                       for e in events], hoverinfo="text",
        )  # fmt: skip

    compile_bar = go.Bar(
        y=["compile"] * len(comp), x=[e.dur_us for e in comp], base=[-e.dur_us for e in comp],
        orientation="h", name="compile", marker={"color": "#FFA15A"},
        text=[f"{e.kind} {e.dur_us / 1e3:.1f} ms" for e in comp], textposition="inside",
        hovertext=[f"{e.kind}: {e.detail}" for e in comp], hoverinfo="text",
    )  # fmt: skip
    lx, ly = kernel_links(cmp, -1)
    links = go.Scatter(x=lx, y=ly, mode="lines", name="links", hoverinfo="skip",
                       line={"width": 1, "color": "rgba(80,80,80,0.5)"})  # fmt: skip
    px, py = kernel_links(cmp, picked, fused_only=False) if picked is not None else ([], [])
    pick = go.Scatter(x=px, y=py, mode="lines+markers", name="picked", hoverinfo="skip",
                      line={"width": 3, "color": "#E4002B"})  # fmt: skip
    fig = go.Figure(
        [bars(eager, "eager", t_e), bars(static, "static", t_s), compile_bar, links, pick]
    )
    span = max([e.start_us - t_e + e.dur_us for e in eager]
               + [e.start_us - t_s + e.dur_us for e in static] + [1.0])  # fmt: skip
    s = cmp.eager.summary(), cmp.static.summary()
    fig.update_layout(
        title=title or f"eager {s[0]['ops']} ops vs static {s[1]['ops']} kernels: "
        f"{cmp.speedup:.2f}x (total time of the run; compilation on its own row)",
        barmode="overlay", showlegend=False, height=300, bargap=0.3,
        xaxis={"title": "µs from the run's first op", "range": [-0.08 * span, 1.03 * span]},
        yaxis={"categoryorder": "array", "categoryarray": list(ROWS)},
        margin={"l": 10, "r": 10, "t": 40, "b": 30},
    )  # fmt: skip
    return fig


def summary_figure(cmp: Comparison) -> go.Figure:
    """The summary table: time, ops, overhead, peak memory, compiles, eager vs static."""
    e, s = cmp.eager.summary(), cmp.static.summary()

    def fmt(v) -> str:
        return f"{v:,.0f}" if isinstance(v, float) else f"{v:,}"

    ratio = [f"{e[k] / s[k]:.2f}x" if s[k] and k != "compiles" else "-" for k in SUMMARY_ROWS]
    fig = go.Figure(go.Table(
        header={"values": ["", "eager", "static", "eager / static"]},
        cells={"values": [list(SUMMARY_ROWS), [fmt(e[k]) for k in SUMMARY_ROWS],
                          [fmt(s[k]) for k in SUMMARY_ROWS], ratio]},
    ))  # fmt: skip
    fig.update_layout(height=260, margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return fig


def rewrite_figure(step, title: str = "") -> go.Figure:
    """One RewriteStep: the graph before (matched nodes in red) and after (new nodes in red).

    ``step`` is an ``explorer.compiler.RewriteStep`` (or None: an empty two-panel figure).
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("before", "after"))
    for col, graph in ((1, step.before if step else None), (2, step.after if step else None)):
        if graph is None:
            fig.add_trace(go.Scatter(x=[], y=[], mode="markers", name=f"g{col}"), 1, col)
            continue
        lay = graph_layout(graph)
        if col == 1:
            marked = set(step.nodes)
        else:
            old = {n.name for n in step.before.nodes}
            marked = {n.name for n in graph.nodes if n.name not in old}
        names = [lay.members[u][0] for u in lay.units]
        fig.add_trace(go.Scatter(
            x=lay.x, y=lay.y, mode="markers", name="before" if col == 1 else "after",
            marker={"size": 8, "color": [CHANGED if n in marked else "#9FB4D0" for n in names]},
            hovertext=[f"%{n} = {graph.node(n).op}" for n in names], hoverinfo="text",
        ), 1, col)  # fmt: skip
    fig.update_layout(
        title=title or (str(step) if step else "no rewrite step"), showlegend=False, height=300,
        margin={"l": 10, "r": 10, "t": 60, "b": 10}, plot_bgcolor="white",
    )  # fmt: skip
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig
