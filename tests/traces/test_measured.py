"""MeasuredRun.from_trace and calibrate's per-category fit (fast: the vendored GPU trace and
hand-made runs; the CPU DDP/FSDP runs end to end are in test_cpu_runs.py)."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.traces import breakdown, load_kineto, vendored
from explorer.training.calibration.fit import _Objective
from explorer.training.calibration.measured import STEP_CATEGORIES, step_categories

CFG = ex.ParallelConfig(dp=2, microbatch_size=4)


@pytest.fixture(scope="module")
def trace():
    return load_kineto(vendored("nccl_data.json.gz"))


def test_from_trace_reads_the_step_and_its_parts(trace):
    run = ex.MeasuredRun.from_trace(trace, "gpt2", CFG, "a100-80g", 8, 1024, skip=1)
    rows = [r for r in breakdown(trace).rows if r.step != trace.ranks[0].steps[0].number]
    assert run.step_time_s == pytest.approx(sum(r.window_s for r in rows) / len(rows))
    cats = dict(run.categories)
    assert tuple(cats) == STEP_CATEGORIES
    # one rank: the parts add up to the step
    assert sum(cats.values()) == pytest.approx(run.step_time_s)
    assert cats["communication"] == pytest.approx(sum(r.exposed_comm_s for r in rows) / len(rows))
    assert "nccl_data.json.gz" in run.source
    # round trip through as_dict keeps the categories
    assert ex.MeasuredRun.from_dict(run.as_dict()) == run


def test_skip_keeps_at_least_one_step(trace):
    all_steps = ex.MeasuredRun.from_trace(trace, "gpt2", CFG, "a100-80g", 8, 1024, skip=0)
    last_only = ex.MeasuredRun.from_trace(trace, "gpt2", CFG, "a100-80g", 8, 1024, skip=99)
    windows = [r.window_s for r in breakdown(trace).rows]
    assert all_steps.step_time_s == pytest.approx(sum(windows) / len(windows))
    assert last_only.step_time_s == pytest.approx(sum(windows) / len(windows))  # all kept


@pytest.mark.parametrize(
    "kwargs, match",
    [({"skip": -1}, "skip"), ({"skip": True}, "skip")],
)
def test_from_trace_refuses_bad_arguments(trace, kwargs, match):
    with pytest.raises(ex.training.CalibrationError, match=match):
        ex.MeasuredRun.from_trace(trace, "gpt2", CFG, "a100-80g", 8, 1024, **kwargs)
    with pytest.raises(ex.training.CalibrationError, match="expected a KinetoTrace"):
        ex.MeasuredRun.from_trace("x.json", "gpt2", CFG, "a100-80g", 8, 1024)


@pytest.mark.parametrize(
    "cats",
    [(("bubble", 1.0),), (("compute", -1.0),), (("idle", 1.0), ("idle", 2.0)), [("idle", 1.0)]],
)
def test_categories_are_checked(cats):
    with pytest.raises(ex.training.CalibrationError, match="categories"):
        ex.MeasuredRun("gpt2", CFG, "a100-80g", 8, 1024, 0.1, categories=cats)


def test_step_categories_partition_the_simulated_step():
    sim = ex.simulate(
        "gpt2", ex.ParallelConfig(dp=2, zero=3, microbatch_size=4), "a100-80g", 8, 1024
    )
    parts = step_categories(sim.time_by_kind)
    assert sum(parts.values()) == pytest.approx(sum(v for _, v in sim.time_by_kind))


def _runs():
    """Two gpt2 runs whose parts are the model's own under other knob values."""
    truth = ex.TrainingParams(matmul_efficiency_cap=0.4)
    out = []
    for dp, mb in ((2, 4), (4, 2)):
        par = ex.ParallelConfig(dp=dp, microbatch_size=mb)
        sim = ex.estimate("gpt2", par, "a100-80g", 16, 1024, truth)
        parts = step_categories(sim.time_by_kind)
        out.append(ex.MeasuredRun("gpt2", par, "a100-80g", 16, 1024, sim.step_time_s,
                                  categories=tuple(parts.items())))  # fmt: skip
    return out


def test_objective_has_a_residual_per_step_and_category():
    runs = _runs()
    o = _Objective(runs, ex.TrainingParams(), ("matmul_efficiency_cap",), "estimate")
    res = o([0.4])
    assert res.shape == (len(runs) * (1 + len(STEP_CATEGORIES)),)
    assert res == pytest.approx(0.0, abs=1e-9)  # the knob value that made the parts
    assert abs(o([0.6])).max() > 1e-3


def test_calibrate_reports_each_category_before_and_after():
    cal = ex.calibrate(
        _runs(), params=ex.TrainingParams(), fit=("matmul_efficiency_cap",), loo=False
    )
    assert cal.values[0] == pytest.approx(0.4, rel=1e-3)
    for row in cal.table:
        assert [c[0] for c in row.categories] == list(STEP_CATEGORIES)
        for _, measured, _before, after in row.categories:
            assert after == pytest.approx(measured, rel=1e-3, abs=1e-9)
    text = cal.category_text()
    assert text.count("compute") == len(cal.table)
    back = ex.Calibration.from_json(cal.to_json())
    assert back.table[0].categories == cal.table[0].categories
    assert cal.determined  # 2 runs x 5 observations for 1 knob


