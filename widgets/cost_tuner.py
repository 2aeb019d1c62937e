"""``CostTuner``: a control per CostParams field, the search method and the mesh shape;
every change re-plans and shows the cost before vs after and the ops that changed."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

from explorer.hardware import Mesh
from explorer.ir import Graph
from explorer.search import METHODS, CostParams, Planner

from .base import View
from .coalesce import Coalescer
from .figures.cost import TRACE_AFTER, TRACE_BEFORE, cost_figure, cost_rows, cost_title, memory_text
from .selection import Selection

__all__ = ["CostTuner", "PRESETS", "mesh_shapes"]

PRESETS = {"roofline": CostParams, "mindspore": CostParams.mindspore}
PLAN_CACHE_SIZE = 32  # plans are immutable values: moving a slider back is instant


def mesh_shapes(size: int, axes: int) -> tuple[tuple[int, ...], ...]:
    """Every way to factor ``size`` devices into ``axes`` ordered axis sizes.

    >>> mesh_shapes(8, 2)
    ((1, 8), (2, 4), (4, 2), (8, 1))
    """
    if axes == 1:
        return ((size,),)
    out = []
    for d in range(1, size + 1):
        if size % d == 0:
            out += [(d, *rest) for rest in mesh_shapes(size // d, axes - 1)]
    return tuple(out)


def _control(name: str, value: Any) -> ipw.Widget:
    """The widget for one CostParams field (by its name and unit suffix)."""
    style = {"description_width": "13em"}
    wide = ipw.Layout(width="30em")
    if name == "unit":
        return ipw.Dropdown(options=("seconds", "bytes"), value=value, description=name,
                            style=style)  # fmt: skip
    if isinstance(value, bool):
        return ipw.Checkbox(value=value, description=name, style=style, indent=True)
    if name in ("alpha_compute", "beta_communication", "gamma_param_comm"):
        return ipw.FloatLogSlider(value=value, base=10, min=-4, max=4, step=0.05,
                                  description=name, readout_format=".3g", style=style,
                                  layout=wide)  # fmt: skip
    if name.endswith("_efficiency"):
        return ipw.FloatSlider(value=value, min=0.05, max=1.0, step=0.05, description=name,
                               style=style, layout=wide)  # fmt: skip
    if name == "grad_comm_overlap":
        return ipw.FloatSlider(value=value, min=0.0, max=1.0, step=0.05, description=name,
                               style=style, layout=wide)  # fmt: skip
    if name.endswith("_ratio"):
        return ipw.FloatSlider(value=value, min=0.0, max=4.0, step=0.1, description=name,
                               style=style, layout=wide)  # fmt: skip
    if name == "device_memory_cap_bytes":  # None (the chip's memory) is shown as 0
        return ipw.BoundedFloatText(value=value or 0.0, min=0.0, max=1e15, description=name,
                                    style=style)  # fmt: skip
    return ipw.BoundedFloatText(value=value, min=0.0, max=1e15, description=name, style=style)


class CostTuner(View):
    """Tune the cost model live: every control change re-plans (through one cached
    ``Planner`` per mesh) and updates the linked views.

    Args:
        graph: the graph to plan.
        mesh: the starting mesh; the ``mesh_shape`` control re-factors its device count.
        params: starting CostParams (default: the planner's default for the mesh).
        method: one of ``explorer.search.METHODS``.
        selection: a shared ``Selection``; each plan is published as ``selection.plan``
            and the ops whose strategy changed as ``selection.highlight``.

    Controls: one per CostParams field (same key), ``method``, ``mesh_shape``, ``preset``.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> tuner = CostTuner(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    >>> tuner.controls["beta_communication"].value = 100.0
    >>> tuner.params.beta_communication, tuner.plan.params.beta_communication
    (100.0, 100.0)
    """

    # --- inputs -------------------------------------------------------------------------
    graph = tl.Instance(Graph)
    mesh = tl.Instance(Mesh)
    params = tl.Instance(CostParams)
    method = tl.Enum(METHODS, default_value="dynamic_programming")
    # --- results ------------------------------------------------------------------------
    plan = tl.Any(None, allow_none=True)
    previous = tl.Any(None, allow_none=True)
    changed = tl.Tuple()
    # --- timings (seconds, last re-plan) --------------------------------------------------
    search_s = tl.Float(0.0)
    update_s = tl.Float(0.0)

    selection_traits = ()
    name = "cost tuner"

    def __init__(
        self, graph: Graph, mesh: Mesh, *, params: CostParams | None = None,
        method: str = "dynamic_programming", selection: Selection | None = None,
        coalesce_s: float = 0.05,
    ) -> None:  # fmt: skip
        super().__init__(selection=selection)
        self._planners: dict[Mesh, Planner] = {}
        self._plans: OrderedDict[tuple, Any] = OrderedDict()
        self.graph, self.mesh, self.method = graph, mesh, method
        self.params = params or self._planner(mesh).default_params()
        self._bulk = False
        self._replan_soon = Coalescer(self.errors.guard(self._replan), delay_s=coalesce_s)
        self.controls = self._make_controls()
        self.changes = ipw.HTML()
        self.status = ipw.HTML()
        self._replan(publish=False)
        self.figure = go.FigureWidget(cost_figure(self.plan.cost, None))
        self._publish()
        c = self.controls
        fields = [c[k] for k in self.params.fields()]
        self._layout_children(
            ipw.HBox([c["preset"], c["method"], c["mesh_shape"]]),
            ipw.HBox([ipw.VBox(fields), ipw.VBox([self.figure, self.status, self.changes])]),
        )  # fmt: skip

    # --- controls -----------------------------------------------------------------------
    def _make_controls(self) -> dict[str, ipw.Widget]:
        controls: dict[str, ipw.Widget] = {
            k: _control(k, v) for k, v in self.params.fields().items()
        }
        names = self.mesh.axis_names
        shapes = mesh_shapes(self.mesh.size, len(names))
        controls["mesh_shape"] = ipw.Dropdown(
            options=[(" x ".join(f"{a}={n}" for a, n in zip(names, s, strict=True)), s)
                     for s in shapes], value=self.mesh.shape, description="mesh",
        )  # fmt: skip
        controls["method"] = ipw.Dropdown(options=METHODS, value=self.method, description="method")
        preset = "mindspore" if self.params.unit == "bytes" else "roofline"
        controls["preset"] = ipw.ToggleButtons(options=tuple(PRESETS), value=preset)
        for w in controls.values():
            w.observe(self.errors.guard(self._on_control), names="value")
        return controls

    def _on_control(self, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        if key == "preset":
            self.set_params(PRESETS[change["new"]]())
            return
        if key == "method":
            self.method = change["new"]
        elif key == "mesh_shape":
            hw = self.mesh.hardware
            self.mesh = Mesh(dict(zip(self.mesh.axis_names, change["new"], strict=True)),
                             hardware=hw)  # fmt: skip
        else:
            self.params = self._params_from_controls()
        self._replan_soon.submit()

    def _params_from_controls(self) -> CostParams:
        values = {k: self.controls[k].value for k in self.params.fields()}
        if not values["device_memory_cap_bytes"]:
            values["device_memory_cap_bytes"] = None
        return CostParams(**values)

    def set_params(self, params: CostParams) -> None:
        """Set every field control at once (one re-plan)."""
        self._bulk = True
        try:
            for k, v in params.fields().items():
                self.controls[k].value = 0.0 if v is None else v
        finally:
            self._bulk = False
        self.params = params
        self._replan_soon.submit()

    # --- planning -----------------------------------------------------------------------
    def _planner(self, mesh: Mesh) -> Planner:
        planner = self._planners.get(mesh)
        if planner is None:
            with self.progress.task(f"cost tables for {mesh}", slow=True) as step:
                step("enumerating strategies and redistributions")
                planner = Planner(self.graph, mesh)
            self._planners[mesh] = planner
        return planner

    def _search(self):
        key = (self.mesh, self.method, self.params)
        plan = self._plans.get(key)
        if plan is None:
            planner = self._planner(self.mesh)
            with self.progress.task(f"re-planning ({self.method})"):
                plan = planner.search(self.method, self.params)
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def _replan(self, publish: bool = True) -> None:
        t0 = time.perf_counter()
        plan = self._search()
        t1 = time.perf_counter()
        previous = self.plan
        self.previous, self.plan = previous, plan
        self.changed = plan.changed(previous) if previous is not None else ()
        if publish:
            self._redraw(previous)
            self._publish()
        self.search_s, self.update_s = t1 - t0, time.perf_counter() - t1
        self.status.value = (
            f"{plan.method} on {plan.mesh}: {plan.status}; search {self.search_s * 1e3:.0f} ms, "
            f"views {self.update_s * 1e3:.0f} ms"
        )

    def _redraw(self, previous) -> None:
        """Only the bar heights and texts change (``cost_figure`` keeps the categories fixed),
        so set those instead of copying a whole new figure (~4x cheaper)."""
        after, before = self.plan.cost, previous.cost if previous is not None else None
        comparable = before is not None and before.unit == after.unit
        u = "s" if after.unit == "seconds" else "B"
        with self.figure.batch_update():
            self.figure.data[TRACE_AFTER].y = list(cost_rows(after).values())
            self.figure.data[TRACE_BEFORE].y = (
                list(cost_rows(before).values()) if comparable else [None] * len(cost_rows(after))
            )
            self.figure.layout.title.text = cost_title(after, before, len(self.changed))
            self.figure.layout.yaxis.title.text = f"cost ({u}, weighted)"
            self.figure.layout.annotations[0].text = memory_text(after)

    def _on_linked(self, selection: Selection) -> None:
        """A new shared selection gets the current plan at once (views linked later or
        ``link(tuner, ...)`` after the first plan see it without waiting for a change)."""
        if self.plan is not None:
            self._publish()

    def _publish(self) -> None:
        self.selection.publish(graph=self.graph, plan=self.plan, highlight=self.changed)
        self.changes.value = self._changes_html()

    def _changes_html(self, limit: int = 12) -> str:
        if self.previous is None:
            return ""
        if not self.changed:
            return "no op changed strategy"
        rows = []
        for n in self.changed[:limit]:
            old = self.previous.assignment[n].name
            rows.append(
                f"<tr><td>%{n}</td><td>{old}</td><td>→ {self.plan.assignment[n].name}</td></tr>"
            )
        more = f"<br>... and {len(self.changed) - limit} more" if len(self.changed) > limit else ""
        return (
            f"<b>{len(self.changed)} ops changed strategy</b><table>{''.join(rows)}</table>{more}"
        )

    def flush(self) -> None:
        """Run a coalesced re-plan now (tests and scripts; the kernel does it by itself)."""
        self._replan_soon.flush()
