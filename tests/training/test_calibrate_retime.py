"""Calibration re-times fixed layouts instead of searching again (a fit in seconds): the
re-costed stage costs equal the search's own breakdown of the same layouts, the fast fit
equals the exact one within the fit's tolerance, the runs whose layouts change under the
fitted params are refitted or named, and bad requests are refused naming the value."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
from test_calibrate import GOOD, TRUTH, synthetic_runs

import explorer as ex
from explorer.search.breakdown import plan_breakdown
from explorer.search.planner import search
from explorer.training import CalibrationError, TrainingParams
from explorer.training.calibration.fit import predict, predict_times, with_values
from explorer.training.step_model.stage_costs import (
    _ATTENTION_CORE,
    decisions_fixed_at,
    stage_costs,
    stage_decisions,
)

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

CAL = sys.modules["explorer.training.calibration.fit"]
P = ex.ParallelConfig
HW = ex.hardware.load("a100-80g")
FUSED = TrainingParams().fused_ops


# ----- re-costing fixed layouts ------------------------------------------------------------
def _breakdown_costs(cfg, seq, tp, mb, p0: ex.CostParams, p1: ex.CostParams):
    """The layer/embed/head (compute, comm, grad) of the layouts searched under ``p0``,
    costed under ``p1`` by the search module's own `plan_breakdown` / `node_cost`: an
    independent path to what `StageDecisions.costs` computes with stacked arrays."""
    norm = lambda p: dataclasses.replace(p, device_memory_cap_bytes=float("inf"))  # noqa: E731
    mesh = ex.Mesh({"tp": tp}, hardware=HW)
    g1 = ex.models.build(cfg.replace(num_layers=1), batch=mb, seq=seq)
    g2 = ex.models.build(cfg.replace(num_layers=2), batch=mb, seq=seq)

    def recost(plan):
        model, choice = plan.cost_tables
        return dataclasses.replace(
            plan, params=norm(p1), cost=plan_breakdown(model, norm(p1), list(choice))
        )

    plan1 = recost(search(g1, mesh, "dynamic_programming", norm(p0), reuse_layers=False))
    plan2 = recost(search(g2, mesh, "dynamic_programming", norm(p0), reuse_layers=False))
    layer = plan2.cost - plan1.cost
    rest = plan1.cost - layer
    embed = core = None
    for n in g1.ops:
        short = n.name.split(".")[-1]
        c = plan1.node_cost(n.name)
        if n.scope.startswith("embed"):
            embed = c if embed is None else embed + c
        elif n.scope.startswith("layers.0") and short in FUSED:
            layer = layer - c
        elif n.scope.startswith("layers.0") and short in _ATTENTION_CORE:
            core = c if core is None else core + c
    head = rest - embed
    trio = lambda b: (b.compute, b.communication_total, b.gradient)  # noqa: E731
    return trio(layer), trio(embed), trio(head), trio(core)


def _trio(part, p):
    """(compute, comm, grad) back from a PartCost's forward/backward split."""
    comm_fwd = part.tp_forward_s
    comm = comm_fwd * (1 + p.backward_comm_ratio)
    return part.forward_s + part.backward_s, comm, part.tp_backward_s - (comm - comm_fwd)


