"""``MeshView``: the device mesh, the blocks each device holds, collectives, ring teaching."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

from explorer.hardware import Mesh
from explorer.ir import TensorType
from explorer.sharding import Layout

from .base import View, replace_figure
from .figures.mesh import TRACE_CELLS, mesh_figure, ring_figure, sharding_figure
from .figures.ring import TEACH_KINDS, ring_steps
from .selection import Selection

__all__ = ["MeshView"]

OUTPUT = -1  # operand index of the op's output


class MeshView(View):
    """The mesh as a grid: for the selected tensor which block each device holds, the
    selected op's collectives as device groups, and a ring teaching mode.

    Args:
        mesh: an ``explorer.Mesh``.
        plan: a ShardingPlan (or through the linked selection's ``plan``); the selected
            node's strategy gives the layouts and collectives shown.
        selection: a shared ``Selection``.

    Controls: ``operand`` (the op's output or one of its inputs), ``collective`` (one of the
    op's collectives, drawn as rings of devices), ``teach_kind``, ``teach_axis``, ``step``.

    >>> import explorer as ex
    >>> view = MeshView(ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    >>> view.controls["step"].value = 2; view.ring_figure.layout.title.text[:18]
    'ring all-reduce ov'
    """

    # --- data ---------------------------------------------------------------------------
    mesh = tl.Instance(Mesh)
    plan = tl.Any(None, allow_none=True)
    # --- what is shown ------------------------------------------------------------------
    tensor = tl.Unicode(None, allow_none=True, help="the node whose tensor is drawn")
    operand = tl.Int(OUTPUT, help="-1: the op's output; k: its k-th input as the op needs it")
    collective = tl.Any(None, allow_none=True, help="(kind, axes) of the highlighted collective")
    device = tl.Int(None, allow_none=True)
    # --- teaching mode ------------------------------------------------------------------
    teach_kind = tl.Enum(TEACH_KINDS, default_value="all-reduce")
    teach_axis = tl.Unicode()
    step = tl.Int(0)

    selection_traits = ("node", "plan", "device")
    name = "mesh"

    def __init__(self, mesh: Mesh, plan=None, *, selection: Selection | None = None) -> None:
        self._ready = False
        super().__init__(selection=None)
        self.mesh, self.plan = mesh, plan
        self.teach_axis = mesh.axis_names[-1]
        self._custom: tuple[TensorType, Layout, str] | None = None
        self.figure = go.FigureWidget(mesh_figure(mesh))
        self.tensor_figure = go.FigureWidget(_placeholder())
        self._steps = ring_steps(self.teach_kind, max(mesh.axis_size(self.teach_axis), 2))
        self.ring_figure = go.FigureWidget(self._ring())
        self.figure.data[TRACE_CELLS].on_click(self.errors.guard(self._on_click))
        guard = self.errors.guard
        self.controls = {
            "operand": ipw.Dropdown(options=[("output", OUTPUT)], value=OUTPUT,
                                    description="tensor"),
            "collective": ipw.Dropdown(options=[("none", None)], value=None,
                                       description="collective"),
            "teach_kind": ipw.ToggleButtons(options=TEACH_KINDS, value=self.teach_kind),
            "teach_axis": ipw.Dropdown(options=mesh.axis_names, value=self.teach_axis,
                                       description="ring axis"),
            "step": ipw.IntSlider(value=0, min=0, max=len(self._steps) - 1, description="step"),
        }  # fmt: skip
        for key in ("operand", "collective", "teach_kind", "teach_axis", "step"):
            self.controls[key].observe(guard(self._on_control), names="value")
        self.info = ipw.HTML()
        c = self.controls
        self._layout_children(
            ipw.HBox([c["operand"], c["collective"]]), self.figure, self.info, self.tensor_figure,
            ipw.HBox([c["teach_kind"], c["teach_axis"], c["step"]]), self.ring_figure,
        )  # fmt: skip
        self._ready = True
        self.link(selection or Selection())

    # --- public -------------------------------------------------------------------------
    def show_layout(self, ttype: TensorType, layout: Layout, tensor: str = "") -> None:
        """Draw any tensor layout (no plan needed): the teaching entry point.

        >>> import explorer as ex  # doctest: +SKIP
        >>> view.show_layout(ex.TensorType((8, 64), "bf16"), Layout((("dp",), ("tp",))))  # doctest: +SKIP
        """
        self._custom = (ttype, layout.validate(ttype, self.mesh, tensor), tensor)
        self._redraw()

    def click_device(self, device: int) -> None:
        """What a click on a cell does: select the device (the ring shows its group)."""
        if not 0 <= device < self.mesh.size:
            raise ValueError(
                f"device {device} is not in {self.mesh}; ids run 0..{self.mesh.size - 1}"
            )
        self.device = device
        self._select(device=device)
        self._redraw()
        replace_figure(self.ring_figure, self._ring())

    def collectives(self) -> list[tuple[str, tuple[str, tuple[str, ...]]]]:
        """The selected op's collectives as (label, (kind, axes)): in-op ones, then the
        redistributions into and out of it, as the plan has them."""
        if self.plan is None or self.tensor is None or self.tensor not in self.plan.assignment:
            return []
        out = []
        s = self.plan.assignment[self.tensor]
        for c in s.collectives:
            out.append((f"in-op {c}", (c.kind.value, tuple(c.axes))))
        for (u, v, _pos), rp in self._redistributions().items():
            if self.tensor not in (u, v):
                continue
            for c in rp.steps:
                if c.axes:
                    out.append((f"%{u}->%{v}: {c}", (c.kind.value, tuple(c.axes))))
        return out

    # --- drawing ------------------------------------------------------------------------
    def _redistributions(self) -> dict:
        cache = getattr(self, "_redis_cache", None)
        if cache is None or cache[0] is not self.plan:
            cache = (self.plan, self.plan.redistributions)
            self._redis_cache = cache
        return cache[1]

    def _current(self) -> tuple[TensorType, Layout, str] | None:
        if (
            self.tensor is not None
            and self.plan is not None
            and self.tensor in self.plan.assignment
        ):
            g, s = self.plan.graph, self.plan.assignment[self.tensor]
            if self.operand == OUTPUT:
                return g.node(self.tensor).type, s.out_layout, self.tensor
            k = self.operand
            src = g.node(self.tensor).inputs[k]
            return g.node(src).type, s.in_layouts[k], f"{src} (input {k} of %{self.tensor})"
        return self._custom

    def _redraw(self) -> None:
        cur = self._current()
        kind, axes = self.collective if self.collective else ("", ())
        if cur is None:
            fig = mesh_figure(self.mesh, groups_axes=axes, collective=kind,
                              selected_device=self.device)  # fmt: skip
            tfig = _placeholder()
        else:
            ttype, layout, name = cur
            fig = mesh_figure(self.mesh, layout, ttype, tensor=name, groups_axes=axes,
                              collective=kind, selected_device=self.device)  # fmt: skip
            tfig = sharding_figure(ttype, layout, self.mesh, name)
        replace_figure(self.figure, fig)
        replace_figure(self.tensor_figure, tfig)

    def _ring(self) -> go.Figure:
        axis = self.teach_axis
        groups = self.mesh.groups((axis,))
        devices = next((g for g in groups if self.device in g), groups[0])
        step = self._steps[min(self.step, len(self._steps) - 1)]
        return ring_figure(step, self.teach_kind, devices, len(self._steps))

    def _drawn_key(self) -> tuple:
        """What the drawing depends on (a re-plan that leaves the selected op alone keeps it)."""
        strategy = None
        if self.plan is not None and self.tensor in self.plan.assignment:
            strategy = self.plan.assignment[self.tensor]
        return (self.mesh, self.tensor, strategy, tuple(self.collectives()))

    def _retarget(self, force: bool = True) -> None:
        """The selected tensor changed: refill the operand and collective menus."""
        key = self._drawn_key()
        if not force and key == getattr(self, "_last_key", None):
            return
        self._last_key = key
        ops: list[tuple[str, int]] = [("output", OUTPUT)]
        if self.plan is not None and self.tensor is not None and self.tensor in self.plan.graph:
            for k, a in enumerate(self.plan.graph.node(self.tensor).inputs):
                ops.append((f"input {k}: %{a}", k))
        self._updating_controls = True
        try:
            self.controls["operand"].options = ops
            self.controls["operand"].value = OUTPUT
            self.operand = OUTPUT
            coll = [("none", None)] + self.collectives()
            self.controls["collective"].options = coll
            self.controls["collective"].value = None
            self.collective = None
        finally:
            self._updating_controls = False
        self.info.value = self._describe()
        self._redraw()

    def _describe(self) -> str:
        if self.plan is None or self.tensor is None or self.tensor not in self.plan.assignment:
            return ""
        s = self.plan.assignment[self.tensor]
        n = len(self.controls["collective"].options) - 1
        return f"%{self.tensor}: strategy <b>{s.name}</b>, {n} collective(s)"

    # --- observers ----------------------------------------------------------------------
    def _on_control(self, change: dict[str, Any]) -> None:
        if getattr(self, "_updating_controls", False):
            return
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        if key == "operand":
            self.operand = change["new"]
            self._redraw()
        elif key == "collective":
            self.collective = change["new"]
            if change["new"] is not None:
                kind, axes = change["new"]
                if kind in TEACH_KINDS and len(axes) == 1:
                    # the teaching ring follows the collective the student just picked
                    self.controls["teach_axis"].value = axes[0]
                    self.controls["teach_kind"].value = kind
            self._redraw()
        else:
            setattr(self, key, change["new"])
            if key in ("teach_kind", "teach_axis"):
                n = self.mesh.axis_size(self.teach_axis)
                if n < 2:
                    raise ValueError(
                        f"axis {self.teach_axis!r} has size 1: no ring to show; pick an axis "
                        "of size 2 or more"
                    )
                self._steps = ring_steps(self.teach_kind, n)
                self.controls["step"].max = len(self._steps) - 1
                self.step = min(self.step, len(self._steps) - 1)
            replace_figure(self.ring_figure, self._ring())

    def _on_click(self, trace, points, state) -> None:
        inds = points.point_inds
        if not inds:
            return
        ind = inds[0]
        if isinstance(ind, list | tuple):  # heatmap points are (row, column)
            d = int(trace.customdata[ind[0]][ind[1]])
        else:
            d = int(ind)
        self.click_device(d)

    def _on_linked(self, selection: Selection) -> None:
        if not getattr(self, "_ready", False):
            return
        if selection.plan is not None and selection.plan.mesh == self.mesh:
            self.plan = selection.plan
        elif selection.plan is not None:
            self.mesh, self.plan = selection.plan.mesh, selection.plan
        if selection.node is not None:
            self.tensor = selection.node
        self._retarget()

    def on_selection(self, change: dict[str, Any]) -> None:
        if change["name"] == "node":
            self.tensor = change["new"]
            self._retarget()
        elif change["name"] == "plan":
            plan = change["new"]
            if plan is not None and plan.mesh != self.mesh:
                self._set_mesh(plan.mesh)
            self.plan = plan
            self._retarget(force=False)
        elif change["name"] == "device":
            self.device = change["new"]
            self._redraw()
            replace_figure(self.ring_figure, self._ring())

    def _set_mesh(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self._updating_controls = True
        try:
            self.controls["teach_axis"].options = mesh.axis_names
            self.controls["teach_axis"].value = mesh.axis_names[-1]
        finally:
            self._updating_controls = False
        self.teach_axis = mesh.axis_names[-1]
        self._steps = ring_steps(self.teach_kind, max(mesh.axis_size(self.teach_axis), 2))
        self.controls["step"].max = len(self._steps) - 1
        self.device = None
        replace_figure(self.ring_figure, self._ring())


def _placeholder() -> go.Figure:
    fig = go.Figure(go.Scatter(x=[], y=[], mode="text", name="blocks"))
    fig.update_layout(title="select a tensor (click a node of the graph)", height=300,
                      plot_bgcolor="white", xaxis={"visible": False}, yaxis={"visible": False})  # fmt: skip
    return fig
