"""Constraints on plan_training (issue 29): the plan under constraints is the best of the
unconstrained enumeration restricted by hand; conflicts name their smallest subset."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import resolve
from explorer.search import SearchError
from explorer.training import TrainingPlanError
from explorer.training.planning.constraints import PlanConstraintError
from explorer.training.planning.ranking import normalize, rank
from explorer.training.planning.space import (
    SearchSpace,
    cheapest_recompute,
    configurations,
    structures,
)

GPT2 = dict(devices=8, hardware="a100-80g", global_batch=64, seq=512)


@pytest.fixture(scope="module")
def gpt2_estimates():
    """Every configuration the unconstrained search estimates for gpt2 on 8 A100s, each
    with the recompute policy the ladder takes (the planner's own enumeration, no
    constraints)."""
    cfg = ex.models.load("gpt2")
    cluster = resolve("a100-80g")
    space = SearchSpace()
    out = []
    found, _ = structures(cfg, 8, cluster, 64, 512, space)
    for tp, pp, dp, cp in found:
        for base in configurations(cfg, tp, pp, dp, cp, 64, space):
            tried = cheapest_recompute(
                space.recompute,
                lambda rec, base=base: ex.estimate(
                    cfg, base.replace(recompute=rec), cluster, 64, 512
                ),  # fmt: skip
                fits=lambda r: r.fits,
                stop_on=(ex.training.ParallelConfigError, SearchError),
            )
            out += [r for _, r in tried]
    return out


HAND = {
    "tp<=2, pp=2": (
        [ex.Bound("tp", max=2), ex.Fix("pp", 2)],
        lambda c: c.tp <= 2 and c.pp == 2,
    ),
    "dp<=2": ([ex.Bound("dp", max=2)], lambda c: c.dp <= 2),
    "zero 1, 1f1b, microbatch 2..4": (
        [ex.Fix("zero", 1), ex.Fix("schedule", "1f1b"), ex.Bound("microbatch", min=2, max=4)],
        lambda c: c.zero == 1 and c.schedule == "1f1b" and 2 <= c.microbatch_size <= 4,
    ),
    "tp within a node, no pipeline": (
        [ex.Within("tp", "node"), ex.Fix("pp", 1)],
        lambda c: c.tp <= 8 and c.pp == 1,
    ),
}


@pytest.mark.parametrize("case", sorted(HAND))
def test_plan_is_the_best_of_the_enumeration_restricted_by_hand(gpt2_estimates, case):
    constraints, keep = HAND[case]
    fitting = sorted((r for r in gpt2_estimates if r.fits and keep(r.config)), key=rank)
    assert fitting, case
    plan = ex.plan_training("gpt2", **GPT2, simulate_top=1, constraints=constraints)
    assert plan.config == normalize(fitting[0]).config
    assert keep(plan.config)
    assert plan.constraints == tuple(constraints)
    # a constraint never makes the plan faster
    free = ex.plan_training("gpt2", **GPT2, simulate_top=1)
    assert plan.sim.step_time_s >= free.sim.step_time_s * (1 - 1e-9)


def test_fix_past_a_node_is_searched_and_honoured():
    plan = ex.plan_training("gpt3-175b", devices=1024, hardware="a100-80g", global_batch=1536,
                            seq=2048, constraints=[ex.Fix("tp", 16)])  # fmt: skip
    assert plan.config.tp == 16
    free = ex.plan_training("gpt3-175b", devices=1024, hardware="a100-80g", global_batch=1536,
                            seq=2048)  # fmt: skip
    assert free.config.tp <= 8  # the default search keeps tp inside a node


def test_smallest_conflicting_subset_is_named():
    a, b = ex.Fix("tp", 16), ex.Within("tp", "node")
    noise = [ex.Bound("zero", max=1), ex.Fix("schedule", "1f1b")]
    with pytest.raises(PlanConstraintError) as info:
        ex.plan_training("gpt3-175b", devices=1024, hardware="a100-80g", global_batch=1536,
                         seq=2048, constraints=[noise[0], a, noise[1], b])  # fmt: skip
    err = info.value
    assert err.conflict == (a, b)
    assert "a node of a100-80g has 8 chips" in err.reason
    assert isinstance(err, TrainingPlanError) and isinstance(err, ex.ConstraintError)
    assert str(a) in str(err) and str(b) in str(err)


def test_one_constraint_alone_can_conflict():
    con = ex.Bound("pp", min=16)  # gpt2 has 12 layers
    with pytest.raises(PlanConstraintError) as info:
        ex.plan_training("gpt2", **GPT2, constraints=[ex.Fix("zero", 1), con])
    assert info.value.conflict == (con,)
    assert "12 layers" in info.value.reason


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: ex.Bound("foo", max=2), "unknown knob 'foo'"),
        (lambda: ex.Fix("tp", 0), "expected an int >= 1"),
        (lambda: ex.Fix("schedule", "zigzag"), "expected one of"),
        (lambda: ex.Bound("schedule", max=1), "use Fix"),
        (lambda: ex.Bound("tp", min=4, max=2), "min is above max"),
        (lambda: ex.Bound("tp"), "bounds nothing"),
        (lambda: ex.Within("dp"), "expected the knob 'tp'"),
        (lambda: ex.StageLayers(()), "layer counts"),
    ],
)
def test_bad_constraint_values_are_named(make, words):
    with pytest.raises(PlanConstraintError, match=words):
        make()


@pytest.mark.parametrize(
    "con, words",
    [
        (ex.Within("tp", "rack"), "has no level 'rack'"),
        (ex.StageLayers((10, 10)), "the stages hold 20 layers, 'gpt2' has 12"),
        (ex.Fix("ep", 2), "dense model"),
        (ex.Pin("x", "replicated"), "not a training-plan constraint"),
    ],
)
def test_constraints_that_do_not_apply_are_named(con, words):
    with pytest.raises(PlanConstraintError, match=words):
        ex.plan_training("gpt2", **GPT2, constraints=[con])


def test_stage_layers_are_the_split_simulated():
    plan = ex.plan_training("gpt2", **GPT2, constraints=[ex.StageLayers((3, 9))])
    assert plan.config.pp == 2 and plan.config.virtual_stages == 1
    assert plan.config.stage_layers == (3, 9)
    assert plan.sim.partition.layer_counts() == (3, 9)
    assert plan.sim.partition_choice.method == "given"
    assert all(a.config.stage_layers == (3, 9) for a in plan.alternatives)
    # the free plan's own split of the same configuration differs, so the split is priced
    own = ex.simulate("gpt2", plan.config.replace(stage_layers=None), "a100-80g", 64, 512)
    assert own.partition.layer_counts() != (3, 9)
    assert own.step_time_s != plan.sim.step_time_s


def test_parallel_config_checks_its_stage_layers():
    with pytest.raises(ex.training.ParallelConfigError, match="gives 3 stages, but pp=2"):
        ex.ParallelConfig(dp=2, pp=2, stage_layers=(4, 4, 4))
    with pytest.raises(ex.training.ParallelConfigError, match="adding up to 12"):
        ex.simulate("gpt2", ex.ParallelConfig(dp=4, pp=2, stage_layers=(4, 4)), "a100-80g", 64, 512)


def test_scaling_curve_passes_constraints():
    curve = ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512,
                             constraints=[ex.Fix("pp", 2)])  # fmt: skip
    assert [p.config.pp for p in curve.points] == [2, 2]


def test_forbidden_by_names_the_constraint_a_configuration_breaks():
    from explorer.training.planning.constraints import forbidden_by

    a100 = resolve("a100-80g")
    cons = (ex.Bound("tp", max=4), ex.Within("tp", "node"), ex.Fix("schedule", "1f1b"))
    assert forbidden_by(cons, ex.ParallelConfig(dp=2, tp=8), a100) == "Bound('tp', max=4)"
    assert forbidden_by(cons[1:], ex.ParallelConfig(dp=1, tp=16), a100) == "Within('tp', 'node')"
    gpipe = ex.ParallelConfig(dp=2, tp=2, pp=2, schedule="gpipe")
    assert forbidden_by(cons, gpipe, a100) == "Fix('schedule', '1f1b')"
    assert forbidden_by(cons, ex.ParallelConfig(dp=2, tp=2, pp=2), a100) == ""
    split = (ex.StageLayers((6, 6)),)
    assert forbidden_by(split, ex.ParallelConfig(dp=2, pp=4), a100) == "StageLayers((6, 6))"


def test_constraints_that_leave_nothing_fitting_are_named():
    # pp <= 2 without ZeRO cannot hold gpt3-175b on 80 GiB chips; tp=1 and 1f1b are not
    # needed for that (tp up to 8 does not help), so the subset leaves them out
    cons = [ex.Fix("tp", 1), ex.Bound("pp", max=2), ex.Fix("schedule", "1f1b"), ex.Fix("zero", 0)]
    with pytest.raises(PlanConstraintError) as info:
        ex.plan_training("gpt3-175b", devices=1024, hardware="a100-80g", global_batch=1536,
                         seq=2048, constraints=cons)  # fmt: skip
    err = info.value
    assert err.conflict == (cons[1], cons[3])
    assert "fits in memory" in err.reason and "above the 80 GiB" in err.reason
    # each member is needed: without either, a configuration fits
    for keep in (cons[1], cons[3]):
        plan = ex.plan_training("gpt3-175b", devices=1024, hardware="a100-80g",
                                global_batch=1536, seq=2048, constraints=[keep])  # fmt: skip
        assert plan.sim.fits


def test_pooled_plans_refuse_constraints_by_name():
    pools = [ex.Pool("a100-80g", 8), ex.Pool("a100-80g", 8, name="second")]
    with pytest.raises(PlanConstraintError, match="pooled search does not take constraints"):
        ex.plan_training("gpt2", pools=pools, global_batch=64, seq=512,
                         constraints=[ex.Fix("pp", 2)])  # fmt: skip
