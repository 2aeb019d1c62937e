"""``MemoryView``: memory per pipeline device as stacked bars against the device capacity."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go

from explorer.models import ModelConfig
from explorer.training import ParallelConfig
from explorer.training.config import RECOMPUTE_POLICIES, ZERO_STAGES

from .base import replace_figure
from .figures.memory import ROWS, memory_figure
from .selection import Selection
from .training_view import TrainingView, divisors

__all__ = ["MemoryView"]

_GIB = 2**30


class MemoryView(TrainingView):
    """Per-device memory (parameters, gradients, optimizer states, activations, the
    recompute working set, the ZeRO-3 gather buffer and each allowance as its own segment)
    per pipeline stage, with the capacity line; reacts to ZeRO, recompute and microbatch
    controls.

    Args:
        model, config, hardware, global_batch, seq, selection: as for ``PipelineView``.

    Controls: ``zero`` (0-3), ``recompute`` (none, selective, full, per_layer: the fewest
    fully recomputed layers that fit), ``microbatch_size`` (a divisor of the batch per
    replica; the microbatch count follows). A click on a bar selects its stage.

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
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(model, config, hardware=hardware, global_batch=global_batch, seq=seq)
        self.sim = self._simulate(self.config)
        self.figure = go.FigureWidget(memory_figure(self.sim))
        for t in self.figure.data[: len(ROWS)]:
            t.on_click(self.errors.guard(self._on_click))
        self.controls = {
            "zero": ipw.ToggleButtons(options=[(f"ZeRO-{z}", z) for z in ZERO_STAGES],
                                      description="ZeRO", style={"button_width": "auto"}),
            "recompute": ipw.Dropdown(options=RECOMPUTE_POLICIES, description="recompute"),
            "microbatch_size": ipw.Dropdown(options=[1], description="microbatch"),
        }  # fmt: skip
        for w in self.controls.values():
            w.observe(self.errors.guard(self._on_control), names="value")
        self._sync_controls()
        self.info = ipw.HTML(self._info())
        c = self.controls
        self._layout_children(
            c["zero"], ipw.HBox([c["recompute"], c["microbatch_size"]]), self.figure, self.info,
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

    def _on_control(self, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        key = self._control_key(change)
        self.set_config(self.config.replace(**{key: change["new"]}))

    # --- drawing ------------------------------------------------------------------------
    def _draw(self) -> None:
        replace_figure(self.figure, memory_figure(self.sim, selected_stage=self.stage))
        self.info.value = self._info()

    def _mark(self) -> None:
        n = len(self.sim.memory_per_device)
        sel = self.stage is not None and self.stage >= 0
        # stage g runs on pipeline device g % pp (interleaved: one bar per device)
        x = (self.stage % n) if sel else 0
        with self.figure.batch_update():
            frame = self.figure.layout.shapes[1]
            frame.visible = sel
            frame.x0, frame.x1 = x - 0.45, x + 0.45

    def _info(self) -> str:
        s = self.sim
        worst = s.memory
        rows = ", ".join(f"{k.replace('_', ' ')} {v / _GIB:.1f}" for k, v in worst.rows() if v)
        n_full = s.config.recompute_num_layers
        extra = f" ({n_full} fully recomputed layers per stage)" if n_full is not None else ""
        return (
            f"worst device: stage {worst.stage}, {worst.total / _GIB:.1f} of "
            f"{s.memory_cap_bytes / _GIB:.0f} GiB — {rows} GiB{extra}; step "
            f"{s.step_time_s * 1e3:.1f} ms"
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
