"""``TraceTimelineView``: a profiled step next to the simulator's predicted step.

One row per lane and track (measured ranks first, then the predicted devices), the time
axis shared; a dropdown picks the profiled step; the table under it lists per track the
measured and predicted milliseconds, the largest difference first (`explorer.traces.
side_by_side`, drawn by `widgets.figures.trace_breakdown.side_by_side_figure`).

>>> import explorer as ex
>>> from explorer.traces.cpu_runs import tiny_gpt_config
>>> t = ex.traces.load_kineto(ex.traces.vendored("cpu_gloo_ddp"))
>>> sim = ex.simulate(tiny_gpt_config(), ex.ParallelConfig(dp=2, microbatch_size=4),
...                   "a100-80g", 8, 32)
>>> view = TraceTimelineView(t, sim, axes={"dp": 2})
>>> view.controls["step"].value = view.controls["step"].options[0]
>>> view.sbs.step == view.controls["step"].options[0]
True
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as ipw

from explorer.traces import KinetoTrace, SideBySide, side_by_side

from .base import View, replace_figure
from .figure_widget import FigureWidget
from .figures.trace_breakdown import side_by_side_figure

__all__ = ["TraceTimelineView", "differences_html"]


def differences_html(s: SideBySide) -> str:
    """The per-track differences as an HTML table (ms), largest first."""
    rows = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{m * 1e3:.3f}</td><td>{p * 1e3:.3f}</td>"
        f"<td>{(m - p) * 1e3:+.3f}</td></tr>"
        for t, m, p in s.differences
    )
    # padded cells, numbers right-aligned: the headers ran together at 1440x900
    style = (
        "<style>.explorer-diff td, .explorer-diff th {padding: 2px 12px} "
        ".explorer-diff td + td, .explorer-diff th + th {text-align: right}</style>"
    )
    return (f"{style}<table class='explorer-diff'><tr><th>track</th><th>measured ms</th>"
            f"<th>predicted ms</th><th>difference ms</th></tr>{rows}</table>")  # fmt: skip


class TraceTimelineView(View):
    """Measured (a `KinetoTrace`) vs predicted (a `SimResult` of `explorer.simulate`) step.

    Args:
        trace: the profiled run; sim: the simulation of the same layout.
        axes: mesh axis sizes in rank order (names the collectives' tracks).
    """

    name = "trace timeline"

    def __init__(self, trace: KinetoTrace, sim, *, axes: dict[str, int] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.trace, self.sim, self.axes = trace, sim, axes
        self.sbs = side_by_side(trace, sim, axes=axes)
        steps = sorted({s.number for r in trace.ranks for s in r.steps})
        self.figure = FigureWidget(side_by_side_figure(self.sbs))
        self.controls = {"step": ipw.Dropdown(options=steps, value=self.sbs.step,
                                              description="profiled step",
                                              style={"description_width": "initial"},
                                              layout=ipw.Layout(width="16em"))}  # fmt: skip
        self.table = ipw.HTML(differences_html(self.sbs))
        self.controls["step"].observe(self.errors.guard(self._on_step), names="value")
        # _layout_children: the errors, and the plot fitted to the notebook column (a bare
        # FigureWidget is drawn 700 px wide)
        self._layout_children(self.controls["step"], self.figure, self.table)

    def _on_step(self, change: dict[str, Any]) -> None:
        self.sbs = side_by_side(self.trace, self.sim, step=change["new"], axes=self.axes)
        replace_figure(self.figure, side_by_side_figure(self.sbs))
        self.table.value = differences_html(self.sbs)
