"""CalibrationView and calibration_figure, headless: the traces hold the
calibration's numbers, fit and check rows stay apart, and the controls refit."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.training import TrainingParams
from explorer.training.calibration.fit import predict, with_values
from widgets import CalibrationView
from widgets.figures.calibration import TRACES, calibration_arrays, calibration_figure, ranks

P = ex.ParallelConfig
LAYOUTS = ((P(dp=8), 32), (P(dp=4, tp=2), 32), (P(dp=2, tp=4), 32), (P(dp=2, tp=2, pp=2), 32))


@pytest.fixture(scope="module")
def runs():
    truth = with_values(TrainingParams(), {"hbm_efficiency": 0.5})
    out = []
    for cfg, gb in LAYOUTS:
        probe = ex.MeasuredRun("gpt2", cfg, "a100-80g", gb, 512, 1.0)
        t = predict(probe, truth).step_time_s
        out.append(ex.MeasuredRun("gpt2", cfg, "a100-80g", gb, 512, t, source="synthetic"))
    return out


@pytest.fixture(scope="module")
def cal(runs):
    return ex.calibrate(runs[:3], fit=("hbm_efficiency",), check=runs[3:], loo=False)


def trace(fig, name):
    return fig.data[TRACES.index(name)]


def test_figure_draws_fit_and_check_rows_before_and_after(cal):
    fig = calibration_figure(cal)
    assert len(fig.data) == len(TRACES)
    fit, check = cal.rows("fit"), cal.rows("check")
    assert list(trace(fig, "fit after").x) == [r.measured_s for r in fit]
    assert list(trace(fig, "fit after").y) == [r.after_s for r in fit]
    assert list(trace(fig, "fit before").y) == [r.before_s for r in fit]
    assert list(trace(fig, "check after").y) == [r.after_s for r in check]
    errs = list(trace(fig, "error after").y)
    assert errs == pytest.approx([r.error_after for r in cal.table])
    # every bar's label says which data it is
    assert [t.endswith("(fit)") for t in trace(fig, "error after").x] == [True] * 3 + [False]
    assert "3 fit rows (1 check rows)" in fig.layout.title.text


def test_ranking_panel_orders_by_measured_throughput(cal):
    a = calibration_arrays(cal)
    tput = [r.run.global_batch * r.run.seq / r.measured_s / r.run.config.devices
            for r in cal.table]  # fmt: skip
    best = max(range(len(tput)), key=tput.__getitem__)
    assert a["rank_measured"][best] == 1
    assert sorted(a["rank_measured"]) == [1, 2, 3, 4]
    # fitted to exact synthetic times, the model orders the layouts as measured
    assert a["rank_predicted"] == a["rank_measured"]
    assert ranks([3.0, 1.0, 2.0]) == [1, 3, 2]


def test_empty_figure_keeps_every_trace():
    fig = calibration_figure(None)
    assert len(fig.data) == len(TRACES)
    assert all(len(t.x or ()) == 0 for t in fig.data if t.name in ("fit after", "check after"))


def test_view_draws_a_given_calibration_and_refits_on_a_knob_change(runs, cal):
    view = CalibrationView(runs[:3], check=runs[3:], calibration=cal, loo=False)
    assert view.calibration is cal
    assert list(trace(view.figure, "fit after").y) == [r.after_s for r in cal.rows("fit")]
    assert "hbm_efficiency" in view.info.value
    view.controls["knobs"].value = ("hbm_efficiency", "cost.bandwidth_efficiency")
    assert view.calibration.fit == ("hbm_efficiency", "cost.bandwidth_efficiency")
    assert len(view.calibration.rows("check")) == 1
    after = [r.after_s for r in view.calibration.rows("check")]
    assert list(trace(view.figure, "check after").y) == after
    assert view.errors.errors == []


def test_view_with_no_knob_marks_itself_stale(runs, cal):
    view = CalibrationView(runs[:3], calibration=cal, loo=False)
    view.controls["knobs"].value = ()
    assert view.stale and view.calibration is cal


def test_view_without_knobs_takes_calibrates_default_choice(runs):
    view = CalibrationView(runs[:3], loo=False)
    assert view.calibration.fit == ex.calibrate(runs[:3], loo=False).fit
    assert tuple(view.controls["knobs"].value) == view.calibration.fit
    assert len(view.calibration.fit) < 3
