"""``ScalingView``: per-device throughput and linearity against the device count, several
configurations (model, hardware, weak or strong scaling) overlaid."""

from __future__ import annotations

import asyncio
import contextlib
import html
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

import explorer as ex
from explorer.training import ScalingCurve

from .base import View
from .errors import FieldError, field
from .figure_widget import FigureWidget
from .figures.errors import ViewError
from .figures.scaling import (
    METRIC_TITLES,
    METRICS,
    axis_ticks,
    curve_label,
    ideal_x,
    scaling_figure,
    scaling_traces,
)
from .heap import gc_paused, settle_heap
from .plan_ahead import PlanAhead, Stopped, in_kernel
from .selection import Selection

__all__ = ["ScalingView", "Series", "DEVICE_COUNTS", "MAX_SERIES"]

DEVICE_COUNTS: tuple[int, ...] = tuple(2**k for k in range(3, 13))  # 8 .. 4096
MAX_SERIES = 6  # trace slots reserved in the figure (traces are updated, never added)
_CURVES: OrderedDict[tuple, ScalingCurve] = OrderedDict()
_CURVES_LOCK = threading.Lock()  # views computing in the background share the cache
CURVE_CACHE_SIZE = 32


class _Replaced(Exception):
    """A background computation whose series were changed since it started stops."""


@dataclass(frozen=True)
class Series:
    """One curve to draw: what ``ex.scaling_curve`` is called with."""

    model: str
    hardware: str = "a100-80g"
    mode: str = "weak"
    global_batch: int | None = None  # at the smallest count (weak) or at every count
    seq: int | None = None
    counts: tuple[int, ...] = DEVICE_COUNTS

    @property
    def label(self) -> str:
        gb = f", batch {self.global_batch}" if self.global_batch else ""
        return f"{self.model} on {self.hardware}, {self.mode}{gb}"


