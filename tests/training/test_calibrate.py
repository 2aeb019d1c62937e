"""ex.calibrate and ex.MeasuredRun (the step model fitted to a user's measured runs): recovery
of known parameters from synthetic runs, bounds, fit vs check rows, leave-one-out, JSON, and named errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import explorer as ex
from explorer.training import CalibrationError, TrainingParams
from explorer.training.calibration.fit import default_fit, float_fields, predict, with_values
from explorer.training.calibration.io import params_from_dict, params_to_dict

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

P = ex.ParallelConfig
# The matmul knob: the shape-aware kernel model's cap on a full wave of GEMM tiles where
# it exists, else the flat model's single fraction of peak.
MATMUL = (
    "matmul_efficiency_cap"
    if "matmul_efficiency_cap" in float_fields()
    else "cost.compute_efficiency"
)
TRUTH = {MATMUL: 0.55, "cost.bandwidth_efficiency": 0.6}
# Layouts whose step times mix compute and communication differently (data-parallel
# all-reduce heavy, tensor-parallel heavy, pipelined), so both knobs are identifiable.
LAYOUTS = (
    (P(dp=64), 128), (P(dp=8, tp=8), 64), (P(dp=4, tp=16), 64),
    (P(dp=16, tp=2, pp=2), 64), (P(dp=32, tp=2), 256), (P(dp=2, tp=8, pp=4), 64),
)  # fmt: skip


def synthetic_runs(noise: float, seed: int = 0) -> list[ex.MeasuredRun]:
    """Runs whose 'measured' times are the model's under TRUTH, times (1 + noise * N(0,1))."""
    truth = with_values(TrainingParams(), TRUTH)
    rng = np.random.default_rng(seed)
    out = []
    for cfg, gb in LAYOUTS:
        probe = ex.MeasuredRun("gpt3-1.3b", cfg, "a100-80g", gb, 2048, 1.0)
        t = predict(probe, truth).step_time_s * (1 + noise * rng.standard_normal())
        out.append(ex.MeasuredRun("gpt3-1.3b", cfg, "a100-80g", gb, 2048, t, source="synthetic"))
    return out


@pytest.fixture(scope="module")
def noisy_fit():
    return ex.calibrate(synthetic_runs(0.03), fit=tuple(TRUTH), loo=False)


def test_recovers_known_parameters_within_10_percent_under_3_percent_noise(noisy_fit):
    for name, want in TRUTH.items():
        got = noisy_fit.fitted[name]
        assert abs(got / want - 1) < 0.10, (name, got, want)
    # the fitted model reproduces the noisy times to about the noise
    assert noisy_fit.median_error("fit") < 0.03
    # and it started far off: the defaults (0.8, 0.8) were > 10% off every run
    assert min(abs(r.error_before) for r in noisy_fit.table) > 0.10


def test_exact_runs_recover_parameters_within_half_a_percent():
    cal = ex.calibrate(synthetic_runs(0.0)[:4], fit=tuple(TRUTH), loo=False)
    for name, want in TRUTH.items():
        assert cal.fitted[name] == pytest.approx(want, rel=5e-3)
    assert cal.rms_log_error < 1e-3


def test_bounds_are_respected_and_reported():
    runs = synthetic_runs(0.0)[:3]
    cal = ex.calibrate(runs, fit=(MATMUL,), bounds={MATMUL: (0.7, 0.9)},
                       loo=False)  # fmt: skip
    (v,) = cal.values
    assert 0.7 <= v <= 0.9
    assert v == pytest.approx(0.7, abs=1e-3)  # the truth (0.55) is below the range
    assert cal.at_bounds == (MATMUL,)
    assert cal.bounds == ((0.7, 0.9),)


