"""``MemoryView``: memory per pipeline device as stacked bars against the device capacity."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw

from explorer.models import ModelConfig
from explorer.training import ZERO_STAGES, ParallelConfig

from .errors import FieldError, field
from .figure_widget import FigureWidget
from .figures.memory import (
    ROW_NAMES,
    ROWS,
    TRACE_TOTAL,
    memory_columns,
    memory_figure,
    memory_layout,
    memory_title,
    total_colors,
)
from .format import fmt_bytes, fmt_seconds
from .pick_menu import NOTHING, PickMenu
from .selection import Selection
from .training_view import TrainingView, divisors

__all__ = ["MemoryView", "RECOMPUTE_NAMES"]

RECOMPUTE_NAMES = (
    ("none", "none"),
    ("selective (attention only)", "selective"),
    ("full (every layer)", "full"),
    ("per layer (fewest that fit)", "per_layer"),
)
_WIDE = {"description_width": "initial"}


class MemoryView(TrainingView):
    """Per-device memory (parameters, gradients, optimizer states, activations, the
    recompute working set, the ZeRO-3 gather buffer and each allowance as its own segment)
    per pipeline stage, with the capacity line; reacts to ZeRO, recompute and microbatch
    controls, each redrawing at once.

    Args:
        model, config, hardware, global_batch, seq, selection: as for ``PipelineView``.

    Controls: ``zero`` (0-3), ``recompute`` (none, selective, full, per_layer: the fewest
    fully recomputed layers that fit), ``microbatch_size`` (a divisor of the batch per
    replica; the microbatch count follows, the global batch stays). A refused value shows
    its error beside its control and keeps the last valid bars, marked stale. A click on a
    bar selects its stage.

    >>> import explorer as ex
    >>> view = MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    >>> before = view.sim.memory_per_device[0].optimizer_states
    >>> view.controls["zero"].value = 1
    >>> view.sim.memory_per_device[0].optimizer_states == before / 4
    True
    """

    name = "memory"

    def __init__(
        self, model: ModelConfig | str, config: ParallelConfig, *, hardware: str = "a100-80g",
        global_batch: int | None = None, seq: int | None = None,
        selection: Selection | None = None, stack: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(model, config, hardware=hardware, global_batch=global_batch, seq=seq,
                         stack=stack)  # fmt: skip
        self.sim = self._simulate(self.config)
        self.figure = FigureWidget(memory_figure(self.sim))
        for t in self.figure.data[: len(ROWS)]:
            t.on_click(self.errors.guard(self._on_click))
        self.controls = {
            "zero": ipw.ToggleButtons(options=[(f"ZeRO-{z}", z) for z in ZERO_STAGES],
                                      description="ZeRO", style={"button_width": "auto",
                                                                 **_WIDE}),
            "recompute": ipw.Dropdown(options=RECOMPUTE_NAMES, description="recomputation",
                                      style=_WIDE, layout=ipw.Layout(width="auto")),
            "microbatch_size": ipw.Dropdown(options=[1], description="microbatch size",
                                            style=_WIDE, layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        self.fields: dict[str, FieldError] = {}
        boxes = {}
        for key, w in self.controls.items():
            boxes[key], self.fields[key] = field(w)
            w.observe(self.errors.guard(self._on_control), names="value")
        self._sync_controls()
        # the keyboard's way to what a click on a bar does
        self.stage_menu = PickMenu(self._stage_options(), self.errors.guard(self._pick_stage),
                                   value=NOTHING, description="select")  # fmt: skip
        self.info = ipw.HTML(self._info(), layout=ipw.Layout(width="auto"))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            ipw.HBox([boxes["zero"], boxes["recompute"], boxes["microbatch_size"],
                      self.stage_menu], layout=wrap),
            self.figure, self.info,
        )  # fmt: skip
        self._finish(selection)

    def microbatch_size_options(self) -> list[int]:
        return divisors(self.per_replica)

    def _sync_controls(self) -> None:
        if not self.controls:
            return
        c = self.config
        self._set_control("zero", value=c.zero)
        self._set_control("recompute", value=c.recompute)
        self._set_control("microbatch_size", options=self.microbatch_size_options(),
                          value=c.microbatch_size)  # fmt: skip
        for f in getattr(self, "fields", {}).values():
            f.last_valid = f.control.value

    def _on_control(self, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        key, new = self._control_key(change), change["new"]

        def apply(value):
            with self.progress.task("simulating the step"):
                self.set_config(self.config.replace(**{key: value}))

        if self.fields[key].run(apply, new):
            self.clear_stale()
            for f in self.fields.values():
                f.clear()
        else:
            first = self.fields[key].text.splitlines()[0]
            self.mark_stale(f"{key} = {new} was refused ({first})")

    # --- drawing ------------------------------------------------------------------------
    def _draw(self) -> None:
        """Every row's bar heights and hover, the totals, title, capacity line and frame,
        set in one update (every row is set every time, zero or not)."""
        sim = self.sim
        mems = sim.memory_per_device
        cols = memory_columns(mems, sim.config.virtual_stages)
        fig = self.figure
        with fig.batch_update():
            for k, r in enumerate(ROWS):
                t = fig.data[k]
                t.x, t.y, t.customdata = cols["x"], cols["rows"][r], cols["hover"][r]
            tot = fig.data[TRACE_TOTAL]
            tot.x, tot.y, tot.text = cols["x"], cols["totals"], cols["total_text"]
            tot.textfont.color = total_colors(cols, sim.memory_cap_bytes)
            fig.layout.update(memory_layout(cols, sim.memory_cap_bytes, len(mems),
                                            self._selected(len(mems)), memory_title(sim),
                                            sim.config.virtual_stages))  # fmt: skip
        self.info.value = self._info()
        self._sync_stage_menu()

    def _selected(self, n: int) -> int | None:
        # stage g runs on pipeline device g % pp (interleaved: one bar per device)
        return None if self.stage is None or self.stage < 0 else self.stage % n

    def _stage_options(self) -> list[tuple[str, int]]:
        where = "stage" if self.sim.config.virtual_stages == 1 else "pipeline device"
        n = len(self.sim.memory_per_device)
        return [("no stage", NOTHING)] + [(f"{where} {k}", k) for k in range(n)]

    def _sync_stage_menu(self) -> None:
        """The stage menu lists the bars drawn and shows the one selected."""
        menu = getattr(self, "stage_menu", None)
        if menu is None:
            return
        x = self._selected(len(self.sim.memory_per_device))
        menu.show(NOTHING if x is None else x, self._stage_options())

    def _pick_stage(self, stage: int) -> None:
        """What a click on a bar does, for the stage menu (`NOTHING`: clear the selection)."""
        if stage == NOTHING:
            self.stage = None
            self._mark()
            self._select(stage=None)
        else:
            self.click(stage)

    def _mark(self) -> None:
        n = len(self.sim.memory_per_device)
        x = self._selected(n)
        self._sync_stage_menu()
        with self.figure.batch_update():
            frame = self.figure.layout.shapes[1]
            frame.visible = x is not None
            frame.x0, frame.x1 = (x or 0) - 0.45, (x or 0) + 0.45

    def _info(self) -> str:
        s = self.sim
        worst = s.memory
        rows = ", ".join(f"{ROW_NAMES[k]} {fmt_bytes(v)}" for k, v in worst.rows() if v)
        n_full = s.config.recompute_num_layers
        extra = f" ({n_full} fully recomputed layers per stage)" if n_full is not None else ""
        verdict = "fits" if s.fits else (
            f"<b style='color:#E4002B'>over by {fmt_bytes(s.over_memory_bytes)}</b>"
        )  # fmt: skip
        where = "stage" if s.config.virtual_stages == 1 else "pipeline device"
        return (
            f"worst device: {where} {worst.stage}, {fmt_bytes(worst.total)} of "
            f"{fmt_bytes(s.memory_cap_bytes)} ({verdict}) — {rows}{extra}; step "
            f"{fmt_seconds(s.step_time_s)}"
        )

    # --- clicks -------------------------------------------------------------------------
    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            self.click(int(points.point_inds[0]))

    def click(self, device: int) -> None:
        """What a click on a bar does: select that stage (pipeline device)."""
        self.stage = device
        self._mark()
        self._select(stage=device)
