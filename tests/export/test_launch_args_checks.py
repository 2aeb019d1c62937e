"""megatron_args refuses what the simulator refuses (one check_layout for both, the same
reason) and launches the plan's own job: its sequence length and batch, its model."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.export import megatron_args
from explorer.export.errors import ExportError

P = ex.ParallelConfig


@pytest.mark.parametrize("par, model, why", [
    (P(tp=5), "gpt2", "tp=5 does not divide the 12 attention heads"),
    (P(dp=4, ep=2), "gpt2", "ep=2 needs a mixture-of-experts model"),
    (P(pp=16), "gpt2", "exceeds the 12 layers"),
])  # fmt: skip
def test_what_the_simulator_refuses_is_refused_with_its_reason(par, model, why):
    with pytest.raises(ex.ExplorerError, match=why) as sim:
        ex.simulate(model, par, global_batch=16, seq=1024)
    with pytest.raises(ExportError, match=why) as exp:
        megatron_args(par, model=model)
    assert str(sim.value) in str(exp.value)


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt2", devices=8, global_batch=16, seq=512)


def test_the_plans_sequence_and_batch_are_written(plan):
    args = megatron_args(plan, model="gpt2")
    assert args[args.index("--seq-length") + 1] == "512"  # gpt2's own is 1024
    assert args[args.index("--global-batch-size") + 1] == "16"


@pytest.mark.parametrize("kw, why", [
    ({"seq": 1024}, "seq=1024 is not the plan's 512"),
    ({"global_batch": 32}, "global_batch=32 is not the plan's 16"),
    ({"model": "gpt2-medium"}, "not the plan's model 'gpt2'"),
])  # fmt: skip
def test_another_job_than_the_plans_is_refused(plan, kw, why):
    with pytest.raises(ExportError, match=why):
        megatron_args(plan, **kw)


@pytest.mark.parametrize("call, why", [
    (lambda M: M.megatron_stage_layers("12", 2), "num_layers='12'"),
    (lambda M: M.megatron_stage_layers(12, 2, first="3"), "first='3'"),
    (lambda M: M.layout_stage_layers(3, 2, 12), "layout=3"),
    (lambda M: M.layout_stage_layers("Et*6|t*6L", "2", 12), "pp='2'"),
    (lambda M: M.layout_string([6, "6"]), "counts="),
    (lambda M: M.layout_string(None), "counts=None"),
    (lambda M: M.split_args(None, 2, 1, 12), "counts=None"),
    (lambda M: M.split_args([6, 6], 2, 1, 12, layout="yes"), "layout='yes'"),
])  # fmt: skip
def test_megatron_split_helpers_name_bad_arguments(call, why):
    # they raised TypeError and AttributeError on the types their signatures name
    from explorer.export import megatron_split

    with pytest.raises(ExportError, match=why):
        call(megatron_split)


def test_megatron_split_takes_numpy_ints():
    import numpy as np

    from explorer.export.megatron_split import layout_string, megatron_stage_layers

    assert megatron_stage_layers(np.int64(12), np.int64(2)) == (6, 6)
    assert layout_string([np.int64(6), np.int64(6)]) == "Et*6|t*6L"
