"""``scaling_figure``: per-device throughput and linearity against the device count, several
ScalingCurves overlaid (weak vs strong, several models or chips).

Two panels side by side; each curve has a fixed pair of traces (throughput left, linearity
right), and ``slots`` reserves empty pairs so that a view can add curves later by updating
traces instead of adding them (added traces are lost when a page reconnects).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.training import ScalingCurve

from ..colors import PALETTE
from .errors import ViewError
from .style import base_layout, wrap_title

__all__ = [
    "scaling_figure", "scaling_traces", "curve_arrays", "curve_label", "Metric", "METRICS",
    "METRIC_TITLES", "LINEARITY_TITLE", "ideal_x", "axis_ticks",
]  # fmt: skip

Metric = Literal["tokens_per_s_per_device", "tflops_per_device", "mfu"]
METRICS: tuple[str, ...] = get_args(Metric)
METRIC_TITLES = {
    "tokens_per_s_per_device": "tokens/s per device",
    "tflops_per_device": "TFLOP/s per device",
    "mfu": "MFU",
}


def curve_label(curve: ScalingCurve) -> str:
    return f"{curve.model} on {curve.hardware}, {curve.mode}"


def curve_arrays(curve: ScalingCurve | None, metric: Metric = "tokens_per_s_per_device") -> dict:
    """x (devices), y (the metric), linearity and hover text; None where nothing fits."""
    if curve is None:
        return {"x": [], "y": [], "lin": [], "hover": []}
    pts = curve.points
    hover = [
        f"{p.devices} devices, batch {p.global_batch}<br>{p.config}" if p.fits
        else f"{p.devices} devices: {p.note[:120]}"
        for p in pts
    ]  # fmt: skip
    return {
        "x": [p.devices for p in pts],
        "y": [getattr(p, metric) if p.fits else None for p in pts],
        "lin": [p.linearity if p.fits else None for p in pts],
        "hover": hover,
    }


def scaling_traces(
    curves: Sequence[ScalingCurve | None], labels: Sequence[str] | None = None,
    metric: Metric = "tokens_per_s_per_device", slots: int | None = None,
) -> tuple[list[dict], list[int]]:  # fmt: skip
    """The properties of every trace of `scaling_figure` but its last (the ideal line), in
    its order (slot k: ``2k`` throughput, ``2k+1`` linearity), and the device counts drawn:
    what a redraw copies into a figure without building another (`widgets.ScalingView`)."""
    if metric not in METRICS:
        raise ViewError(f"metric={metric!r}; expected one of {', '.join(METRICS)}")
    slots = max(slots or len(curves), len(curves))
    traces: list[dict] = []
    xs: list[int] = []
    for k in range(slots):
        curve = curves[k] if k < len(curves) else None
        a = curve_arrays(curve, metric)
        xs += a["x"]
        label = (labels[k] if labels and k < len(labels) else None) or (
            curve_label(curve) if curve is not None else f"slot {k}"
        )
        color = PALETTE[k % len(PALETTE)]
        dash = "dash" if curve is not None and curve.mode == "strong" else "solid"
        common = {"mode": "lines+markers", "hovertext": a["hover"], "legendgroup": f"c{k}",
                  "visible": curve is not None, "line": {"color": color, "dash": dash},
                  "name": label, "x": a["x"]}  # fmt: skip
        traces.append({**common, "y": a["y"],
                       "hovertemplate": "%{y:.4g}<br>%{hovertext}<extra>%{fullData.name}</extra>"})  # fmt: skip
        traces.append({**common, "y": a["lin"], "showlegend": False,
                       "hovertemplate": "linearity %{y:.3f}<br>%{hovertext}<extra></extra>"})  # fmt: skip
    return traces, sorted(set(xs))


def scaling_figure(
    curves: Sequence[ScalingCurve | None], labels: Sequence[str] | None = None,
    metric: Metric = "tokens_per_s_per_device", slots: int | None = None, title: str = "",
) -> go.Figure:  # fmt: skip
    """Throughput per device (left) and linearity (right, 1 = linear) vs device count.

    Traces: for curve slot k, ``2k`` is its throughput and ``2k+1`` its linearity; the
    last trace is the ideal linearity line. A ``None`` curve (or a slot past the curves)
    is an empty, hidden pair.

    >>> import explorer as ex
    >>> c = ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512)
    >>> fig = scaling_figure([c], slots=3)
    >>> len(fig.data), fig.data[1].y[0]
    (7, 1.0)
    """
    traces, xs = scaling_traces(curves, labels, metric, slots)
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.1,
        subplot_titles=(METRIC_TITLES[metric], LINEARITY_TITLE),
    )  # fmt: skip
    for i, t in enumerate(traces):
        fig.add_trace(go.Scatter(**t), row=1, col=1 + i % 2)
    # The ideal line: y is the same [1, 1] in every state, so an update never sends it.
    fig.add_trace(go.Scatter(x=ideal_x(xs), y=[1.0, 1.0], mode="lines", name="ideal (linear)",
                             line={"color": "#999", "dash": "dot"}, hoverinfo="skip",
                             showlegend=True, legendgroup="ideal"), row=1, col=2)  # fmt: skip
    ticks = axis_ticks(xs)
    for col in (1, 2):
        fig.update_xaxes(type="log", tickvals=ticks, title_text="devices", row=1, col=col)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(range=[0, 1.1], row=1, col=2)
    # one more title line: the panel titles sit in the top margin too
    lines = wrap_title(title or "scaling").count("<br>") + 2
    fig.update_layout(base_layout(title or "scaling", height=440, legend=False,
                                  title_lines=lines))  # fmt: skip
    fig.update_layout(
        hovermode="closest", plot_bgcolor="white", showlegend=True,
        legend={"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top", "xanchor": "left",
                "font": {"size": 11}},
        margin={"b": 110},
    )  # fmt: skip
    return fig


#: the right panel's title (the left one is the metric's, `METRIC_TITLES`)
LINEARITY_TITLE = "linearity (per-device throughput / first)"


def ideal_x(xs: Sequence[int]) -> list[int]:
    """The ideal linearity line's two x: the device counts drawn, end to end."""
    return [min(xs), max(xs)] if xs else [8, 4096]


def axis_ticks(xs: Sequence[int]) -> list[int]:
    """The x ticks: the device counts drawn (a default decade-ish set when none)."""
    return list(xs) or [8, 64, 512, 4096]
