"""Where a profiled step went, and the measured step beside the predicted one.

`breakdown_figure`: one stacked bar per rank and step (compute, exposed
communication, idle; the overlapped communication as a line across each bar), and the
time per kernel category (`explorer.traces.Breakdown`). `side_by_side_figure`: the measured
ranks' and the predicted devices' timelines on one axis (`explorer.traces.SideBySide`).

>>> import explorer as ex
>>> b = ex.traces.breakdown(ex.traces.load_kineto(ex.traces.vendored("nccl_data.json.gz")))
>>> fig = breakdown_figure(b)
>>> [t.name for t in fig.data][:4]
['compute', 'exposed communication', 'idle', 'overlapped communication']
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.traces import CATEGORIES, TRACKS, Breakdown, SideBySide

from ..colors import BUBBLE, color_for
from .errors import ViewError
from .style import base_layout

__all__ = [
    "breakdown_figure", "side_by_side_figure", "PART_COLORS", "CATEGORY_COLORS",
    "TRACK_COLORS", "row_label",
]  # fmt: skip

PART_COLORS = {
    "compute": "#636EFA",
    "exposed communication": "#EF553B",
    "idle": BUBBLE,
    "overlapped communication": "#FFA15A",
}
CATEGORY_COLORS = {c: color_for(c) for c in CATEGORIES}
_PARTS = (("compute", "compute_s"), ("exposed communication", "exposed_comm_s"),
          ("idle", "idle_s"), ("overlapped communication", "overlapped_comm_s"))  # fmt: skip


def row_label(rank, step) -> str:
    return f"rank {rank if rank is not None else '?'} · step {step}"


def breakdown_figure(b: Breakdown, title: str = "") -> go.Figure:
    """Left: per rank and step, compute + exposed communication + idle (the analysed
    window) in one stacked bar, overlapped communication as a line across it. Right: the time
    per category (matmul, attention, ...). Times in milliseconds."""
    if not isinstance(b, Breakdown):
        raise ViewError(f"breakdown_figure({b!r}): expected an explorer.traces.Breakdown")
    labels = [row_label(r.rank, r.step) for r in b.rows]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("step: compute, communication, idle",
                                        "busy time per category"))  # fmt: skip
    for name, attr in _PARTS[:3]:
        ms = [getattr(r, attr) * 1e3 for r in b.rows]
        fig.add_trace(
            go.Bar(name=name, y=labels, x=ms, orientation="h", marker_color=PART_COLORS[name],
                   hovertemplate=f"%{{y}}<br>{name}: %{{x:.3f}} ms<extra></extra>"),  # fmt: skip
            row=1, col=1,
        )  # fmt: skip
    # overlapped communication runs under compute: a thick line from 0 across each bar
    name = "overlapped communication"
    xs: list = []
    ys: list = []
    for lab, r in zip(labels, b.rows, strict=True):
        xs += [0.0, r.overlapped_comm_s * 1e3, None]
        ys += [lab, lab, None]
    fig.add_trace(
        go.Scatter(name=name, x=xs, y=ys, mode="lines",
                   line={"color": PART_COLORS[name], "width": 5},
                   hovertemplate=f"%{{y}}<br>{name}: %{{x:.3f}} ms<extra></extra>"),  # fmt: skip
        row=1, col=1,
    )  # fmt: skip
    for cat in CATEGORIES:
        ms = [r.category(cat) * 1e3 for r in b.rows]
        if not any(ms):
            continue
        fig.add_trace(
            go.Bar(name=cat, y=labels, x=ms, orientation="h", marker_color=CATEGORY_COLORS[cat],
                   legendgroup="categories",
                   hovertemplate=f"%{{y}}<br>{cat}: %{{x:.3f}} ms<extra></extra>"),  # fmt: skip
            row=1, col=2,
        )  # fmt: skip
    fig.update_layout(
        **base_layout(title or "Where each profiled step went", height=140 + 28 * len(labels)),
        barmode="stack",
    )
    fig.update_xaxes(title_text="ms", row=1, col=1)
    fig.update_xaxes(title_text="ms", row=1, col=2)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    return fig


TRACK_COLORS = {
    "compute": "#636EFA", "TP comm": "#AB63FA", "DP comm": "#EF553B", "CP comm": "#19D3F3",
    "EP comm": "#FF6692", "PP send/recv": "#FFA15A", "comm": "#8C564B", "bubble": BUBBLE,
}  # fmt: skip


def side_by_side_figure(s: SideBySide, title: str = "") -> go.Figure:
    """The measured ranks' step and the predicted devices' step on one time axis (ms): one
    row per lane and track (``measured rank 0 · compute``, ...), one bar trace per track
    (`TRACKS`, always all of them, so a view updates them in place); the title names the
    largest difference."""
    if not isinstance(s, SideBySide):
        raise ViewError(f"side_by_side_figure({s!r}): expected an explorer.traces.SideBySide")
    used = [t for t in TRACKS if any(lane.track_s(t) for lane in s.lanes)]
    rows = [f"{lane.label} · {t}" for lane in s.lanes for t in used]
    fig = go.Figure()
    for track in TRACKS:
        ys, xs, bases, names = [], [], [], []
        for lane in s.lanes:
            for sl in lane.slices:
                if sl.track == track:
                    ys.append(f"{lane.label} · {track}")
                    xs.append(sl.dur_s * 1e3)
                    bases.append(sl.start_s * 1e3)
                    names.append(sl.name)
        fig.add_trace(
            go.Bar(
                name=track,
                y=ys,
                x=xs,
                base=bases,
                orientation="h",
                customdata=names,
                marker_color=TRACK_COLORS[track],
                showlegend=bool(ys),
                hovertemplate="%{y}<br>%{customdata}: %{base:.3f} ms + %{x:.3f} ms<extra></extra>",
            )  # fmt: skip
        )
    top = s.differences[0] if s.differences else None
    what = (f"largest difference: {top[0]} measured {top[1] * 1e3:.3g} ms, predicted "
            f"{top[2] * 1e3:.3g} ms" if top else "")  # fmt: skip
    fig.update_layout(
        **base_layout(
            title or f"Step {s.step}: measured vs predicted ({what})", height=120 + 22 * len(rows)
        ),  # fmt: skip
        barmode="overlay",
        xaxis={"title": {"text": "ms from the step's start"}},
        yaxis={"categoryorder": "array", "categoryarray": rows, "autorange": "reversed"},
    )
    return fig
