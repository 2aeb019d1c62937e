"""``ParallelismLesson``: one parallelism stepped op by op on a small mesh, with the numbers.

The core (`explorer.sharding.lesson`) computes every step; this view draws it: the tensors
cut into the blocks each device holds, the collective on a ring of devices with one arrow
per chunk sent, a sentence per step, each device's numbers, and the final comparison with
the unsharded result.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

from explorer.hardware import Mesh
from explorer.sharding import LESSON_KINDS, LessonCollective, LessonStep, lesson

from .base import View, replace_figure
from .errors import field
from .figure_widget import FigureWidget
from .figures.mesh import TRACE_BLOCKS, lesson_blocks_figure, matrix_text
from .figures.ring import TRACE_DEVICES, ring_rounds_figure
from .selection import Selection

__all__ = ["ParallelismLesson", "KIND_LABELS"]

KIND_LABELS = {
    "tensor": "tensor (Megatron MLP)",
    "data": "data (gradient all-reduce)",
    "sequence": "sequence (gather / scatter)",
    "zero": "ZeRO-3 (gather per use)",
    "context": "context (all-gather K/V, causal)",
    "experts": "experts (router, all-to-all)",
}
DEFAULT_AXES = "default"


class ParallelismLesson(View):
    """Step through tensor, data, sequence, ZeRO, context or expert parallelism on a small
    mesh.

    Args:
        mesh: at most 64 devices (default ``Mesh({"dp": 2, "tp": 4})``).
        kind: ``tensor``, ``data``, ``sequence``, ``zero``, ``context`` or ``experts``.
        selection: a shared ``Selection`` (the picked device is shared).

    Controls: ``kind``, ``axes`` (the ring axes), ``prev``, ``step``, ``next``, ``device``
    (whose numbers are listed).

    >>> view = ParallelismLesson()
    >>> view.controls["step"].value = view.controls["step"].max
    >>> "max |error|" in view.check_line.value
    True
    """

    kind = tl.Enum(LESSON_KINDS, default_value="tensor")
    step = tl.Int(0)
    device = tl.Int(0)

    selection_traits = ("device",)
    name = "lesson"

    def __init__(self, mesh: Mesh | None = None, kind: str = "tensor", *,
                 selection: Selection | None = None) -> None:  # fmt: skip
        self._ready = False
        super().__init__(selection=None)
        self.mesh = mesh or Mesh({"dp": 2, "tp": 4})
        self.kind = kind
        self.axes: tuple[str, ...] | None = None
        self.steps: tuple[LessonStep, ...] = lesson(kind, self.mesh)
        first = self.steps[0]
        self.figure = FigureWidget(lesson_blocks_figure(first))
        self.ring_figure = FigureWidget(self._ring(first))
        self.figure.data[TRACE_BLOCKS].on_click(self.errors.guard(self._on_click))
        self.ring_figure.data[TRACE_DEVICES].on_click(self.errors.guard(self._on_click))
        axes_options = [("default", DEFAULT_AXES)] + [
            (f"{a} ({self.mesh.axis_size(a)})", a) for a in self.mesh.axis_names
        ]
        if len(self.mesh.axis_names) > 1:
            axes_options.append(("all axes", ",".join(self.mesh.axis_names)))
        auto = {"width": "auto"}
        self.controls = {
            "kind": ipw.ToggleButtons(options=[(KIND_LABELS[k], k) for k in LESSON_KINDS],
                                      value=kind, style={"button_width": "auto"},
                                      tooltips=[f"{k} parallelism" for k in LESSON_KINDS]),
            "axes": ipw.Dropdown(options=axes_options, value=DEFAULT_AXES,
                                 description="ring over", style={"description_width": "initial"},
                                 layout=ipw.Layout(width="auto")),
            "prev": ipw.Button(description="prev", icon="step-backward", layout=ipw.Layout(**auto),
                               tooltip="previous step"),
            "step": ipw.IntSlider(value=0, min=0, max=len(self.steps) - 1, description="step",
                                  readout_format="d", continuous_update=True,
                                  style={"description_width": "initial"},
                                  layout=ipw.Layout(flex="1 1 320px", min_width="260px")),
            "next": ipw.Button(description="next", icon="step-forward", layout=ipw.Layout(**auto),
                               tooltip="next step"),
            "device": ipw.Dropdown(options=self._device_options(), value=0,
                                   description="numbers of device",
                                   style={"description_width": "initial"},
                                   layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        guard = self.errors.guard
        c = self.controls
        c["kind"].observe(guard(self._on_kind), names="value")
        c["axes"].observe(guard(self._on_axes), names="value")
        c["step"].observe(guard(lambda ch: self.go(ch["new"])), names="value")
        c["device"].observe(guard(self._on_device), names="value")
        c["prev"].on_click(guard(lambda _: self.go(self.step - 1)))
        c["next"].on_click(guard(lambda _: self.go(self.step + 1)))
        axes_box, self.axes_error = field(c["axes"])
        self.text = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.check_line = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.numbers = ipw.HTML(layout=ipw.Layout(width="auto"))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="center", width="100%")
        self._layout_children(
            ipw.HBox([c["kind"], axes_box], layout=wrap),
            ipw.HBox([c["prev"], c["step"], c["next"]], layout=wrap),
            self.text, self.figure, self.ring_figure, self.check_line,
            ipw.HBox([c["device"]], layout=wrap), self.numbers,
        )  # fmt: skip
        self.layout = ipw.Layout(width="100%", min_width="0")
        self._ready = True
        self.link(selection or Selection())
        self._draw()

    # --- public -------------------------------------------------------------------------
    @property
    def current(self) -> LessonStep:
        return self.steps[self.step]

    def go(self, index: int) -> None:
        """Show step ``index`` (clamped to the lesson's steps: prev/next at either end stay)."""
        index = max(0, min(int(index), len(self.steps) - 1))
        self.step = index
        if self.controls["step"].value != index:
            self.controls["step"].value = index  # re-enters go() once, same index
            return
        self._draw()

    def show(self, kind: str, axes: tuple[str, ...] | None = None) -> None:
        """Load another lesson (``axes``: the ring axes, None for the kind's default)."""
        steps = lesson(kind, self.mesh, axes=axes)  # raises before anything changes
        self.kind, self.axes, self.steps = kind, axes, steps
        slider = self.controls["step"]
        self.step = 0
        with slider.hold_trait_notifications():
            slider.value = 0
            slider.max = len(steps) - 1
        self._draw()

    # --- drawing ------------------------------------------------------------------------
    def _collective_for(self, step: LessonStep) -> tuple[LessonCollective, int, bool]:
        """The ring to draw: this step's, else the next one of the lesson (idle), else the
        last one."""
        if step.collective is not None:
            return step.collective, step.round, True
        later = [s for s in self.steps[step.index :] if s.collective is not None]
        if later:
            return later[0].collective, 0, False
        last = [s for s in self.steps if s.collective is not None][-1]
        return last.collective, len(last.collective.rounds), False

    def _ring(self, step: LessonStep) -> go.Figure:
        coll, rnd, active = self._collective_for(step)
        hover = {}
        held = [t for t in step.tensors if t.name == coll.tensor]
        if held:
            t = held[-1]
            hover = {
                d: f"{t.name} here:<br>{matrix_text(t.values[d])}" for d in range(len(t.values))
            }
        note = (
            ""
            if active
            else f"in this step the devices do not communicate; the {coll.kind} of {coll.tensor} comes {'later' if rnd == 0 else 'earlier'}"
        )
        return ring_rounds_figure(coll, rnd, hover=hover, active=active, note=note)

    def _draw(self) -> None:
        step = self.current
        n = len(self.steps)
        # the numbers the step slider reads (0 .. n-1): the text never says "step 10 of 10"
        # over a slider at 9
        where = f"step {step.index} of 0–{n - 1}"
        replace_figure(self.figure, lesson_blocks_figure(step, title=f"{where}: {step.op}"))
        replace_figure(self.ring_figure, self._ring(step))
        self.text.value = (f"<div style='font-size:14px;line-height:1.4'><b>{where} — "
                           f"{_esc(step.op)}</b>: {_esc(step.text)}</div>")  # fmt: skip
        final = self.steps[-1].check
        if step.check is not None:
            ok = "&#10003;" if step.check.ok else "&#10007;"
            self.check_line.value = (
                f"<b>{ok} equal to the unsharded result: max |error| = "
                f"{step.check.max_abs_error:.2g}</b> (tolerance {step.check.tolerance:g}, "
                f"float32 values against a float64 numpy run without sharding)"
            )
        else:
            self.check_line.value = (
                f"<i>the last step compares the result with the unsharded numpy run "
                f"(max |error| = {final.max_abs_error:.2g} there)</i>"
            )
        self.controls["prev"].disabled = step.index == 0
        self.controls["next"].disabled = step.index == n - 1
        self.numbers.value = self._numbers(step, self.device)

    def _numbers(self, step: LessonStep, device: int) -> str:
        cells = []
        for t in step.tensors:
            sl = ", ".join(f"{a}:{b}" for a, b in t.slices[device])
            what = " (partial sum: one addend)" if t.is_partial else ""
            what += " (in the ring: · = not received yet)" if t.chunks is not None else ""
            body = matrix_text(t.values[device]).replace("<br>", "\n")
            cells.append(
                f"<div style='margin:0 18px 6px 0'><b>{_esc(t.name)}</b>[{sl}]{what}"
                f"<pre style='margin:2px 0;font-size:11px;line-height:1.25'>{body}</pre></div>"
            )
        return "<div style='display:flex;flex-wrap:wrap'>" + "".join(cells) + "</div>"

    def _device_options(self) -> list[tuple[str, int]]:
        mesh = self.mesh
        return [(f"{d} (" + ", ".join(f"{a}={i}" for a, i in
                                      zip(mesh.axis_names, mesh.coords(d), strict=True)) + ")", d)
                for d in range(mesh.size)]  # fmt: skip

    # --- observers ----------------------------------------------------------------------
    def _on_kind(self, change: dict[str, Any]) -> None:
        self.controls["axes"].value = DEFAULT_AXES  # each kind has its own default ring
        self._apply(change["new"], DEFAULT_AXES)

    def _on_axes(self, change: dict[str, Any]) -> None:
        self._apply(self.controls["kind"].value, change["new"])

    def _apply(self, kind: str, axes_value: str) -> None:
        axes = None if axes_value == DEFAULT_AXES else tuple(axes_value.split(","))
        if self.axes_error.run(lambda _: self.show(kind, axes), axes_value):
            self.clear_stale()
        else:
            self.mark_stale(f"the ring axes {axes_value!r} do not make a lesson; see the "
                            "message under 'ring over'")  # fmt: skip

    def _on_device(self, change: dict[str, Any]) -> None:
        self.device = change["new"]
        self.numbers.value = self._numbers(self.current, self.device)
        self._select(device=self.device)

    def _on_click(self, trace, points, state) -> None:
        if not points.point_inds:
            return
        i = points.point_inds[0]
        if trace.customdata is not None:
            d = int(trace.customdata[i])
        else:
            d = int(trace.text[i])
        self.controls["device"].value = d

    def on_selection(self, change: dict[str, Any]) -> None:
        d = change["new"]
        if d is not None and 0 <= d < self.mesh.size and d != self.device:
            self.controls["device"].value = d


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
