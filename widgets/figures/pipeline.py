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

from explorer.training import SimResult, Timeline
from explorer.training.pipeline.timeline import EVENT_KINDS

from ..colors import EVENT_COLORS, SELECTED

__all__ = [
    "pipeline_figure", "pipeline_title", "kind_arrays", "selected_arrays", "timeline_columns",
    "TRACE_SELECTED_MB", "row_labels", "figure_height", "EVENT_KINDS",
]  # fmt: skip

TRACE_SELECTED_MB = len(EVENT_KINDS)  # after one trace per event kind
_MS = 1e3
_SHORT = {"compute-forward": "F", "compute-backward": "B", "recompute": "R"}


def figure_height(pp: int) -> int:
    return max(220, 110 + 42 * pp)


def row_labels(pp: int, chunks: int) -> list[str]:
    """``stage d`` per pipeline device (``dev d: stages d, d+p`` when interleaved)."""
    if chunks == 1:
        return [f"stage {d}" for d in range(pp)]
    return [f"dev {d}: st " + ",".join(str(c * pp + d) for c in range(chunks)) for d in range(pp)]


def timeline_columns(timeline: Timeline) -> dict[str, np.ndarray]:
    """The events as numpy columns (one pass; the figure never loops over events again):
    kind, device, start/end (ms), stage, microbatch."""
    ev = timeline.events
    n = len(ev)
    kind = np.array([e.kind for e in ev], dtype=object)
    num = np.fromiter(
        (x for e in ev for x in (e.device, e.start_s, e.end_s, e.stage, e.microbatch)),
        dtype=float, count=5 * n,
    ).reshape(n, 5)  # fmt: skip
    return {
        "kind": kind, "device": num[:, 0].astype(int), "start": num[:, 1] * _MS,
        "end": num[:, 2] * _MS, "stage": num[:, 3].astype(int), "mb": num[:, 4].astype(int),
    }  # fmt: skip


def kind_arrays(cols: dict[str, np.ndarray], kind: str) -> dict:
    """The bar data of one event kind: y (device), base and x (start and length in ms),
    customdata ([stage, microbatch, start, end]); labels and hover are per-trace templates
    over customdata, so no per-event string is made in Python."""
    m = cols["kind"] == kind
    start, end = cols["start"][m], cols["end"][m]
    custom = np.column_stack([cols["stage"][m], cols["mb"][m], start, end])
    return {"y": cols["device"][m], "base": start, "x": np.maximum(end - start, 0.0),
            "customdata": custom}  # fmt: skip


def selected_arrays(
    cols: dict[str, np.ndarray], microbatch: int | None, stage: int | None
) -> dict[str, np.ndarray]:
    """Outline bars: the compute steps of ``microbatch`` (on ``stage`` only, if given), or
    of every microbatch on ``stage``; nothing when neither is given."""
    if microbatch is None and stage is None:
        return {"y": np.array([], int), "base": np.array([]), "x": np.array([])}
    m = np.isin(cols["kind"], ("compute-forward", "compute-backward", "recompute"))
    if microbatch is not None:
        m &= cols["mb"] == microbatch
    if stage is not None:
        m &= cols["stage"] == stage
    return {"y": cols["device"][m], "base": cols["start"][m],
            "x": cols["end"][m] - cols["start"][m]}  # fmt: skip


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
    >>> fig.data[0].name, fig.data[0].texttemplate, fig.data[0].customdata[0][:2].tolist()
    ('compute-forward', 'F%{customdata[1]}', [0.0, 0.0])
    """
    sim = result if isinstance(result, SimResult) else None
    timeline = sim.timeline if sim is not None else result
    if timeline is None:
        raise ValueError(
            "pipeline_figure needs an event timeline: pass ex.simulate(...)'s result (an "
            "estimate has none) or a Timeline"
        )
    chunks = sim.config.virtual_stages if sim is not None else 1
    cols = timeline_columns(timeline)
    traces = []
    for kind in EVENT_KINDS:
        a = kind_arrays(cols, kind)
        thin = kind == "pp-comm"
        marker: dict = {"color": EVENT_COLORS[kind], "line": {"width": 0}}
        if kind == "idle":
            marker["pattern"] = {"shape": "/", "fgcolor": "#B0B0B0", "size": 6}
        short = _SHORT.get(kind)
        where = "stage %{customdata[0]}, microbatch %{customdata[1]}<br>" if short else ""
        traces.append(go.Bar(
            orientation="h", name=kind, y=a["y"], base=a["base"], x=a["x"],
            customdata=a["customdata"],
            texttemplate=f"{short}%{{customdata[1]}}" if short else None,
            hovertemplate=f"{where}%{{customdata[2]:.3f}} → %{{customdata[3]:.3f}} ms "
                          f"(%{{x:.3f}} ms)<extra>{kind}</extra>",
            textposition="inside" if short else "none", insidetextanchor="middle",
            textfont={"size": 9}, marker=marker, width=0.18 if thin else 0.8,
            offset=0.3 if thin else -0.4,
        ))  # fmt: skip
    sel = selected_arrays(cols, selected_microbatch, selected_stage)
    traces.append(go.Bar(
        orientation="h", name="selected", y=sel["y"], base=sel["base"], x=sel["x"],
        marker={"color": "rgba(0,0,0,0)", "line": {"width": 2.5, "color": SELECTED}},
        width=0.8, offset=-0.4, hoverinfo="skip", showlegend=False,
    ))  # fmt: skip
    fig = go.Figure(traces)
    pp = timeline.devices
    fig.update_layout(
        title=title or pipeline_title(sim, timeline), barmode="overlay",
        height=height or figure_height(pp), bargap=0.15,
        xaxis={"title": "time (ms)", "rangemode": "tozero"},
        yaxis={"tickmode": "array", "tickvals": list(range(pp)),
               "ticktext": row_labels(pp, chunks), "autorange": "reversed",
               "range": None},
        legend={"orientation": "h", "x": 0, "y": -0.18, "yanchor": "top", "font": {"size": 10}},
        uniformtext={"minsize": 7, "mode": "hide"}, plot_bgcolor="white",
        margin={"l": 10, "r": 10, "t": 40, "b": 40}, clickmode="event",
    )  # fmt: skip
    return fig
