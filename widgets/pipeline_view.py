"""``PipelineView``: the pipeline schedule of one training step as a stage x time Gantt."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import numpy as np

from explorer.models import ModelConfig
from explorer.training import ParallelConfig
from explorer.training.pipeline import (
    BubbleBreakdown,
    bubble_breakdown,
    microbatch_size_for,
    peak_in_flight,
)

from .errors import FieldError, ViewError, field
from .figure_widget import FigureWidget
from .figures.pipeline import (
    CHUNK_PATTERNS,
    CHUNKED_KINDS,
    MAX_CHUNKS,
    OVERVIEW_KEYS,
    TRACE_GROUPS,
    TRACE_KEYS,
    TRACE_OVERVIEW,
    TRACE_SELECTED_MB,
    box_text,
    drawn_range,
    figure_height,
    group_arrays,
    kind_traces,
    overview_arrays,
    overview_mode,
    overview_trace_data,
    overview_ygap,
    pipeline_axes,
    pipeline_figure,
    pipeline_title,
    readable_window,
    selected_arrays,
    time_unit,
    timeline_columns,
    trace_arrays,
    trace_hover,
    visible_groups,
)
from .format import fmt_seconds
from .heap import gc_paused
from .pick_menu import NOTHING, PickMenu
from .selection import Selection
from .training_view import TrainingView, divisors

__all__ = ["PipelineView", "MAX_MICROBATCHES", "SCHEDULE_NAMES"]

# Above this many microbatches the chart holds tens of thousands of bars; the slider offers
# counts up to here (and up to the sequences per replica).
MAX_MICROBATCHES = 256
VIRTUAL_STAGES = (1, 2, 3, 4, 6, 8)
SCHEDULE_NAMES = (("1F1B", "1f1b"), ("GPipe", "gpipe"), ("interleaved 1F1B", "interleaved_1f1b"))
_WIDE = {"description_width": "initial"}


class PipelineView(TrainingView):
    """The schedule as a Gantt chart (Megatron-LM's 1F1B figures): forward (F) and
    backward (B) of every numbered microbatch on every stage, the bubble hatched grey,
    collectives and the optimizer in their colours.

    Args:
        model: a ModelConfig or a registry name.
        config: the ParallelConfig to start from (its device count stays fixed).
        hardware, global_batch, seq: as for ``ex.simulate`` (default batch: 4 pp
            microbatches per replica).
        selection: a shared Selection; a click on a bar selects its stage and microbatch;
            a published ``training`` plan is adopted.

    Controls: ``schedule``; ``pp`` (dp follows: the device count is fixed; the microbatch
    size is kept, so the count follows); ``microbatches`` per replica and step — the
    global batch stays fixed and the microbatch size follows (global batch / (dp x
    microbatches)); a count that does not divide is refused with the error beside the
    slider, the last valid chart kept and marked stale; ``virtual_stages`` (interleaved
    only); ``zoom`` (the part of the step shown, in percent: zoomed in, every box shows
    its number; the toolbar's zoom relabels the same way). Zoomed, the figure holds the
    boxes around the window only (``figures.pipeline.drawn_range``) and fetches others as
    the window moves; zoomed out so far that even the widest box is narrower than a box
    number needs, or that the boxes around the window are more than a browser draws in
    half a second (a whole real-size step), it draws the overview instead (one cell per
    pixel showing the kind and chunk busy longest there; hover counts its boxes and
    microbatches) and the boxes come back as the zoom narrows. ``pick["stage"]`` and
    ``pick["microbatch"]``: the keyboard's way to what a click on a box does
    (``widgets.pick_menu.PickMenu``).

    The info line shows the bubble twice, named: the closed formula and the simulated one,
    with what separates them (``explorer.training.pipeline.bubble_breakdown``).

    >>> import explorer as ex
    >>> view = PipelineView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=32, seq=512)
    >>> view.controls["microbatches"].value = 4
    >>> view.global_batch, view.sim.config.num_microbatches, view.config.microbatch_size
    (32, 4, 4)
    """

    name = "pipeline"

    def __init__(
        self, model: ModelConfig | str, config: ParallelConfig, *, hardware: str = "a100-80g",
        global_batch: int | None = None, seq: int | None = None,
        selection: Selection | None = None, stack: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(model, config, hardware=hardware, global_batch=global_batch, seq=seq,
                         stack=stack)  # fmt: skip
        self.window: tuple[float, float] | None = None
        self._bubbles: dict[int, tuple[Any, BubbleBreakdown]] = {}
        with gc_paused():
            self.sim = self._simulate(self.config)
            self.bubble = self._bubble(self.sim)
            self._cols = timeline_columns(self.sim.timeline)
            self.window = readable_window(self._cols)  # real sizes open where numbers are read
            self.figure = FigureWidget(pipeline_figure(self.sim, formula=self.bubble.formula,
                                                       window=self.window))  # fmt: skip
            self._drawn = drawn_range(self.window)  # the boxes the figure holds
            self._overview = overview_mode(self._cols, self.window)  # drawn as the overview
            self._cells_held = self._overview  # the overview heatmaps hold cells
        self.figure.layout.on_change(self.errors.guard(self._on_zoom), "xaxis.range")
        for k in ("compute-forward", "compute-backward"):  # every chunk's trace
            for i in kind_traces(k):
                self.figure.data[i].on_click(self.errors.guard(self._on_click))
        for k, (kind, _) in enumerate(OVERVIEW_KEYS):  # and its overview cells
            if kind in ("compute-forward", "compute-backward"):
                self.figure.data[TRACE_OVERVIEW + k].on_click(self.errors.guard(self._on_cell))
        self.controls = {
            "schedule": ipw.Dropdown(options=SCHEDULE_NAMES, description="schedule",
                                     style=_WIDE, layout=ipw.Layout(width="auto")),
            "pp": ipw.Dropdown(options=[1], description="pipeline stages (pp)", style=_WIDE,
                               layout=ipw.Layout(width="auto")),
            "virtual_stages": ipw.Dropdown(options=[1], description="virtual stages per device",
                                           style=_WIDE, layout=ipw.Layout(width="auto")),
            "microbatches": ipw.SelectionSlider(options=[1], description="microbatches",
                                                continuous_update=False, style=_WIDE,
                                                layout=ipw.Layout(width="30em")),
            "zoom": ipw.IntRangeSlider(min=0, max=100, value=(0, 100), readout_format="d",
                                       description="zoom (% of the step)",
                                       continuous_update=False, style=_WIDE,
                                       layout=ipw.Layout(width="30em")),
        }  # fmt: skip
        self.fields: dict[str, FieldError] = {}
        boxes = {}
        for key, w in self.controls.items():
            boxes[key], self.fields[key] = field(w)
            w.observe(self.errors.guard(self._on_control), names="value")
        self._sync_controls()
        # the keyboard's way to what a click on a bar does (select a stage, a microbatch)
        pick = self.errors.guard(lambda _: self._on_pick())
        self.pick = {
            "stage": PickMenu([("no stage", NOTHING)], pick, description="select"),
            "microbatch": PickMenu([("every microbatch", NOTHING)], pick),
        }
        self._sync_pick()
        self.info = ipw.HTML(self._info(), layout=ipw.Layout(width="auto"))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            ipw.HBox([boxes["schedule"], boxes["pp"], boxes["virtual_stages"]], layout=wrap),
            ipw.HBox([boxes["microbatches"], boxes["zoom"], self.pick["stage"],
                      self.pick["microbatch"]], layout=wrap),
            self.figure, self.info,
        )  # fmt: skip
        self._finish(selection)

    # --- options ------------------------------------------------------------------------
    @property
    def microbatches(self) -> int:
        return self.per_replica // self.config.microbatch_size

    def microbatch_options(self) -> list[int]:
        """Counts that keep the global batch (the divisors of the sequences per replica, up
        to ``MAX_MICROBATCHES``) and that the schedule takes (interleaved 1F1B: multiples of
        pp). The slider offers only these; the current count is always among them."""
        c = self.config
        out = [m for m in divisors(self.per_replica) if m <= MAX_MICROBATCHES
               and (c.schedule != "interleaved_1f1b" or m % c.pp == 0)]  # fmt: skip
        return sorted({*out, self.microbatches})

    def set_microbatches(self, count: int) -> None:
        """Run the step with ``count`` microbatches per replica (the global batch stays, the
        microbatch size follows); a count the slider does not offer is refused by name."""
        options = self.microbatch_options()
        if count not in options:
            raise ViewError(
                f"{count} microbatches: the global batch {self.global_batch} gives "
                f"{self.per_replica} sequences per replica; choose a count that divides "
                f"{self.per_replica}"
                + (f" and is a multiple of pp={self.config.pp}"
                   if self.config.schedule == "interleaved_1f1b" else "")
                + f": {', '.join(map(str, options))}"
            )  # fmt: skip
        self.controls["microbatches"].value = count

    def pp_options(self) -> list[int]:
        """pp values that keep the device count and give every stage a layer."""
        c, L = self.config, self.model_config.num_layers
        rest = self.devices // (c.tp * c.cp)
        return [p for p in divisors(rest) if p <= L]

    def virtual_stage_options(self) -> list[int]:
        c, L = self.config, self.model_config.num_layers
        if c.schedule != "interleaved_1f1b":
            return [1]
        return [v for v in VIRTUAL_STAGES if v > 1 and c.pp * v <= L and L % (c.pp * v) == 0]

    def _sync_controls(self) -> None:
        if not self.controls:
            return
        c, m = self.config, self.microbatches
        self._set_control("schedule", value=c.schedule)
        self._set_control("pp", options=self.pp_options(), value=c.pp)
        w = self.controls["microbatches"]
        self._bulk = True
        try:
            w.options = self.microbatch_options()
            w.value = m
            self.controls["zoom"].value = self._zoom_percent()
        finally:
            self._bulk = False
        vs = self.virtual_stage_options() or [c.virtual_stages]
        self._set_control("virtual_stages", options=vs, value=c.virtual_stages,
                          disabled=c.schedule != "interleaved_1f1b")  # fmt: skip
        for f in getattr(self, "fields", {}).values():
            f.last_valid = f.control.value

    # --- controls -----------------------------------------------------------------------
    def _on_control(self, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        key, new = self._control_key(change), change["new"]
        if key == "zoom":
            self.zoom(*new)
            return
        ok = self.fields[key].run(lambda v: self._apply(key, v), new)
        if ok:
            self.clear_stale()
            for f in self.fields.values():
                f.clear()
        else:
            first = self.fields[key].text.splitlines()[0]
            self.mark_stale(f"{key} = {new} was refused ({first})")

    def _apply(self, key: str, new: Any) -> None:
        """Turn one control's new value into a configuration and simulate it (raises, and
        keeps the last valid result, when the value is refused)."""
        c, gb = self.config, self.global_batch
        if key == "schedule":
            v = 1
            if new == "interleaved_1f1b":
                L = self.model_config.num_layers
                v = next((v for v in VIRTUAL_STAGES[1:] if L % (c.pp * v) == 0), 2)
            c = c.replace(schedule=new, virtual_stages=v)
        elif key == "pp":  # dp follows (devices fixed); the microbatch size is kept
            v = c.virtual_stages
            if c.schedule == "interleaved_1f1b":  # keep v if the layers still split evenly
                L = self.model_config.num_layers
                ok = [x for x in VIRTUAL_STAGES[1:] if new * x <= L and L % (new * x) == 0]
                v = v if v in ok else (ok[0] if ok else v)
            c = c.replace(pp=new, dp=self.devices // (c.tp * c.cp * new), ep=1, virtual_stages=v)
        elif key == "microbatches":  # the global batch stays; the microbatch size follows
            c = c.replace(microbatch_size=microbatch_size_for(gb, c.dp, new))
        elif key == "virtual_stages":
            c = c.replace(virtual_stages=new)
        with self.progress.task("simulating and drawing the step"):
            self.set_config(c, global_batch=gb)

    def set_config(self, config: ParallelConfig, global_batch: int | None = None) -> None:
        self.window = None  # _draw opens the new step on a readable window
        super().set_config(config, global_batch)

    def _zoom_percent(self) -> tuple[int, int]:
        """The zoom control's reading of the window shown (whole percent, at least 1)."""
        if self.window is None:
            return (0, 100)
        span = float(self._cols["span"]) or 1.0
        lo = int(self.window[0] / span * 100)
        hi = max(lo + 1, min(100, int(np.ceil(self.window[1] / span * 100))))
        return (lo, hi)

    # --- drawing ------------------------------------------------------------------------
    def _bubble(self, sim) -> BubbleBreakdown:
        hit = self._bubbles.get(id(sim))
        if hit is None or hit[0] is not sim:
            hit = (sim, bubble_breakdown(sim))
            self._bubbles = {id(sim): hit, **dict(list(self._bubbles.items())[:7])}
        return hit[1]

    def _draw(self) -> None:
        """Set only what changes (bar arrays, row labels, title, axes, group labels):
        building a new figure and copying it costs ~3x more for a few thousand bars. Each
        trace keeps its colour and pattern (one per kind and chunk), so a redraw sends
        numbers only, and only for the boxes around the window (``_set_boxes``)."""
        sim, c = self.sim, self.sim.config
        self.bubble = self._bubble(sim)
        unit, scale = time_unit(sim.timeline.step_time_s)
        self._cols = cols = timeline_columns(sim.timeline, scale)
        if self.window is None:  # a new step: open it where the boxes carry their numbers
            self.window = readable_window(cols)
        fig = self.figure
        self._zooming = True
        try:
            with fig.batch_update():
                self._set_boxes()
                self._set_box_text()
                self._set_groups()
                fig.layout.title.text = pipeline_title(sim, sim.timeline, self.bubble.formula)
                fig.layout.update(pipeline_axes(cols, c.pp, c.virtual_stages, unit, self.window))
                fig.layout.height = figure_height(c.pp)
                fig.update_traces(ygap=overview_ygap(fig.layout, c.pp),
                                  selector={"type": "heatmap"})  # fmt: skip
        finally:
            self._zooming = False
        self.info.value = self._info()
        self._sync_pick()
        self._set_zoom_control()

    def _set_boxes(self) -> None:
        """Put the boxes of ``drawn_range(window)`` in the bar traces and the outline (the
        browser draws a few hundred boxes around the window, not a whole GPT-3 step); where
        the boxes are too narrow or too many (``overview_mode``), the overview heatmaps
        instead, and the outline still on the selection's real boxes."""
        c, fig = self.sim.config, self.figure
        unit = time_unit(self.sim.timeline.step_time_s)[0]
        self._drawn = drawn = drawn_range(self.window)
        self._overview = overview = overview_mode(self._cols, self.window)
        arrays = trace_arrays(self._cols, c.virtual_stages, drawn, overview)
        for trace, (kind, chunk), a in zip(fig.data, TRACE_KEYS, arrays, strict=False):
            trace.update(hovertemplate=trace_hover(kind, chunk, c.virtual_stages, unit), **a)
        if not overview and not getattr(self, "_cells_held", True):
            return  # the overview heatmaps are empty already
        cells = (overview_arrays(self._cols, c.pp, self.window) if overview
                 else [None] * len(OVERVIEW_KEYS))  # fmt: skip
        for k, ((kind, chunk), a) in enumerate(zip(OVERVIEW_KEYS, cells, strict=True)):
            fig.data[TRACE_OVERVIEW + k].update(**overview_trace_data(a, kind, chunk, unit))
        self._cells_held = overview
        sel = selected_arrays(self._cols, self.microbatch, self._stage_filter(), drawn)
        t = fig.data[TRACE_SELECTED_MB]
        t.y, t.base, t.x = sel["y"], sel["base"], sel["x"]

    def _set_box_text(self) -> None:
        """Box numbers on, or off where no box in the window is wide enough for one."""
        where = box_text(self._cols, self.window)
        for trace, (kind, _) in zip(self.figure.data, TRACE_KEYS, strict=False):
            if kind in CHUNKED_KINDS:
                trace.textposition = where

    def _set_zoom_control(self) -> None:
        if "zoom" not in getattr(self, "controls", {}):
            return
        bulk, self._bulk = self._bulk, True
        try:
            self.controls["zoom"].value = self._zoom_percent()
        finally:
            self._bulk = bulk

    def zoom(self, lo: float, hi: float) -> None:
        """Show ``lo``..``hi`` percent of the step (0, 100: the whole step); when the boxes
        become wide enough each shows its number, otherwise groups are labelled."""
        if not 0 <= lo < hi <= 100:
            raise ViewError(f"zoom {lo}..{hi}%: expected 0 <= lo < hi <= 100")
        span = float(self._cols["span"])
        whole = lo <= 0 and hi >= 100
        self._set_window(None if whole else (span * lo / 100, span * hi / 100))

    def _set_window(self, window: tuple[float, float] | None) -> None:
        self.window = window
        c = self.sim.config
        unit = time_unit(self.sim.timeline.step_time_s)[0]
        self._zooming = True
        try:
            with self.figure.batch_update():
                # the overview's cells are a pixel of this window: redrawn at every zoom
                overview = overview_mode(self._cols, window)
                if _reslice(self._drawn, window) or overview or overview != self._overview:
                    self._set_boxes()
                self._set_box_text()
                self._set_groups()
                self.figure.layout.update(
                    pipeline_axes(self._cols, c.pp, c.virtual_stages, unit, window)
                )
        finally:
            self._zooming = False

    def _set_groups(self) -> None:
        g = group_arrays(visible_groups(self._cols, self.window))
        t = self.figure.data[TRACE_GROUPS]
        t.x, t.y, t.text = g["x"], g["y"], g["text"]

    def _on_zoom(self, layout, xrange) -> None:
        """The toolbar's zoom (a relayout from the page): relabel for the new range."""
        if getattr(self, "_zooming", False) or xrange is None:
            return
        lo, hi = (float(x) for x in xrange)
        if self.window is not None and (lo, hi) == tuple(self.window):
            return
        self._set_window((lo, hi))
        self._set_zoom_control()

    def _stage_filter(self) -> int | None:
        # a stage alone outlines that stage's steps; with a microbatch, the microbatch
        return self.stage if self.microbatch is None else None

    def _sync_pick(self) -> None:
        """The stage and microbatch menus list what is drawn and show what is selected."""
        pick = getattr(self, "pick", None)
        if pick is None:
            return
        c = self.sim.config
        # every stage a click can pick: interleaved, pp x v of them, chunk c on device d
        stages = [("no stage", NOTHING)] + [
            (f"stage {k}" if c.virtual_stages == 1 else
             f"stage {k} (device {k % c.pp}, chunk {k // c.pp})", k)
            for k in range(c.pp * c.virtual_stages)
        ]  # fmt: skip
        mbs = [("every microbatch", NOTHING)] + [(f"microbatch {m}", m)
                                                 for m in range(c.num_microbatches)]  # fmt: skip
        pick["stage"].show(NOTHING if self.stage is None else self.stage, stages)
        pick["microbatch"].show(NOTHING if self.microbatch is None else self.microbatch, mbs)

    def _on_pick(self) -> None:
        stage, mb = (w.value for w in self.pick.values())
        self.stage = None if stage == NOTHING else stage
        self.microbatch = None if mb == NOTHING else mb
        self._mark()
        self._select(stage=self.stage, microbatch=self.microbatch)

    def _mark(self) -> None:
        self._sync_pick()
        sel = selected_arrays(self._cols, self.microbatch, self._stage_filter(), self._drawn)
        with self.figure.batch_update():
            t = self.figure.data[TRACE_SELECTED_MB]
            t.y, t.base, t.x = sel["y"], sel["base"], sel["x"]

    def _info(self) -> str:
        s, c, b = self.sim, self.sim.config, self.bubble
        flight = [_in_flight(s, d) for d in range(c.pp)]
        batch = (
            f"global batch <b>{s.global_batch}</b> (fixed) = dp {c.dp} × "
            f"{c.num_microbatches} microbatches × microbatch size <b>{c.microbatch_size}</b> "
            "— changing the microbatch count changes the microbatch size"
        )
        steps = "; ".join(
            f"{_STEP_NAMES[name]} {value:.1%} ({delta:+.1%})" for name, value, delta, _ in b.steps()
        )
        why = (
            f"The formula assumes identical stages and free transfers; here the slowest "
            f"stage takes {b.stage_imbalance:.2f}× the mean (the embedding sits on the first "
            f"stage, the head and loss on the last, layers may not divide evenly), transfers "
            f"take {fmt_seconds(b.p2p_s)} per hop"
        )
        return (
            f"<div style='line-height:1.45'><b>{c}</b> on {c.devices} × {s.hardware}: step "
            f"{fmt_seconds(s.step_time_s)}, {s.tflops_per_device:.0f} TFLOP/s per device"
            f"{'' if s.fits else ' — <b style=color:#E4002B>over memory</b>'}<br>{batch}<br>"
            f"<b>bubble</b>: formula ({_formula_text(c)}) <b>{b.formula:.1%}</b>, simulated "
            f"<b>{b.simulated:.1%}</b>. Step by step: {steps}.<br>{why}. "
            f"Microbatches in flight per device: {flight}.{_chunks_text(c)}</div>"
        )

    # --- clicks -------------------------------------------------------------------------
    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            i = points.point_inds[0]  # the box's stage and microbatch (trace_arrays)
            stage, mb = int(trace.customdata[i]), int(trace.text[i])
            self.click(stage, mb)

    def _on_cell(self, trace, points, state) -> None:
        """A click on an overview cell: select the stage and microbatch of the cell's trace's
        box nearest the click on that row (the cell's time and device: its x and y)."""
        if not points.xs:
            return
        kind, chunk = OVERVIEW_KEYS[points.trace_index - TRACE_OVERVIEW]
        self.click_at(kind, chunk, int(round(float(points.ys[0]))), float(points.xs[0]))

    def click_at(self, kind: str, chunk: int, device: int, time: float) -> None:
        """Select the box of ``kind`` and virtual ``chunk`` on pipeline ``device`` nearest
        ``time`` (x axis units): what a click on an overview cell does."""
        cols = self._cols
        m = (cols["kind"] == kind) & (cols["device"] == device)
        m &= cols["chunk"] % MAX_CHUNKS == chunk
        if not m.any():
            c = self.sim.config
            raise ViewError(
                f"no {kind} box of chunk {chunk} on pipeline device {device}: nothing to "
                f"select; give a device in 0..{c.pp - 1} and a chunk in 0..{c.virtual_stages - 1}"
            )
        i = np.flatnonzero(m)
        mid = (cols["start"][i] + cols["end"][i]) / 2
        j = i[int(np.argmin(np.abs(mid - time)))]
        self.click(int(cols["stage"][j]), int(cols["mb"][j]))

    def click(self, stage: int, microbatch: int) -> None:
        """What a click on a forward or backward bar does: select its stage and microbatch."""
        self.stage, self.microbatch = stage, microbatch
        self._mark()
        self._select(stage=stage, microbatch=microbatch)