class ScalingView(View):
    """Planned throughput per device and linearity from 8 to 4096 devices.

    Each series is a ``scaling_curve`` (every point is a ``plan_training`` result, so each
    device count has its own best configuration; hover shows it). The controls edit the
    last series; ``add`` keeps it and starts a new one (up to ``MAX_SERIES``).

    Args:
        series: the curves to draw (default: ``model`` weak and strong).
        model, hardware, global_batch, seq: the default series' settings.
        counts: device counts (powers of two from 8 to 4096 by default).
        lazy: draw empty axes and compute on ``compute()`` (the dashboard computes when
            its tab opens: a 1.3B model over 10 counts takes a few seconds).
        background: compute in a thread and draw each point as it is planned (the
            dashboard's tab: GPT-3 175B over ten counts plans for about ten seconds, and the
            tab shows its axes at once, then the points as they come, with progress);
            ``wait()`` waits for it. A change of the series stops the computation and
            starts the new one. ``None`` (default): the first curves are computed before
            the constructor returns, and a control's change is computed in the background
            when the view lives in a kernel (a running event loop; a weak/strong change of
            GPT-3 175B plans its points for seconds), at once in scripts and tests.
            ``False``: always at once.
        plan_ahead: after the curves are drawn, plan in a thread the series the next
            likely change needs (the last series in the other mode, then its device range
            one count wider at either end), so that the change is drawn from the caches
            (`PlanAhead`; a change before they are done plans what is missing itself).
            ``None`` (default): in a kernel (a running event loop), not in scripts and
            tests; ``ahead.wait()`` waits for it.

    Controls: ``model``, ``hardware``, ``mode``, ``global_batch``, ``counts`` (a range),
    ``metric``, ``add``, ``clear``.

    >>> view = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    >>> view.controls["mode"].value = "strong"
    >>> [p.global_batch for p in view.curves[-1].points]
    [64, 64]
    """

    series = tl.List(help="the Series drawn (the last one follows the controls)")
    curves = tl.List(help="their ScalingCurves (None: not computed yet)")
    metric = tl.Enum(METRICS, default_value="tokens_per_s_per_device")

    selection_traits = ("training",)
    name = "scaling"

    def __init__(
        self, series: list[Series] | None = None, *, model: str = "gpt2-medium",
        hardware: str = "a100-80g", global_batch: int | None = None, seq: int | None = None,
        counts: tuple[int, ...] = DEVICE_COUNTS, lazy: bool = False,
        selection: Selection | None = None, background: bool | None = None,
        plan_ahead: bool | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=None)
        self.background = background
        # decided here: a kernel's cell runs in its event loop, a worker thread does not
        self.plan_ahead = in_kernel() if plan_ahead is None else plan_ahead
        self.ahead = PlanAhead("scaling view")
        self._lock = threading.RLock()
        self._generation = 0  # bumped by every change of the series: stale workers stop
        self._worker: threading.Thread | None = None
        self._partial: dict[int, ScalingCurve] = {}  # series index -> points so far
        # background: what a series that fails to plan is undone to (series, curves, kept,
        # (control, its value before)), and the control that asked for it
        self._undo: tuple | None = None
        self._editing: tuple[str, Any] | None = None
        base = Series(model, hardware, "weak", global_batch, seq, tuple(counts))
        series = list(series or [base, _replace(base, mode="strong")])
        if len(series) > MAX_SERIES:
            raise ViewError(f"{len(series)} series; the view draws at most {MAX_SERIES}")
        self.series = series
        self.curves = [None] * len(series)
        self.figure = FigureWidget(self._build())
        self._bulk = False
        last = series[-1]
        pow2 = [n for n in DEVICE_COUNTS if n not in last.counts]
        options = sorted({*last.counts, *pow2})
        auto = ipw.Layout(width="auto")
        self.controls = {
            "model": ipw.Dropdown(options=ex.models.names(), value=last.model,
                                  description="model", style=_WIDE, layout=auto),
            "hardware": ipw.Dropdown(options=ex.hardware.names(), value=last.hardware,
                                     description="hardware", style=_WIDE, layout=auto),
            "mode": ipw.ToggleButtons(options=(("weak scaling", "weak"),
                                               ("strong scaling", "strong")),
                                      value=last.mode, style={"button_width": "auto"}),
            "global_batch": ipw.BoundedIntText(value=last.global_batch or 0, min=0,
                                               max=10**7, description="global batch (0: auto)",
                                               style=_WIDE,
                                               layout=ipw.Layout(width="17em")),
            "counts": ipw.SelectionRangeSlider(options=options,
                                               index=(options.index(min(last.counts)),
                                                      options.index(max(last.counts))),
                                               description="devices", continuous_update=False,
                                               style=_WIDE,
                                               layout=ipw.Layout(width="min(100%, 30em)")),
            "metric": ipw.Dropdown(options=[(METRIC_TITLES[m], m) for m in METRICS],
                                   value=self.metric, description="metric", style=_WIDE,
                                   layout=auto),
            "add": ipw.Button(description="add series", icon="plus", layout=auto),
            "clear": ipw.Button(description="clear", layout=auto),
        }  # fmt: skip
        guard = self.errors.guard
        for w in self.controls.values():
            if isinstance(w, ipw.Button):
                continue
            w.observe(guard(self._on_control), names="value")
        self.controls["add"].on_click(guard(lambda _: self._on_add()))
        self.controls["clear"].on_click(guard(lambda _: self.clear()))
        self.info = ipw.HTML(layout=ipw.Layout(width="auto"))
        #: the number of series kept by "add series": a control change after it starts a new
        #: series instead of editing a kept one
        self._kept = len(series) - 1
        self.field_errors: dict[str, FieldError] = {}
        boxed = {}
        for k in ("model", "hardware", "mode", "global_batch", "counts", "add"):
            boxed[k], self.field_errors[k] = field(self.controls[k])
        self.editing = ipw.HTML(layout=ipw.Layout(width="auto"))
        c = self.controls
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            self.editing,
            ipw.HBox([boxed["model"], boxed["hardware"], boxed["mode"]], layout=wrap),
            ipw.HBox([boxed["global_batch"], boxed["counts"], c["metric"]], layout=wrap),
            ipw.HBox([boxed["add"], c["clear"]], layout=wrap), self.figure, self.info,
        )  # fmt: skip
        self._say_editing()
        self.auto = not lazy  # compute on every change (lazy: after the first compute())
        if not lazy:
            self.compute()
        self.link(selection or Selection())
        settle_heap()  # in a kernel, once: short full collections from now on (heap.py)

    # --- computing ----------------------------------------------------------------------
    def _curve(self, s: Series, report, on_point=None, paused: bool = True) -> ScalingCurve:
        """The curve of ``s`` (kept for the next view asking); planned with the cyclic
        collector paused (``paused``, the user's change: `heap.gc_paused`; a curve planned
        ahead leaves it on)."""
        key = _key(s)
        with _CURVES_LOCK:
            curve = _CURVES.get(key)
        if curve is None:
            with gc_paused() if paused else contextlib.nullcontext():
                curve = ex.scaling_curve(
                    s.model, s.hardware, list(s.counts), global_batch=s.global_batch,
                    seq=s.seq, mode=s.mode, progress=report, on_point=on_point,
                )  # fmt: skip
            with _CURVES_LOCK:
                _CURVES[key] = curve
                if len(_CURVES) > CURVE_CACHE_SIZE:
                    _CURVES.popitem(last=False)
        return curve

    def _replace_series(self) -> None:
        """The series are about to change: a background computation of the old ones stops
        at its next point and draws nothing more."""
        with self._lock:
            self._generation += 1
            self._partial.clear()
            self._undo = None  # set_last sets its own after this

    def _in_background(self) -> bool:
        """Whether a control's change is computed in a thread (see ``background``)."""
        if self.background is not None:
            return self.background
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def compute(self, background: bool | None = None) -> None:
        """Compute every series not computed yet (with progress) and redraw (in a thread
        with ``background``, default the view's own ``background is True``: each point is
        drawn as it is planned)."""
        self.auto = True
        if background is None:
            background = self.background is True
        if background:
            self._start()
            return
        todo = [i for i, c in enumerate(self.curves) if c is None]
        curves = list(self.curves)
        for i in todo:
            s = self.series[i]
            self._own_turn(s)
            with self.progress.task(f"scaling {s.label}"):
                report = self.errors.guard(self.progress.callback(f"scaling {s.model}"))
                curves[i] = self._curve(s, report)
        self.curves = curves
        self._draw()
        self.look_ahead()

    # --- planning ahead -----------------------------------------------------------------
    def next_series(self) -> list[Series]:
        """The series a next change most likely asks for, most likely first: the last
        series in the other mode, then, when its counts are a range of the slider's (as the
        slider sets them), that range one count wider at the top and at the bottom; those
        already planned are left out. Counts given by hand (64, 512, 4096) get the other
        mode only: the slider would replace them by every count between, a new curve."""
        last = self.series[-1]
        options = sorted(self.controls["counts"].options)
        lo, hi = options.index(min(last.counts)), options.index(max(last.counts))
        out = [_replace(last, mode="strong" if last.mode == "weak" else "weak")]
        if last.counts == tuple(options[lo : hi + 1]):
            if hi + 1 < len(options):
                out.append(_replace(last, counts=tuple(options[lo : hi + 2])))
            if lo > 0:
                out.append(_replace(last, counts=tuple(options[lo - 1 : hi + 1])))
        with _CURVES_LOCK:
            return [s for s in out if _key(s) not in _CURVES and s not in self.series]

    def _own_turn(self, s: Series) -> None:
        """Before computing ``s``: when it is the series being planned ahead, wait for it
        (it is partly done); otherwise stop planning ahead. Every view's planning ahead
        stops: the change's own computation gets the interpreter."""
        self.ahead.finish(s)
        PlanAhead.stop_all()

    def look_ahead(self) -> None:
        """Every curve drawn: plan the next likely series (`next_series`) in a thread (see
        ``plan_ahead``; called after each draw, and by hand to start it)."""
        if not self.plan_ahead or not self.computed:
            return

        def compute(s: Series, live) -> None:
            def report(done: int, total: int) -> None:
                if not live():
                    raise Stopped

            self._curve(s, report, paused=False)

        self.ahead.start(self.next_series(), compute)

    def _start(self) -> None:
        with self._lock:
            self._generation += 1
            generation, series = self._generation, list(self.series)
            todo = [i for i, c in enumerate(self.curves) if c is None]
            if not todo:
                self._draw()
                self.look_ahead()
                return
            self._draw()  # the axes (and the series computed before) at once
            worker = threading.Thread(
                target=self.errors.guard(self._work), args=(generation, series, todo),
                name=f"scaling view {generation}", daemon=True,
            )  # fmt: skip
            self._worker = worker
        worker.start()

    def _work(self, generation: int, series: list[Series], todo: list[int]) -> None:
        """The background computation of ``series[i]`` for each ``i`` in ``todo``."""

        def live() -> bool:
            return generation == self._generation

        try:
            for i in todo:
                s = series[i]

                def drawn(curve: ScalingCurve, i: int = i) -> None:
                    with self._lock:
                        if not live():
                            raise _Replaced
                        self._partial[i] = curve
                        self._draw()

                self._own_turn(s)
                try:
                    with self.progress.task(f"scaling {s.label}"):
                        report = self.errors.guard(self.progress.callback(f"scaling {s.model}"))
                        curve = self._curve(s, report, drawn)
                except _Replaced:
                    raise
                except Exception as e:
                    if not self._undone(generation, e):
                        raise
                    return
                with self._lock:
                    if not live():
                        return
                    curves = list(self.curves)
                    curves[i] = curve
                    self.curves = curves
                    self._partial.pop(i, None)
                    self._draw()
            with self._lock:
                if live():
                    self._undo = None
                else:
                    return
            self.look_ahead()
        except _Replaced:
            return

    def _undone(self, generation: int, error: Exception) -> bool:
        """A series set in the background failed to plan: put back the series drawn before
        it and show why beside the control that asked for it, as a synchronous refusal does
        (False: nothing to undo, the error goes to the error pane)."""
        with self._lock:
            if generation != self._generation or self._undo is None:
                return False
            series, curves, kept, editing = self._undo
            self._undo = None
            self._generation += 1
            self._partial.clear()
            self.series, self.curves, self._kept = series, curves, kept
        self._say_editing()
        self._draw()
        if editing is not None and editing[0] in self.field_errors:
            key, before = editing
            err = self.field_errors[key]
            err.show(error)
            err.last_valid = before  # "restore" puts back the value that was planned
            self.mark_stale(f"{key}: {err.text.split(': ', 1)[-1]}")
        else:
            self.errors.report(error, "scaling")
        if any(c is None for c in self.curves):
            self.compute(background=True)
        return True

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the background computation (nothing to wait for without one)."""
        worker = self._worker
        if worker is None:
            return
        worker.join(timeout_s)
        if worker.is_alive():
            raise ViewError(
                f"the scaling curves are still being planned after {timeout_s} s; wait "
                "longer or fewer device counts"
            )

    @property
    def computed(self) -> bool:
        return all(c is not None for c in self.curves)

    # --- controls -----------------------------------------------------------------------
    def _series_from_controls(self) -> Series:
        c = self.controls
        lo, hi = c["counts"].value
        counts = tuple(n for n in c["counts"].options if lo <= n <= hi)
        return Series(c["model"].value, c["hardware"].value, c["mode"].value,
                      c["global_batch"].value or None, self.series[-1].seq, counts)  # fmt: skip

    def _on_control(self, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        if change["owner"] is self.controls["metric"]:
            self.metric = change["new"]
            self._draw()
            return
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        err = self.field_errors[key]
        self._editing = (key, err.last_valid)
        if err.run(lambda _: self.set_last(self._series_from_controls()), change["new"]):
            self.clear_stale()
        else:
            self.mark_stale(f"{key}: {err.text.split(': ', 1)[-1]}")

    def _say_editing(self) -> None:
        """Which series the controls edit, in words above them (a change never replaces a
        series silently)."""
        n = len(self.series)
        if self._kept >= n:
            what = (f"the {n} series drawn are kept; a change of the controls below adds "
                    f"series {n + 1}")  # fmt: skip
        else:
            what = f"the controls below edit series {n}: {html.escape(self.series[-1].label)}"
        self.editing.value = f"<span style='color:#444'>{what}</span>"

    def set_last(self, series: Series) -> None:
        """Make ``series`` the one the controls edit and compute it: it replaces the last
        series, or, after "add series" kept that one, it is added. Its curve is computed
        first, so a series that cannot be planned (a chip without the model's precision)
        raises and leaves the drawn ones as they were."""
        self._replace_series()
        adding = self._kept >= len(self.series)
        kept = self.series if adding else self.series[:-1]
        if adding and len(self.series) >= MAX_SERIES:
            raise ViewError(
                f"the view holds at most {MAX_SERIES} series; press clear or edit the last one"
            )
        if adding:
            _refuse_duplicate(series, kept)
        if self._in_background():  # drawn as planned; a failure is undone and shown later
            with self._lock:
                self._undo = (self.series, self.curves, self._kept, self._editing)
                if adding:
                    self.series, self.curves = [*self.series, series], [*self.curves, None]
                else:
                    self.series, self.curves = [*kept, series], [*self.curves[:-1], None]
            self._say_editing()
            self.compute(background=True)
            return
        self._own_turn(series)
        with self.progress.task(f"scaling {series.label}"):
            report = self.errors.guard(self.progress.callback(f"scaling {series.model}"))
            curve = self._curve(series, report)
        if adding:
            self.series, self.curves = [*self.series, series], [*self.curves, curve]
        else:
            self.series, self.curves = [*kept, series], [*self.curves[:-1], curve]
        self._say_editing()
        self.compute()

    def _on_add(self) -> None:
        self.field_errors["add"].run(lambda _: self.add_series(), None)

    def add_series(self, series: Series | None = None) -> None:
        """Keep the series drawn. With ``series``: draw it too (the controls then edit it);
        without: the next change of a control starts a new series (nothing is drawn twice).
        """
        if series is None:
            self._kept = len(self.series)
            self._say_editing()
            return
        if len(self.series) >= MAX_SERIES:
            raise ViewError(
                f"the view holds at most {MAX_SERIES} series; press clear or edit the last one"
            )
        _refuse_duplicate(series, self.series)
        self._replace_series()
        self.series = [*self.series, series]
        self.curves = [*self.curves, None]
        self._kept = len(self.series) - 1
        self._say_editing()
        self.compute()

    def clear(self) -> None:
        """Keep only the last series (the controls edit it)."""
        self._replace_series()
        self.series, self.curves = self.series[-1:], self.curves[-1:]
        self._kept = 0
        self._say_editing()
        self._draw()

    # --- drawing ------------------------------------------------------------------------
    def _shown(self) -> list[ScalingCurve | None]:
        """The curves drawn: the computed ones, and the points so far of those computing."""
        return [c if c is not None else self._partial.get(i) for i, c in enumerate(self.curves)]

    def _build(self) -> go.Figure:
        labels = [s.label for s in self.series]
        return scaling_figure(self._shown(), labels, self.metric, slots=MAX_SERIES, title=_TITLE)

    def _draw(self) -> None:
        """Copy the fresh traces into the figure property by property (plotly sends only
        what changed, never a clearing), and the layout keys that change (ticks, the
        metric's panel title), without building a figure (`scaling_traces`: a figure's
        subplots and layout took three quarters of a redraw)."""
        traces, xs = scaling_traces(self._shown(), [s.label for s in self.series],
                                    self.metric, slots=MAX_SERIES)  # fmt: skip
        with self.figure.batch_update():
            *curves, ideal = self.figure.data
            for old, fresh in zip(curves, traces, strict=True):
                old.update({k: fresh[k] for k in _TRACE_KEYS})
            ideal.x = ideal_x(xs)
            lay = self.figure.layout
            for ax in ("xaxis", "xaxis2"):
                lay[ax].tickvals = axis_ticks(xs)
            lay.annotations[0].text = METRIC_TITLES[self.metric]
        lines = []
        for s, c in zip(self.series, self._shown(), strict=True):
            if c is None:
                continue
            fits = [p for p in c.points if p.fits]
            last = fits[-1] if fits else None
            tail = (f"linearity {last.linearity:.2f} at {last.devices} devices"
                    if last else "nothing fits")  # fmt: skip
            if len(c.points) < len(s.counts):
                tail += f" (planned {len(c.points)} of {len(s.counts)} device counts so far)"
            lines.append(f"{curve_label(c)}: {tail}")
        self.info.value = "<br>".join(lines)

    # --- selection ----------------------------------------------------------------------
    def on_selection(self, change: dict[str, Any]) -> None:
        """A new TrainingPlan (dashboard): the last series follows its model and chip."""
        plan = change["new"]
        if plan is None or not hasattr(plan, "model"):
            return
        s = self.series[-1]
        if (s.model, s.hardware) == (plan.model, plan.hardware):
            return
        self._bulk = True
        try:
            if plan.model in self.controls["model"].options:
                self.controls["model"].value = plan.model
            self.controls["hardware"].value = plan.hardware
        finally:
            self._bulk = False
        self._replace_series()
        self.series = [_replace(x, model=plan.model, hardware=plan.hardware, seq=plan.seq)
                       for x in self.series]  # fmt: skip
        self.curves = [None] * len(self.series)
        if self.auto:
            self.compute()
        else:
            self._draw()


_WIDE = {"description_width": "initial"}
# what a scaling figure's traces differ in from one state to the next
_TRACE_KEYS = ("x", "y", "name", "visible", "hovertext", "line", "legendgroup")
_TITLE = "per-device throughput and linearity vs devices"


def _key(s: Series) -> tuple:
    """The curve cache's key of a series."""
    return (s.model, s.hardware, s.mode, s.global_batch, s.seq, s.counts)


def _refuse_duplicate(series: Series, drawn: list[Series]) -> None:
    if series in drawn:
        k = drawn.index(series) + 1
        raise ViewError(
            f"{series.label} is drawn already (series {k}); change the model, hardware, mode, "
            "batch or devices first"
        )


def _replace(s: Series, **kw) -> Series:
    from dataclasses import replace

    return replace(s, **kw)
