"""``pipeline_figure``: a simulated training step as a device x time Gantt chart.

One horizontal-bar trace per event kind (forward, backward, recompute, each collective,
optimizer, idle), always in the order of ``EVENT_KINDS`` so that views update them by
index; forwards and backwards carry their microbatch number, the bubble shows as hatched
grey ``idle`` bars. Pipeline transfers (``pp-comm``, which overlap compute) are a thin strip
under their row. A last trace outlines the selected microbatch.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.planner import SimResult, Timeline
from explorer.planner.timeline import EVENT_KINDS

from ..colors import EVENT_COLORS, SELECTED

__all__ = ["pipeline_figure", "pipeline_title", "kind_arrays", "TRACE_SELECTED_MB", "row_labels"]

TRACE_SELECTED_MB = len(EVENT_KINDS)  # after one trace per event kind
_MS = 1e3
_SHORT = {"compute-forward": "F", "compute-backward": "B", "recompute": "R"}


def row_labels(pp: int, chunks: int) -> list[str]:
    """``stage d`` per pipeline device (``dev d: stages d, d+p`` when interleaved)."""
    if chunks == 1:
        return [f"stage {d}" for d in range(pp)]
    return [f"dev {d}: st " + ",".join(str(c * pp + d) for c in range(chunks)) for d in range(pp)]


def kind_arrays(timeline: Timeline, kind: str) -> dict:
    """The bar data of one event kind: y (device), base and x (start and length in ms),
    text (microbatch label), customdata ([stage, microbatch]) and hover text."""
    ev = [e for e in timeline.events if e.kind == kind]
    if not ev:
        return {"y": [], "base": [], "x": [], "text": [], "customdata": [], "hovertext": []}
    arr = np.array([(e.device, e.start_s, e.end_s, e.stage, e.microbatch) for e in ev])
    short = _SHORT.get(kind, "")
    text = [f"{short}{int(mb)}" if short and mb >= 0 else "" for mb in arr[:, 4]]
    hover = [
        f"{kind}<br>device {int(d)}"
        + (f", stage {int(g)}, microbatch {int(mb)}" if mb >= 0 else "")
        + f"<br>{s * _MS:.3f} → {t * _MS:.3f} ms ({(t - s) * _MS:.3f} ms)"
        for d, s, t, g, mb in arr
    ]  # fmt: skip
    return {
        "y": arr[:, 0].astype(int), "base": arr[:, 1] * _MS,
        "x": np.maximum(arr[:, 2] - arr[:, 1], 0.0) * _MS, "text": text,
        "customdata": arr[:, 3:5].astype(int), "hovertext": hover,
    }  # fmt: skip


def _selected_arrays(timeline: Timeline, microbatch: int | None, stage: int | None) -> dict:
    ev = [
        e for e in timeline.events
        if e.kind in ("compute-forward", "compute-backward", "recompute")
        and (microbatch is None or e.microbatch == microbatch)
        and (stage is None or e.stage == stage)
    ] if microbatch is not None or stage is not None else []  # fmt: skip
    return {
        "y": [e.device for e in ev], "base": [e.start_s * _MS for e in ev],
        "x": [(e.end_s - e.start_s) * _MS for e in ev],
    }  # fmt: skip


def pipeline_title(sim: SimResult | None, timeline: Timeline) -> str:
    if sim is None:
        return f"{timeline}"
    c = sim.config
    sched = c.schedule + (f" (v={c.virtual_stages})" if c.virtual_stages > 1 else "")
    return (
        f"{sched}: pp={c.pp}, {c.num_microbatches} microbatches of {c.microbatch_size} — "
        f"step {sim.step_time_s * _MS:.1f} ms, bubble {timeline.bubble_fraction():.1%}"
    )


def pipeline_figure(
    result: SimResult | Timeline, *, selected_microbatch: int | None = None,
    selected_stage: int | None = None, title: str = "", height: int | None = None,
) -> go.Figure:  # fmt: skip
    """The Gantt chart of a simulated step (``SimResult`` with a timeline, or a Timeline).

    Rows are the pipeline's devices (stage d on device d; with interleaving device d runs
    stages d, d+p, ...); x is time in ms. Traces: one per ``EVENT_KINDS`` entry, then
    ``selected`` (the outline of the selected microbatch, or of a stage's steps).

    >>> import explorer as ex
    >>> sim = ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4, microbatch_size=2),
    ...                   global_batch=32, seq=512)
    >>> fig = pipeline_figure(sim)
    >>> fig.data[0].name, fig.data[0].text[:2]
    ('compute-forward', ('F0', 'F1'))
    """
    sim = result if isinstance(result, SimResult) else None
    timeline = sim.timeline if sim is not None else result
    if timeline is None:
        raise ValueError(
            "pipeline_figure needs an event timeline: pass ex.simulate(...)'s result (an "
            "estimate has none) or a Timeline"
        )
    chunks = sim.config.virtual_stages if sim is not None else 1
    traces = []
    for kind in EVENT_KINDS:
        a = kind_arrays(timeline, kind)
        thin = kind == "pp-comm"
        marker: dict = {"color": EVENT_COLORS[kind], "line": {"width": 0}}
        if kind == "idle":
            marker["pattern"] = {"shape": "/", "fgcolor": "#B0B0B0", "size": 6}
        traces.append(go.Bar(
            orientation="h", name=kind, y=a["y"], base=a["base"], x=a["x"], text=a["text"],
            customdata=a["customdata"], hovertext=a["hovertext"], hoverinfo="text",
            textposition="inside", insidetextanchor="middle", textfont={"size": 9},
            marker=marker, width=0.18 if thin else 0.8, offset=0.3 if thin else -0.4,
            showlegend=True,
        ))  # fmt: skip
    sel = _selected_arrays(timeline, selected_microbatch, selected_stage)
    traces.append(go.Bar(
        orientation="h", name="selected", y=sel["y"], base=sel["base"], x=sel["x"],
        marker={"color": "rgba(0,0,0,0)", "line": {"width": 2.5, "color": SELECTED}},
        width=0.8, offset=-0.4, hoverinfo="skip", showlegend=False,
    ))  # fmt: skip
    fig = go.Figure(traces)
    pp = timeline.devices
    fig.update_layout(
        title=title or pipeline_title(sim, timeline), barmode="overlay",
        height=height or max(220, 70 + 42 * pp), bargap=0.15,
        xaxis={"title": "time (ms)", "rangemode": "tozero"},
        yaxis={"tickmode": "array", "tickvals": list(range(pp)),
               "ticktext": row_labels(pp, chunks), "autorange": "reversed",
               "range": None},
        legend={"orientation": "h", "x": 0, "y": -0.18, "yanchor": "top", "font": {"size": 10}},
        uniformtext={"minsize": 7, "mode": "hide"}, plot_bgcolor="white",
        margin={"l": 10, "r": 10, "t": 40, "b": 40}, clickmode="event",
    )  # fmt: skip
    return fig
