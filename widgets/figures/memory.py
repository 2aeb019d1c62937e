"""``memory_figure``: memory per pipeline device as stacked bars against the device capacity
(in the manner of the Ultra-Scale Playbook's memory widget: one bar per configuration's
device, one colour per component with its human name, the capacity as a line).

One bar per pipeline device (stage d on device d; the data-parallel and tensor-parallel
replicas of a stage hold the same), one stacked segment per row of
``MemoryBreakdown.ROWS`` (parameters, gradients, optimizer states, activations, the
recompute working set, the ZeRO-3 gather buffer, and each allowance: runtime context,
communication buffers, fragmentation) — every row is a trace in every state, a zero row is
a zero-height segment that keeps its legend entry. The capacity is a dashed line (layout
shape 0); the selected stage is framed (layout shape 1); the total of each bar is written
above it (trace ``TRACE_TOTAL``).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from explorer.training import MemoryBreakdown, SimResult

from ..colors import CHANGED, MEMORY_COLORS, SELECTED
from ..format import fmt_bytes
from .errors import ViewError
from .style import base_layout

__all__ = [
    "memory_figure", "memory_columns", "memory_title", "memory_layout", "TRACE_TOTAL", "ROWS",
    "ROW_NAMES",
]  # fmt: skip

ROWS: tuple[str, ...] = MemoryBreakdown.ROWS
TRACE_TOTAL = len(ROWS)  # the text trace of totals, after one bar trace per row
ROW_NAMES: dict[str, str] = {
    "parameters": "Parameters",
    "gradients": "Gradients",
    "optimizer_states": "Optimizer states",
    "activations": "Activations",
    "recompute_working_set": "Recompute working set",
    "zero_gather_buffer": "ZeRO-3 gather buffer",
    "zero_reduce_buffer": "ZeRO-2/3 gradients before reduce-scatter",
    "runtime_context": "Runtime context (CUDA, kernels)",
    "communication_buffers": "Communication buffers",
    "fragmentation": "Fragmentation",
}
_GIB = 2**30


def memory_columns(mems: Sequence[MemoryBreakdown], chunks: int = 1) -> dict:
    """x labels, per-row heights (GiB) with their hover texts, totals (GiB) and their
    labels, for ``mems`` (one per pipeline device). Plain lists: a few bars."""
    x = [str(m.stage) for m in mems]  # short: 16 bars fit a laptop column unrotated
    rows = {r: [float(getattr(m, r)) / _GIB for m in mems] for r in ROWS}
    hover = {r: [fmt_bytes(getattr(m, r)) for m in mems] for r in ROWS}
    totals = [float(m.total) / _GIB for m in mems]
    return {"x": x, "rows": rows, "hover": hover, "totals": totals,
            "total_text": [fmt_bytes(m.total) for m in mems]}  # fmt: skip


def memory_title(sim: SimResult) -> str:
    c = sim.config
    verdict = "fits" if sim.fits else f"over by {fmt_bytes(sim.over_memory_bytes)}"
    return (
        f"{sim.model}, {c}: worst device {fmt_bytes(sim.memory.total)} of "
        f"{fmt_bytes(sim.memory_cap_bytes)} ({verdict})"
    )


def _shapes(cap_gib: float, n: int, selected: int | None) -> list[dict]:
    line = {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": cap_gib,
            "y1": cap_gib, "line": {"color": CHANGED, "width": 2, "dash": "dash"}}  # fmt: skip
    sel = selected is not None and 0 <= selected < n
    frame = {"type": "rect", "xref": "x", "yref": "paper", "y0": 0, "y1": 1,
             "x0": (selected if sel else 0) - 0.45, "x1": (selected if sel else 0) + 0.45,
             "line": {"color": SELECTED, "width": 2}, "visible": sel}  # fmt: skip
    return [line, frame]


def memory_layout(
    cols: dict, cap_bytes: float, n: int, selected: int | None, title: str, chunks: int = 1
) -> dict:  # fmt: skip
    """The layout keys that change with the data: title, y range, capacity line, frame."""
    cap_gib = cap_bytes / _GIB
    top = max([*cols["totals"], cap_gib]) * 1.15
    base = base_layout(title, legend=False)
    return {
        "title": base["title"],
        "margin": {"t": base["margin"]["t"], "b": 120},
        "yaxis": {"title": {"text": "memory per device (GiB)"}, "range": [0, top],
                  "autorange": False, "gridcolor": "#EEE"},
        "xaxis": {"title": {"text": "pipeline stage" if chunks == 1 else
                            f"pipeline device (device d runs stages d, d+{n}, …)"},
                  "type": "category", "tickangle": 0},
        "shapes": _shapes(cap_gib, n, selected),
        "annotations": [{"text": f"capacity {fmt_bytes(cap_bytes)}", "xref": "paper", "x": 1,
                         "yref": "y", "y": cap_gib, "showarrow": False, "xanchor": "right",
                         "yanchor": "bottom", "font": {"color": CHANGED, "size": 11}}],
    }  # fmt: skip


def total_colors(cols: dict, cap_bytes: float) -> list[str]:
    return [CHANGED if v > cap_bytes / _GIB else "#222" for v in cols["totals"]]


def memory_figure(
    result: SimResult | Sequence[MemoryBreakdown], cap_bytes: float | None = None, *,
    selected_stage: int | None = None, title: str = "", chunks: int = 1,
) -> go.Figure:  # fmt: skip
    """Stacked memory bars per pipeline device with the capacity line.

    Args:
        result: a SimResult (its ``memory_per_device``; one per pipeline device from
            ``simulate``) or the breakdowns themselves (then give ``cap_bytes``).
        selected_stage: the stage (device) to frame.

    Traces: one bar per ``ROWS`` entry (named by ``ROW_NAMES``, ``legendgroup`` = the row
    key), then ``total`` (text above each bar).

    >>> import explorer as ex
    >>> sim = ex.simulate("gpt2", ex.ParallelConfig(pp=2, microbatch_size=2),
    ...                   global_batch=8, seq=512)
    >>> fig = memory_figure(sim)
    >>> [t.name for t in fig.data][:3], fig.layout.shapes[0].y0
    (['Parameters', 'Gradients', 'Optimizer states'], 80.0)
    """
    if isinstance(result, SimResult):
        mems, cap = result.memory_per_device, result.memory_cap_bytes
        chunks, title = result.config.virtual_stages, title or memory_title(result)
    else:
        mems, cap = tuple(result), cap_bytes
        if cap is None:
            raise ViewError("memory_figure(breakdowns) needs cap_bytes (the device memory)")
    cols = memory_columns(mems, chunks)
    traces = [
        go.Bar(x=cols["x"], y=cols["rows"][r], name=ROW_NAMES[r], legendgroup=r,
               customdata=cols["hover"][r], marker_color=MEMORY_COLORS[r],
               hovertemplate="%{x}: %{customdata}<extra>" + ROW_NAMES[r] + "</extra>")
        for r in ROWS
    ]  # fmt: skip
    traces.append(go.Scatter(
        x=cols["x"], y=cols["totals"], mode="text", name="total", showlegend=False,
        text=cols["total_text"], textposition="top center",
        textfont={"color": total_colors(cols, cap)}, hoverinfo="skip",
    ))  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(base_layout(title or "memory per device", height=480, legend=False))
    fig.update_layout(
        barmode="stack", plot_bgcolor="white", showlegend=True,
        legend={"orientation": "h", "x": 0.0, "xanchor": "left", "yref": "container", "y": 0.0,
                "yanchor": "bottom", "font": {"size": 11}, "traceorder": "normal"},
        **memory_layout(cols, cap, len(mems), selected_stage, title or "memory per device",
                        chunks),
    )  # fmt: skip
    return fig
