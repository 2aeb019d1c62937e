"""Tensor parallelism as the frameworks run it (TrainingParams.tp_layout): Megatron-LM's
column/row split pinned on a dense layer, one all-gather per block input with sequence
parallelism, the presets that use it, and the errors."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.search.errors import SearchError
from explorer.training import TrainingParams
from explorer.training.errors import TrainingParamsError
from explorer.training.step_model.stage_costs import MEGATRON_TP, stage_costs

HW = ex.hardware.load("h100-hbm2e-96g")


def _costs(model: str, tp: int, mb: int, seq: int, layout: str):
    cfg = ex.models.load(model)
    p = ex.stacks.params("torchtitan")
    return stage_costs(cfg, seq, tp, mb, HW, p.cost, p.search_method, p.fused_ops, layout)


def test_megatron_layout_pins_every_dense_contraction_to_the_column_row_split() -> None:
    c = _costs("llama3-8b", 8, 12, 2048, "megatron")
    chosen = dict(c.strategies)
    for name, strategy in chosen.items():
        key = ".".join(name.split(".")[-2:])
        assert strategy == MEGATRON_TP[key], name
    assert chosen["layers.0.attn.o"] == "k=tp" and chosen["layers.0.mlp.gate"] == "n=tp"


def test_megatron_layout_norms_run_on_a_share_of_the_sequence() -> None:
    megatron = _costs("llama3-8b", 8, 12, 2048, "megatron")
    norms = [o for o in megatron.layer.kernels if o.name.endswith("attn.norm")]
    full = 12 * 2048 * 4096 * 2  # bf16 activations of the microbatch
    assert len(norms) == 1 and norms[0].written_bytes == pytest.approx(full / 8)


def test_one_all_gather_serves_q_k_and_v() -> None:
    # Forward: all-gather before attention and MLP, reduce-scatter after them: the volume
    # of two all-reduces of the layer's output (Megatron-LM), whatever the q/k/v fan-out.
    c = _costs("llama3-8b", 8, 12, 2048, "megatron")
    mesh = ex.hardware.Mesh({"tp": 8}, hardware=HW)
    per = 12 * 2048 * 4096 * 2
    eff = ex.stacks.params("torchtitan").cost.bandwidth_efficiency  # the search's links
    two_all_reduces = 2 * mesh.collective_time("all-reduce", per, ("tp",)) / eff
    assert c.layer.tp_forward_s == pytest.approx(two_all_reduces, rel=0.05)


def test_searched_layout_may_split_the_batch_over_tp() -> None:
    # what the operator search finds cheapest for a small model at tp 8 is not the
    # frameworks' plan: no weight split on q
    searched = dict(_costs("llama3-8b", 8, 12, 2048, "searched").strategies)
    assert searched["layers.0.attn.q"] != "n=tp"


def test_no_plan_honours_the_pins_falls_back_to_the_search() -> None:
    # 12 heads of gpt2 do not split 8 ways: the search's layouts, no error
    cfg = ex.models.load("gpt2")
    p = TrainingParams()
    a = stage_costs(cfg, 256, 8, 1, HW, p.cost, p.search_method, p.fused_ops, "megatron")
    b = stage_costs(cfg, 256, 8, 1, HW, p.cost, p.search_method, p.fused_ops, "searched")
    assert a.strategies == b.strategies


def test_presets_run_megatron_tp_and_the_2021_preset_keeps_the_search() -> None:
    for name in ("megatron-core", "nemo", "torchtitan", "pytorch-fsdp"):
        assert ex.stacks.params(name).tp_layout == "megatron", name
    assert ex.stacks.params("megatron-lm-2021").tp_layout == "searched"
    assert ex.stacks.params("deepspeed").tp_layout == "searched"


def test_tp_layout_errors_name_the_value_and_the_choices() -> None:
    with pytest.raises(TrainingParamsError, match="tp_layout='rows'.*'searched'.*'megatron'"):
        TrainingParams(tp_layout="rows")
    p = TrainingParams()
    with pytest.raises(SearchError, match="layout='rows'"):
        stage_costs(ex.models.load("gpt2"), 256, 2, 1, HW, p.cost, p.search_method, (), "rows")


def test_simulate_with_the_torchtitan_preset_charges_the_tp_collectives() -> None:
    cfg = ex.models.load("llama3-8b")
    par = ex.ParallelConfig(dp=1, tp=8, microbatch_size=12, sp=True)
    meg = ex.stacks.params("torchtitan")
    sea = meg.replace(tp_layout="searched")
    a = ex.training.estimate(cfg, par, HW, global_batch=12, seq=8192, params=meg)
    b = ex.training.estimate(cfg, par, HW, global_batch=12, seq=8192, params=sea)
    tp_a = dict(a.time_by_kind)["tp-comm"]
    tp_b = dict(b.time_by_kind)["tp-comm"]
    assert tp_a > 2 * tp_b


def test_fp8_tensor_parallel_all_gathers_move_three_quarters_of_the_bytes() -> None:
    cfg = ex.models.load("llama3-8b")
    par = ex.ParallelConfig(dp=1, tp=8, microbatch_size=12, sp=True)
    fp8 = ex.stacks.params("torchtitan", precision="fp8")
    plain = fp8.replace(fp8_tp_gather=False)
    a = ex.training.estimate(cfg, par, HW, global_batch=12, seq=8192, params=fp8)
    b = ex.training.estimate(cfg, par, HW, global_batch=12, seq=8192, params=plain)
    # the layers' collectives at 3/4 (the embedding's and head's stay BF16: a little more)
    ratio = dict(a.time_by_kind)["tp-comm"] / dict(b.time_by_kind)["tp-comm"]
    assert 0.75 <= ratio < 0.76
    # torchtitan runs regular TP for torchao's rowwise recipes
    row = ex.stacks.row_params(
        "torchtitan_2025_asynctp", "torchtitan", "fp8", "float8=true; float8_recipe=rowwise"
    )
    assert not row.fp8_tp_gather
    with pytest.raises(TrainingParamsError, match="fp8_tp_gather"):
        TrainingParams(fp8_tp_gather="yes")


def test_op_level_checkpointing_gathers_the_block_inputs_again() -> None:
    cfg = ex.models.load("llama3-8b")
    par = ex.ParallelConfig(dp=1, tp=8, microbatch_size=12, sp=True, recompute="selective")
    op = ex.stacks.params("torchtitan")
    core = op.replace(selective_recompute="attention")
    a = ex.training.estimate(cfg, par, HW, global_batch=12, seq=8192, params=op)
    b = ex.training.estimate(cfg, par, HW, global_batch=12, seq=8192, params=core)
    # the backward's TP seconds grow by the forward's all-gathers (half its TP seconds)
    fwd_tp = dict(b.time_by_kind)["tp-comm"] / 2  # forward and backward alike here
    extra = dict(a.time_by_kind)["tp-comm"] - dict(b.time_by_kind)["tp-comm"]
    assert extra == pytest.approx(fwd_tp / 2, rel=0.05)
