"""Calibration files: read through the project's JSON reader (every file problem named) and
checked on load, so that a saved file that loads also prints and predicts."""

from __future__ import annotations

import json

import pytest

import explorer as ex
from explorer.training.calibration.fit import CalibrationRow
from explorer.training.calibration.io import read_calibration, write_calibration
from explorer.training.errors import CalibrationError
from tests.training.test_calibrate import MATMUL, synthetic_runs


@pytest.fixture(scope="module")
def cal():
    runs = synthetic_runs(0.03)
    return ex.calibrate(runs[:2], fit=(MATMUL,), check=runs[3:4])


def _load(path):
    return read_calibration(path, ex.Calibration, CalibrationRow)


def test_write_then_read_gives_the_same_calibration(cal, tmp_path):
    write_calibration(cal, tmp_path / "c.json")
    assert _load(tmp_path / "c.json") == cal


@pytest.mark.parametrize("make, match", [
    (lambda d: d / "missing.json", "does not exist|no such|missing"),
    (lambda d: d, "directory"),
    (lambda d: (d / "bin.json").write_bytes(b'{"a": "\\xff\xfe"}') and d / "bin.json", "UTF-8"),
    (lambda d: (d / "deep.json").write_text("[" * 5000 + "]" * 5000) and d / "deep.json",
     "nest|deep"),
    (lambda d: 3, "not a file path"),
])  # fmt: skip
def test_file_problems_are_named(make, match, tmp_path):
    with pytest.raises(CalibrationError, match=match):
        _load(make(tmp_path))


def test_an_unwritable_path_is_named(cal, tmp_path):
    with pytest.raises(CalibrationError, match="cannot write"):
        write_calibration(cal, tmp_path / "no" / "such" / "dir" / "c.json")


def _edited(cal, edit) -> str:
    doc = json.loads(cal.to_json())
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(fit="abc"), "fit='abc'; expected a list of knob names"),
    (lambda d: d.update(fit=["no_such_knob"]), "'no_such_knob', which is not a float knob"),
    (lambda d: d.update(values=[float("nan")]), "values=.*finite numbers"),
    (lambda d: d.update(start=[]), "start=.*1 finite numbers"),
    (lambda d: d.update(bounds=[[2, 1]]), "bounds="),
    (lambda d: d["table"][0].update(role="train"), "role 'train'; expected 'fit' or 'check'"),
    (lambda d: d["table"][0].update(measured_s=float("nan")), r"measured_s=nan"),
    (lambda d: d["table"][0].update(after_s=-1), r"after_s=-1"),
    (lambda d: d.update(table={}), "table=.*list of rows"),
])  # fmt: skip
def test_files_that_would_fail_later_are_refused_on_load(cal, edit, match):
    with pytest.raises(CalibrationError, match=match):
        ex.Calibration.from_json(_edited(cal, edit))


@pytest.mark.parametrize("text", [None, 3, "[" * 5000])
def test_from_json_of_non_text_or_deep_text_is_named(text):
    with pytest.raises(CalibrationError):
        ex.Calibration.from_json(text)


def test_load_and_save_go_through_the_checked_reader(cal, tmp_path):
    cal.save(tmp_path / "c.json")
    assert ex.Calibration.load(tmp_path / "c.json") == cal
    with pytest.raises(CalibrationError, match="directory"):
        ex.Calibration.load(tmp_path)
    with pytest.raises(CalibrationError, match="cannot write"):
        cal.save(tmp_path / "missing" / "c.json")


def test_a_knob_no_run_uses_is_not_fitted_to_its_start_value():
    runs = synthetic_runs(0.0)[:3]
    # with kernel_model="shape" compute times come from the kernel model, not this fraction
    with pytest.raises(CalibrationError, match=r"'cost.compute_efficiency', which changes no"):
        ex.calibrate(runs, fit=("cost.compute_efficiency",), loo=False)


def test_check_runs_are_held_out():
    runs = synthetic_runs(0.0)
    with pytest.raises(CalibrationError, match="check runs are fit runs too"):
        ex.calibrate(runs[:2], fit=(MATMUL,), check=runs[1:3], loo=False)


def test_measured_runs_take_numpy_numbers_as_the_numbers_they_are():
    import numpy as np

    P = ex.ParallelConfig(dp=2)
    r = ex.MeasuredRun("gpt2", P, "a100-80g", np.int64(16), np.int64(512), np.float32(0.05))
    assert type(r.global_batch) is int and type(r.step_time_s) is float
    assert r == ex.MeasuredRun("gpt2", P, "a100-80g", 16, 512, float(np.float32(0.05)))
    with pytest.raises(CalibrationError, match="step_time_s=True"):
        ex.MeasuredRun("gpt2", P, "a100-80g", 16, 512, True)
