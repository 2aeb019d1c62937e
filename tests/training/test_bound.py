"""The search's branch and bound (`planning.bound`, `planning.bounded`): the floor is below
every estimate it stands for, and skipping configurations changes no plan."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.hardware import resolve
from explorer.training import stacks
from explorer.training.pipeline.partition import uniform_partition
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
        # most configurations need recomputation: their memory is asked before their
        # estimate and raises their floor
        dict(cfg="gpt3-175b", devices=256, hardware="a100-80g", global_batch=1536, seq=2048),
        # a ladder the memory questions leave to the estimates
        dict(
            cfg="gpt3-1.3b",
            devices=16,
            hardware="a100-80g",
            global_batch=256,
            seq=2048,
            space=SearchSpace(recompute=("none", "selective", "full")),
        ),
    ],
    ids=["gpt2", "gpt3-1.3b", "qwen3-30b-a3b", "gpt3-175b-recompute", "other-ladder"],
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


def _search(prune: bool, keep: int = 2, job=("gpt3-1.3b", 32, "a100-80g", 64, 2048)):
    from explorer.training.planning.bounded import BoundedSearch

    name, devices, hw, gb, seq = job
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
    search.estimate_below(middle, over=len(every))
    got = {repr(r) for r in search.results()}
    below = [r for r in exhaustive if r.step_time_s < middle]
    assert below and all(repr(r) in got for r in below)
    assert 0 < search.pruned < skipped
    search.estimate_below(float("inf"), over=len(every))
    assert search.pruned == 0 and [repr(r) for r in search.results()] == every


def test_the_over_memory_list_needs_only_its_fastest_below_a_step_time():
    # estimate_below stops once no floor left is below the over-th fastest result over
    # memory: those over-memory results are the exhaustive search's, estimated or not
    job = ("gpt3-175b", 256, "a100-80g", 1536, 2048)  # most need recomputation
    exhaustive = _search(prune=False, job=job).results()
    worst = max(r.step_time_s for r in exhaustive)
    over = sorted((r for r in exhaustive if not r.fits), key=lambda r: r.step_time_s)[:2]
    assert len(over) == 2
    wide, narrow = _search(prune=True, job=job), _search(prune=True, job=job)
    wide.estimate_below(worst, over=len(exhaustive))
    narrow.estimate_below(worst, over=2)
    assert narrow.pruned > wide.pruned  # fewer estimated
    got = sorted((r for r in narrow.results() if not r.fits), key=lambda r: r.step_time_s)
    assert [repr(r) for r in got[:2]] == [repr(r) for r in over]


def test_the_recompute_floor_is_below_every_count_from_it():
    # `step_time_floor(recomputed=k)`: a per_layer configuration whose ladder cannot fit
    # with fewer than k fully recomputed layers per stage is never estimated faster with
    # k or more (split known in advance and balanced by time)
    from explorer.training.simulate import recompute_counts

    cfg, tparams = ex.models.load("gpt3-1.3b"), stacks.resolve(None, None, "test")
    cluster, checked = resolve("a100-80g").extended(32), 0
    for base in list(_bases("gpt3-1.3b", 32, "a100-80g", 64, 2048))[::7]:
        par = base.replace(recompute="per_layer")
        step = StepModel(cfg, par, cluster, 64, 2048, tparams)
        counts = recompute_counts(step)
        floors = [step_time_floor(step, recomputed=k) for k in counts]
        assert floors == sorted(floors) and floors[-1] > floors[0]  # more layers, more time
        for k, floor in zip(counts, floors, strict=True):
            for n in counts[counts.index(k) :: 3]:
                r = ex.estimate(cfg, par.replace(recompute_num_layers=n), cluster, 64, 2048,
                                tparams)  # fmt: skip
                assert floor * (1 - FLOOR_SLACK) <= r.step_time_s, (str(par), k, n)
                checked += 1
    assert checked > 50


def test_configurations_whose_model_states_exceed_the_cap_fit_no_count():
    # `simulate.states_over_cap`: the search skips the ladder's questions of a
    # configuration whose model states alone exceed the memory cap; none of its rungs fits
    from explorer.training.simulate import ladder_fits, recompute_counts, states_over_cap

    job = ("gpt3-175b", 256, "a100-80g", 1536, 2048)  # many cannot fit at all
    cfg, tparams = ex.models.load("gpt3-175b"), stacks.resolve(None, None, "test")
    cluster, over, fitting = resolve("a100-80g").extended(256), 0, 0
    for base in list(_bases(*job))[::2]:
        none = StepModel(cfg, base.replace(recompute="none"), cluster, 1536, 2048, tparams)
        step = StepModel(cfg, base.replace(recompute="per_layer"), cluster, 1536, 2048, tparams)
        if states_over_cap(none):
            over += 1
            assert states_over_cap(step) and not ladder_fits(none, None), str(base)
            assert not any(ladder_fits(step, k) for k in recompute_counts(step)), str(base)
        else:
            fitting += any(ladder_fits(step, k) for k in recompute_counts(step)[-1:])
    assert over > 20 and fitting > 20


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.booleans(), min_size=1, max_size=20),
    st.integers(0, 20),
)
def test_the_bisection_stopped_early_never_passes_the_ladders_answer(fits, enough_from):
    # `simulate.fewest_fitting(enough=)`: the plan's search stops the ladder's bisection
    # once its lower end is enough; what it returns is never above the ladder's answer
    # (fits need not be monotone: a floor of the answer must hold whatever the memory does)
    from explorer.training.simulate import fewest_fitting

    asked = []

    def ask(k):
        asked.append(k)
        return fits[k]

    answer = fewest_fitting(len(fits), ask)
    plain = len(asked)
    asked.clear()
    got = fewest_fitting(len(fits), ask, lambda lo: lo >= enough_from)
    assert len(asked) <= plain
    if answer is None:
        assert got is None or got >= enough_from
    else:
        assert got is not None and got <= answer
        assert got == answer or got >= enough_from
    assert fewest_fitting(len(fits), ask, lambda lo: False) == answer


@pytest.mark.parametrize(
    "warm",
    [
        # the plan's own choice, the runner-up, a slow layout, one outside the space
        "chosen",
        "runner-up",
        ex.ParallelConfig(dp=16, tp=8, pp=2, sp=True, microbatch_size=1, zero=1),
        ex.ParallelConfig(dp=256, tp=1, pp=1, microbatch_size=3, zero=3),
    ],
    ids=["chosen", "runner-up", "slow", "outside"],
)
def test_a_warm_start_changes_no_plan(warm):
    # `plan_homogeneous(warm_start=)`: estimated first when it is among the configurations,
    # it bounds the search from the start; the plan is the one found without it
    from explorer.training.planning.homogeneous import plan_homogeneous

    kw = dict(devices=256, hardware="a100-80g", global_batch=1536, seq=2048,
              simulate_top=1, chosen_only=True)  # fmt: skip
    cold = plan_homogeneous("gpt3-175b", **kw)
    if warm == "chosen":
        warm = cold.config
    elif warm == "runner-up":
        wide = plan_homogeneous("gpt3-175b", **{**kw, "chosen_only": False}, top_k=3)
        warm = next(r.config for r in wide.alternatives if repr(r.config) != repr(cold.config))
    hot = plan_homogeneous("gpt3-175b", warm_start=warm, **kw)
    assert repr(hot.config) == repr(cold.config) and repr(hot.sim) == repr(cold.sim)
    assert hot.searched <= cold.searched + len(RECOMPUTE_LADDER)  # its rungs at most


def test_a_scaling_curves_points_start_from_the_previous_choice(monkeypatch):
    # each count after the first is searched with the previous point's configuration, its
    # data-parallel degree scaled, as its warm start: the same points, fewer questions
    from explorer.memo import clear_all
    from explorer.training.planning import bounded, scaling

    args = ("gpt3-175b", "a100-80g", [256, 512])
    kw = dict(global_batch=3072, seq=2048, mode="weak")
    asked, firsts = [], []
    real_ask, real_index = bounded.BoundedSearch._ask, bounded.BoundedSearch._index_of
    monkeypatch.setattr(
        bounded.BoundedSearch, "_ask", lambda self, *a: asked.append(1) or real_ask(self, *a)
    )
    monkeypatch.setattr(
        bounded.BoundedSearch, "_index_of",
        lambda self, par: firsts.append(str(par)) or real_index(self, par),
    )  # fmt: skip
    clear_all()
    warm = scaling.scaling_curve(*args, **kw)
    with_warm = len(asked)
    first = warm.points[0].config
    assert firsts == [str(first.replace(dp=first.dp * 2))]
    monkeypatch.setattr(scaling, "_scaled", lambda *a: None)
    clear_all()
    asked.clear()
    cold = scaling.scaling_curve(*args, **kw)
    assert [repr(p) for p in warm.points] == [repr(p) for p in cold.points]
    assert with_warm <= len(asked)


@pytest.mark.parametrize(
    "job,every,covers",
    [
        # known splits and time-balanced ones, fitting and not
        (("gpt3-175b", 256, "a100-80g", 1536, 2048), 5, "all"),
        # Llama 3's large head: the balanced split puts more layers on device 0, and only
        # the uniform split fits
        (("llama3-8b", 16, "h100-sxm", 64, 8192), 1, "uniform"),
    ],
    ids=["gpt3-175b", "llama3-8b"],
)
def test_the_ladders_question_is_the_split_and_memory_the_estimate_takes(job, every, covers):
    # `simulate.ladder_fits` answers at the first device over the cap and tries the uniform
    # split only when the time-balanced one does not fit: the same answer as the memory of
    # the split `estimate` takes (`_partition(memory_capped=False)`) against the cap
    sim = importlib.import_module("explorer.training.simulate")  # the module, not the function
    name, devices, hw, gb, seq = job
    cfg, tparams = ex.models.load(name), stacks.resolve(None, None, "test")
    cluster, answers = resolve(hw).extended(devices), set()
    bases = list(_bases(*job))[::every]
    if covers == "uniform":
        bases = [b for b in bases if b.pp == 2 and b.tp == 1]
    for base in bases:
        for rec in ("none", "per_layer"):
            par = base.replace(recompute=rec)
            for k in sim.recompute_counts(StepModel(cfg, par, cluster, gb, seq, tparams))[::4]:
                fresh = StepModel(cfg, par, cluster, gb, seq, tparams)
                flight = sim._in_flight(fresh)
                part = sim._partition(fresh, k, flight, memory_capped=False)[0]
                need = max(m.total for m in sim._formula_memories(fresh, part, k, flight))
                asked = StepModel(cfg, par, cluster, gb, seq, tparams)
                got = sim.ladder_fits(asked, k)
                assert got == (need <= fresh.cap), (str(par), k)
                assert sim.ladder_fits(asked, k) == got  # asked again: the answer kept
                known = known_partition(par, cfg.num_layers) is not None
                answers.add((got, known, not known and part == uniform_partition(
                    cfg.num_layers, par.stages)))  # fmt: skip
    if covers == "all":
        assert {(a, b) for a, b, _ in answers} == {(x, y) for x in (0, 1) for y in (0, 1)}
    else:
        assert (True, False, True) in answers  # the uniform split fits, the balanced not


@pytest.mark.parametrize("job", JOBS[:3], ids=[j[0] for j in JOBS[:3]])
def test_a_step_model_at_another_zero_stage_estimates_as_a_fresh_one(job):
    # `StepModel.with_zero` (the search's ZeRO siblings) shares the tables no ZeRO stage
    # changes and starts the others empty: estimates and memories equal a fresh model's,
    # whichever stage was asked first
    from explorer.training.simulate import estimate_step, ladder_fits

    name, devices, hw, gb, seq = job
    cfg, tparams = ex.models.load(name), stacks.resolve(None, None, "test")
    cluster, checked = resolve(hw).extended(devices), 0
    for base in list(_bases(*job))[::4]:
        if base.dp == 1:
            continue
        first = StepModel(cfg, base.replace(zero=3), cluster, gb, seq, tparams)
        estimate_step(first)  # its tables filled at ZeRO-3
        ladder_fits(first, None)
        step_time_floor(first)
        for zero in (0, 1, 2):
            twin = first.with_zero(zero)
            fresh = StepModel(cfg, base.replace(zero=zero), cluster, gb, seq, tparams)
            assert step_time_floor(twin) == step_time_floor(fresh), (str(base), zero)
            assert repr(estimate_step(twin)) == repr(estimate_step(fresh)), (str(base), zero)
            checked += 1
    assert checked > 20


def test_the_floor_of_a_split_balanced_by_time_counts_its_fullest_stage():
    # where the split is balanced by time (1F1B with pipelines) some stage holds at least
    # ceil(L / S) layers: the slowest stage is at least such a stage with its ZeRO terms,
    # not the mean stage. GPT-3 175B at batch 6144 on 256 A100s: the median floor within 4%
    # of the estimate (6% with the mean stage alone), never above it
    import statistics

    job = ("gpt3-175b", 256, "a100-80g", 6144, 2048)
    cfg, tparams = ex.models.load("gpt3-175b"), stacks.resolve(None, None, "test")
    cluster, ratios = resolve("a100-80g").extended(256), []
    for base in list(_bases(*job))[::2]:
        if known_partition(base, cfg.num_layers) is not None:
            continue
        par = base.replace(recompute="none")
        step = StepModel(cfg, par, cluster, 6144, 2048, tparams)
        r = ex.estimate(cfg, par, cluster, 6144, 2048, tparams)
        floor = step_time_floor(step)
        assert floor * (1 - FLOOR_SLACK) <= r.step_time_s, str(par)
        assert step_time_floor(step, zero_terms=False) <= floor
        ratios.append(floor / r.step_time_s)
    assert len(ratios) > 100 and statistics.median(ratios) > 0.96


def test_the_search_reports_progress_while_it_skips():
    # a view stops a computation from its progress callback: the search calls it at least
    # every `_HEARTBEAT` configurations taken from the heap, not only after an estimate
    # (GPT-3 175B at batch 6144 on 256 A100s estimates ~10 configurations of ~900)
    from explorer.training.planning import bounded

    calls = []
    plan = ex.plan_training("gpt3-175b", devices=256, hardware="a100-80g", global_batch=6144,
                            seq=2048, progress=lambda d, t: calls.append(d))  # fmt: skip
    assert plan.searched < 40 < len(calls)
    assert len(calls) >= (plan.searched + plan.pruned) // (4 * bounded._HEARTBEAT)


def test_a_warm_start_that_is_no_configuration_is_refused_by_name():
    from explorer.training.planning.homogeneous import plan_homogeneous

    with pytest.raises(ex.ExplorerError, match="warm_start='dp8': expected a ParallelConfig"):
        plan_homogeneous("gpt2", 8, "a100-80g", 64, 512, warm_start="dp8")
