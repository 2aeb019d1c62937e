"""Real traces made here: a tiny GPT trained 3 steps with DDP and with FSDP2 on CPU over
gloo in 2 processes, profiled, then imported and broken down end to end. The collectives'
bytes must equal what the plan predicts for that model and layout (slow tier: ~1 min for
the two runs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import explorer as ex
from explorer.hardware.collectives import bytes_sent_per_device
from explorer.traces import breakdown, load_kineto
from explorer.traces.cpu_runs import host_cluster, profile_cpu_run, tiny_gpt_config

pytest.importorskip("torch")

MICRO = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("kineto")
    return {w: profile_cpu_run(w, base / w, microbatch=MICRO, steps=3) for w in ("ddp", "fsdp")}


def _fp32():
    """The runs train in fp32: 4-byte weights and gradients in the plan."""
    p = ex.TrainingParams()
    return replace(p, state=replace(p.state, weight_bytes=4.0, gradient_bytes=4.0))


def _config(wrapper):
    return ex.ParallelConfig(dp=2, zero=3 if wrapper == "fsdp" else 0, microbatch_size=MICRO)


def _sent_per_step(row, n=2):
    """Bytes one device sends per step by kind, from the trace's buffer sizes and our formula."""
    out: dict[str, float] = {}
    for key, size in row.comm_bytes:
        kind = key.split(" ")[0]
        if kind in ("all-reduce", "all-gather", "reduce-scatter"):
            out[kind] = out.get(kind, 0.0) + bytes_sent_per_device(kind, size, n)
    return out


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_collective_bytes_equal_the_plan(runs, wrapper):
    cfg = tiny_gpt_config()
    t = load_kineto(runs[wrapper])
    assert [r.rank for r in t.ranks] == [0, 1] and t.world_size == 2
    sim = ex.simulate(cfg, _config(wrapper), host_cluster(runs[wrapper]), 2 * MICRO,
                      cfg.max_seq_len, _fp32())  # fmt: skip
    plan = dict(sim.comm_bytes)
    for row in breakdown(t, axes={"dp": 2}).rows:
        sent = _sent_per_step(row)
        if wrapper == "ddp":  # the gradient all-reduce
            assert sent == {"all-reduce": plan["dp"]}
        else:  # ZeRO-3: gathers forward and backward (zero), reduce-scatter (dp)
            assert sent == {"all-gather": plan["zero"], "reduce-scatter": plan["dp"]}
        assert {k.split(" ")[1] for k, _ in row.comm_bytes} == {"dp"}


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_buffer_sizes_are_the_parameter_count(runs, wrapper):
    cfg = tiny_gpt_config()
    p4 = 4 * cfg.num_params()
    for row in breakdown(load_kineto(runs[wrapper]), axes={"dp": 2}).rows:
        b = dict(row.comm_bytes)
        if wrapper == "ddp":
            assert b["all-reduce dp"] == p4
        else:
            assert (b["all-gather dp"], b["reduce-scatter dp"]) == (2 * p4, p4)


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_cpu_steps_are_classified_and_add_up(runs, wrapper):
    b = breakdown(load_kineto(runs[wrapper]), axes={"dp": 2})
    assert len(b.rows) == 2 * 3
    for row in b.rows:
        assert row.compute_s + row.exposed_comm_s + row.idle_s == pytest.approx(row.window_s)
        assert row.window_s == pytest.approx(row.step_s)
        assert row.category("matmul") > 0 and row.category("communication") > 0
        assert row.category("optimizer") > 0 and row.category("attention") > 0


def test_host_cluster_is_measured(runs):
    c = host_cluster(runs["ddp"])
    assert c.chips_per_node == 2 and c.chip.peak_flops("fp32") > 0
    assert "measured" in c.source


def test_calibrate_from_the_traces_fits_the_parts(runs):
    """Import, classify and calibrate end to end: the fitted knobs bring the predicted step
    and its parts closer to the traces' than the start values."""
    import numpy as np

    from explorer.training.calibration.fit import _Objective

    cfg = tiny_gpt_config()
    measured = [
        ex.MeasuredRun.from_trace(
            load_kineto(runs[w]),
            cfg,
            _config(w),
            host_cluster(runs[w]),
            2 * MICRO,
            cfg.max_seq_len,
            axes={"dp": 2},
        )  # fmt: skip
        for w in ("ddp", "fsdp")
    ]
    cal = ex.calibrate(measured, params=_fp32(), loo=False)
    o = _Objective(measured, cal.base, cal.fit, "estimate")
    before = float(np.sum(o(np.array(cal.start)) ** 2))
    after = float(np.sum(o(np.array(cal.values)) ** 2))
    assert after < before
    for row in cal.table:
        # the step's parts, then the kernel parts the trace recorded with their shapes
        assert [c[0] for c in row.categories] == ["compute", "optimizer", "communication", "idle",
                                                  "matmul", "attention"]  # fmt: skip
    assert "communication" in cal.category_text()
