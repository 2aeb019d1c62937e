"""Narayanan et al. 2021, Table 1, reproduced by the simulator with one calibration."""

import pytest

import explorer as ex
from explorer.training import compare_megatron, load_published, megatron_flops_per_iteration
from explorer.training.calibration.published import MEGATRON_PARAMS

# The claim README.md states for notebook 06: every row within 6% (worst measured 5.1%,
# megatron-39.1b; bench/training.py prints the table).
TOLERANCE = 0.06


@pytest.fixture(scope="module")
def comparisons():
    return compare_megatron()


def test_table_has_the_ten_rows_with_sources():
    rows = load_published()
    assert [r.gpus for r in rows] == [32, 64, 128, 256, 512, 1024, 1536, 1920, 2520, 3072]
    assert all("Narayanan et al. 2021" in r.source for r in rows)
    for r in rows:
        cfg = ex.models.load(r.model)
        assert (cfg.num_heads, cfg.hidden_size, cfg.num_layers) == (r.heads, r.hidden, r.layers)
        assert r.percent_of_peak == pytest.approx(100 * r.achieved_tflops_per_gpu / 312, abs=0.6)


def test_paper_flops_formula():
    cfg = ex.models.load("megatron-1008b")
    B, s, l, h, V = 3072, 2048, 128, 25600, 51200
    want = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    assert megatron_flops_per_iteration(cfg, B, s) == want


def test_every_row_within_tolerance(comparisons):
    for c in comparisons:
        r = c.run
        assert (c.plan.config.tp, c.plan.config.pp, c.plan.config.dp) == (r.tp, r.pp, r.dp)
        assert c.plan.config.recompute == "full" and c.plan.config.zero == 0
        assert abs(c.ratio - 1) <= TOLERANCE, (r.model, c.predicted_tflops_per_gpu)


@pytest.mark.parametrize("model", ["megatron-1.7b", "megatron-18.4b"])
def test_planner_finds_at_least_the_published_speed(model, comparisons):
    """The free search includes the published configuration, so it must do as well (the
    benchmark checks all ten rows; two here keep the suite fast)."""
    c = next(c for c in comparisons if c.run.model == model)
    r = c.run
    plan = ex.plan_training(model, r.gpus, r.hardware, r.global_batch, r.seq, MEGATRON_PARAMS)
    assert plan.sim.step_time_s <= c.plan.sim.step_time_s * (1 + 1e-9)
    flops = megatron_flops_per_iteration(ex.models.load(model), r.global_batch, r.seq)
    assert flops / plan.sim.step_time_s / r.gpus / 1e12 >= r.achieved_tflops_per_gpu
