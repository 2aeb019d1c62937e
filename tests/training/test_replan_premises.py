"""A re-plan keeps its premises: the job's chips, a memory cap no higher than the chip's,
and events given with numpy numbers mean what the same plain numbers mean."""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.training.errors import ReplanError
from explorer.training.replanning.replan import (
    MemoryCap,
    NewGlobalBatch,
    NodeLoss,
    Straggler,
    replan,
)


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt3-125m", devices=16, global_batch=64, seq=1024)


def test_a_cap_above_the_chip_is_refused_not_a_bigger_device(plan):
    with pytest.raises(ReplanError, match=r"above the 80 GiB.*cannot add memory; pass at most"):
        replan(plan, MemoryCap(1e15))


def test_another_chip_is_refused_with_the_fix(plan):
    with pytest.raises(ReplanError, match=r"h100-sxm.*plan ran on .*A100.*plan_training"):
        replan(plan, NodeLoss(1), hardware="h100-sxm")


def test_the_plans_own_hardware_given_again_is_accepted(plan):
    r = replan(plan, MemoryCap(40 * 2**30), hardware=plan.hardware)
    assert r.new.sim.memory.total <= 40 * 2**30


def test_numpy_numbers_mean_what_plain_numbers_mean():
    assert NodeLoss(np.int64(1), nodes=(np.int64(0),)) == NodeLoss(1, nodes=(0,))
    assert type(NodeLoss(1, nodes=(np.int32(3),)).nodes[0]) is int
    assert Straggler(np.int64(2), np.float32(0.5)) == Straggler(2, 0.5)
    assert NewGlobalBatch(np.int64(8)).n == 8 and type(NewGlobalBatch(np.int64(8)).n) is int
    assert type(MemoryCap(np.float32(1e9)).bytes) is float


def test_numpy_node_ids_name_nodes_of_the_job(plan):
    a = replan(plan, NodeLoss(1, nodes=(np.int64(0),)))
    b = replan(plan, NodeLoss(1, nodes=(0,)))
    assert a.new.config == b.new.config


@pytest.mark.parametrize("nodes", [(True,), (-1,), (0.0,), "0", 0])
def test_bad_node_ids_are_named(nodes):
    with pytest.raises(ReplanError, match="NodeLoss"):
        NodeLoss(1, nodes=nodes)


def test_nothing_fits_under_a_tiny_cap_is_said_not_a_type_error(plan):
    # the fallback's full search took SearchSpace's tp=None for a tuple
    with pytest.raises(ex.ExplorerError, match="fits the memory a device may use"):
        replan(plan, MemoryCap(2**20))  # it said "no configuration ... is valid"


def test_a_batch_of_two_to_the_62_is_refused_not_scheduled(plan):
    from explorer.training.simulate import MAX_SIMULATED_MICROBATCHES

    with pytest.raises(ex.ExplorerError, match=f"{MAX_SIMULATED_MICROBATCHES:,} it is refused"):
        ex.simulate("gpt2", ex.ParallelConfig(dp=2), global_batch=2**62, seq=512)
    est = ex.estimate("gpt2", ex.ParallelConfig(dp=2), global_batch=2**62, seq=512)
    assert est.step_time_s > 0  # the closed form prices it
    with pytest.raises(ex.ExplorerError):
        replan(plan, NewGlobalBatch(2**62))
