"""Multi-objective plans: the Pareto front of the fitting configurations."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.errors import ExplorerError
from explorer.hardware import load
from explorer.training import ParetoError
from explorer.training.planning.pareto import (
    DEFAULT_OBJECTIVES,
    check_objectives,
    dominates,
    pareto_front,
    pareto_split,
)

GPT2 = {"devices": 8, "global_batch": 64, "seq": 512}


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt2", **GPT2, objectives=("step_time", "memory", "communication"))


# --- the exact split, against the definition -------------------------------------------------
def _brute(values: np.ndarray) -> set[int]:
    n = len(values)
    return {i for i in range(n) if not any(dominates(values[j], values[i]) for j in range(n))}


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda k: st.lists(
            st.lists(st.integers(0, 4), min_size=k, max_size=k), min_size=0, max_size=30
        )
    )
)
def test_split_equals_the_definition(rows):
    # small integers make ties and equal coordinates frequent
    values = np.array(rows, dtype=float).reshape(len(rows), -1 if rows else 1)
    front, dominated, by = pareto_split(values)
    assert set(front) == _brute(values)
    assert sorted(front + dominated) == list(range(len(values)))
    for d, i in enumerate(dominated):
        for f, j in enumerate(front):
            assert by[d, f] == dominates(values[j], values[i])
        assert by[d].any()  # every dominated point has a dominator on the front


def test_identical_points_both_stay_and_are_reported_as_a_tie():
    # two configurations with the same values: neither dominates; both on the front
    values = np.array([[2.0, 1.0], [1.0, 2.0], [1.0, 2.0], [3.0, 3.0]])
    front, dominated, by = pareto_split(values)
    assert front == [1, 2, 0] and dominated == [3]
    assert by.tolist() == [[True, True, True]]


def test_domination_is_exact_no_tolerance():
    a, b = (1.0, 2.0), (np.nextafter(1.0, 2.0), 2.0)  # one ulp apart
    assert dominates(a, b) and not dominates(b, a)
    front, dominated, _ = pareto_split(np.array([a, b]))
    assert front == [0] and dominated == [1]


def test_split_refuses_nan():
    with pytest.raises(ParetoError, match="NaN"):
        pareto_split(np.array([[1.0, float("nan")]]))


# --- plan_training(objectives=...) ---------------------------------------------------------
def test_front_is_the_non_dominated_fitting_plans(plan):
    front = plan.pareto
    objs = front.objectives
    assert objs == ("step_time", "memory", "communication")
    assert front.front and len(front.points) == len({p.config for p in front.points})
    values = [p.values(objs) for p in front.points]
    for i, p in enumerate(front.front):
        assert p.on_front and not any(dominates(v, p.values(objs)) for v in values)
        assert p.dominates == len(front.dominated_by(i))
    for p in front.dominated:
        assert p.dominated_by
        for j in p.dominated_by:
            assert dominates(front.front[j].values(objs), p.values(objs))
        # "by whom" is complete: every front point that dominates it is listed
        listed = {j for j, f in enumerate(front.front) if dominates(f.values(objs), p.values(objs))}
        assert set(p.dominated_by) == listed
    assert sum(p.dominates for p in front.front) >= front.n_dominated


def test_every_point_fits_and_values_match_the_estimates(plan):
    cfg = ex.models.load("gpt2")
    for p in plan.pareto.points[:: max(1, len(plan.pareto.points) // 12)]:
        r = (ex.simulate if p.simulated else ex.training.estimate)(
            cfg, p.config, "a100-80g", GPT2["global_batch"], GPT2["seq"]
        )
        assert r.fits
        assert p.step_time_s == r.step_time_s and p.memory_bytes == r.memory.total
        assert p.comm_bytes == pytest.approx(sum(v for _, v in r.comm_bytes), rel=1e-12)


def test_the_fastest_plan_is_still_the_config_and_on_the_front(plan):
    front = plan.pareto
    assert plan.config == front.fastest.config
    assert front.chosen is not None and front.front[front.chosen].config == plan.config
    assert front.front[front.chosen].simulated  # the ranking's own (simulated) numbers
    assert front.front[front.chosen].step_time_s == plan.sim.step_time_s
    # nothing fitting is faster (plan_training's ranking: times within 1e-9 are equal)
    assert min(p.step_time_s for p in front.points) >= plan.sim.step_time_s * (1 - 1e-9)
    # the plan without objectives is the same plan
    plain = ex.plan_training("gpt2", **GPT2)
    assert plain.config == plan.config and plain.pareto is None


def test_fewer_objectives_give_a_front_inside_the_larger_one(plan):
    two = ex.plan_training("gpt2", **GPT2, objectives=("step_time", "memory")).pareto
    three = {p.config for p in plan.pareto.front}
    # a point non-dominated on (time, memory) and not tied there stays non-dominated with
    # one more objective
    tied = {two.front[j].config for group in two.ties for j in group}
    assert {p.config for p in two.front} - tied <= three


def test_cost_per_step_with_a_chip_price():
    hw = load("a100-80g")
    assert hw.price_per_chip_hour is not None and hw.chip.price_source.startswith("assumption")
    plan = ex.plan_training("gpt2", **GPT2, objectives=("step_time", "cost"))
    front = plan.pareto
    assert front.price_per_hour == hw.price_per_chip_hour * GPT2["devices"]
    for p in front.points:
        assert p.cost_usd == front.price_per_hour * p.step_time_s / 3600.0
    # one cluster, all devices used: cost is step time times a constant, so the front is
    # the fastest plan (and any exact tie with it)
    assert front.front[0].config == plan.config
    assert all(p.step_time_s == front.front[0].step_time_s for p in front.front)


def test_json_has_the_front(plan):
    d = json.loads(plan.to_json())
    assert len(d["pareto"]["front"]) == len(plan.pareto.front)
    assert d["pareto"]["objectives"] == list(plan.pareto.objectives)
    assert "dominated" in plan.pareto.table() and str(plan.pareto).startswith("ParetoFront(")
    assert str(plan.pareto) in plan.report()


# --- errors ----------------------------------------------------------------------------------
def test_unknown_objective_names_the_known_ones():
    with pytest.raises(ParetoError, match=r"unknown objective 'speed'.*'step_time'") as e:
        ex.plan_training("gpt2", **GPT2, objectives=("speed",))
    assert isinstance(e.value, ExplorerError) and isinstance(e.value, ex.training.TrainingPlanError)


@pytest.mark.parametrize(
    ("objectives", "match"),
    [
        ("step_time", "expected a tuple"),
        ((), "at least one"),
        (("memory", "memory"), "'memory' twice"),
    ],
)
def test_malformed_objectives(objectives, match):
    with pytest.raises(ParetoError, match=match):
        check_objectives(objectives, None)


def _unpriced():
    """a100-80g without its price (a profile without one, whatever the catalog holds)."""
    hw = load("a100-80g")
    chip = replace(hw.chip, price_per_chip_hour=None, price_source="")
    return replace(hw, name="a100-unpriced", chip=chip)


def test_cost_without_a_price_says_how_to_give_one():
    hw = _unpriced()
    assert hw.price_per_chip_hour is None
    with pytest.raises(ParetoError, match=r"'a100-unpriced' has none; add 'price_usd_per_chip"):
        ex.plan_training("gpt2", **GPT2, hardware=hw, objectives=("step_time", "cost"))
    # a Cluster given its price works
    chip = replace(hw.chip, price_per_chip_hour=4.0, price_source="assumption: test")
    plan = ex.plan_training("gpt2", **GPT2, hardware=replace(hw, chip=chip),
                            objectives=("cost",))  # fmt: skip
    assert plan.pareto.front[0].cost_usd == 4.0 * 8 * plan.pareto.front[0].step_time_s / 3600


def test_a_price_needs_a_source():
    chip = _unpriced().chip
    with pytest.raises(ExplorerError, match="price_source"):
        replace(chip, price_per_chip_hour=4.0)
    with pytest.raises(ExplorerError, match="positive finite"):
        replace(chip, price_per_chip_hour=-1.0, price_source="x")


def test_pareto_front_directly_from_results():
    rs = [
        ex.training.estimate("gpt2", ex.ParallelConfig(dp=8 // t, tp=t), "a100-80g", 64, 512)
        for t in (1, 2, 4)
    ]
    f = pareto_front(rs + rs[:1], DEFAULT_OBJECTIVES)
    assert f.duplicates == 1 and len(f.points) == 3
    with pytest.raises(ParetoError, match="needs a chip price"):
        pareto_front(rs, ("cost",))


def test_objectives_with_pools_are_refused_not_dropped():
    pools = [ex.Pool("a100-80g", 8), ex.Pool("h100-sxm", 8)]
    with pytest.raises(ParetoError, match="one cluster only"):
        ex.plan_training("gpt2", pools=pools, global_batch=64, seq=512, objectives=("memory",))
