"""``MeshView``: the device mesh, the blocks each device holds, collectives, ring teaching."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

from explorer.hardware import Mesh
from explorer.ir import TensorType
from explorer.sharding import Layout, ring_collective

from .base import View, replace_figure
from .errors import ViewError, field
from .figure_widget import FigureWidget
from .figures.mesh import (
    TRACE_CELLS,
    default_dims,
    dim_letters,
    levels_text,
    mesh_figure,
    sharding_figure,
)
from .figures.ring import TEACH_KINDS, ring_rounds_figure
from .figures.style import base_layout
from .pick_menu import NOTHING, PickMenu
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

    Controls: ``operand`` (the op's output or one of its inputs), ``dims`` (the two tensor
    dims drawn: any pair, so every dim of a 3-D/4-D tensor is reachable), ``collective`` (one
    of the op's collectives, drawn as rings of devices; the first is picked when there are
    any), ``teach_kind``, ``teach_axis``, ``step`` (a ring collective round by round, drawn
    on the devices with one arrow per chunk sent).

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

    dims = tl.Tuple(help="the two tensor dims drawn (one for a rank-1 tensor); () = default")

    selection_traits = ("node", "plan", "device", "training")
    name = "mesh"

    def __init__(self, mesh: Mesh, plan=None, *, selection: Selection | None = None) -> None:
        self._ready = False
        super().__init__(selection=None)
        self.mesh, self.plan = mesh, plan
        self.teach_axis = _ring_axis(mesh)
        self._custom: tuple[TensorType, Layout, str] | None = None
        self.figure = FigureWidget(mesh_figure(mesh))
        self.tensor_figure = FigureWidget(_placeholder())
        self._ring_coll = _teaching_ring(self.teach_kind, mesh, self.teach_axis)
        self.ring_figure = FigureWidget(self._ring())
        self.figure.data[TRACE_CELLS].on_click(self.errors.guard(self._on_click))
        guard = self.errors.guard
        words = {"style": {"description_width": "initial"}, "layout": ipw.Layout(width="auto")}
        self.controls = {
            "operand": ipw.Dropdown(options=[("output", OUTPUT)], value=OUTPUT,
                                    description="tensor", **words),
            "dims": ipw.Dropdown(options=[("—", ())], value=(), description="draw dims",
                                 **words),
            "collective": ipw.Dropdown(options=[("none", None)], value=None,
                                       description="collective", **words),
            "teach_kind": ipw.ToggleButtons(options=TEACH_KINDS, value=self.teach_kind,
                                            style={"button_width": "auto"}),
            "teach_axis": ipw.Dropdown(options=mesh.axis_names, value=self.teach_axis,
                                       description="ring axis", **words),
            "step": ipw.IntSlider(value=0, min=0, max=len(self._ring_coll.rounds),
                                  description="round", readout_format="d",
                                  style={"description_width": "initial"},
                                  layout=ipw.Layout(flex="1 1 220px", min_width="200px")),
        }  # fmt: skip
        for key in ("operand", "dims", "collective", "teach_kind", "teach_axis", "step"):
            self.controls[key].observe(guard(self._on_control), names="value")
        # the keyboard's way to what a click on a cell does
        self.controls["device"] = PickMenu(_device_options(mesh), guard(self._pick_device),
                                           value=NOTHING, description="device")  # fmt: skip
        self.observe(guard(self._device_menu_follows), names="device")
        axis_box, self.axis_error = field(self.controls["teach_axis"])
        self.info = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.scope = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.levels_line = ipw.HTML(levels_text(mesh), layout=ipw.Layout(width="auto"))
        c = self.controls
        wrap = ipw.Layout(flex_flow="row wrap", align_items="center", width="100%")
        self._layout_children(
            ipw.HBox([c["operand"], c["dims"], c["collective"], c["device"]], layout=wrap),
            self.scope,
            self.levels_line, self.figure, self.info, self.tensor_figure,
            ipw.HBox([c["teach_kind"], axis_box, c["step"]], layout=wrap), self.ring_figure,
        )  # fmt: skip
        # Two views side by side in an HBox share the row instead of overflowing it; inside,
        # the control rows wrap and the figures follow the width.
        self.layout = ipw.Layout(flex="1 1 0%", min_width="0", width="100%")
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
            raise ViewError(
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
            self._refill_dims(ttype)
            letters = self._letters()
            fig = mesh_figure(self.mesh, layout, ttype, tensor=name, groups_axes=axes,
                              collective=kind, selected_device=self.device,
                              letters=letters)  # fmt: skip
            tfig = sharding_figure(ttype, layout, self.mesh, name, dims=self.dims or None,
                                   letters=letters)  # fmt: skip
        replace_figure(self.figure, fig)
        replace_figure(self.tensor_figure, tfig)

    def _letters(self) -> str | None:
        """The op signature's letters of the tensor drawn (one notation with the strategy
        names and the graph's hover); None for a tensor given by hand."""
        if self.plan is None or self.tensor is None or self.tensor not in self.plan.assignment:
            return None
        try:
            ins, out = self.plan.graph.signature(self.tensor).split("->")
        except Exception:  # noqa: BLE001  (an op without a signature: A, B, C)
            return None
        if self.operand == OUTPUT:
            return out
        parts = ins.split(",")
        return parts[self.operand] if self.operand < len(parts) else None

    def _refill_dims(self, ttype: TensorType) -> None:
        """The dim-pair menu for a tensor of this rank (kept when the rank is unchanged)."""
        rank = ttype.rank
        letters = dim_letters(ttype, self._letters())
        if rank <= 2:
            opts = [(" x ".join(f"dim {i} ({letters[i]}, {ttype.shape[i]})" for i in range(rank))
                     or "scalar", tuple(range(rank)))]  # fmt: skip
        else:
            opts = [(f"dims {i}, {j} ({letters[i]} x {letters[j]})", (i, j))
                    for i in range(rank) for j in range(i + 1, rank)]  # fmt: skip
        values = [v for _, v in opts]
        ctl = self.controls["dims"]
        if list(ctl.options) == opts and self.dims in values:
            return
        layout = cur[1] if (cur := self._current()) is not None else None
        want = default_dims(ttype, layout) if layout is not None else values[0]
        self._updating_controls = True
        try:
            ctl.options = opts
            ctl.value = want if want in values else values[0]
            self.dims = ctl.value
        finally:
            self._updating_controls = False

    def _ring(self) -> go.Figure:
        coll = self._ring_coll
        ring = next((i for i, g in enumerate(coll.rings) if self.device in g), 0)
        step = min(self.step, len(coll.rounds))
        return ring_rounds_figure(coll, step, rings=[ring], note=self._ring_note())

    def _ring_note(self) -> str:
        """The line under the ring: whose collective it is. A selected op without a
        collective (gelu) is said to need none, so the ring reads as the lesson's example,
        not as the op's communication."""
        coll = self._ring_coll
        what = (f"{self.teach_kind} over {self.teach_axis} ({coll.ring_size} devices per ring, "
                f"{len(coll.rings)} rings)")  # fmt: skip
        tip = "click a device in the grid to see its ring"
        op = self.tensor
        if self.plan is None or op is None or op not in self.plan.assignment:
            return f"{what}; {tip}"
        if not getattr(self, "_n_collectives", 0):
            return (f"%{op} needs no collective: the ring is the lesson's example, {what}; "
                    "pick its kind and axis above")  # fmt: skip
        picked = self.collective
        if picked is not None and picked == (self.teach_kind, (self.teach_axis,)):
            return f"%{op}'s {what}; {tip}"
        return f"the lesson's {what}, not a collective of %{op}; {tip}"

    def _set_ring(self) -> None:
        """Recompute the teaching ring for ``teach_kind`` over ``teach_axis`` (raises for an
        axis of size 1: the FieldError under the menu shows it)."""
        n = self.mesh.axis_size(self.teach_axis)
        if n < 2:
            raise ViewError(
                f"axis {self.teach_axis!r} has size 1: no ring to show; pick an axis of size 2 "
                "or more"
            )
        self._ring_coll = ring_collective(self.teach_kind, self.mesh, (self.teach_axis,))
        last = len(self._ring_coll.rounds)
        self.step = min(self.step, last)
        self._updating_controls = True
        try:
            self.controls["step"].max = last
            self.controls["step"].value = self.step
        finally:
            self._updating_controls = False

    def _drawn_key(self) -> tuple:
        """What the drawing depends on (a re-plan that leaves the selected op alone keeps it)."""
        strategy = None
        if self.plan is not None and self.tensor in self.plan.assignment:
            strategy = self.plan.assignment[self.tensor]
        return (self.mesh, self.tensor, strategy, tuple(self.collectives()))

    def _retarget(self, force: bool = True) -> None:
        """The selected tensor changed: refill the operand and collective menus (the first
        collective is picked, so the menu never reads blank while collectives exist)."""
        key = self._drawn_key()
        if not force and key == getattr(self, "_last_key", None):
            return
        self._last_key = key
        ops: list[tuple[str, int]] = [("output", OUTPUT)]
        if self.plan is not None and self.tensor is not None and self.tensor in self.plan.graph:
            for k, a in enumerate(self.plan.graph.node(self.tensor).inputs):
                ops.append((f"input {k}: %{a}", k))
        found = self.collectives()
        coll = found + [("no highlight", None)] if found else [("none", None)]
        self._updating_controls = True
        try:
            self.controls["operand"].options = ops
            self.controls["operand"].value = OUTPUT
            self.operand = OUTPUT
            self.controls["collective"].options = coll
            self.controls["collective"].value = coll[0][1]
            self.collective = coll[0][1]
        finally:
            self._updating_controls = False
        self._n_collectives = len(found)
        if self.collective is not None:
            self._follow_collective(self.collective)
        replace_figure(self.ring_figure, self._ring())  # its note names the op's collective
        self.info.value = self._describe()
        self._redraw()

    def _describe(self) -> str:
        if self.plan is None or self.tensor is None or self.tensor not in self.plan.assignment:
            return ""
        s = self.plan.assignment[self.tensor]
        n = getattr(self, "_n_collectives", 0)
        if n == 0:
            return f"%{self.tensor}: strategy <b>{s.name}</b>, no collective"
        return (f"%{self.tensor}: strategy <b>{s.name}</b>, {n} collective(s); the menu picks "
                "which one the grid draws as device groups")  # fmt: skip

    def _scope(self) -> str:
        """Say which devices of the job the grid stands for (a dp x tp mesh of a pipelined
        job is one stage's copy)."""
        plan = self.selection.training if "selection" in self._trait_values else None
        total = getattr(plan, "devices", None)
        config = getattr(plan, "config", None)
        if not total or total == self.mesh.size or config is None:
            return ""
        pp, cp = getattr(config, "pp", 1), getattr(config, "cp", 1)
        copies = total // self.mesh.size
        why = (f"one per pipeline stage (pp={pp})" if pp == copies else
               f"per pipeline stage and context-parallel rank (pp={pp} x cp={cp}; cp ranks "
               "hold other positions of the sequences)" if pp * cp == copies else
               f"{copies} copies")  # fmt: skip
        return (
            f"<div style='background:#EEF3FB;border-left:3px solid #636EFA;padding:2px 8px'>"
            f"the job has <b>{total} devices</b>: this grid is its {self.mesh.size}-device "
            f"{' x '.join(self.mesh.axis_names)} mesh, repeated {why}; every copy holds the "
            f"same layouts for its own layers ({total} = {copies} x {self.mesh.size}).</div>"
        )

    # --- observers ----------------------------------------------------------------------
    def _follow_collective(self, picked: tuple[str, tuple[str, ...]]) -> None:
        """The teaching ring follows the collective shown (when it is a ring over one axis)."""
        kind, axes = picked
        if kind not in TEACH_KINDS or len(axes) != 1 or self.mesh.axis_size(axes[0]) < 2:
            return
        self._updating_controls = True
        try:
            self.controls["teach_axis"].value = axes[0]
            self.controls["teach_kind"].value = kind
        finally:
            self._updating_controls = False
        self.teach_axis, self.teach_kind = axes[0], kind
        self._set_ring()
        replace_figure(self.ring_figure, self._ring())

    def _on_control(self, change: dict[str, Any]) -> None:
        if getattr(self, "_updating_controls", False):
            return
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        if key == "operand":
            self.operand = change["new"]
            self._redraw()
        elif key == "dims":
            self.dims = change["new"]
            self._redraw()
        elif key == "collective":
            self.collective = change["new"]
            if change["new"] is not None:
                self._follow_collective(change["new"])
            self._redraw()
        elif key in ("teach_kind", "teach_axis"):
            setattr(self, key, change["new"])
            if self.axis_error.run(lambda _: self._set_ring(), change["new"]):
                self.clear_stale()
                replace_figure(self.ring_figure, self._ring())
            else:
                self.mark_stale(f"ring axis {self.teach_axis!r}: see the message under it")
        else:
            self.step = change["new"]
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
        if d >= 0:  # an empty cell of a folded grid holds no device
            self.click_device(d)

    def _on_linked(self, selection: Selection) -> None:
        if not getattr(self, "_ready", False):
            return
        if selection.plan is not None and selection.plan.mesh == self.mesh:
            self.plan = selection.plan
        elif selection.plan is not None:
            self._set_mesh(selection.plan.mesh)
            self.plan = selection.plan
        if selection.node is not None:
            self.tensor = selection.node
        self.scope.value = self._scope()
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
        elif change["name"] == "training":
            self.scope.value = self._scope()
        elif change["name"] == "device":
            self.device = change["new"]
            self._redraw()
            replace_figure(self.ring_figure, self._ring())

    def _pick_device(self, device: int) -> None:
        """What a click on a device cell does, for the device menu."""
        if device != NOTHING and device != self.device:
            self.click_device(device)

    def _device_menu_follows(self, change: dict[str, Any]) -> None:
        menu = self.controls.get("device")
        if menu is not None:
            menu.show(NOTHING if change["new"] is None else change["new"],
                      _device_options(self.mesh))  # fmt: skip

    def _set_mesh(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.levels_line.value = levels_text(mesh)
        axis = _ring_axis(mesh)
        self._updating_controls = True
        try:
            self.controls["teach_axis"].options = mesh.axis_names
            self.controls["teach_axis"].value = axis
        finally:
            self._updating_controls = False
        self.teach_axis = axis
        self.device = None
        self._ring_coll = _teaching_ring(self.teach_kind, mesh, axis)
        self.step = min(self.step, len(self._ring_coll.rounds))
        self._updating_controls = True
        try:
            self.controls["step"].max = len(self._ring_coll.rounds)
            self.controls["step"].value = self.step
        finally:
            self._updating_controls = False
        replace_figure(self.ring_figure, self._ring())


def _ring_axis(mesh: Mesh) -> str:
    """The last axis with two or more devices (the tensor-parallel one, by convention)."""
    return next((a for a in reversed(mesh.axis_names) if mesh.axis_size(a) > 1),
                mesh.axis_names[-1])  # fmt: skip


def _teaching_ring(kind: str, mesh: Mesh, axis: str):
    """The ring of ``kind`` over ``axis``; a mesh without an axis of 2+ devices has no ring,
    so a two-device ring stands in (the note under the title says so)."""
    if mesh.axis_size(axis) > 1:
        return ring_collective(kind, mesh, (axis,))
    return ring_collective(kind, Mesh({"illustration": 2}), ("illustration",))


def _placeholder() -> go.Figure:
    """The tensor figure before any tensor is chosen: one line saying how to choose one."""
    fig = go.Figure(go.Scatter(x=[0], y=[0], mode="text", name="blocks", hoverinfo="skip",
                               text=["click an op in the graph (or call show_layout)"],
                               textfont={"color": "#111"}))  # fmt: skip
    fig.update_layout(base_layout("no tensor selected", height=300, legend=False))
    fig.update_layout(plot_bgcolor="white", xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def _device_options(mesh: Mesh) -> list[tuple[str, int]]:
    """The device menu: "none" and every device id of the mesh."""
    return [("none", NOTHING)] + [(str(d), d) for d in range(mesh.size)]
