"""``GraphView``: the computation graph, collapsible by layer, linked by selection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

from explorer.ir import Graph

from .base import View
from .figures.graph import (
    COLOR_BY,
    TRACE_CHANGED,
    TRACE_NODES,
    TRACE_SELECTED,
    graph_figure,
    unit_colors,
    unit_hover,
)
from .figures.layout import LARGE_GRAPH, GraphLayout, graph_layout, layer_scopes
from .selection import Selection

__all__ = ["GraphView"]


class GraphView(View):
    """The graph as a layered DAG; click a node to select it, a layer box to expand it.

    Args:
        graph: an ``explorer.ir.Graph``.
        plan: a ShardingPlan (or later through the linked selection's ``plan``).
        color_by: ``group``, ``strategy``, ``cost``, ``communication`` or ``stage``.
        collapsed: start with every repeated layer as one box (default: graphs of
            ``LARGE_GRAPH`` = 2,000 nodes or more).
        selection: a shared ``Selection`` (default: a new one).

    >>> import explorer as ex
    >>> view = GraphView(ex.models.build(ex.models.load("mlp-small"), batch=8))
    >>> view.controls["color_by"].value = "group"; view.click("layers.0.fc1")
    >>> view.selection.node
    'layers.0.fc1'
    """

    # --- data ---------------------------------------------------------------------------
    graph = tl.Instance(Graph)
    plan = tl.Any(None, allow_none=True)
    stages = tl.Any(None, allow_none=True, help="{node: stage} for color_by='stage' (part 2)")
    # --- display ------------------------------------------------------------------------
    color_by = tl.Enum(COLOR_BY, default_value="group")
    collapsed = tl.Tuple(help="layer scopes drawn as one box each")
    # --- mirrored from the selection ----------------------------------------------------
    selected = tl.Unicode(None, allow_none=True)
    highlight = tl.Tuple()

    selection_traits = ("node", "plan", "highlight")
    name = "graph"

    def __init__(
        self, graph: Graph, plan=None, *, color_by: str = "group", collapsed: bool | None = None,
        selection: Selection | None = None, webgl: bool | None = None,
        stages: Mapping[str, int] | None = None,
    ) -> None:  # fmt: skip
        self._ready = False
        super().__init__(selection=None)
        self.graph, self.plan, self.stages, self.color_by = graph, plan, stages, color_by
        self.webgl = len(graph) >= LARGE_GRAPH if webgl is None else webgl
        start = len(graph) >= LARGE_GRAPH if collapsed is None else collapsed
        self.collapsed = layer_scopes(graph) if start else ()
        self._layout: GraphLayout = graph_layout(graph, self.collapsed)
        self.figure = go.FigureWidget(self._build())
        self.figure.data[TRACE_NODES].on_click(self.errors.guard(self._on_click))
        self.controls = {
            "color_by": ipw.Dropdown(options=COLOR_BY, value=color_by, description="colour"),
            "collapsed": ipw.Checkbox(
                value=bool(self.collapsed), description="collapse layers", indent=False
            ),  # fmt: skip
        }
        self.controls["color_by"].observe(self.errors.guard(self._on_color), names="value")
        self.controls["collapsed"].observe(self.errors.guard(self._on_collapse), names="value")
        self.info = ipw.HTML()
        self._layout_children(
            ipw.HBox([self.controls["color_by"], self.controls["collapsed"]]), self.figure,
            self.info,
        )  # fmt: skip
        self._ready = True
        self.link(selection or Selection())

    # --- building -----------------------------------------------------------------------
    def _build(self) -> go.Figure:
        return graph_figure(
            self.graph, self.plan, color_by=self.color_by, highlight=self.highlight,
            selected=self.selected, webgl=self.webgl, stages=self.stages, layout=self._layout,
        )  # fmt: skip

    def _relayout(self) -> None:
        """Positions changed (a layer expanded or collapsed): replace every trace's data."""
        self._layout = graph_layout(self.graph, self.collapsed)
        new = self._build()
        with self.figure.batch_update():
            for old, fresh in zip(self.figure.data, new.data, strict=True):
                old.update(fresh.to_plotly_json(), overwrite=True)
            self.figure.layout.title = new.layout.title

    def _recolor(self, hover: bool = False) -> None:
        colors, numeric = unit_colors(self.graph, self._layout, self.color_by, self.plan,
                                      self.stages)  # fmt: skip
        nodes = self.figure.data[TRACE_NODES]
        with self.figure.batch_update():
            nodes.marker.color = colors
            nodes.marker.showscale = numeric
            if numeric:
                nodes.marker.colorscale = "Viridis"
                nodes.marker.colorbar.title.text = f"log10 {self.color_by}"
            if hover:
                nodes.hovertext = [unit_hover(self.graph, self._layout, u, self.plan)
                                   for u in self._layout.units]  # fmt: skip

    def _mark(self, trace: int, names) -> None:
        names = set(names)
        idx = [i for i, u in enumerate(self._layout.units)
               if names.intersection(self._layout.members[u])]  # fmt: skip
        with self.figure.batch_update():
            self.figure.data[trace].x = self._layout.x[idx]
            self.figure.data[trace].y = self._layout.y[idx]

    # --- trait observers ----------------------------------------------------------------
    @tl.observe("plan")
    def _plan_changed(self, change: dict[str, Any]) -> None:
        if self._ready:
            self._recolor(hover=True)

    @tl.observe("selected")
    def _selected_changed(self, change: dict[str, Any]) -> None:
        if self._ready:
            self._mark(TRACE_SELECTED, [change["new"]] if change["new"] else [])
            self.info.value = self._describe(change["new"])

    @tl.observe("highlight")
    def _highlight_changed(self, change: dict[str, Any]) -> None:
        if self._ready:
            self._mark(TRACE_CHANGED, change["new"])

    # --- controls and clicks ------------------------------------------------------------
    def _on_color(self, change: dict[str, Any]) -> None:
        self.color_by = change["new"]
        self._recolor()

    def _on_collapse(self, change: dict[str, Any]) -> None:
        self.collapsed = layer_scopes(self.graph) if change["new"] else ()
        self._relayout()

    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            self.click(self._layout.units[points.point_inds[0]])

    def click(self, unit: str) -> None:
        """What a click does: a layer box expands; a node becomes the selection."""
        if unit.startswith("scope:"):
            self.expand(unit[len("scope:") :])
            return
        self.selected = unit
        self._select(node=unit)

    def expand(self, scope: str) -> None:
        if scope not in self.collapsed:
            raise ValueError(f"layer {scope!r} is not collapsed; collapsed: {self.collapsed}")
        self.collapsed = tuple(s for s in self.collapsed if s != scope)
        self._relayout()

    def collapse(self, scope: str) -> None:
        if scope not in layer_scopes(self.graph):
            raise ValueError(
                f"{scope!r} is not a layer scope of {self.graph.name!r}; "
                f"layer scopes: {', '.join(layer_scopes(self.graph)[:4])}..."
            )
        if scope not in self.collapsed:
            self.collapsed = tuple(s for s in layer_scopes(self.graph)
                                   if s in self.collapsed or s == scope)  # fmt: skip
            self._relayout()

    def unit_of(self, node: str) -> str | None:
        """The drawn unit (the node, or the box of its collapsed layer)."""
        return self._layout.unit_of(node)

    def _describe(self, node: str | None) -> str:
        if not node:
            return ""
        if self.plan is None:
            return f"selected %{node}"
        return "<pre>" + str(self.plan.explain(node)) + "</pre>"

    # --- selection ----------------------------------------------------------------------
    def _on_linked(self, selection: Selection) -> None:
        if not getattr(self, "_ready", False):
            return
        if selection.graph is None:
            selection.publish(graph=self.graph)
        if selection.plan is not None and selection.plan.graph is self.graph:
            self.plan = selection.plan
        self.highlight = tuple(selection.highlight)
        self.selected = selection.node if selection.node in self.graph else None

    def on_selection(self, change: dict[str, Any]) -> None:
        if change["name"] == "node":
            node = change["new"]
            self.selected = node if node is not None and node in self.graph else None
        elif change["name"] == "plan":
            plan = change["new"]
            if plan is not None and plan.graph is not self.graph:
                self.graph = plan.graph
                self.collapsed = tuple(s for s in self.collapsed if s in layer_scopes(self.graph))
                self._relayout()
            self.plan = plan
            self.info.value = self._describe(self.selected)
        elif change["name"] == "highlight":
            self.highlight = tuple(change["new"])

    @property
    def layout_data(self) -> GraphLayout:
        return self._layout
