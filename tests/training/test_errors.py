"""Bad arguments to simulate / estimate / plan_training and the training knobs fail early
with the training area's own errors, all under explorer.ExplorerError, each message naming
the value and what to use instead."""

import math

import pytest

import explorer as ex
from explorer.training import (
    ActivationTerms,
    MemoryAllowances,
    ParallelConfigError,
    PartitionError,
    SearchSpace,
    StateBytes,
    TrainingParams,
    TrainingParamsError,
    TrainingPlanError,
    estimate,
)

HW = "a100-80g"
PAR = ex.ParallelConfig(dp=2)


def test_every_training_error_is_an_explorer_error():
    for err in (ParallelConfigError, PartitionError, TrainingPlanError, TrainingParamsError):
        assert issubclass(err, ex.ExplorerError) and issubclass(err, ValueError)


@pytest.mark.parametrize("fn", [ex.simulate, estimate])
@pytest.mark.parametrize("kw, words", [
    (dict(global_batch=0), ["global_batch=0", "int >= 1"]),
    (dict(global_batch=2.0), ["global_batch=2.0"]),
    (dict(global_batch=9), ["global batch 9 is not divisible by dp=2"]),
    (dict(global_batch=8, seq=0), ["seq=0", "int >= 1"]),
    (dict(global_batch=8, seq=math.inf), ["seq=inf"]),
    (dict(global_batch=8, parallel={"dp": 2}), ["parallel={'dp': 2}", "ParallelConfig"]),
    (dict(global_batch=8, params=ex.CostParams()), ["expected a TrainingParams"]),
])  # fmt: skip
def test_simulate_arguments(fn, kw, words):
    args = dict(parallel=PAR, hardware=HW, seq=256) | kw
    with pytest.raises(ParallelConfigError) as e:
        fn("gpt2", **args)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("kw, words", [
    (dict(top_k=0), ["top_k=0", "int >= 1"]),
    (dict(top_k=1.5), ["top_k=1.5"]),
    (dict(simulate_top=0), ["simulate_top=0"]),
    (dict(global_batch=0), ["global_batch=0"]),
    (dict(global_batch=-8), ["global_batch=-8"]),
    (dict(seq=-1), ["seq=-1"]),
    (dict(seq=float("nan")), ["seq=nan"]),
    (dict(devices=8.0), ["devices=8.0"]),
    (dict(global_batch=7, space=SearchSpace(pp=(1,))),
     ["global batch 7", "dp=8 (tp=1, pp=1) does not divide the batch 7"]),
    (dict(space=(1, 2)), ["space=(1, 2)", "SearchSpace"]),
    (dict(params=ex.CostParams()), ["expected a TrainingParams"]),
])  # fmt: skip
def test_plan_training_arguments(kw, words):
    args = dict(devices=8, hardware=HW, global_batch=8, seq=256) | kw
    with pytest.raises(TrainingPlanError) as e:
        ex.plan_training("gpt2", **args)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("kw, words", [
    (dict(microbatch_sizes=()), ["microbatch_sizes=()", "non-empty"]),
    (dict(microbatch_sizes=(0, 1)), ["microbatch_sizes=(0, 1)"]),
    (dict(tp=(2.5,)), ["tp=(2.5,)", "or None"]),
    (dict(virtual_stages=(1, 2)), ["at least 2 chunks"]),
    (dict(zero=(4,)), ["zero=(4,)", "0, 1, 2, 3"]),
    (dict(zero=(True,)), ["zero=(True,)"]),
    (dict(recompute=("always",)), ["'always'", "selective"]),
    (dict(schedules=("zb-v",)), ["'zb-v'"]),
])  # fmt: skip
def test_search_space_is_checked(kw, words):
    with pytest.raises(TrainingPlanError) as e:
        SearchSpace(**kw)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("make, words", [
    (lambda: StateBytes(optimizer_bytes=-1.0), ["StateBytes.optimizer_bytes=-1.0"]),
    (lambda: StateBytes(weight_bytes=math.nan), ["StateBytes.weight_bytes=nan", "finite"]),
    (lambda: ActivationTerms(split_bytes=math.inf), ["ActivationTerms.split_bytes=inf"]),
    (lambda: MemoryAllowances(runtime_context_bytes=-1.0), ["runtime_context_bytes=-1.0"]),
    (lambda: MemoryAllowances(fragmentation_fraction=1.0), ["fragmentation_fraction=1.0"]),
    (lambda: TrainingParams(optimizer_step_bytes_per_param=math.nan),
     ["optimizer_step_bytes_per_param=nan"]),
    (lambda: TrainingParams(zero3_prefetch_layers=0), ["zero3_prefetch_layers=0"]),
    (lambda: TrainingParams(search_method="greedy"), ["'greedy'", "dynamic_programming"]),
    (lambda: TrainingParams(fused_ops=["scale"]), ["fused_ops=['scale']", "tuple"]),
    (lambda: TrainingParams(state={"weight_bytes": 2}), ["TrainingParams.state=", "StateBytes"]),
])  # fmt: skip
def test_training_knobs_are_checked(make, words):
    with pytest.raises(TrainingParamsError) as e:
        make()
    for w in words:
        assert w in str(e.value)


def test_a_search_space_too_narrow_to_fit_says_so_not_that_the_devices_are_too_few():
    from explorer.training import SearchSpace

    narrow = SearchSpace(tp=(1,), pp=(1,), zero=(0,), recompute=("none",))
    with pytest.raises(ex.ExplorerError) as err:
        ex.plan_training(ex.models.load("gpt3-13b"), devices=8, hardware="a100-80g",
                         global_batch=64, seq=2048, space=narrow)  # fmt: skip
    text = str(err.value)
    assert "fits no configuration of the search space on 8 x a100-80g" in text
    assert "widen the SearchSpace" in text and "smallest device count" not in text


def test_plan_training_out_of_time_returns_the_best_estimated_and_says_so():
    kw = dict(devices=64, hardware="a100-80g", global_batch=256, seq=2048)
    full = ex.plan_training("gpt3-1.3b", **kw)
    early = ex.plan_training("gpt3-1.3b", time_limit_s=1e-9, **kw)  # passed at the first check
    assert full.stopped_early is None
    assert early.stopped_early.startswith("time_limit_s=1e-09 ran out after 1 of ")
    assert early.searched < full.searched and early.sim.fits
    assert early.sim.step_time_s >= full.sim.step_time_s * (1 - 1e-9)
    assert early.stopped_early in str(early)


@pytest.mark.parametrize("bad", [0, -5, math.nan, math.inf, "60", True])
def test_plan_training_time_limit_is_checked(bad):
    with pytest.raises(ex.ExplorerError, match="time_limit_s="):
        ex.plan_training("gpt2", devices=8, global_batch=64, seq=512, time_limit_s=bad)
