"""``PipelineView``: the pipeline schedule of one training step as a stage x time Gantt."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go

from explorer.models import ModelConfig
from explorer.training import ParallelConfig, bubble_fraction
from explorer.training.config import SCHEDULES

from .figures.pipeline import (
    EVENT_KINDS,
    TRACE_SELECTED_MB,
    figure_height,
    kind_arrays,
    pipeline_figure,
    pipeline_title,
    row_labels,
    selected_arrays,
    timeline_columns,
)
from .selection import Selection
from .training_view import TrainingView, divisors

__all__ = ["PipelineView", "MAX_MICROBATCHES"]

# Above this many microbatches the chart holds tens of thousands of bars and the simulation
# itself passes ~150 ms; the control offers counts up to here.
MAX_MICROBATCHES = 128
VIRTUAL_STAGES = (1, 2, 3, 4, 6, 8)


class PipelineView(TrainingView):
    """The schedule as a Gantt chart: forward (F) and backward (B) of every microbatch on
    every stage, the bubble hatched grey, collectives and the optimizer in their colours.

    Args:
        model: a ModelConfig or a registry name.
        config: the ParallelConfig to start from (its device count stays fixed).
        hardware, global_batch, seq: as for ``ex.simulate`` (default batch: 4 pp
            microbatches per replica).
        selection: a shared Selection; a click on a bar selects its stage and microbatch;
            a published ``training`` plan is adopted.

    Controls: ``schedule``, ``pp`` (dp follows: the device count is fixed),
    ``microbatches`` (per step and replica; the microbatch size is kept, so the global
    batch follows: dp x microbatch size x microbatches, shown in the info line — the layer
    costs need no new operator search and the chart redraws in tens of ms),
    ``virtual_stages`` (interleaved only).

    >>> import explorer as ex
    >>> view = PipelineView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=32, seq=512)
    >>> view.controls["microbatches"].value = 4
    >>> view.global_batch, view.sim.config.num_microbatches
    (8, 4)
    """

    name = "pipeline"

    def __init__(
        self, model: ModelConfig | str, config: ParallelConfig, *, hardware: str = "a100-80g",
        global_batch: int | None = None, seq: int | None = None,
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(model, config, hardware=hardware, global_batch=global_batch, seq=seq)
        self.sim = self._simulate(self.config)
        self._cols = timeline_columns(self.sim.timeline)
        self.figure = go.FigureWidget(pipeline_figure(self.sim))
        self.figure.data[0].on_click(self.errors.guard(self._on_click))
        self.figure.data[1].on_click(self.errors.guard(self._on_click))
        guard = self.errors.guard
        self.controls = {
            "schedule": ipw.Dropdown(options=SCHEDULES, description="schedule"),
            "pp": ipw.Dropdown(options=[1], description="pp"),
            "microbatches": ipw.IntSlider(min=1, max=MAX_MICROBATCHES, description="microbatches",
                                          continuous_update=False),
            "virtual_stages": ipw.Dropdown(options=[1], description="virtual stages"),
        }  # fmt: skip
        for w in self.controls.values():
            w.observe(guard(self._on_control), names="value")
        self._sync_controls()
        self.info = ipw.HTML(self._info())
        c = self.controls
        self._layout_children(
            ipw.HBox([c["schedule"], c["pp"], c["virtual_stages"]]), c["microbatches"],
            self.figure, self.info,
        )  # fmt: skip
        self._finish(selection)

    # --- options ------------------------------------------------------------------------
    @property
    def microbatches(self) -> int:
        return self.per_replica // self.config.microbatch_size

    def pp_options(self) -> list[int]:
        """pp values that keep the device count and give every stage a layer."""
        rest, L = self.devices // self.config.tp, self.model_config.num_layers
        return [p for p in divisors(rest) if p <= L]

    def virtual_stage_options(self) -> list[int]:
        c, L = self.config, self.model_config.num_layers
        if c.schedule != "interleaved_1f1b":
            return [1]
        return [v for v in VIRTUAL_STAGES if v > 1 and c.pp * v <= L and L % (c.pp * v) == 0]

    def _sync_controls(self) -> None:
        if not self.controls:
            return
        c = self.config
        self._set_control("schedule", value=c.schedule)
        self._set_control("pp", options=self.pp_options(), value=c.pp)
        self._set_control("microbatches", value=self.microbatches)
        vs = self.virtual_stage_options() or [c.virtual_stages]
        self._set_control("virtual_stages", options=vs, value=c.virtual_stages,
                          disabled=c.schedule != "interleaved_1f1b")  # fmt: skip

    # --- controls -----------------------------------------------------------------------
    def _on_control(self, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        key, new = self._control_key(change), change["new"]
        c, m = self.config, self.microbatches
        if key == "schedule":
            v = 1
            if new == "interleaved_1f1b":
                L = self.model_config.num_layers
                v = next((v for v in VIRTUAL_STAGES[1:] if L % (c.pp * v) == 0), 2)
            c = c.replace(schedule=new, virtual_stages=v)
        elif key == "pp":  # dp follows (devices fixed); microbatch count and size kept
            v = c.virtual_stages
            if c.schedule == "interleaved_1f1b":  # keep v if the layers still split evenly
                L = self.model_config.num_layers
                ok = [x for x in VIRTUAL_STAGES[1:] if new * x <= L and L % (new * x) == 0]
                v = v if v in ok else (ok[0] if ok else v)
            c = c.replace(pp=new, dp=self.devices // (c.tp * new), ep=1, virtual_stages=v)
        elif key == "microbatches":
            m = new
        elif key == "virtual_stages":
            c = c.replace(virtual_stages=new)
        self.set_config(c, global_batch=c.dp * c.microbatch_size * m)

    # --- drawing ------------------------------------------------------------------------
    def _draw(self) -> None:
        """Set only what changes (bar arrays, row labels, title, height): building a new
        figure and copying it costs ~3x more for a few thousand bars."""
        sim, c = self.sim, self.sim.config
        self._cols = cols = timeline_columns(sim.timeline)
        sel = selected_arrays(cols, self.microbatch, self._stage_filter())
        fig = self.figure
        with fig.batch_update():
            for trace, kind in zip(fig.data, EVENT_KINDS, strict=False):
                a = kind_arrays(cols, kind)
                trace.update(y=a["y"], base=a["base"], x=a["x"], customdata=a["customdata"])
            t = fig.data[TRACE_SELECTED_MB]
            t.y, t.base, t.x = sel["y"], sel["base"], sel["x"]
            fig.layout.title.text = pipeline_title(sim, sim.timeline)
            fig.layout.yaxis.tickvals = list(range(c.pp))
            fig.layout.yaxis.ticktext = row_labels(c.pp, c.virtual_stages)
            fig.layout.height = figure_height(c.pp)
        self.info.value = self._info()

    def _stage_filter(self) -> int | None:
        # a stage alone outlines that stage's steps; with a microbatch, the microbatch
        return self.stage if self.microbatch is None else None

    def _mark(self) -> None:
        sel = selected_arrays(self._cols, self.microbatch, self._stage_filter())
        with self.figure.batch_update():
            t = self.figure.data[TRACE_SELECTED_MB]
            t.y, t.base, t.x = sel["y"], sel["base"], sel["x"]

    def _info(self) -> str:
        s, c = self.sim, self.sim.config
        ideal = bubble_fraction(c.schedule, c.pp, c.num_microbatches, c.virtual_stages)
        flight = [_in_flight(s, d) for d in range(c.pp)]
        return (
            f"<b>{c}</b> on {c.devices} x {s.hardware}, global batch {s.global_batch}: "
            f"step {s.step_time_s * 1e3:.1f} ms, "
            f"bubble {s.timeline.bubble_fraction():.1%} simulated (uniform-stage formula "
            f"{ideal:.1%}), microbatches in flight per device {flight}, "
            f"{s.tflops_per_device:.0f} TFLOP/s per device"
            f"{'' if s.fits else ' — <b style=color:#E4002B>over memory</b>'}"
        )

    # --- clicks -------------------------------------------------------------------------
    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            stage, mb = (int(v) for v in trace.customdata[points.point_inds[0]][:2])
            self.click(stage, mb)

    def click(self, stage: int, microbatch: int) -> None:
        """What a click on a forward or backward bar does: select its stage and microbatch."""
        self.stage, self.microbatch = stage, microbatch
        self._mark()
        self._select(stage=stage, microbatch=microbatch)


def _in_flight(sim, device: int) -> int:
    from explorer.training import peak_in_flight

    c = sim.config
    return peak_in_flight(c.schedule, c.pp, c.num_microbatches, device, c.virtual_stages)
