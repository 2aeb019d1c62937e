"""plan.robustness(): the factor found for a knob really flips the winner when applied
(every configuration simulated again at that factor) and does not just below it."""

import pytest

import explorer as ex
from explorer.training.planning import robustness as rb


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt3-175b", devices=1024, hardware="a100-80g",
                            global_batch=1536, seq=2048)  # fmt: skip


@pytest.fixture(scope="module")
def result(plan):
    return plan.robustness(k=3, knobs=("matmul_efficiency_cap", "bandwidth inter-node"))


def _winner(plan, configs, knob, factor):
    ctx = rb.context_of(plan)
    k = rb.knobs_for(ctx.cluster)[knob]
    p, c = k.set(ctx.params, ctx.cluster, k.get(ctx.params, ctx.cluster) * factor)
    sims = [ex.simulate(ctx.model, cfg, c, ctx.global_batch, ctx.seq, p) for cfg in configs]
    fitting = [s for s in sims if s.fits]
    return str(min(fitting, key=rb.rank).config)


def test_a_flip_is_found_and_it_really_flips(plan, result):
    found = [f for f in result.flips if f.factor is not None]
    assert found, result.text()
    configs = [plan.config, *(a.config for a in plan.alternatives[:3])]
    for f in found:
        assert _winner(plan, configs, f.knob, f.factor) == f.rival != result.chosen
        just_before = f.factor * 1.02 if f.direction == "down" else f.factor / 1.02
        assert _winner(plan, configs, f.knob, just_before) == result.chosen


def test_verdict_follows_the_span(result):
    inside = any(f.factor and result.span[0] <= f.factor <= result.span[1]
                 for f in result.flips)  # fmt: skip
    assert result.verdict == ("fragile" if inside or any(c.flips for c in result.corners)
                              else "robust")  # fmt: skip
    assert result.verdict in result.label
    assert len(result.corners) == 4


def test_bad_arguments_are_named(plan):
    with pytest.raises(ex.TrainingError, match="unknown knob"):
        plan.robustness(knobs=("warp_speed",))
    with pytest.raises(ex.TrainingError, match="int >= 1"):
        plan.robustness(k=0)


def test_each_link_level_of_the_cluster_is_a_knob():
    gb200 = ex.hardware.load("gb200-nvl72")
    names = set(rb.knobs_for(gb200))
    assert {f"bandwidth {lv.name}" for lv in gb200.link_levels} <= names
    k = rb.knobs_for(gb200)["bandwidth nvlink"]
    _, scaled = k.set(None, gb200, k.get(None, gb200) * 0.5)
    by_name = {lv.name: lv.bandwidth_bytes_per_s for lv in scaled.levels}
    assert by_name["nvlink"] == 0.5 * k.get(None, gb200)
    assert by_name["ib"] == next(lv.bandwidth_bytes_per_s for lv in gb200.link_levels
                                 if lv.name == "ib")  # fmt: skip


def test_report_shows_the_scan_once_it_ran():
    plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    assert "robustness: not scanned" in plan.report()
    assert "robustness" not in plan.report(robust=False)
    r = plan.robustness()
    assert r.text() in plan.report()  # the scan that ran, not a second one
    assert plan.robustness() is r
