"""Megatron-LM and DeepSpeed launch arguments, golden."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.export import (
    ExportError,
    deepspeed_args,
    deepspeed_config,
    launch_command,
    megatron_args,
)

GPT3 = ex.ParallelConfig(dp=8, tp=8, pp=16, sp=True, microbatch_size=1,
                         schedule="interleaved_1f1b", zero=1, recompute="full")  # fmt: skip


def test_megatron_args_gpt3_golden():
    got = " ".join(megatron_args(GPT3, model="gpt3-175b", global_batch=1536, seq=2048))
    assert got == (
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --sequence-parallel "
        "--num-layers-per-virtual-pipeline-stage 3 --micro-batch-size 1 --global-batch-size 1536 "
        "--use-distributed-optimizer --recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1 --num-layers 96 --hidden-size 12288 --num-attention-heads 96 "
        "--ffn-hidden-size 49152 --seq-length 2048 --max-position-embeddings 2048 --bf16"
    )


def test_megatron_args_llama_zero3_per_layer():
    c = ex.ParallelConfig(dp=4, tp=2, zero=3, recompute="per_layer", recompute_num_layers=4,
                          ep=1, microbatch_size=2)  # fmt: skip
    got = megatron_args(c, model="llama2-7b")
    assert " ".join(got[:4]) == "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1"
    assert "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params" in " ".join(
        got
    )
    assert "--recompute-method block --recompute-num-layers 4" in " ".join(got)
    assert {"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear"} <= set(
        got
    )
    assert got[got.index("--normalization") + 1] == "RMSNorm"


def test_training_plan_config_is_accepted():
    class Plan:  # a TrainingPlan carries its ParallelConfig as .config
        config = ex.ParallelConfig(dp=2, tp=4)

    assert megatron_args(Plan())[:2] == ("--tensor-model-parallel-size", "4")


def test_deepspeed_golden():
    c = ex.ParallelConfig(dp=8, tp=4, zero=2, microbatch_size=2, recompute="selective")
    assert deepspeed_config(c, global_batch=64) == {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "zero_optimization": {"stage": 2},
        "bf16": {"enabled": True},
        "activation_checkpointing": {"partition_activations": True,
                                     "contiguous_memory_optimization": False},
    }  # fmt: skip
    assert " ".join(deepspeed_args(c)) == (
        "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 1 --no-pipeline-parallel "
        "--micro-batch-size 2 --zero-stage 2 --deepspeed --deepspeed_config ds_config.json "
        "--deepspeed-activation-checkpointing --checkpoint-activations"
    )


def test_launch_command():
    assert launch_command(ex.ParallelConfig(dp=2, tp=8), nodes=2) == (
        "torchrun --nnodes=2 --nproc_per_node=8 pretrain_gpt.py --tensor-model-parallel-size 8 "
        "--pipeline-model-parallel-size 1 --micro-batch-size 1"
    )


def test_errors_name_the_fix():
    with pytest.raises(ExportError, match="no GPipe"):
        megatron_args(ex.ParallelConfig(pp=4, schedule="gpipe"))
    with pytest.raises(ExportError, match="needs model="):
        megatron_args(ex.ParallelConfig(pp=4, schedule="interleaved_1f1b"))
    with pytest.raises(ExportError, match="ZeRO 0 or 1"):
        deepspeed_config(ex.ParallelConfig(dp=2, pp=2, zero=3), global_batch=8)
    with pytest.raises(ExportError, match="ParallelConfig or a TrainingPlan"):
        megatron_args({"tp": 2})


@pytest.mark.parametrize("exchange, kind", [("all_gather", "allgather"), ("ring", "p2p")])
def test_megatron_args_context_parallel(exchange, kind):
    # Llama 3 405B at 128K (Table 4): TP8 CP16 PP16 DP8
    c = ex.ParallelConfig(dp=8, tp=8, pp=16, cp=16, sp=True, cp_kv_exchange=exchange)
    got = " ".join(megatron_args(c))
    assert f"--context-parallel-size 16 --cp-comm-type {kind}" in got
    assert "context-parallel" not in " ".join(
        megatron_args(c.replace(cp=1, cp_kv_exchange="all_gather"))
    )
