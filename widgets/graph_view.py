"""``GraphView``: the graph as nested groups (model > layer > block > op), searchable,
every group opened and closed by a click, linked to the others by the selection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ipywidgets as ipw
import numpy as np
import traitlets as tl

from explorer.ir import (
    CHANGE_THRESHOLD,
    ROOT,
    Graph,
    HierarchyError,
    Match,
    changed_materially,
    hierarchy,
)

from .base import View
from .errors import field
from .figure_widget import FigureWidget
from .figures.graph import (
    COLOR_BY,
    OPEN_PREFIX,
    PLOT_PX,
    TRACE_BOXES,
    TRACE_CHANGED,
    TRACE_GROUPS,
    TRACE_NODES,
    TRACE_SELECTED,
    changed_marks,
    graph_figure_spec,
    graph_height,
    label_px,
    unit_hover,
    unit_labels,
)
from .figures.layout import BOX_PREFIX, LARGE_GRAPH, GraphLayout, graph_layout
from .format import human_label
from .selection import Selection

__all__ = ["GraphView", "OPEN_BELOW"]

OPEN_BELOW = 200  # nodes: smaller graphs open with every group open, larger ones closed
FOCUS_SPAN = 40.0  # data units shown around a search match (op labels fit at this zoom)
FOCUS_MAX_SPAN = 60.0  # ... or its whole layer, when the layer is at most this wide
_COLOR_OPTIONS = [("op group", "group"), ("strategy", "strategy"), ("cost", "cost"),
                  ("communication", "communication"), ("pipeline stage", "stage")]  # fmt: skip


def _same(a, b) -> bool:
    """Equal spec values (arrays element by element; nested dicts holding arrays and
    arrays of another length count as changed)."""
    try:
        eq = a == b
        if isinstance(eq, bool):
            return eq
        return np.shape(a) == np.shape(b) and bool(np.all(eq))
    except (ValueError, TypeError):
        return False


class GraphView(View):
    """The graph as nested groups; click a box to open it, a frame's label to close it,
    an op to select it; search any name.

    Args:
        graph: an ``explorer.ir.Graph``.
        plan: a ShardingPlan (or later through the linked selection's ``plan``).
        color_by: ``group``, ``strategy``, ``cost``, ``communication`` or ``stage``.
        collapsed: start with every group closed (True) or open (False); default: closed
            for graphs of ``OPEN_BELOW`` nodes or more.
        selection: a shared ``Selection`` (default: a new one).
        webgl: draw the nodes with Scattergl (default: for ``LARGE_GRAPH`` nodes or more).
        stages: {node: pipeline stage} for ``color_by="stage"``.
        change_threshold: a red ring marks an op whose strategy changed (the selection's
            ``highlight``) and whose cost moved by at least this fraction of its cost in
            the baseline plan (the first plan the view showed; ``pin_baseline()`` re-pins).

    >>> import explorer as ex
    >>> view = GraphView(ex.models.build(ex.models.load("mlp-small"), batch=8))
    >>> view.controls["color_by"].value = "group"; view.click("layers.0.fc1")
    >>> view.selection.node
    'layers.0.fc1'
    """

    # --- data ---------------------------------------------------------------------------
    graph = tl.Instance(Graph)
    plan = tl.Any(None, allow_none=True)
    baseline = tl.Any(None, allow_none=True, help="the plan 'changed' rings compare against")
    stages = tl.Any(None, allow_none=True, help="{node: stage} for color_by='stage'")
    # --- display ------------------------------------------------------------------------
    color_by = tl.Enum(COLOR_BY, default_value="group")
    expanded = tl.Tuple(help="open group paths ('' = the model is always open)")
    change_threshold = tl.Float(CHANGE_THRESHOLD, help="fraction of an op's cost")
    # --- mirrored from the selection ----------------------------------------------------
    selected = tl.Unicode(None, allow_none=True)
    highlight = tl.Tuple(help="what the selection asks to emphasise (ops whose strategy changed)")
    changed = tl.Tuple(help="the ops ringed: highlighted and cost moved >= change_threshold")
    found = tl.Unicode(None, allow_none=True, help="the group or node the search jumped to")

    selection_traits = ("node", "plan", "highlight")
    name = "graph"

    def __init__(
        self, graph: Graph, plan=None, *, color_by: str = "group", collapsed: bool | None = None,
        selection: Selection | None = None, webgl: bool | None = None,
        stages: Mapping[str, int] | None = None, change_threshold: float = CHANGE_THRESHOLD,
    ) -> None:  # fmt: skip
        self._ready = False
        super().__init__(selection=None)
        self.graph, self.stages, self.color_by = graph, stages, color_by
        self.change_threshold = change_threshold
        #: the plot's width in the page (FitWidth measures it): labels are placed for it
        self.px = float(PLOT_PX)
        self.plan = plan
        self.baseline = plan
        self.webgl = len(graph) >= LARGE_GRAPH if webgl is None else webgl
        start = len(graph) >= OPEN_BELOW if collapsed is None else collapsed
        h = hierarchy(graph)
        self.expanded = () if start else tuple(p for p in h.groups if p != ROOT)
        self._matches: tuple[Match, ...] = ()
        self._match_i = 0
        self._layout: GraphLayout = graph_layout(graph, expanded=self.expanded)
        self._hover: dict[str, str] = {}  # unit -> hover text, for the current plan
        self._spec = self._build()
        self.figure = FigureWidget(self._spec)  # complete page state; fills the column
        self.figure.data[TRACE_NODES].on_click(self.errors.guard(self._on_click))
        self.figure.data[TRACE_GROUPS].on_click(self.errors.guard(self._on_click))
        self.figure.data[TRACE_BOXES].on_click(self.errors.guard(self._on_click))
        self.figure.layout.on_change(self.errors.guard(self._on_zoom), "xaxis.range")
        wide = {"description_width": "initial"}
        self.controls = {
            "color_by": ipw.Dropdown(options=_COLOR_OPTIONS, value=color_by,
                                     description="colour by", style=wide,
                                     layout=ipw.Layout(width="auto")),
            "search": ipw.Text(placeholder="a name, e.g. layers.3.mlp or q_w",
                               description="search", style=wide, continuous_update=False,
                               layout=ipw.Layout(width="22em")),
            "next": ipw.Button(description="next match", layout=ipw.Layout(width="auto"),
                               disabled=True),
            "collapsed": ipw.Checkbox(value=start, description="close all groups", indent=False,
                                      layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        search_box, self.search_error = field(self.controls["search"])
        self.controls["color_by"].observe(self.errors.guard(self._on_color), names="value")
        self.controls["search"].observe(self._on_search, names="value")
        self.controls["next"].on_click(self.errors.guard(lambda _: self.next_match()))
        self.controls["collapsed"].observe(self.errors.guard(self._on_collapse), names="value")
        self.match_info = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.info = ipw.HTML()
        row = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            ipw.HBox([self.controls["color_by"], search_box, self.controls["next"],
                      self.match_info, self.controls["collapsed"]],
                     layout=row),
            self.figure, self.info,
        )  # fmt: skip
        self._ready = True
        self.link(selection or Selection())

    # --- building -----------------------------------------------------------------------
    def _build(self, span: float | None = None) -> dict:
        hover = self._hover
        for u in self._layout.units:
            if u not in hover:
                hover[u] = unit_hover(self.graph, self._layout, u, self.plan)
        return graph_figure_spec(
            self.graph, self.plan, color_by=self.color_by, highlight=self.changed,
            selected=self.selected, webgl=self.webgl, stages=self.stages, layout=self._layout,
            change_threshold=self.change_threshold, span=span,
            hovertext=[hover[u] for u in self._layout.units], px=self.px,
        )  # fmt: skip

    def _redraw(self) -> None:
        """Apply a fresh spec of the current state to the figure on screen, as one message:
        only what differs from the last spec is validated and sent."""
        new, old = self._build(), self._spec
        with self.figure.batch_update():
            for trace, was, now in zip(self.figure.data, old["data"], new["data"], strict=True):
                changes = {k: v for k, v in now.items() if k != "type" and not _same(was.get(k), v)}
                if trace.name in ("changed", "selected"):  # _mark may have moved them since
                    changes.update(x=now["x"], y=now["y"], marker=now["marker"])
                if changes:
                    trace.update(changes, overwrite=True)
            # The height stays the first one: the page does not jump when a group opens,
            # and a plotly relayout of the height would end the plot's autosized width.
            new["layout"]["height"] = old["layout"]["height"]
            lay = {k: v for k, v in new["layout"].items()
                   if not _same(old["layout"].get(k), v)}  # fmt: skip
            if lay:
                self.figure.layout.update(lay, overwrite=True)
        self._spec = new
        self._mark_found()

    def _fit_plot(self, index: int, width: int) -> None:
        """The page measured the plot ``width`` px wide: place the labels for that width (they
        were placed for ``PLOT_PX``; in a narrower column, such as the dashboard's tab, they
        ran together: "tokens" over "tokens", "scores scale mask probs")."""
        super()._fit_plot(index, width)
        figures = self.figures_in_page_order()
        if not (0 <= index < len(figures) and figures[index] is self.figure) or width <= 0:
            return
        if abs(width - self.px) < 1:
            return
        self.px = float(width)
        rng = self.figure.layout.xaxis.range
        x0, x1, _, _ = self._layout.extent
        self._on_zoom(self.figure.layout, tuple(rng) if rng else (x0, x1))
        # the height for this width (after the width: the page keeps the width it was sent);
        # in a narrower column the 1000 px height left the plot's top and bottom empty
        m = self.figure.layout.margin
        height = graph_height(self._layout, self.px, (m.t or 0) + (m.b or 0))
        if abs(height - (self.figure.layout.height or 0)) > 24:
            self.figure.layout.height = height
            self._spec["layout"]["height"] = height

    def _relayout(self) -> None:
        """Groups opened or closed: new positions (every unit keeps its row), then redraw."""
        self._layout = graph_layout(self.graph, expanded=self.expanded, keep_rows=self._layout)
        self._redraw()

    def _mark(self, trace: int, names) -> None:
        lay = self._layout
        idx = sorted({lay.index(u) for n in names if (u := lay.unit_of(n)) is not None})
        with self.figure.batch_update():
            if trace == TRACE_CHANGED:
                self.figure.data[trace].update(changed_marks(lay, idx), overwrite=True)
            else:
                self.figure.data[trace].x = lay.x[idx]
                self.figure.data[trace].y = lay.y[idx]

    def _mark_found(self) -> None:
        """A found group's label carries the selection ring (a node's is its own)."""
        path = self.found
        if path is None or path not in hierarchy(self.graph).groups:
            return
        trace = self.figure.data[TRACE_GROUPS]
        ids = list(trace.customdata)
        key = OPEN_PREFIX + path
        with self.figure.batch_update():
            if key in ids:
                k = ids.index(key)
                self.figure.data[TRACE_SELECTED].x = [trace.x[k]]
                self.figure.data[TRACE_SELECTED].y = [trace.y[k]]
            elif (u := BOX_PREFIX + path) in self._layout.units:
                i = self._layout.index(u)
                self.figure.data[TRACE_SELECTED].x = [self._layout.x[i]]
                self.figure.data[TRACE_SELECTED].y = [self._layout.y[i]]

    # --- trait observers ----------------------------------------------------------------
    @tl.observe("plan")
    def _plan_changed(self, change: dict[str, Any]) -> None:
        new = change["new"]
        self._hover = {}
        if self.baseline is None or (new is not None and self.baseline.graph is not new.graph):
            self.baseline = new
        self._update_changed()
        if self._ready:
            self._redraw()

    @tl.observe("highlight", "change_threshold")
    def _highlight_changed(self, change: dict[str, Any]) -> None:
        self._update_changed()
        if self._ready:
            self._mark(TRACE_CHANGED, self.changed)

    @tl.observe("selected")
    def _selected_changed(self, change: dict[str, Any]) -> None:
        if self._ready:
            self._mark(TRACE_SELECTED, [change["new"]] if change["new"] else [])
            self.info.value = self._describe(change["new"])

    def _update_changed(self) -> None:
        names = [n for n in self.highlight if n in self.graph]
        before, after = self.baseline, self.plan
        if not names or after is None or before is None or before is after:
            self.changed = tuple(names) if before is None or before is not after else ()
            return
        if before.cost.unit != after.cost.unit:  # costs in different units do not compare
            self.changed = tuple(names)
            return
        b = {n: before.node_cost(n).total for n in names if n in before.assignment}
        a = {n: after.node_cost(n).total for n in names if n in after.assignment}
        self.changed = changed_materially(b, a, names, self.change_threshold)

    def pin_baseline(self, plan=None) -> None:
        """Compare later plans with ``plan`` (default: the plan shown now)."""
        self.baseline = plan if plan is not None else self.plan
        self._update_changed()
        if self._ready:
            self._mark(TRACE_CHANGED, self.changed)

    # --- controls and clicks ------------------------------------------------------------
    def _on_color(self, change: dict[str, Any]) -> None:
        self.color_by = change["new"]
        self._redraw()

    def _on_zoom(self, layout, x_range) -> None:
        """Labels that fit at the new zoom (ops named once there is room for the names)."""
        if x_range is None or len(x_range) != 2:
            return
        span = abs(float(x_range[1]) - float(x_range[0]))
        lay, m = self.figure.layout, self.figure.layout.margin
        px = label_px(self._layout, self.px, lay.height or 500, (m.t or 0) + (m.b or 0), span)
        text = unit_labels(self.graph, self._layout, span, px)
        shown = self.figure.data[TRACE_NODES].text
        if shown is None or list(shown) != text:
            self.figure.data[TRACE_NODES].text = text
            self._spec["data"][TRACE_NODES]["text"] = np.array(text, dtype=object)

    def _on_collapse(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.collapse(ROOT)
        else:
            self.open_all()

    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            self.click(trace.customdata[points.point_inds[0]])

    def click(self, unit: str) -> None:
        """What a click does: a closed group opens one level (its own ops and its child
        groups as closed boxes; a group holding nothing but one child group opens through to
        it, so no click is spent on a box in a box); an open group's label closes it (the
        model's label closes every group); a node becomes the selection."""
        if unit.startswith(BOX_PREFIX):
            self.expand(self._one_level(unit[len(BOX_PREFIX) :]))
        elif unit.startswith(OPEN_PREFIX):
            self.collapse(unit[len(OPEN_PREFIX) :])
        else:
            self.selected = unit
            self._select(node=unit)

    def _one_level(self, path: str) -> str:
        """``path``, or the deepest group below it reached through groups that hold no op
        and a single child group."""
        h = hierarchy(self.graph)
        g = h.group(path)
        while not g.nodes and len(g.children) == 1:
            g = h.group(g.children[0])
        return g.path

    def expand(self, path: str, inside: bool = False) -> None:
        """Open the group ``path`` (and the groups around it; with ``inside``, also every
        group inside it)."""
        h = hierarchy(self.graph)
        path = path[len(BOX_PREFIX) :] if path.startswith(BOX_PREFIX) else path
        h.group(path)  # unknown: raises, naming close ones
        want = [*h.ancestors(path), path] if path != ROOT else []
        if inside:
            want += [p for p in h.groups if p.startswith(path + ".")]
        new = tuple(dict.fromkeys([*self.expanded, *want]))
        if new != self.expanded:
            self.expanded = new
            self._relayout()

    def collapse(self, path: str) -> None:
        """Close the group ``path`` and every group inside it (``""``: all of them)."""
        h = hierarchy(self.graph)
        h.group(path)
        inside = path + "."
        new = tuple(p for p in self.expanded
                    if path != ROOT and p != path and not p.startswith(inside))  # fmt: skip
        if new != self.expanded:
            self.expanded = new
            self._relayout()

    def open_all(self) -> None:
        """Open every group (a big model takes seconds: the progress bar shows)."""
        with self.progress.task("opening every group", steps=2) as step:
            self.expanded = tuple(p for p in hierarchy(self.graph).groups if p != ROOT)
            self._layout = graph_layout(self.graph, expanded=self.expanded)
            step("layout")
            self._redraw()
            step("drawn")

    # --- search -------------------------------------------------------------------------
    def _on_search(self, change: dict[str, Any]) -> None:
        text = change["new"]
        if not text.strip():
            self._matches, self.found = (), None
            self._mark(TRACE_SELECTED, [self.selected] if self.selected else [])
            self.match_info.value = ""
            self.controls["next"].disabled = True
            self.search_error.clear()
            return
        self.search_error.run(self.search, text)

    def search(self, text: str) -> tuple[Match, ...]:
        """Jump to the first group or node whose name contains ``text``: the groups around
        it open, a group match opens too, and the match is selected and centred.

        Raises HierarchyError when nothing matches (the view shows it beside the box).
        """
        matches = hierarchy(self.graph).search(text)
        if not matches:
            raise HierarchyError(
                f"no group or node of {self.graph.name!r} contains {text.strip()!r}; try a "
                "shorter part of a name such as 'mlp', 'layers.3' or 'q_w'"
            )
        self._matches, self._match_i = matches, 0
        self.controls["next"].disabled = len(matches) < 2
        self._go(matches[0])
        return matches

    def next_match(self) -> None:
        if not self._matches:
            return
        self._match_i = (self._match_i + 1) % len(self._matches)
        self._go(self._matches[self._match_i])

    def _go(self, m: Match) -> None:
        n = len(self._matches)
        what = "group" if m.is_group else "node"
        self.match_info.value = (
            f"<span style='white-space:nowrap'>{self._match_i + 1} of {n}"
            f"{'+' if n >= 50 else ''}: {what} <b>{m.path}</b></span>"
        )
        opened = [*m.ancestors, m.path] if m.is_group else list(m.ancestors)
        self.found = m.path if m.is_group else None
        new = tuple(dict.fromkeys([*self.expanded, *opened]))
        if new != self.expanded:
            self.expanded = new
            self._layout = graph_layout(self.graph, expanded=self.expanded,
                                        keep_rows=self._layout)  # fmt: skip
        if m.is_group:
            self.selected = None
            self._redraw()
            f = next((f for f in self._layout.frames if f.path == m.path), None)
            center = ((f.x0 + f.x1) / 2, (f.y0 + f.y1) / 2) if f else (0.0, 0.0)
            self.info.value = self._describe_group(m.path)
        else:
            self._redraw()
            self.selected = m.path
            self._select(node=m.path)
            i = self._layout.index(m.path)
            center = (float(self._layout.x[i]), float(self._layout.y[i]))
        outer = m.ancestors[0] if m.ancestors else (m.path if m.is_group else None)
        frame = next((f for f in self._layout.frames if f.path == outer), None)
        self._focus(*center, frame)

    def _focus(self, x: float, y: float, frame=None) -> None:
        """Show (x, y) at a zoom where op names fit; with the whole ``frame`` (the match's
        layer) in view when it fits at that zoom."""
        span = FOCUS_SPAN
        if frame is not None and frame.x1 - frame.x0 + 2 <= FOCUS_MAX_SPAN:
            span = max(span, frame.x1 - frame.x0 + 2)
            x, y = (frame.x0 + frame.x1) / 2, (frame.y0 + frame.y1) / 2
        # The y span that keeps the plot's aspect (its axes are locked 1:1): with both
        # spans consistent, plotly shows exactly this x range and the labels fit it.
        m = self.figure.layout.margin
        plot_h = (self.figure.layout.height or 500) - (m.t or 0) - (m.b or 0)
        plot_w = self.px - (m.l or 0) - (m.r or 0)
        aspect = max(plot_h, 50) / max(plot_w, 50)
        y_span = span * aspect
        top = y + y_span / 2
        if frame is not None and frame.y1 - frame.y0 + 2 <= y_span:
            top = frame.y1 + 1.5  # the layer near the top, what follows it below
        with self.figure.batch_update():
            self.figure.layout.xaxis.range = [x - span / 2, x + span / 2]
            self.figure.layout.yaxis.range = [top - y_span, top]
        self._on_zoom(self.figure.layout, (x - span / 2, x + span / 2))

    # --- details ------------------------------------------------------------------------
    def unit_of(self, node: str) -> str | None:
        """The drawn unit (the node, or the box of its closed group)."""
        return self._layout.unit_of(node)

    def _describe_group(self, path: str) -> str:
        g = hierarchy(self.graph).group(path)
        return (f"<b>{g.label}</b> ({human_label(g.kind).lower()}): {g.num_nodes} nodes, "
                f"{g.num_ops} ops, {len(g.children)} groups inside")  # fmt: skip

    def _describe(self, node: str | None) -> str:
        if not node:
            return ""
        if self.plan is None or node not in self.plan.assignment:
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
        elif selection.plan is None and self.plan is not None:
            # the views linked after it see the plan this view was made with (notebook 03's
            # mesh view stayed empty after a click: the selection had a node but no plan)
            selection.publish(plan=self.plan)
        if selection.node is None and self.selected is not None:
            self._select(node=self.selected)
        self.highlight = tuple(selection.highlight)
        self.selected = selection.node if selection.node in self.graph else None

    def on_selection(self, change: dict[str, Any]) -> None:
        if change["name"] == "node":
            node = change["new"]
            if node is not None and node in self.graph and self.unit_of(node) != node:
                self.expand(hierarchy(self.graph).group_of(node))  # show what was picked
            self.selected = node if node is not None and node in self.graph else None
        elif change["name"] == "plan":
            plan = change["new"]
            if plan is not None and plan.graph is not self.graph:
                self._set_graph(plan.graph)
            self.plan = plan
            self.info.value = self._describe(self.selected)
        elif change["name"] == "highlight":
            self.highlight = tuple(change["new"])

    def _set_graph(self, graph: Graph) -> None:
        groups = hierarchy(graph).groups
        self.graph = graph
        self._hover = {}
        self.baseline = None
        self.expanded = tuple(p for p in self.expanded if p in groups)
        self._layout = graph_layout(graph, expanded=self.expanded)

    @property
    def layout_data(self) -> GraphLayout:
        return self._layout

    @property
    def visible_units(self) -> int:
        """How many units are drawn (nodes and closed-group boxes)."""
        return int(np.size(self._layout.units))