@pytest.mark.parametrize("tp, mb", [(2, 1), (8, 2)])
def test_recosted_layouts_equal_the_search_breakdown_of_the_same_layouts(tp, mb):
    cfg = ex.models.load("gpt2")
    p0 = ex.CostParams(compute_efficiency=0.65, bandwidth_efficiency=0.8)
    p1 = ex.CostParams(compute_efficiency=0.4, bandwidth_efficiency=0.3, grad_comm_overlap=0.5)
    with decisions_fixed_at(p0):
        moved = stage_costs(cfg, 512, tp, mb, HW, p1, "dynamic_programming", FUSED)
    want = _breakdown_costs(cfg, 512, tp, mb, p0, p1)
    got = [_trio(moved.layer, p1), _trio(moved.embed, p1), _trio(moved.head, p1)]
    core = moved.layer.recompute_selective_s * (1 + p1.backward_compute_ratio)
    for g, w in zip(got, want[:3], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(core, want[3][0], rtol=1e-12)
    # the layouts are those of p0, the times those of p1
    assert moved.strategies == stage_costs(cfg, 512, tp, mb, HW, p0, fused=FUSED).strategies
    assert (
        moved.layer.tp_forward_s
        > stage_costs(cfg, 512, tp, mb, HW, p0, fused=FUSED).layer.tp_forward_s
    )


def test_fixing_the_layouts_at_the_params_in_use_changes_nothing():
    cfg = ex.models.load("gpt2")
    p = ex.CostParams(bandwidth_efficiency=0.5)
    plain = stage_costs(cfg, 256, 4, 1, HW, p)
    with decisions_fixed_at(p):
        fixed = stage_costs(cfg, 256, 4, 1, HW, p)
    assert fixed == plain
    d = stage_decisions(cfg, 256, 4, 1, HW, p)
    assert d.costs(p) == plain and d.strategies == plain.strategies


def test_fixed_layouts_are_per_thread():
    from concurrent.futures import ThreadPoolExecutor

    cfg = ex.models.load("gpt2")
    p0, p1 = ex.CostParams(), ex.CostParams(bandwidth_efficiency=0.2)
    plain = stage_costs(cfg, 256, 2, 1, HW, p1)
    with decisions_fixed_at(p0), ThreadPoolExecutor(1) as pool:
        other_thread = pool.submit(stage_costs, cfg, 256, 2, 1, HW, p1).result()
    assert other_thread is plain  # the block does not reach into another thread


def test_decisions_fixed_at_refuses_a_non_cost_params():
    with pytest.raises(ex.ExplorerError, match="CostParams"):
        with decisions_fixed_at(TrainingParams()):
            pass


# ----- the fit -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(0.03)


@pytest.fixture(scope="module")
def exact(runs):
    return ex.calibrate(runs, fit=tuple(TRUTH), loo=False, exact=True)


@pytest.fixture(scope="module")
def fast(runs):
    return ex.calibrate(runs, fit=tuple(TRUTH), loo=False)


def test_retimed_fit_equals_the_exact_fit_within_its_tolerance(fast, exact):
    # least_squares stops at xtol=1e-3 (relative) on the knobs: both fits agree within it
    assert not fast.exact and exact.exact
    for k in TRUTH:
        assert fast.fitted[k] == pytest.approx(exact.fitted[k], rel=1e-3), k
    for a, b in zip(fast.table, exact.table, strict=True):
        assert a.after_s == pytest.approx(b.after_s, rel=1e-3)
        assert a.before_s == b.before_s


def test_the_table_is_the_full_simulation_under_the_fitted_params(fast):
    for row in fast.table:
        assert row.after_s == predict(row.run, fast.params).step_time_s
    after = np.array([r.after_s for r in fast.rows("fit")])
    meas = np.array([r.measured_s for r in fast.rows("fit")])
    assert fast.rms_log_error == pytest.approx(np.sqrt(np.mean(np.log(after / meas) ** 2)))


def test_layouts_that_change_under_the_fitted_params_are_refitted_and_named(runs, fast):
    # From bandwidth_efficiency 0.8 the first fit lands where the search picks other
    # layouts for a tp16 run: timed with the start's layouts, that fit is far off.
    start = TrainingParams()
    fitted_once = with_values(start, {"cost.bandwidth_efficiency": 0.35})
    full = predict_times(runs, fitted_once)
    retimed = predict_times(runs, fitted_once, decided_at=start)
    assert np.max(np.abs(full / retimed - 1)) > 0.1  # the case this test is about
    assert fast.rounds >= 2 and not fast.exact
    assert any("tp16" in label for label in fast.redecided)
    assert set(fast.redecided) <= {r.label for r in runs}
    assert fast.retime_gap > 0.1
    assert "took other layouts during the fit" in str(fast)
    # the last fit's layouts are those of the fitted params: re-timed == full there
    last = predict_times(runs, fast.params)
    np.testing.assert_array_equal(last, [r.after_s for r in fast.rows("fit")])


def test_layouts_still_changing_after_the_rounds_end_in_an_exact_fit(runs, exact, monkeypatch):
    monkeypatch.setattr(CAL, "MAX_ROUNDS", 1)
    once = ex.calibrate(runs, fit=tuple(TRUTH), loo=False)
    assert once.rounds == 2 and once.exact  # one re-timed fit, then one searching
    assert once.redecided and once.retime_gap > 0.1
    for k in TRUTH:
        assert once.fitted[k] == pytest.approx(exact.fitted[k], rel=1e-3), k
    for row in once.table:
        assert row.after_s == predict(row.run, once.params).step_time_s


def test_concurrent_calibrations_equal_sequential_ones(runs, fast, exact):
    from concurrent.futures import ThreadPoolExecutor

    def fit(is_exact):
        return ex.calibrate(runs, fit=tuple(TRUTH), loo=False, exact=is_exact)

    with ThreadPoolExecutor(2) as pool:  # the fixed layouts of one are not the other's
        a, b = pool.map(fit, (False, True))
    assert a.fitted == fast.fitted and a.table == fast.table
    assert b.fitted == exact.fitted and b.table == exact.table


def test_kernel_knob_fit_needs_one_round(runs):
    cal = ex.calibrate(runs, fit=("matmul_efficiency_cap", "hbm_efficiency"), loo=False)
    assert cal.rounds == 1 and cal.redecided == () and cal.retime_gap == 0.0
    assert not cal.exact


def test_json_keeps_the_retiming_fields(fast, tmp_path):
    path = tmp_path / "cal.json"
    fast.save(path)
    back = ex.Calibration.load(path)
    assert (back.exact, back.rounds, back.redecided, back.retime_gap) == (
        fast.exact, fast.rounds, fast.redecided, fast.retime_gap,
    )  # fmt: skip
    doc = json.loads(path.read_text())
    for k in ("exact", "rounds", "redecided", "retime_gap"):
        del doc[k]
    older = ex.Calibration.from_json(json.dumps(doc))  # a file from before re-timing
    assert older.exact and older.rounds == 1 and older.redecided == ()
    assert older.fitted == fast.fitted and older.table == fast.table


# ----- named errors ------------------------------------------------------------------------
@pytest.mark.parametrize("name, bounds, bad", [
    ("bandwidth_efficiency", (0.1, 1.5), "1.5"),
    ("compute_efficiency", (0.0, 0.9), "0.0"),
    ("matmul_efficiency_cap", (0.0, 0.9), "0.0"),
    ("kernel_overhead_s", (0.0, 1.0), "1.0"),
    ("grad_overlap_fraction", (-0.5, 0.5), "-0.5"),
])  # fmt: skip
def test_bounds_outside_the_valid_values_are_refused_naming_them(name, bounds, bad):
    run = ex.MeasuredRun(**GOOD, step_time_s=1.0)
    with pytest.raises(CalibrationError, match=rf"bounds\['{name}'\]") as e:
        ex.calibrate([run], fit=(name,), bounds={name: bounds}, loo=False)
    assert f"={bad} is not a valid value" in str(e.value)
    assert "valid range" in str(e.value)


@pytest.mark.parametrize("config, why", [
    (P(tp=5), "does not divide"),
    (P(dp=2, pp=24), "exceeds the 12 layers"),  # more chips than the profile grow it instead
])  # fmt: skip
def test_a_run_the_model_cannot_take_is_named_before_the_fit(config, why, monkeypatch):
    bad = ex.MeasuredRun("gpt2", config, "a100-80g", config.dp * 2, 512, 1.0)
    good = ex.MeasuredRun(**GOOD, step_time_s=1.0)
    monkeypatch.setattr(CAL, "_solve", lambda *a, **k: pytest.fail("fit started"))
    for kwargs in ({"runs": [good, bad]}, {"runs": [good], "check": [bad]}):
        with pytest.raises(CalibrationError, match=why) as e:
            ex.calibrate(**kwargs, fit=("compute_efficiency",), loo=False)
        assert bad.label in str(e.value)


@pytest.mark.parametrize("kwargs, match", [
    ({"exact": "yes"}, "exact='yes'; expected True or False"),
    ({"loo": 1}, "loo=1; expected True or False"),
    ({"max_nfev": 0}, "max_nfev=0; expected an int >= 1"),
    ({"max_nfev": 2.5}, "max_nfev=2.5; expected an int >= 1"),
    ({"bounds": [1, 2]}, r"bounds=\[1, 2\]; expected a dict"),
    ({"bounds": [("compute_efficiency", (0.1, 0.9))]}, "expected a dict"),
])  # fmt: skip
def test_bad_options_are_refused_naming_the_value(kwargs, match):
    run = ex.MeasuredRun(**GOOD, step_time_s=1.0)
    with pytest.raises(CalibrationError, match=match):
        ex.calibrate([run], fit=("compute_efficiency",), **kwargs)
