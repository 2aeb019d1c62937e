"""The SimuMax side-by-side of bench/accuracy.py: what SimuMax is given for a row (its model,
strategy and system configs built from this project's values; SimuMax itself not needed)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

import explorer as ex

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import simumax_peer as peer  # noqa: E402


def _run(par: ex.ParallelConfig, model: str = "llama3-70b") -> ex.MeasuredRun:
    return ex.MeasuredRun(model, par, "h100-sxm", 64, 4096, step_time_s=10.0)


def test_system_config_carries_the_datasheet_and_the_template():
    sys_ = peer.system_config("h100-sxm")
    chip = ex.hardware.load("h100-sxm").chip
    assert sys_["accelerator"]["op"]["matmul"]["tflops"] == chip.peak_flops("bf16") / 1e12
    assert sys_["accelerator"]["op"]["fp8_matmul"]["tflops"] == chip.peak_flops("fp8") / 1e12
    assert sys_["accelerator"]["op"]["matmul"]["efficient_factor"] == peer.TEMPLATE["compute"]
    assert sys_["num_per_node"] == 8
    assert sys_["networks"]["inter_node"]["bandwidth"]["gbps"] == 50
    assert peer.system_config("gb200-nvl72")["num_per_node"] == 72  # one NVLink domain


def test_strategy_follows_the_layout_and_refuses_what_simumax_lacks():
    par = ex.ParallelConfig(dp=4, tp=4, pp=4, sp=True, microbatch_size=2, zero=1,
                            schedule="interleaved_1f1b", virtual_stages=2, recompute="full")  # fmt: skip
    s = peer.strategy_config(_run(par), ex.stacks.params("nemo"))
    assert (s["world_size"], s["micro_batch_num"], s["interleaving_size"]) == (64, 8, 2)
    assert s["recompute_granularity"] == "full_block" and s["recompute_layer_num"] == 20
    assert s["pp_comm_async"] is False and s["grad_reduce_in_bf16"] is True
    with pytest.raises(ValueError, match="ZeRO-3"):
        peer.strategy_config(_run(replace(par, zero=3)), ex.stacks.params("nemo"))
    odd = peer.strategy_config(_run(ex.ParallelConfig(dp=1, pp=8), "llama3-405b"),
                               ex.stacks.params("nemo"))  # fmt: skip
    assert odd["account_for_embedding_in_pipeline_split"]  # 126 + 2 layers over 8 stages


def test_model_config_is_the_dense_decoder_and_refuses_moe():
    m = peer.model_config(ex.models.load("llama3-70b"))
    assert (m["hidden_size"], m["kv_head_num"], m["intermediate_size"], m["layer_num"]) == (
        8192, 8, 28672, 80)  # fmt: skip
    assert m["use_swiglu"] and not peer.model_config(ex.models.load("gpt3-175b"))["use_swiglu"]
    with pytest.raises(ValueError, match="MoE"):
        peer.model_config(ex.models.load("deepseek-v3"))


def test_unavailable_simumax_says_why(monkeypatch):
    monkeypatch.delenv("SIMUMAX_PYTHON", raising=False)
    python, why = peer.available()
    assert python is None and "SIMUMAX_PYTHON" in why
