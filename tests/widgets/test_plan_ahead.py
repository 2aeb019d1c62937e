"""Planning ahead: the dashboard plans the neighbouring device counts and ScalingView the
other scaling mode and a one-count-wider range after a draw; the change is then drawn from
the caches, and a change before the planning ahead finished is still the plan of its job
(stopped or waited for, never a half result)."""

import threading
import time

import pytest

import explorer as ex
from explorer.memo import clear_all
from explorer.training.planning import scaling
from explorer.training.planning.homogeneous import plan_homogeneous
from widgets import ScalingView, Series, StrategyExplorer, strategy_explorer
from widgets.plan_ahead import PlanAhead, Stopped
from widgets.scaling_view import _CURVES


# ----- PlanAhead itself -----------------------------------------------------------------------
def test_plan_ahead_runs_its_jobs_in_order_skips_failures_and_stops():
    out, gate = [], threading.Event()

    def compute(job, live):
        if job == "bad":
            raise ValueError("does not fit")
        if job == "slow":
            while not gate.wait(0.01):
                if not live():
                    raise Stopped
        out.append(job)

    ahead = PlanAhead("test")
    ahead.start(["a", "bad", "b"], compute)
    ahead.wait(30)
    assert out == ["a", "b"] and ahead.done == ["a", "b"] and ahead.current is None
    ahead.start(["slow", "c"], compute)
    while ahead.current != "slow":
        time.sleep(0.01)
    ahead.stop()  # stops inside the job: nothing stored, nothing after it
    ahead.wait(30)
    assert out == ["a", "b"] and ahead.done == [] and not ahead.running
    # finish(job) for the job in flight: it ends, nothing after it runs
    ahead.start(["slow", "c"], compute)
    while ahead.current != "slow":
        time.sleep(0.01)
    threading.Timer(0.2, gate.set).start()
    assert ahead.finish("slow") is True
    assert out == ["a", "b", "slow"] and ahead.done == ["slow"] and not ahead.running
    # finish(another job): it stops and says so
    gate.clear()
    ahead.start(["slow"], compute)
    while ahead.current != "slow":
        time.sleep(0.01)
    assert ahead.finish("c") is False
    ahead.wait(30)
    assert out == ["a", "b", "slow"]


# ----- ScalingView ----------------------------------------------------------------------------
def _fresh(series: Series) -> list:
    """(devices, batch, config, step time) of each count, planned now (no memo)."""
    out = []
    for n in series.counts:
        gb = series.global_batch * n // series.counts[0] if series.mode == "weak" else (
            series.global_batch)  # fmt: skip
        plan = plan_homogeneous(series.model, n, series.hardware, gb, series.seq, top_k=1,
                                simulate_top=1)  # fmt: skip
        out.append((n, gb, plan.config, plan.sim.step_time_s))
    return out


def _drawn(curve) -> list:
    return [(p.devices, p.global_batch, p.config, p.step_time_s) for p in curve.points]


@pytest.fixture
def planned(monkeypatch):
    """Counts planned afresh, by thread name (the view's own or the one planning ahead)."""
    calls = []
    real = scaling._plan_point

    def counted(cfg, n, cluster, gb, *rest):
        calls.append((threading.current_thread().name, n, gb))
        return real(cfg, n, cluster, gb, *rest)

    monkeypatch.setattr(scaling, "_plan_point", counted)
    clear_all()
    _CURVES.clear()
    return calls


def test_scaling_view_plans_the_next_series_and_the_change_comes_from_the_caches(planned):
    strong = Series("gpt2", "a100-80g", "strong", 64, 512, (8, 16))
    view = ScalingView([strong], plan_ahead=True)
    weak, wider = view.next_series()
    assert weak == Series("gpt2", "a100-80g", "weak", 64, 512, (8, 16))
    assert wider.counts == (8, 16, 32) and wider.mode == "strong"  # 8 is the lowest count
    view.ahead.wait(600)
    assert view.ahead.done == [weak, wider]
    ahead = [c for c in planned if c[0].endswith("ahead")]
    # weak's 8 is strong's 8 (same job): planned once; wider plans 32 only
    assert [(n, gb) for _, n, gb in ahead] == [(16, 128), (32, 64)]
    view.controls["mode"].value = "weak"  # at once (a script): from the caches
    assert [c for c in planned if c[0] == "MainThread"] == [("MainThread", 8, 64),
                                                          ("MainThread", 16, 64)]  # fmt: skip
    assert _drawn(view.curves[-1]) == _fresh(weak)
    assert view.series[-1] == weak
    view.ahead.wait(600)  # then weak over 8..32 ahead (strong was planned before)
    assert [s.counts for s in view.ahead.done] == [(8, 16, 32)]


