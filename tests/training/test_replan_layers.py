"""A straggler whose node holds some pipeline stages: fewer layers on those stages."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import resolve
from explorer.models import load
from explorer.training import TrainingParams
from explorer.training.replanning.layers import LayerSplit, rebalance_layers
from explorer.training.step_model.model import StepModel

SPACE = ex.training.SearchSpace(tp=(1,), pp=(4,), schedules=("1f1b",))


@pytest.fixture(scope="module")
def pp_job():  # dp8 x pp4 on 4 nodes of 8: node g holds pipeline stage g of every replica
    return ex.plan_training("gpt3-1.3b", devices=32, hardware="a100-80g", global_batch=128,
                            seq=2048, space=SPACE)  # fmt: skip


def _step(job) -> StepModel:
    s = job.sim
    return StepModel(load("gpt3-1.3b"), s.config, resolve("a100-80g"), s.global_batch, s.seq,
                     TrainingParams())  # fmt: skip


def test_straggler_on_a_stage_is_rebalanced_by_layers(pp_job) -> None:
    assert pp_job.config.pp == 4 and pp_job.config.dp == 8
    r = ex.replan(pp_job, ex.Straggler(1, speed=0.5), space=SPACE)
    opts = {o.name.split(" ")[0]: o for o in r.options}
    lay = opts["rebalance-layers"]
    # the slow stage's node no longer gates every microbatch: faster than keeping, never
    # faster than the job without a straggler
    assert pp_job.sim.step_time_s < lay.step_time_s < r.keep_step_s
    assert lay.migration is not None and lay.migration.total_bytes > 0
    assert lay.migration.checkpoint_bytes == 0 and lay.switch_s == lay.migration.time_s
    assert lay.break_even_steps == pytest.approx(lay.switch_s / (r.keep_step_s - lay.step_time_s))
    assert "stages [1] on the slow node" in lay.note


def test_split_moves_layers_off_the_slow_stage(pp_job) -> None:
    step, part = _step(pp_job), pp_job.sim.partition
    splits = [rebalance_layers(step, part, frozenset({1}), s) for s in (0.9, 0.7, 0.5)]
    assert all(isinstance(s, LayerSplit) for s in splits)
    L = pp_job.model_config.num_layers
    for s in splits:
        assert sum(s.new_layers) == L and s.old_layers == part.layer_counts()
        assert s.new_layers[1] <= s.old_layers[1] and 0 < s.ratio <= 1
        assert s.partition.layer_counts() == s.new_layers
    # a slower node keeps no more layers and gains at least as much
    assert [s.new_layers[1] for s in splits] == sorted((s.new_layers[1] for s in splits),
                                                       reverse=True)  # fmt: skip
    assert splits[-1].new_layers[1] < splits[-1].old_layers[1] and splits[-1].ratio < 1


def test_no_layer_rebalance_without_another_stage(
    pp_job,
) -> None:
    step, part = _step(pp_job), pp_job.sim.partition
    assert "every pipeline stage" in rebalance_layers(step, part, frozenset(range(4)), 0.5)
    flat = ex.plan_training("gpt3-125m", devices=16, global_batch=128, seq=1024,
                            space=ex.training.SearchSpace(tp=(1,), pp=(1,)))  # fmt: skip
    r = ex.replan(flat, ex.Straggler(1, speed=0.5))
    lay = next(o for o in r.options if o.name == "rebalance-layers")
    assert lay.step_time_s == r.keep_step_s and lay.migration is None
    assert "one pipeline stage" in lay.note
