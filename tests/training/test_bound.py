"""The search's branch and bound (`planning.bound`, `planning.bounded`): the floor is below
every estimate it stands for, and skipping configurations changes no plan."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import resolve
from explorer.training import stacks
from explorer.training.planning.bound import FLOOR_SLACK, known_partition, step_time_floor
from explorer.training.planning.space import (
    RECOMPUTE_LADDER,
    SearchSpace,
    configurations,
    structures,
)
from explorer.training.step_model.model import StepModel

# (model, devices, hardware, global batch, sequence): dense with and without pipelines,
# MoE with dense first layers, context parallelism
JOBS = [
    ("gpt2", 8, "a100-80g", 64, 512),
    ("gpt3-1.3b", 32, "a100-80g", 64, 2048),
    ("qwen3-30b-a3b", 16, "h100-sxm", 64, 4096),
    ("llama3-8b", 16, "h100-sxm", 8, 32768),
]


def _bases(name, devices, hw, gb, seq):
    cfg = ex.models.load(name)
    cluster = resolve(hw).extended(devices)
    space = SearchSpace()
    for tp, pp, dp, cp in structures(cfg, devices, cluster, gb, seq, space)[0]:
        yield from configurations(cfg, tp, pp, dp, cp, gb, space)


@pytest.mark.parametrize("job", JOBS, ids=[j[0] for j in JOBS])
def test_the_floor_is_below_every_recompute_policy_estimate(job):
    name, devices, hw, gb, seq = job
    cfg, tparams = ex.models.load(name), stacks.resolve(None, None, "test")
    cluster = resolve(hw).extended(devices)
    checked = staged = 0
    for base in list(_bases(*job))[::3]:  # every third: the fast tier stays fast
        step = StepModel(cfg, base, cluster, gb, seq, tparams)
        floor = step_time_floor(step)
        # the group floor, shared by the ZeRO stages of one configuration, is lower still
        assert step_time_floor(step, zero_terms=False) <= floor
        staged += known_partition(base, cfg.num_layers) is not None
        for rec in RECOMPUTE_LADDER:
            try:
                r = ex.estimate(cfg, base.replace(recompute=rec), cluster, gb, seq, tparams)
            except ex.ExplorerError:
                continue
            assert floor * (1 - FLOOR_SLACK) <= r.step_time_s, (str(base), rec, floor)
            checked += 1
    assert checked > 10 and staged > 0


def test_the_floor_is_tight_where_nothing_overlaps():
    # one stage, no tensor parallelism, ZeRO-0: compute, the all-reduce tail's floor, the
    # optimizer step; the estimate adds what the overlap hides and the floor cannot know
    cfg, hw = ex.models.load("gpt2"), ex.hardware.load("a100-80g")
    par = ex.ParallelConfig(dp=8, microbatch_size=8)
    step = StepModel(cfg, par, hw, 64, 512, stacks.resolve(None, None, "test"))
    est = ex.estimate(cfg, par, hw, 64, 512).step_time_s
    assert 0.9 * est <= step_time_floor(step) <= est


def test_known_partition_only_where_the_split_does_not_depend_on_times():
    L = 24
    assert known_partition(ex.ParallelConfig(dp=2), L).bounds[-1] == L + 2
    equal = ex.ParallelConfig(pp=2, schedule="interleaved_1f1b", virtual_stages=3)
    assert known_partition(equal, L) is not None
    assert known_partition(ex.ParallelConfig(pp=2), L) is None  # balanced by time
    given = ex.ParallelConfig(pp=2, stage_layers=(10, 14))
    assert known_partition(given, L).layer_counts() == (10, 14)


@pytest.mark.parametrize(
    "kw",
    [
        dict(cfg="gpt2", devices=8, hardware="a100-80g", global_batch=64, seq=1024),
        dict(cfg="gpt3-1.3b", devices=64, hardware="a100-80g", global_batch=256, seq=2048),
        dict(cfg="qwen3-30b-a3b", devices=16, hardware="h100-sxm", global_batch=64, seq=4096),
    ],
    ids=["gpt2", "gpt3-1.3b", "qwen3-30b-a3b"],
)
def test_pruning_changes_no_plan(kw):
    # objectives= estimates every configuration (the Pareto front needs them all): the
    # exhaustive search through the same code
    cfg = kw.pop("cfg")
    plan = ex.plan_training(cfg, **kw)
    every = ex.plan_training(cfg, objectives=("step_time", "memory"), **kw)
    assert every.pruned == 0 and plan.pruned > 0
    assert plan.searched < every.searched
    assert repr(plan.config) == repr(every.config) and repr(plan.sim) == repr(every.sim)
    assert plan.alternatives == every.alternatives
    assert plan.over_memory == every.over_memory
    assert f"{plan.pruned} configurations skipped by their step-time floor" in plan.report(
        robust=False
    )


def test_fewer_kept_plans_prune_more():
    kw = dict(devices=64, hardware="a100-80g", global_batch=256, seq=2048)
    wide = ex.plan_training("gpt3-1.3b", top_k=10, simulate_top=5, **kw)
    narrow = ex.plan_training("gpt3-1.3b", top_k=1, simulate_top=1, **kw)
    assert narrow.searched < wide.searched and narrow.pruned > wide.pruned
    assert len(wide.alternatives) == 10 and len(narrow.alternatives) == 1


def _search(prune: bool, keep: int = 2):
    from explorer.training.planning.bounded import BoundedSearch

    name, devices, hw, gb, seq = "gpt3-1.3b", 32, "a100-80g", 64, 2048
    cfg, tparams = ex.models.load(name), stacks.resolve(None, None, "test")
    cluster = resolve(hw).extended(devices)
    search = BoundedSearch(cfg, cluster, gb, seq, tparams, SearchSpace(), keep)
    search.add(_bases(name, devices, hw, gb, seq), prune)
    assert search.run(0.0, 1e9, None, 1, 1) is None
    return search


def test_skipped_configurations_estimated_after_all_below_a_step_time():
    # the over-memory list names the configurations faster than the simulated plan: each
    # one below that time is estimated after all, in the order of the enumeration
    exhaustive = _search(prune=False).results()
    every = [repr(r) for r in exhaustive]
    times = sorted(r.step_time_s for r in exhaustive)
    search = _search(prune=True)
    skipped = search.pruned
    assert skipped > 0 and search.estimated < len(every)
    middle = times[len(times) // 2]
    search.estimate_below(middle)
    got = {repr(r) for r in search.results()}
    below = [r for r in exhaustive if r.step_time_s < middle]
    assert below and all(repr(r) in got for r in below)
    assert 0 < search.pruned < skipped
    search.estimate_below(float("inf"))
    assert search.pruned == 0 and [repr(r) for r in search.results()] == every