def test_a_scaling_change_before_planning_ahead_finished_is_still_right(planned, monkeypatch):
    strong = Series("gpt2", "a100-80g", "strong", 64, 512, (8, 16))
    entered, release = threading.Event(), threading.Event()
    real = scaling._plan_point

    def held(cfg, n, cluster, gb, *rest):
        if threading.current_thread().name.endswith("ahead") and not release.is_set():
            entered.set()
            assert release.wait(60)
        return real(cfg, n, cluster, gb, *rest)

    monkeypatch.setattr(scaling, "_plan_point", held)
    view = ScalingView([strong], plan_ahead=True)
    assert entered.wait(60)  # planning weak's 16 ahead, held there
    weak = Series("gpt2", "a100-80g", "weak", 64, 512, (8, 16))
    assert view.ahead.current == weak
    # the change asks for the series in flight: it waits for it (released meanwhile)
    threading.Timer(0.3, release.set).start()
    view.controls["mode"].value = "weak"
    assert _drawn(view.curves[-1]) == _fresh(weak)
    assert [c[1:] for c in planned if c[1:] == (16, 128)] == [(16, 128)]  # planned once
    # a change to a series not planned ahead stops the planning ahead and plans itself
    release.clear()
    entered.clear()
    view.ahead.wait(60)
    other = ScalingView([Series("gpt2", "a100-80g", "strong", 32, 512, (8, 16))],
                        plan_ahead=True)  # fmt: skip
    assert entered.wait(60) and other.ahead.current is not None  # held inside a job
    threading.Timer(0.3, release.set).start()
    other.controls["global_batch"].value = 48
    assert _drawn(other.curves[-1]) == _fresh(Series("gpt2", "a100-80g", "strong", 48, 512,
                                                     (8, 16)))  # fmt: skip
    other.ahead.wait(60)


# ----- the dashboard --------------------------------------------------------------------------
def test_dashboard_plans_the_neighbouring_device_counts_and_answers_from_the_cache():
    strategy_explorer._PLANS.clear()
    dash = StrategyExplorer("gpt2", devices=16, global_batch=64, seq=512, draw_layers=2,
                            coalesce_s=0, plan_ahead=True)  # fmt: skip
    dash.ahead.wait(600)
    job = dash._job()
    assert dash.ahead.done == [(*job[:3], 8, *job[4:]), (*job[:3], 32, *job[4:])]
    assert dash.next_jobs() == []  # both planned
    dash.controls["devices"].value = 32  # at once: the plan cache answers
    assert dash.plan_cached and dash.plan.devices == 32
    want = ex.plan_training("gpt2", devices=32, hardware="a100-80g", global_batch=64, seq=512)
    assert dash.plan.config == want.config and dash.plan.sim == want.sim
    dash.ahead.wait(600)  # then 64 is planned ahead (16 was planned before)
    assert [j[3] for j in dash.ahead.done] == [64]


def test_a_device_change_before_planning_ahead_finished_is_still_right(monkeypatch):
    strategy_explorer._PLANS.clear()
    entered, release = threading.Event(), threading.Event()
    real = ex.plan_training

    def held(*args, **kwargs):
        if threading.current_thread().name.endswith("ahead") and not release.is_set():
            entered.set()
            assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(strategy_explorer.ex, "plan_training", held)
    dash = StrategyExplorer("gpt2", devices=16, global_batch=64, seq=512, draw_layers=2,
                            coalesce_s=0, plan_ahead=True)  # fmt: skip
    assert entered.wait(60) and dash.ahead.current[3] == 8  # held inside the 8-device job
    # a job not in flight (32): planning ahead stops, the change plans its own job
    threading.Timer(0.3, release.set).start()
    dash.controls["devices"].value = 32
    assert not dash.plan_cached and dash.plan.devices == 32
    want = real("gpt2", devices=32, hardware="a100-80g", global_batch=64, seq=512)
    assert dash.plan.config == want.config and dash.plan.sim == want.sim
    dash.ahead.wait(600)
    # the job in flight (16 ahead of 32 is cached; 64 is planned ahead): the change waits
    release.clear()
    entered.clear()
    strategy_explorer._PLANS.pop(dash._job()[:3] + (16,) + dash._job()[4:], None)
    dash.look_ahead()
    assert entered.wait(60) and dash.ahead.current[3] == 16
    threading.Timer(0.3, release.set).start()
    dash.controls["devices"].value = 16
    assert dash.plan.devices == 16 and dash.plan_cached  # the job planned ahead, waited for
    want = real("gpt2", devices=16, hardware="a100-80g", global_batch=64, seq=512)
    assert dash.plan.config == want.config and dash.plan.sim == want.sim


