"""``CalibrationView``: fit the step model to measured runs and see how well it predicts
them: measured vs predicted before and after, residuals, and the ranking of the layouts."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import ipywidgets as ipw
import traitlets as tl

import explorer as ex
from explorer.training import Calibration, MeasuredRun, float_fields

from .base import View, replace_figure
from .figure_widget import FigureWidget
from .figures.calibration import calibration_figure
from .selection import Selection

__all__ = ["CalibrationView", "knob_options"]


def knob_options(params: ex.training.TrainingParams | None = None) -> tuple[str, ...]:
    """The knobs offered in the view: the efficiencies, overlaps and fixed overheads."""
    keys = ("efficiency", "overlap", "overhead")
    return tuple(p for p in float_fields(params) if any(k in p.rsplit(".", 1)[-1] for k in keys))


class CalibrationView(View):
    """Calibrate `TrainingParams` to measured runs and draw the result.

    Args:
        runs: the fit data (`MeasuredRun` list); ``check``: runs only predicted.
        params: the starting `TrainingParams`; ``fit``: the knobs (default: calibrate's
            own choice among `default_fit`, the knobs these runs' times depend on).
        calibration: a `Calibration` already computed (drawn as is; the view fits again
            when the knobs change or ``fit again`` is pressed).
        loo: compute the leave-one-out error (one more fit per run).

    Controls: ``knobs`` (the fields to fit), ``loo``, ``refit`` (the button).

    >>> import explorer as ex
    >>> runs = [ex.MeasuredRun("gpt2", ex.ParallelConfig(dp=d, tp=8 // d), "a100-80g", 32,
    ...                        512, t) for d, t in ((8, 0.05), (4, 0.055))]
    >>> view = CalibrationView(runs, fit=("hbm_efficiency",), loo=False)
    >>> view.calibration.fit
    ('hbm_efficiency',)
    """

    calibration = tl.Instance(Calibration, allow_none=True)
    selection_traits = ("training",)
    name = "calibration"

    def __init__(
        self, runs: Sequence[MeasuredRun], *, check: Sequence[MeasuredRun] = (),
        params: ex.training.TrainingParams | None = None, fit: Sequence[str] | None = None,
        calibration: Calibration | None = None, loo: bool = True,
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=None)
        self.runs, self.check, self.params = tuple(runs), tuple(check), params
        options = knob_options(params)
        if calibration is None and fit is None:  # calibrate's own choice of default knobs
            with self.progress.task(f"calibrating on {len(self.runs)} runs"):
                calibration = ex.calibrate(self.runs, params, check=self.check, loo=loo)
        chosen = tuple(calibration.fit) if calibration else tuple(fit)
        options = tuple(dict.fromkeys((*chosen, *options)))
        wide = {"description_width": "initial"}
        self.controls = {
            "knobs": ipw.SelectMultiple(options=options, value=chosen, rows=min(6, len(options)),
                                        description="knobs to fit", style=wide,
                                        layout=ipw.Layout(width="min(100%, 28em)")),
            "loo": ipw.Checkbox(value=loo, description="leave-one-out error", indent=False,
                                layout=ipw.Layout(width="auto")),
            "refit": ipw.Button(description="fit again", icon="refresh",
                                layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        guard = self.errors.guard
        self.controls["knobs"].observe(guard(lambda _: self.refit()), names="value")
        self.controls["refit"].on_click(guard(lambda _: self.refit()))
        self.figure = FigureWidget(calibration_figure(calibration))
        self.info = ipw.HTML(layout=ipw.Layout(width="auto"))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="center", width="100%")
        c = self.controls
        self._layout_children(
            ipw.HBox([c["knobs"], ipw.VBox([c["loo"], c["refit"]])], layout=wrap),
            self.figure, self.info,
        )  # fmt: skip
        if calibration is None:
            self.refit()
        else:
            self.calibration = calibration
            self._draw()
        self.link(selection or Selection())

    def refit(self) -> None:
        """Fit the chosen knobs to the runs again and redraw."""
        knobs = tuple(self.controls["knobs"].value)
        if not knobs:
            self.mark_stale("choose at least one knob to fit")
            return
        with self.progress.task(f"calibrating {len(knobs)} knobs on {len(self.runs)} runs"):
            cal = ex.calibrate(self.runs, self.params, fit=knobs, check=self.check,
                               loo=self.controls["loo"].value)  # fmt: skip
        self.clear_stale()
        self.calibration = cal
        self._draw()

    def _draw(self) -> None:
        replace_figure(self.figure, calibration_figure(self.calibration))
        self.info.value = _info_html(self.calibration)


def _info_html(cal: Calibration | None) -> str:
    if cal is None:
        return ""
    rows = []
    for n, s, v, (lo, hi) in zip(cal.fit, cal.start, cal.values, cal.bounds, strict=True):
        flag = " <b>at a bound</b>" if n in cal.at_bounds else ""
        rows.append(
            f"<tr><td><code>{escape(n)}</code></td><td>{s:.4g}</td><td>{v:.4g}{flag}</td>"
            f"<td>{lo:.3g} .. {hi:.3g}</td></tr>"
        )
    table = (
        "<style>.explorer-cal td, .explorer-cal th {padding: 1px 12px 1px 0}</style>"
        "<table class='explorer-cal' style='border-collapse:collapse'><tr><th align=left>knob"
        "</th><th align=left>start</th><th align=left>fitted</th><th align=left>range</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    loo = "not computed" if cal.loo_error is None else f"{cal.loo_error:.1%}"
    return (
        f"{table}<div>fit rows: {len(cal.rows('fit'))}, check rows: {len(cal.rows('check'))};"
        f" leave-one-out median |error|: {loo}; {cal.evaluations} step-model evaluations, "
        f"{cal.seconds:.1f} s</div>"
    )
