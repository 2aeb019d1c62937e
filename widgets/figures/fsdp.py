"""``fsdp_overlap_figure``: an FSDP forward pass on its two streams, gathering on demand and
prefetching one layer ahead, one time axis (`explorer.training.fsdp_overlap`)."""

from __future__ import annotations

import plotly.graph_objects as go

from ..colors import BUBBLE, EVENT_COLORS
from .style import base_layout

__all__ = ["fsdp_overlap_figure", "ROWS"]

ROWS = ("on demand: compute", "on demand: all-gather", "prefetch: compute",
        "prefetch: all-gather")  # fmt: skip
_STYLE = {  # colour, pattern (meaning not by colour alone), text prefix
    "compute": (EVENT_COLORS["compute-forward"], "", "L"),
    "all-gather": (EVENT_COLORS["zero-gather"], "/", "G"),  # the pipeline chart's ZeRO gather
    "wait": (BUBBLE, "x", ""),
}


def fsdp_overlap_figure(lesson) -> go.Figure:
    """Four rows (compute and communication stream, without and with prefetch), bars
    labelled ``G3`` (layer 3's all-gather) and ``L3`` (its compute), waits hatched."""
    traces = []
    for kind, (color, pattern, prefix) in _STYLE.items():
        y, base, x, text = [], [], [], []
        for name, run in (("on demand", lesson.serial), ("prefetch", lesson.prefetch)):
            for e in run.events:
                if e.kind != kind:
                    continue
                stream = "all-gather" if e.stream == "comm" else "compute"
                y.append(ROWS.index(f"{name}: {stream}"))
                base.append(e.start_s)
                x.append(e.end_s - e.start_s)
                text.append(f"{prefix}{e.layer}" if prefix else "wait")
        traces.append(go.Bar(
            orientation="h", y=y, base=base, x=x, text=text, name=kind, textposition="inside",
            insidetextanchor="middle", textfont={"color": "white" if kind != "wait" else "#333"},
            marker={"color": color, "pattern": {"shape": pattern, "fgcolor": "#FFFFFF",
                                                "fgopacity": 0.4}}, width=0.7,
            hovertemplate="%{text}: %{base:.3g} → %{x:.3g} long<extra>" + kind + "</extra>",
        ))  # fmt: skip
    s, p = lesson.serial, lesson.prefetch
    title = (f"FSDP forward of {lesson.layers} layers: on demand {s.step_s:g} "
             f"({s.exposed_s:g} waiting), prefetch {p.step_s:g} ({p.exposed_s:g} waiting, "
             f"{p.peak_layers} layers' weights alive)")  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(**base_layout(title, height=300, legend=True), barmode="overlay",
                      plot_bgcolor="white")  # fmt: skip
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(ROWS))), ticktext=list(ROWS),
                     range=[len(ROWS) - 0.5, -0.5], automargin=True)  # fmt: skip
    fig.update_xaxes(title_text="time (units of the lesson)", showgrid=True, gridcolor="#EEE")
    return fig
