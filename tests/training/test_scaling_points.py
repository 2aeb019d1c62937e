"""scaling_curve keeps each device count's plan outcome by every input of its plan: a curve
asked again, the weak and strong curves' common first point and neighbouring ranges' common
counts are not planned twice, and a changed input (params, constraints) plans again."""

import dataclasses

import pytest

import explorer as ex
from explorer.memo import clear_all
from explorer.training.planning import scaling
from explorer.training.planning.homogeneous import plan_homogeneous


@pytest.fixture
def planned(monkeypatch):
    """The (devices, global batch) of every count planned afresh."""
    calls = []
    real = scaling._plan_point

    def counted(cfg, n, cluster, gb, *rest):
        calls.append((n, gb))
        return real(cfg, n, cluster, gb, *rest)

    monkeypatch.setattr(scaling, "_plan_point", counted)
    clear_all()
    return calls


def _points(curve):
    return [(p.devices, p.global_batch, p.config, p.step_time_s, p.mfu, p.linearity)
            for p in curve.points]  # fmt: skip


def test_a_count_planned_once_is_not_planned_again(planned):
    weak = ex.scaling_curve("gpt2", "a100-80g", [8, 16, 32], global_batch=64, seq=512)
    assert planned == [(8, 64), (16, 128), (32, 256)]
    again = ex.scaling_curve("gpt2", "a100-80g", [8, 16, 32], global_batch=64, seq=512)
    assert planned == [(8, 64), (16, 128), (32, 256)] and _points(again) == _points(weak)
    strong = ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512,
                              mode="strong")  # fmt: skip
    assert planned[3:] == [(16, 64)]  # the first point is the weak curve's
    # each point is the plan of its job (top_k=1, simulate_top=1 as the curve plans)
    for p in strong.points:
        want = plan_homogeneous("gpt2", p.devices, "a100-80g", 64, 512, top_k=1, simulate_top=1)
        assert p.config == want.config and p.step_time_s == want.sim.step_time_s
    # a wider range plans the new count only
    ex.scaling_curve("gpt2", "a100-80g", [8, 16, 32, 64], global_batch=64, seq=512)
    assert planned[4:] == [(64, 512)]


def test_another_input_plans_again(planned):
    ex.scaling_curve("gpt2", "a100-80g", [8], global_batch=64, seq=512)
    slow = ex.stacks.params("torchtitan")
    other = ex.scaling_curve("gpt2", "a100-80g", [8], global_batch=64, seq=512, params=slow)
    fixed = ex.scaling_curve("gpt2", "a100-80g", [8], global_batch=64, seq=512,
                             constraints=[ex.Fix("pp", 2)])  # fmt: skip
    assert planned == [(8, 64)] * 3
    assert fixed.points[0].config.pp == 2
    want = plan_homogeneous("gpt2", 8, "a100-80g", 64, 512, slow, top_k=1, simulate_top=1)
    assert other.points[0].step_time_s == want.sim.step_time_s


def test_a_count_without_a_plan_keeps_its_reason_and_progress_reaches_the_total(planned):
    calls = []
    first = ex.scaling_curve("gpt3-175b", "a100-80g", [8, 16], global_batch=16, seq=2048,
                             progress=lambda d, t: calls.append((d, t)))  # fmt: skip
    assert not first.points[0].fits and "fits no configuration" in first.points[0].note
    assert calls[-1] == (200, 200)
    calls.clear()
    again = ex.scaling_curve("gpt3-175b", "a100-80g", [8, 16], global_batch=16, seq=2048,
                             progress=lambda d, t: calls.append((d, t)))  # fmt: skip
    assert planned == [(8, 16), (16, 32)] and again.points == first.points
    assert calls == [(100, 200), (200, 200)]


def test_a_point_is_planned_as_the_chosen_configuration_alone():
    # chosen_only: no alternatives or over-memory list searched, no timeline kept; the same
    # configuration and step (every SimResult field but the timeline) with fewer estimates
    kw = dict(cfg="gpt3-175b", devices=256, hardware="a100-80g", global_batch=3072, seq=2048)
    full = plan_homogeneous(**kw, top_k=1, simulate_top=1)
    alone = plan_homogeneous(**kw, top_k=1, simulate_top=1, chosen_only=True)
    assert full.sim.timeline is not None and alone.sim.timeline is None
    assert alone.sim == dataclasses.replace(full.sim, timeline=None)
    assert alone.config == full.config and alone.searched < full.searched
    assert full.alternatives and not alone.alternatives and not alone.over_memory
    point = ex.scaling_curve(kw["cfg"], "a100-80g", [256], global_batch=3072, seq=2048).points[0]
    assert (point.config, point.step_time_s) == (full.config, full.sim.step_time_s)


@pytest.mark.parametrize(
    "model,par,kw",
    [
        ("gpt3-1.3b",
         ex.ParallelConfig(dp=2, tp=2, pp=4, microbatch_size=2, schedule="interleaved_1f1b",
                           virtual_stages=2, recompute="per_layer"),
         dict(hardware="a100-80g", global_batch=64, seq=1024)),
        # the scaling view's GPT-3 175B point: 384 microbatches over pp 8 x v 4, ZeRO-1
        ("gpt3-175b",
         ex.ParallelConfig(dp=8, tp=4, pp=8, sp=True, microbatch_size=2,
                           schedule="interleaved_1f1b", virtual_stages=4, zero=1),
         dict(hardware="a100-80g", global_batch=6144, seq=2048)),
        # experts, a dense first layer, ZeRO-3 gathers, uneven stages (1F1B, time-balanced)
        ("deepseek-v3",
         ex.ParallelConfig(dp=8, tp=1, pp=16, ep=8, microbatch_size=1, zero=3,
                           recompute="selective"),
         dict(hardware="h100-sxm", global_batch=256, seq=4096)),
    ],
    ids=["gpt3-1.3b", "gpt3-175b", "deepseek-v3"],
)  # fmt: skip
def test_simulate_without_a_timeline_is_the_same_result(model, par, kw):
    with_events = ex.simulate(model, par, **kw)
    without = ex.simulate(model, par, timeline=False, **kw)
    assert without.timeline is None and with_events.timeline.events
    assert without == dataclasses.replace(with_events, timeline=None)


def test_a_timeline_flag_that_is_no_bool_is_refused_by_name():
    par = ex.ParallelConfig(dp=2)
    with pytest.raises(ex.ExplorerError, match="timeline='no': expected True"):
        ex.simulate("gpt2", par, "a100-80g", 8, 512, timeline="no")