def test_check_rows_are_predicted_but_not_fitted():
    runs = synthetic_runs(0.0)
    fit, check = runs[:3], runs[3:]
    a = ex.calibrate(fit, fit=tuple(TRUTH), check=check, loo=False)
    moved = [ex.MeasuredRun(r.model, r.config, r.hardware, r.global_batch, r.seq,
                            r.step_time_s * 3) for r in check]  # fmt: skip
    b = ex.calibrate(fit, fit=tuple(TRUTH), check=moved, loo=False)
    assert a.values == b.values  # check data never moves the fit
    assert [r.role for r in a.table] == ["fit"] * 3 + ["check"] * 3
    assert all(r.loo_s is None for r in a.rows("check"))
    for r in a.rows("check"):  # both knobs fitted on three runs predict the others exactly
        assert abs(r.error_after) < 0.01 < abs(r.error_before)


def test_leave_one_out_predicts_each_run_from_the_others():
    runs = synthetic_runs(0.03)[:4]
    cal = ex.calibrate(runs, fit=tuple(TRUTH))
    errs = [abs(r.error_loo) for r in cal.rows("fit")]
    assert cal.loo_error == pytest.approx(float(np.median(errs)))
    # the right two knobs fitted on three runs with 3% noise predict the fourth within 10%
    assert max(errs) < 0.10
    # leave-one-out is never better than in-sample on every row at once
    assert sum(errs) >= sum(abs(r.error_after) for r in cal.rows("fit")) - 1e-9


def test_fitted_params_plan_and_simulate():
    cal = ex.calibrate(synthetic_runs(0.0)[:2], fit=(MATMUL,), loo=False)
    sim = ex.simulate("gpt3-1.3b", P(dp=8, tp=8), "a100-80g", 64, 2048, params=cal.params)
    assert sim.step_time_s > 0
    assert cal.params == with_values(TrainingParams(), {MATMUL: cal.values[0]})


def test_json_round_trip(tmp_path):
    runs = synthetic_runs(0.03)
    cal = ex.calibrate(runs[:2], fit=(MATMUL,), check=runs[3:4])
    back = ex.Calibration.from_json(cal.to_json())
    assert back == cal
    path = tmp_path / "cal.json"
    cal.save(path)
    assert ex.Calibration.load(path).params == cal.params


def test_params_json_keeps_nested_fields_and_refuses_unknown_keys():
    p = with_values(TrainingParams(), {"cost.compute_efficiency": 0.5})
    assert params_from_dict(params_to_dict(p)) == p
    d = params_to_dict(p)
    d["cost"]["no_such_knob"] = 1.0
    with pytest.raises(CalibrationError, match="no_such_knob"):
        params_from_dict(d)


def test_default_fit_is_every_efficiency_field():
    names = default_fit()
    assert "cost.compute_efficiency" in names and "cost.bandwidth_efficiency" in names
    assert all(n in float_fields() for n in names)
    assert all("efficiency" in n or "overlap" in n for n in names)


def test_default_fit_keeps_the_knobs_the_runs_depend_on():
    cal = ex.calibrate(synthetic_runs(0.0)[:3], loo=False)
    assert "cost.bandwidth_efficiency" in cal.fit
    assert set(cal.fit) <= set(default_fit())
    for name in cal.fit:  # each kept knob moves some prediction when changed
        moved = with_values(TrainingParams(), {name: cal.bounds[cal.fit.index(name)][1]})
        times = [predict(r, moved).step_time_s for r in synthetic_runs(0.0)[:3]]
        base = [predict(r, TrainingParams()).step_time_s for r in synthetic_runs(0.0)[:3]]
        assert times != base, name


# ----- named errors ----------------------------------------------------------------------
GOOD = dict(model="gpt2", config=P(dp=2), hardware="a100-80g", global_batch=16, seq=512)


@pytest.mark.parametrize("bad", [-1.0, 0.0, math.nan, math.inf, "2", None, True])
def test_bad_step_time_is_refused_naming_the_value(bad):
    with pytest.raises(CalibrationError, match="step_time_s") as e:
        ex.MeasuredRun(**GOOD, step_time_s=bad)
    assert repr(bad) in str(e.value)
    assert isinstance(e.value, ex.ExplorerError)