_STEP_NAMES = {
    "uneven": "+ this split's stage times",
    "with_p2p": "+ pipeline transfers",
    "simulated": "+ gradient reduction and optimizer",
}


def _chunks_text(c) -> str:
    """How the view tells the virtual chunks apart (pattern and shade, not colour alone)."""
    if c.virtual_stages <= 1:
        return ""
    names = {"": "plain", "/": "hatched /", ".": "dotted", "x": "crossed", "\\": "hatched \\",
             "+": "gridded", "-": "lined -", "|": "lined |"}  # fmt: skip
    parts = [f"chunk {k} {names[CHUNK_PATTERNS[k % len(CHUNK_PATTERNS)]]}"
             for k in range(c.virtual_stages)]  # fmt: skip
    return (f"<br>Virtual chunks (stage = chunk × pp + device): {', '.join(parts)}, each a "
            "lighter shade; hover a box for its chunk.")  # fmt: skip


def _reslice(drawn: tuple[float, float] | None, window: tuple[float, float] | None) -> bool:
    """Whether a figure holding the boxes of ``drawn`` must be re-sliced to show ``window``:
    the window leaves the boxes held, or they are many times more than it needs (a zoom in
    from the whole step)."""
    need = drawn_range(window)
    if need is None or drawn is None:
        return need != drawn
    inside = drawn[0] <= window[0] and window[1] <= drawn[1]
    return not inside or drawn[1] - drawn[0] > 4 * (need[1] - need[0])


def _formula_text(c) -> str:
    p, m, v = c.pp, c.num_microbatches, c.virtual_stages
    if c.schedule == "interleaved_1f1b":
        return f"(p−1)/v ÷ (m + (p−1)/v), p={p}, m={m}, v={v}"
    return f"(p−1)/(m+p−1), p={p}, m={m}"


def _in_flight(sim, device: int) -> int:
    c = sim.config
    return peak_in_flight(c.schedule, c.pp, c.num_microbatches, device, c.virtual_stages)
