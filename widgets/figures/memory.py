"""``memory_figure``: memory per pipeline device as stacked bars against the device capacity
(in the manner of the Ultra-Scale Playbook's memory widget).

One bar per pipeline device (stage d on device d; the data-parallel and tensor-parallel
replicas of a stage hold the same), one stacked segment per row of
``MemoryBreakdown.ROWS`` (parameters, gradients, optimizer states, activations, the
recompute working set, the ZeRO-3 gather buffer, and each allowance: runtime context,
communication buffers, fragmentation). The capacity is a dashed line (layout shape 0); the
selected stage is framed (layout shape 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from explorer.training import MemoryBreakdown, SimResult

from ..colors import CHANGED, MEMORY_COLORS, SELECTED

__all__ = ["memory_figure", "memory_columns", "memory_title", "TRACE_TOTAL", "ROWS"]

ROWS: tuple[str, ...] = MemoryBreakdown.ROWS
TRACE_TOTAL = len(ROWS)  # the text trace of totals, after one bar trace per row
_GIB = 2**30


def memory_columns(mems: Sequence[MemoryBreakdown], chunks: int = 1) -> dict:
    """x labels, per-row heights (GiB) and totals of ``mems`` (one per pipeline device)."""
    x = [f"stage {m.stage}" if chunks == 1 else f"device {m.stage}" for m in mems]
    rows = {r: [getattr(m, r) / _GIB for m in mems] for r in ROWS}
    totals = [m.total / _GIB for m in mems]
    return {"x": x, "rows": rows, "totals": totals}


def memory_title(sim: SimResult) -> str:
    c, gib = sim.config, _GIB
    verdict = "fits" if sim.fits else f"over by {sim.over_memory_bytes / gib:.1f} GiB"
    return (
        f"{sim.model}, {c}: worst {sim.memory.total / gib:.1f} of "
        f"{sim.memory_cap_bytes / gib:.0f} GiB ({verdict})"
    )


def _shapes(cap_gib: float, n: int, selected: int | None) -> list[dict]:
    line = {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": cap_gib,
            "y1": cap_gib, "line": {"color": CHANGED, "width": 2, "dash": "dash"}}  # fmt: skip
    sel = selected is not None and 0 <= selected < n
    frame = {"type": "rect", "xref": "x", "yref": "paper", "y0": 0, "y1": 1,
             "x0": (selected if sel else 0) - 0.45, "x1": (selected if sel else 0) + 0.45,
             "line": {"color": SELECTED, "width": 2}, "visible": sel}  # fmt: skip
    return [line, frame]


def memory_figure(
    result: SimResult | Sequence[MemoryBreakdown], cap_bytes: float | None = None, *,
    selected_stage: int | None = None, title: str = "", chunks: int = 1,
) -> go.Figure:  # fmt: skip
    """Stacked memory bars per pipeline device with the capacity line.

    Args:
        result: a SimResult (its ``memory_per_device``; one per pipeline device from
            ``simulate``) or the breakdowns themselves (then give ``cap_bytes``).
        selected_stage: the stage (device) to frame.

    Traces: one bar per ``ROWS`` entry, then ``total`` (text above each bar).

    >>> import explorer as ex
    >>> sim = ex.simulate("gpt2", ex.ParallelConfig(pp=2, microbatch_size=2),
    ...                   global_batch=8, seq=512)
    >>> fig = memory_figure(sim)
    >>> [t.name for t in fig.data][:4], fig.layout.shapes[0].y0
    (['parameters', 'gradients', 'optimizer_states', 'activations'], 80.0)
    """
    if isinstance(result, SimResult):
        mems, cap = result.memory_per_device, result.memory_cap_bytes
        chunks, title = result.config.virtual_stages, title or memory_title(result)
    else:
        mems, cap = tuple(result), cap_bytes
        if cap is None:
            raise ValueError("memory_figure(breakdowns) needs cap_bytes (the device memory)")
    cols = memory_columns(mems, chunks)
    cap_gib = cap / _GIB
    traces = [
        go.Bar(x=cols["x"], y=cols["rows"][r], name=r.replace("_", " "),
               marker_color=MEMORY_COLORS[r],
               hovertemplate="%{x}: %{y:.2f} GiB<extra>" + r.replace("_", " ") + "</extra>")
        for r in ROWS
    ]  # fmt: skip
    for t, r in zip(traces, ROWS, strict=True):
        t.name = r  # the row key (legend shows it with underscores; tests look it up)
    traces.append(go.Scatter(
        x=cols["x"], y=cols["totals"], mode="text", name="total", showlegend=False,
        text=[f"{v:.1f} GiB" for v in cols["totals"]], textposition="top center",
        textfont={"color": [CHANGED if v > cap_gib else "#222" for v in cols["totals"]]},
        hoverinfo="skip",
    ))  # fmt: skip
    fig = go.Figure(traces)
    top = max([*cols["totals"], cap_gib]) * 1.12
    fig.update_layout(
        title=title or "memory per device", barmode="stack", height=380,
        yaxis={"title": "GiB per device", "range": [0, top]},
        shapes=_shapes(cap_gib, len(mems), selected_stage),
        annotations=[{"text": f"capacity {cap_gib:.0f} GiB", "xref": "paper", "x": 1,
                      "yref": "y", "y": cap_gib, "showarrow": False, "xanchor": "right",
                      "yanchor": "bottom", "font": {"color": CHANGED, "size": 11}}],
        legend={"font": {"size": 10}}, margin={"l": 10, "r": 10, "t": 40, "b": 30},
        plot_bgcolor="white",
    )  # fmt: skip
    return fig