@pytest.mark.parametrize("bad", [-5.0, math.nan, 0])
def test_bad_memory_is_refused(bad):
    with pytest.raises(CalibrationError, match="memory_bytes"):
        ex.MeasuredRun(**GOOD, step_time_s=1.0, memory_bytes=bad)


def test_bad_batch_and_config_are_refused():
    with pytest.raises(ex.ExplorerError, match="global batch 15"):
        ex.MeasuredRun(**{**GOOD, "global_batch": 15}, step_time_s=1.0)
    with pytest.raises(CalibrationError, match="config"):
        ex.MeasuredRun(**{**GOOD, "config": {"dp": 2}}, step_time_s=1.0)
    with pytest.raises(ex.ExplorerError, match="no-such-model"):
        ex.MeasuredRun(**{**GOOD, "model": "no-such-model"}, step_time_s=1.0)


def test_unknown_fit_name_is_refused_listing_the_fields():
    run = ex.MeasuredRun(**GOOD, step_time_s=1.0)
    with pytest.raises(CalibrationError, match="'flux_capacitor'") as e:
        ex.calibrate([run], fit=("flux_capacitor",))
    assert "cost.compute_efficiency" in str(e.value)
    with pytest.raises(CalibrationError, match="fit='compute_efficiency'"):
        ex.calibrate([run], fit="compute_efficiency")


def test_bad_bounds_and_runs_are_refused():
    run = ex.MeasuredRun(**GOOD, step_time_s=1.0)
    fit = ("compute_efficiency",)
    with pytest.raises(CalibrationError, match=r"\(0.9, 0.5\)"):
        ex.calibrate([run], fit=fit, bounds={"compute_efficiency": (0.9, 0.5)})
    with pytest.raises(CalibrationError, match="not fitted"):
        ex.calibrate([run], fit=fit, bounds={"bandwidth_efficiency": (0.1, 0.9)})
    with pytest.raises(CalibrationError, match="empty"):
        ex.calibrate([], fit=fit)
    with pytest.raises(CalibrationError, match=r"runs\[1\]"):
        ex.calibrate([run, 1.0], fit=fit)
    with pytest.raises(CalibrationError, match="evaluator"):
        ex.calibrate([run], fit=fit, evaluator="guess")


def test_a_malformed_file_is_refused():
    with pytest.raises(CalibrationError, match="not JSON"):
        ex.Calibration.from_json("{")
    with pytest.raises(CalibrationError, match="not a calibration file"):
        ex.Calibration.from_json('{"format": "other"}')


def test_runs_round_trip_with_a_model_config_and_a_grown_cluster():
    cfg = ex.models.load("gpt2").replace(num_layers=2)
    hw = ex.hardware.load("a100-80g").extended(4096 * 8)  # grown past the profile
    assert hw.extended_from is not None
    run = ex.MeasuredRun(cfg, P(dp=2), hw, 16, 512, 0.1, memory_bytes=2e9, source="log")
    assert ex.MeasuredRun.from_dict(run.as_dict()) == run
    named = ex.MeasuredRun("gpt2", P(dp=2), "a100-80g", 16, 512, 0.1)
    assert ex.MeasuredRun.from_dict(named.as_dict()) == named


def test_default_fit_keeps_fewer_knobs_than_runs():
    runs = synthetic_runs(0.0)[:2]
    cal = ex.calibrate(runs, loo=False)
    assert len(cal.fit) == 1 and cal.determined
    named = ex.calibrate(runs, fit=tuple(TRUTH), loo=False)  # named knobs are taken as given
    assert named.fit == tuple(TRUTH) and not named.determined
    assert "not unique" in str(named)


def test_table_text_has_one_line_per_run_with_its_role_and_errors(noisy_fit):
    lines = noisy_fit.table_text().splitlines()
    assert lines[0].split() == ["role", "run", "measured", "before", "after"]
    assert len(lines) == 1 + len(noisy_fit.table)
    for line, row in zip(lines[1:], noisy_fit.table, strict=True):
        assert line.startswith(row.role) and row.run.label in line
        assert f"({row.error_after:+6.1%})" in line and f"({row.error_before:+6.1%})" in line
