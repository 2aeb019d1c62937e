"""``PlanDiffView``: two plans side by side (``ex.diff``): the difference by term, the rows
that differ, and for sharding plans the graph with the ops that changed strategy ringed and
the chosen op's two layouts on the mesh.

Everything shown is the core's ``PlanDiff`` / ``TrainingDiff``; the view draws it. The op
menu lists the rows that differ (largest first); a click on a ringed op in the graph, or a
node selected in a linked view, chooses it too.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as ipw
import traitlets as tl

import explorer as ex
from explorer.diff import PlanDiff

from .base import View, replace_figure
from .figure_widget import FigureWidget
from .figures.graph import graph_figure
from .figures.plan_diff import layouts_figure, terms_figure
from .format import fmt_bytes
from .selection import Selection

__all__ = ["PlanDiffView", "rows_html"]

_STYLE = {"description_width": "initial"}
MAX_ROWS = 40  # rows of the table shown (the diff keeps them all)


def rows_html(d, max_rows: int = MAX_ROWS) -> str:
    """The diff's rows as an HTML table (sharding: op, count, strategies, collectives,
    b - a; training: group, aspect, a, b, b - a)."""
    cell = "padding:2px 8px;text-align:left;vertical-align:top"
    num = "padding:2px 8px;text-align:right;vertical-align:top"
    if isinstance(d, PlanDiff):
        unit = "s" if d.unit == "seconds" else "B"
        th = lambda text, style=cell: f"<th style='{style}'>{text}</th>"  # noqa: E731
        head = ("<tr>" + th("op") + th("copies", num) + th("a") + th("b")
                + th("collectives a / b") + th(f"b - a ({unit})", num) + "</tr>")  # fmt: skip
        body = []
        for r in d.rows[:max_rows]:
            colls = (escape("; ".join(r.collectives_a) or "none") + "<br>"
                     + escape("; ".join(r.collectives_b) or "none"))  # fmt: skip
            same = "" if r.changed else " (same; inputs differ)"
            body.append(
                f"<tr><td style='{cell}'>%{escape(r.label)}</td><td style='{num}'>{r.count}</td>"
                f"<td style='{cell}'>{escape(r.strategy_a)}</td><td style='{cell}'>"
                f"{escape(r.strategy_b)}{same}</td><td style='{cell};font-size:11px'>{colls}</td>"
                f"<td style='{num}'>{r.delta:+.4g}</td></tr>"
            )
        more = len(d.rows) - max_rows
    else:
        th = lambda text, style=cell: f"<th style='{style}'>{text}</th>"  # noqa: E731
        head = ("<tr>" + th("group") + th("aspect") + th("a") + th("b") + th("b - a", num)
                + "</tr>")  # fmt: skip
        body = []
        for r in d.rows[:max_rows]:
            delta = ""
            if r.delta is not None:
                delta = fmt_bytes(r.delta) if r.unit == "bytes" else f"{r.delta:+.3g} {r.unit}"
                if r.unit == "bytes" and r.delta > 0:
                    delta = "+" + delta
            body.append(
                f"<tr><td style='{cell}'>{escape(r.group)}</td><td style='{cell}'>"
                f"{escape(r.name)}</td><td style='{cell}'>{escape(r.a)}</td>"
                f"<td style='{cell}'>{escape(r.b)}</td><td style='{num}'>{delta}</td></tr>"
            )
        more = len(d.rows) - max_rows
    tail = f"<p><i>{more} more rows (diff.rows)</i></p>" if more > 0 else ""
    return (f"<table style='border-collapse:collapse;font-size:12px'>{head}{''.join(body)}"
            f"</table>{tail}")  # fmt: skip


class PlanDiffView(View):
    """Two plans side by side.

    Args:
        a, b: two ShardingPlans of one graph and mesh, or two training plans (TrainingPlan,
            SimResult, or a configuration such as ``"dp16 tp8"`` simulated in the other
            side's context): what ``ex.diff`` takes.

    Controls: ``op`` (sharding plans: the rows that differ; choosing one draws its two
    layouts on the mesh and selects it in linked views).

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g")
    >>> a, b = ex.search(g, mesh, "ilp", top_k=2).top_k(2)
    >>> view = PlanDiffView(a, b)
    >>> view.diff.total == b.cost.total - a.cost.total
    True
    """

    diff = tl.Any(None, allow_none=True, help="the core's PlanDiff or TrainingDiff drawn")
    op = tl.Unicode(None, allow_none=True, help="the op whose two layouts are drawn")

    selection_traits = ("node",)
    name = "plan diff"

    def __init__(self, a: Any, b: Any, *, selection: Selection | None = None) -> None:
        super().__init__(selection=None)
        self.diff = ex.diff(a, b)
        self.summary = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.table = ipw.HTML(layout=ipw.Layout(width="auto", overflow="auto"))
        self.figure = FigureWidget(terms_figure(self.diff))
        self.graph_figure = self.mesh_figure = None
        self.controls = {}
        rows: list[ipw.Widget] = [self.summary, self.figure]
        if self.sharding:
            self.graph_figure = FigureWidget(self._graph())
            self.graph_figure.data[1].on_click(self._on_click)
            self.controls["op"] = ipw.Dropdown(
                options=self._options(), description="op", style=_STYLE,
                layout=ipw.Layout(width="auto", max_width="40em"),
            )  # fmt: skip
            self.controls["op"].observe(self._on_op, names="value")
            self.op = self.controls["op"].value
            self.mesh_figure = FigureWidget(self._layouts())
            rows += [self.graph_figure, self.controls["op"], self.mesh_figure]
        rows.append(self.table)
        self._fill()
        self._layout_children(*rows)
        self.link(selection or Selection())

    def set_plans(self, a: Any, b: Any) -> None:
        """Diff two other plans of the same kind (sharding plans: of the same graph) and
        redraw; an error leaves the view as it was."""
        d = ex.diff(a, b)
        if isinstance(d, PlanDiff) != self.sharding or (
            self.sharding and d.a.graph is not self.diff.a.graph
        ):
            raise ex.ExplorerError(
                "set_plans: this view draws "
                + (f"sharding plans of {self.diff.a.graph.name!r}" if self.sharding
                   else "training plans")
                + "; build a new PlanDiffView for other plans"
            )  # fmt: skip
        self.diff = d
        replace_figure(self.figure, terms_figure(d))
        if self.sharding:
            replace_figure(self.graph_figure, self._graph())
            self.op = None
            self.controls["op"].options = self._options()  # selects the first: no redraw yet
            self.op = self.controls["op"].value
            replace_figure(self.mesh_figure, self._layouts())
        self._fill()

    def _graph(self):
        d = self.diff
        # ringed: every op whose strategy changed
        return graph_figure(d.a.graph, d.b, color_by="strategy", highlight=d.changed_ops,
                            change_threshold=0.0)  # fmt: skip

    def _options(self) -> list[tuple[str, str | None]]:
        rows = self.diff.rows
        return [(f"%{r.label}" + (f" (x{r.count})" if r.count > 1 else ""), r.ops[0])
                for r in rows] or [("(no op differs)", None)]  # fmt: skip

    @property
    def sharding(self) -> bool:
        return isinstance(self.diff, PlanDiff)

    # --- drawing ------------------------------------------------------------------------
    def _fill(self) -> None:
        d = self.diff
        if self.sharding:
            u = "s" if d.unit == "seconds" else "B"
            text = (f"<b>a</b> {d.a.method} {d.a.cost.total:.4g} {u}, <b>b</b> {d.b.method} "
                    f"{d.b.cost.total:.4g} {u}: b - a <b>{d.total:+.4g} {u}</b>; "
                    f"{len(d.changed_ops)} ops change strategy (ringed in red), "
                    f"{d.unchanged} unchanged; memory per device a "
                    f"{fmt_bytes(d.memory_a_bytes)}, b {fmt_bytes(d.memory_b_bytes)}")  # fmt: skip
        else:
            text = (f"<b>a</b> {escape(str(d.a.config))}: {d.a.step_time_s:.4g} s<br>"
                    f"<b>b</b> {escape(str(d.b.config))}: {d.b.step_time_s:.4g} s<br>"
                    f"b - a <b>{d.total:+.4g} s</b> ({d.total / d.a.step_time_s:+.1%})")  # fmt: skip
        self.summary.value = text
        self.table.value = rows_html(d)

    def _layouts(self):
        if self.op is None:
            return layouts_figure(self.diff.a, self.diff.b, self.diff.a.graph.nodes[-1].name)
        return layouts_figure(self.diff.a, self.diff.b, self.op)

    def _on_op(self, change: dict[str, Any]) -> None:
        try:
            if change["new"] is None or change["new"] == self.op:
                return
            self.op = change["new"]
            replace_figure(self.mesh_figure, self._layouts())
            self._select(node=self.op)
        except Exception as e:  # noqa: BLE001  (shown in the pane, see errors.py)
            self.errors.report(e, "op")

    def choose(self, node: str) -> None:
        """Draw ``node``'s two layouts (a node of a row that differs)."""
        d = self.diff
        row = next((r for r in d.rows if node in r.ops), None)
        if row is None:
            raise ex.ExplorerError(
                f"%{node} has the same strategy and cost in both plans; choose one of the "
                f"{len(d.rows)} ops that differ (view.controls['op'].options)"
            )
        self.controls["op"].value = row.ops[0]

    def _on_click(self, trace, points, state) -> None:
        try:
            for i in points.point_inds:
                self.click(str(trace.customdata[i]))
        except Exception as e:  # noqa: BLE001  (shown in the pane, see errors.py)
            self.errors.report(e, "click")

    def click(self, unit: str) -> None:
        """A click on a graph unit: a ringed op draws its layouts; others are ignored."""
        if any(unit in r.ops for r in self.diff.rows):
            self.choose(unit)

    def on_selection(self, change: dict[str, Any]) -> None:
        node = change["new"]
        if self.sharding and node and any(node in r.ops for r in self.diff.rows):
            self.choose(node)