def test_counts_given_by_hand_are_planned_ahead_in_the_other_mode_only():
    _CURVES.clear()
    hand = Series("gpt2", "a100-80g", "strong", 64, 512, (8, 32))  # not a slider range
    view = ScalingView([hand], plan_ahead=False)
    assert view.next_series() == [Series("gpt2", "a100-80g", "weak", 64, 512, (8, 32))]
    ranged = Series("gpt2", "a100-80g", "strong", 64, 512, (16, 32))
    view.set_last(ranged)
    assert [(s.mode, s.counts) for s in view.next_series()] == [
        ("weak", (16, 32)), ("strong", (16, 32, 64)), ("strong", (8, 16, 32))
    ]  # fmt: skip


def test_the_heap_is_settled_once_and_in_a_kernel_only(monkeypatch):
    import asyncio
    import gc

    from widgets import heap

    async def twice():
        return heap.settle_heap(), heap.settle_heap()

    monkeypatch.setattr(heap, "_done", False)
    assert heap.settle_heap() is False  # a script: no running event loop
    before = gc.get_freeze_count()
    try:
        assert asyncio.run(twice()) == (True, False)
        assert gc.get_freeze_count() > before  # the objects alive then are frozen
    finally:
        gc.unfreeze()  # the rest of the test run keeps CPython's collector as it was
    monkeypatch.setattr(heap, "_done", False)
    monkeypatch.setattr(heap, "FREEZE", False)
    assert asyncio.run(twice()) == (False, False)


def test_a_scaling_change_is_planned_with_the_collector_paused(monkeypatch):
    # a scaling curve makes ~10^5 objects: a full collection in the middle of the user's
    # change held the interpreter 65 ms (bench/widgets.py, batch 3072 -> 4096); the change
    # plans with the cyclic collector paused (`heap.gc_paused`), planning ahead leaves it on
    import gc

    seen = []
    real = ex.scaling_curve

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(ex, "scaling_curve", spy)
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16), plan_ahead=False)
    v.controls["global_batch"].value = 96  # a new curve, planned at once (no event loop)
    mine = len(seen)
    assert mine and not any(seen) and gc.isenabled()
    v.plan_ahead = True
    v.look_ahead()
    v.ahead.wait(120)
    assert len(seen) > mine and all(seen[mine:])


def test_a_dashboard_change_is_planned_with_the_collector_paused(monkeypatch):
    # the dashboard's own re-plan runs with the cyclic collector paused (a full collection
    # of the kernel's heap, ~250 ms in bench/widgets.py, fell inside a batch change and
    # held the interpreter); its planning ahead leaves the collector on
    import gc

    strategy_explorer._PLANS.clear()
    seen = []
    real = ex.plan_training

    def spy(*a, **k):
        seen.append((threading.current_thread().name.endswith("ahead"), gc.isenabled()))
        return real(*a, **k)

    monkeypatch.setattr(strategy_explorer.ex, "plan_training", spy)
    dash = StrategyExplorer("gpt2", devices=16, global_batch=64, seq=512, draw_layers=2,
                            coalesce_s=0, plan_ahead=False)  # fmt: skip
    dash.controls["global_batch"].value = 96
    assert seen == [(False, False), (False, False)] and gc.isenabled()
    dash.plan_ahead = True
    dash.look_ahead()
    dash.ahead.wait(600)
    assert seen[2:] and all(ahead and enabled for ahead, enabled in seen[2:])
