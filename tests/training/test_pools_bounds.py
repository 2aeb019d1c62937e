"""Pools at scale: the pipeline search counts its tensor-parallel layouts before walking
them, and the reasons a plan over many pools fails are true."""

from __future__ import annotations

import time

import pytest

import explorer as ex
from explorer.training.errors import TrainingPlanError
from explorer.training.hetero.data import _unit
from explorer.training.hetero.plan import (
    MAX_PIPELINE_STRUCTURES,
    _tp_tuples,
    _tuple_counts,
)
from explorer.training.hetero.pools import Pool


def test_the_count_is_the_number_of_tuples_walked():
    per_pool = [(1, 2, 4), (1, 2), (1, 2, 4, 8)]
    stages = [[8 // t for t in ts] for ts in per_pool]
    for layers in (3, 6, 12, 30):
        walked = list(_tp_tuples(per_pool, stages, layers))
        assert len(walked) == _tuple_counts(stages, layers)[0][0]
        assert all(sum(8 // t for t in tps) <= layers for tps in walked)


def test_a_thousand_pools_finish_with_the_true_reasons():
    pools = [Pool("a100-80g", 8, name=f"p{i}") for i in range(1000)]
    t0 = time.process_time()
    with pytest.raises(TrainingPlanError) as e:
        ex.plan_training("gpt2", pools=pools, global_batch=8000, seq=512)
    assert time.process_time() - t0 < 60  # the product over 1000 pools never finished
    text = str(e.value)
    assert "1000 pools (8000 x a100-80g)" in text
    assert "1000 pools need at least 1000 stages, more than 'gpt2''s 12 layers" in text
    assert "at most 64 equal shares of 125 sequences" in text and "divisible by 1024" in text


def test_more_pools_than_the_default_units_still_split_the_batch():
    # 320 sequences over 40 pools: 64 shares of 5 (it was refused: "fewer sequences than pools")
    assert _unit(320, 40) == 5
    pools = [Pool("a100-80g", 8, name=f"p{i}") for i in range(40)]
    plan = ex.plan_training("gpt2", pools=pools, global_batch=320, seq=512)
    assert plan.mode == "data" and sum(a.sequences for a in plan.assignments) == 320


def test_too_many_layouts_are_refused_with_the_limit_and_the_fix():
    pools = [Pool("a100-80g", 8, name=f"p{i}") for i in range(30)]
    with pytest.raises(TrainingPlanError, match=rf"more than the {MAX_PIPELINE_STRUCTURES:,}"):
        ex.plan_training("gpt3-175b", pools=pools, global_batch=240, seq=2048)


def test_one_pool_is_the_same_job_as_devices():
    one = ex.plan_training("gpt3-1.3b", pools=[Pool("a100-80g", 16)], global_batch=64,
                           seq=2048)  # fmt: skip
    flat = ex.plan_training("gpt3-1.3b", devices=16, global_batch=64, seq=2048)
    assert one.step_time_s == pytest.approx(flat.sim.step_time_s, rel=1e-12)
    assert one.assignments[0].config == flat.config