def test_cpu_run_arguments_are_checked_before_any_process_starts(tmp_path):
    from explorer.traces import TracesError
    from explorer.traces.cpu_runs import host_cluster, profile_cpu_run, tiny_gpt_config

    with pytest.raises(TracesError, match="wrapper='zero'"):
        profile_cpu_run("zero", tmp_path)
    with pytest.raises(TracesError, match="microbatch"):
        profile_cpu_run("ddp", tmp_path, microbatch=True)
    with pytest.raises(TracesError, match="not a host measurement"):
        host_cluster(tmp_path)
    h, layers, vocab, seq = 64, 2, 128, 32  # GPT-2: embeddings, 12h^2 + 13h per layer, ln_f
    want = vocab * h + seq * h + layers * (12 * h * h + 13 * h) + 2 * h
    assert tiny_gpt_config(h, layers, 4, vocab, seq).num_params() == want
    assert list(tmp_path.iterdir()) == []


def test_a_run_on_a_cluster_of_ones_own_round_trips_through_json():
    import dataclasses
    import json

    from explorer.traces.cpu_runs import host_cluster, tiny_gpt_config

    host = host_cluster(vendored("cpu_gloo_ddp"))  # not in the catalog
    changed = dataclasses.replace(ex.hardware.load("a100-80g"), inter_node_latency_s=9e-6)
    for hw in (host, changed):
        run = ex.MeasuredRun(tiny_gpt_config(), ex.ParallelConfig(dp=2, microbatch_size=4),
                             hw, 8, 32, 0.1, categories=(("compute", 0.05),))  # fmt: skip
        d = json.loads(json.dumps(run.as_dict()))
        assert "hardware_profile" in d
        back = ex.MeasuredRun.from_dict(d)
        assert back == run and back.cluster == hw
    # a catalog profile is still written by name
    plain = ex.MeasuredRun("gpt2", CFG, ex.hardware.load("a100-80g"), 8, 1024, 0.1)
    assert "hardware_profile" not in plain.as_dict()
    bad = {**d, "hardware_profile": {**d["hardware_profile"], "chips_per_node": 0}}
    with pytest.raises(ex.training.CalibrationError, match="chips_per_node"):
        ex.MeasuredRun.from_dict(bad)


def test_labels_tell_ddp_from_fsdp():
    ddp = ex.MeasuredRun("gpt2", CFG, "a100-80g", 8, 1024, 0.1)
    fsdp = ex.MeasuredRun("gpt2", ex.ParallelConfig(dp=2, zero=3, microbatch_size=4),
                          "a100-80g", 8, 1024, 0.1)  # fmt: skip
    assert ddp.label == "gpt2 dp2 tp1 pp1 mb4"
    assert fsdp.label == "gpt2 dp2 tp1 pp1 zero3 mb4"


def test_a_calibration_on_a_cluster_of_ones_own_round_trips_through_json():
    from explorer.traces.cpu_runs import host_cluster, tiny_gpt_config

    folder = vendored("cpu_gloo_ddp")
    run = ex.MeasuredRun.from_trace(load_kineto(folder), tiny_gpt_config(),
                                    ex.ParallelConfig(dp=2, microbatch_size=4),
                                    host_cluster(folder), 8, 32, axes={"dp": 2})  # fmt: skip
    cal = ex.calibrate([run], fit=("matmul_efficiency_cap",), loo=False)
    back = ex.training.Calibration.from_json(cal.to_json())
    assert back.table[0].run == run and back.fitted == cal.fitted


def _gemm_run(cap: float):
    """A run whose one recorded GEMM shape took what the step model gives it at ``cap``."""
    from explorer.training.step_model.kernels import gemm_s

    a100 = ex.hardware.load("a100-80g")
    truth = ex.TrainingParams(matmul_efficiency_cap=cap)
    secs = gemm_s(1, 2048, 4096, 1024, 2, a100.chip, truth)
    sim = ex.estimate("gpt2", CFG, "a100-80g", 8, 1024, truth)
    return ex.MeasuredRun("gpt2", CFG, a100, 8, 1024, sim.step_time_s,
                          kernels=(("matmul", (1, 2048, 1024, 4096), 3.0, 3 * secs),))  # fmt: skip


def test_each_kernel_part_is_a_residual_of_its_own():
    run = _gemm_run(0.3)
    o = _Objective([run], ex.TrainingParams(), ("matmul_efficiency_cap",), "estimate")
    assert o([0.3]).shape == (2,)  # the step, the matmul kernels
    assert o([0.3])[-1] == pytest.approx(0.0, abs=1e-12)
    assert o([0.6])[-1] < -1e-4  # a higher cap predicts the GEMMs faster than measured
    cal = ex.calibrate([run], params=ex.TrainingParams(), fit=("matmul_efficiency_cap",),
                       loo=False)  # fmt: skip
    ((name, measured, before, after),) = cal.table[0].categories
    assert name == "matmul" and measured == pytest.approx(run.kernels[0][3])
    assert cal.values[0] == pytest.approx(0.3, rel=1e-3) and before < measured
    assert after == pytest.approx(measured, rel=1e-3)


def test_from_trace_records_the_kernels_of_the_kept_steps():
    folder = vendored("cpu_gloo_ddp")
    t = load_kineto(folder)
    run = ex.MeasuredRun.from_trace(t, "gpt2", CFG, "a100-80g", 8, 1024, skip=1)
    kept = [(r, s) for r in t.ranks for s in r.steps[1:]]
    mms = sum(1 for r, s in kept for a in r.ops
              if a.name in ("aten::mm", "aten::addmm") and s.ts <= a.ts < s.end)  # fmt: skip
    calls = sum(c for part, _, c, _ in run.kernels if part == "matmul")
    assert calls == pytest.approx(mms / len(kept)) and mms > 0
    assert ex.MeasuredRun.from_dict(run.as_dict()) == run
    with pytest.raises(ex.training.CalibrationError, match="kernels"):
        ex.MeasuredRun("gpt2", CFG, "a100-80g", 8, 1024, 0.1, kernels=(("gemm", (1,), 1, 1),))
