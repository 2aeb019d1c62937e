"""Training stacks as data (`explorer.training.stacks`) and the physics their presets need:
fused attention with per-chip efficiencies, FSDP's per-block gathers, communication overlap,
FP8 as a training choice (issue 24)."""

from __future__ import annotations

import dataclasses

import pytest

import explorer as ex
from explorer.hardware import Chip
from explorer.hardware.chip import EFFICIENCY_FACTS
from explorer.models import ModelConfigError
from explorer.training import TrainingParamsError, stacks
from explorer.training.calibration.published import load_published, row_space
from explorer.training.errors import CalibrationError

GPT = "gpt3-1.3b"


def test_presets_named_and_sourced():
    assert stacks.names()[:3] == ("megatron-core", "nemo", "torchtitan")
    for name in ("megatron-core", "torchtitan", "pytorch-fsdp", "deepspeed", "megatron-lm-2021"):
        s = stacks.get(name)
        assert s.values, name
        for field, _ in s.values:
            assert s.source(field).strip(), (name, field)
        assert name in s.table()
    assert stacks.get(stacks.get("nemo")) is stacks.get("nemo")


def test_megatron_lm_2021_is_todays_defaults():
    assert stacks.params("megatron-lm-2021") == ex.TrainingParams()
    assert stacks.params("deepspeed") == ex.TrainingParams()  # today's per-tensor ZeRO-3


def test_unknown_stack_lists_names():
    with pytest.raises(TrainingParamsError, match="megatron-core, nemo, torchtitan"):
        stacks.get("megatron")
    with pytest.raises(TrainingParamsError, match="expected a Stack"):
        ex.simulate(GPT, ex.ParallelConfig(dp=8), "a100-80g", 64, 2048, stack=3)


def test_stack_refuses_unknown_field_and_missing_source():
    with pytest.raises(TrainingParamsError, match="not a TrainingParams field"):
        ex.Stack("x", "y", {"flash": True}, {"flash": "assumption"})
    with pytest.raises(TrainingParamsError, match="has no source"):
        ex.Stack("x", "y", {"flash_attention": True}, {})
    with pytest.raises(TrainingParamsError, match="expected a finite number"):
        ex.Stack("x", "y", {"hbm_efficiency": 2.0}, {"hbm_efficiency": "assumption"})


def test_params_and_stack_together_refused():
    par = ex.ParallelConfig(dp=8)
    with pytest.raises(TrainingParamsError, match="give one of the two"):
        ex.simulate(GPT, par, "a100-80g", 64, 2048, params=ex.TrainingParams(), stack="nemo")
    with pytest.raises(TrainingParamsError, match="give one of the two"):
        ex.plan_training(GPT, 8, "a100-80g", 64, 2048, ex.TrainingParams(), stack="nemo")
    run = ex.MeasuredRun(GPT, par, "a100-80g", 64, 2048, 1.0)
    with pytest.raises(CalibrationError, match="give one of the two"):
        ex.calibrate([run], params=ex.TrainingParams(), stack="nemo", loo=False)


def test_default_is_the_default_stack():
    assert stacks.DEFAULT_STACK == "megatron-core"  # a current stack, not the 2021 values
    par = ex.ParallelConfig(dp=4, tp=2, microbatch_size=2)
    default = ex.estimate(GPT, par, "h100-sxm", 64, 2048)
    named = ex.estimate(GPT, par, "h100-sxm", 64, 2048, stack=stacks.DEFAULT_STACK)
    assert default.step_time_s == named.step_time_s


def test_megatron_core_is_faster_than_2021():
    par = ex.ParallelConfig(dp=4, tp=2, microbatch_size=2)
    core = ex.estimate(GPT, par, "h100-sxm", 64, 2048, stack="megatron-core")
    old = ex.estimate(GPT, par, "h100-sxm", 64, 2048, stack="megatron-lm-2021")
    plain = ex.estimate(GPT, par, "h100-sxm", 64, 2048, ex.TrainingParams())
    assert old.step_time_s == plain.step_time_s
    assert core.step_time_s < old.step_time_s  # fused attention, overlap, H100 GEMMs
    assert core.memory.activations < old.memory.activations  # no s x s scores kept


def test_dataset_stacks_name_presets():
    assert stacks.DATASET_STACKS["megatron_2021_table1"] == "megatron-lm-2021"
    assert stacks.DATASET_STACKS["llama3_2024_table4"] == "megatron-lm-2021"
    for name in (*stacks.DATASET_STACKS.values(), *stacks.FRAMEWORK_STACKS.values()):
        stacks.get(name)
    p = stacks.row_params("torchtitan_2025_asynctp", "torchtitan", "fp8", "async_tp=true")
    assert (p.tp_comm_overlap_fraction, p.precision) == (stacks.TP_COMM_OVERLAP_ON, "fp8")
    assert stacks.row_params("mtnlg_2022") == ex.TrainingParams()
    with pytest.raises(TrainingParamsError, match="no stack for dataset"):
        stacks.row_params("nowhere")


def test_old_table_reproduces_under_its_stack():
    """Narayanan et al. 2021 Table 1's first row with the megatron-lm-2021 stack, as
    bench/training.py runs it (all ten within 5% there)."""
    run = load_published()[0]
    plan = ex.plan_training(
        run.model, run.gpus, run.hardware, run.global_batch, run.seq, space=row_space(run),
        stack=stacks.DATASET_STACKS["megatron_2021_table1"], top_k=1, simulate_top=1,
    )  # fmt: skip
    cfg = ex.models.load(run.model)
    flops = ex.training.megatron_flops_per_iteration(cfg, run.global_batch, run.seq)
    tflops = flops / plan.sim.step_time_s / run.gpus / 1e12
    assert tflops == pytest.approx(run.achieved_tflops_per_gpu, rel=0.06)


# --- per-chip efficiencies -------------------------------------------------------------------
def test_chip_efficiencies_filled_and_checked():
    for name in ("a100-80g", "h100-sxm", "h100-hbm2e-96g", "h200", "b200", "mi300x", "tpu-v5p"):
        chip = ex.hardware.load(name).chip
        assert 0 < chip.matmul_efficiency <= 1 and 0 < chip.attention_efficiency <= 1
        assert chip.efficiency_source
    assert "FlashAttention-2" in EFFICIENCY_FACTS["NVIDIA A100 SXM4 80GB"][2]
    toy = Chip("toy", {"bf16": 1e12}, 2**30, 1e11)
    assert "assumption" in toy.efficiency_source
    with pytest.raises(ex.hardware.HardwareError, match="matmul_efficiency=1.5"):
        Chip("toy", {"bf16": 1e12}, 2**30, 1e11, matmul_efficiency=1.5)


def test_grand_teton_h100_profile():
    cl = ex.hardware.load("h100-hbm2e-96g")
    assert cl.chip.memory_bytes == 96 * 2**30
    assert cl.chip.memory_bandwidth_bytes_per_s == pytest.approx(2.4e12)
    assert cl.chip.compute_units == 132


def test_auto_knobs_use_the_chip():
    par = ex.ParallelConfig(dp=8)
    auto = stacks.params("megatron-core")
    assert auto.matmul_efficiency_cap is None and auto.flash_attention_efficiency is None
    chip = ex.hardware.load("h100-sxm").chip
    fixed = auto.resolved(chip)
    assert fixed.matmul_efficiency_cap == chip.matmul_efficiency
    a = ex.estimate(GPT, par, "h100-sxm", 64, 2048, auto)
    b = ex.estimate(GPT, par, "h100-sxm", 64, 2048, fixed)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert "auto (chip.matmul_efficiency)" in ex.training.params.knob_table(auto)


# --- FSDP's per-block gathers, overlap ---------------------------------------------------------
def test_block_gathers_pay_one_latency_per_layer():
    par = ex.ParallelConfig(dp=256, zero=3, microbatch_size=1)
    base = stacks.params("megatron-lm-2021")
    tensor = ex.estimate("llama2-7b", par, "h100-sxm", 256, 4096, base)
    block = ex.estimate(
        "llama2-7b", par, "h100-sxm", 256, 4096, base.replace(zero3_gather_granularity="block")
    )
    assert block.step_time_s < tensor.step_time_s
    with pytest.raises(TrainingParamsError, match="zero3_gather_granularity='flat'"):
        ex.TrainingParams(zero3_gather_granularity="flat")


def test_tp_comm_overlap_hides_tensor_parallel_collectives():
    par = ex.ParallelConfig(dp=1, tp=8, sp=True, microbatch_size=1)
    off = ex.estimate(GPT, par, "h100-sxm", 8, 2048, stack="megatron-core")
    on = ex.estimate(
        GPT, par, "h100-sxm", 8, 2048,
        stacks.params("megatron-core", tp_comm_overlap_fraction=stacks.TP_COMM_OVERLAP_ON,
                      loss_forward_bytes_per_logit=0.0, loss_backward_bytes_per_logit=0.0),
    )  # fmt: skip
    nemo = ex.estimate(GPT, par, "h100-sxm", 8, 2048, stack="nemo")  # + the fused loss
    assert on.step_time_s < off.step_time_s
    assert nemo.step_time_s == on.step_time_s
    assert dict(on.comm_bytes)["tp"] == dict(off.comm_bytes)["tp"]  # same bytes, hidden


def test_param_gather_overlap_hides_zero1_gather():
    par = ex.ParallelConfig(dp=64, zero=1, microbatch_size=1)
    base = stacks.params("megatron-lm-2021", grad_overlap_fraction=1.0)
    off = ex.estimate(GPT, par, "a100-80g", 64, 2048, base)
    on = ex.estimate(GPT, par, "a100-80g", 64, 2048, base.replace(param_gather_overlap_fraction=1))
    assert on.step_time_s < off.step_time_s


# --- precision ---------------------------------------------------------------------------
def test_fp8_is_a_training_choice():
    with pytest.raises(ModelConfigError, match="precision='fp8'"):
        dataclasses.replace(ex.models.load(GPT), dtype="fp8")
    par = ex.ParallelConfig(dp=8, microbatch_size=2)
    bf16 = ex.estimate(GPT, par, "h100-sxm", 64, 2048, stack="megatron-core")
    fp8 = ex.estimate(
        GPT, par, "h100-sxm", 64, 2048, stacks.params("megatron-core", precision="fp8")
    )
    assert fp8.step_time_s < bf16.step_time_s
    assert fp8.memory.parameters == bf16.memory.parameters  # weights stay BF16
    with pytest.raises(TrainingParamsError, match="no FP8 tensor cores"):
        ex.estimate(GPT, par, "a100-80g", 64, 2048, stacks.params("megatron-core", precision="fp8"))
    with pytest.raises(TrainingParamsError, match="precision='int4'"):
        ex.TrainingParams(precision="int4")


def test_fp8_weight_gather_halves_zero3_gather_bytes():
    par = ex.ParallelConfig(dp=16, zero=3, microbatch_size=1)
    p = stacks.params("torchtitan", precision="fp8")
    plain = ex.estimate(GPT, par, "h100-sxm", 16, 2048, p)
    fp8 = ex.estimate(GPT, par, "h100-sxm", 16, 2048, p.replace(fp8_weight_gather=True))
    assert dict(fp8.comm_bytes)["zero"] == pytest.approx(dict(plain.comm_bytes)["zero"] / 2)


# --- torchtitan's op-level selective checkpointing, torch.compile's fusions --------------------
def test_op_level_selective_recompute_sits_between_none_and_full():
    p = stacks.params("torchtitan")
    assert p.selective_recompute == "op"
    sims = {
        rec: ex.estimate(GPT, ex.ParallelConfig(dp=8, recompute=rec), "h100-sxm", 16, 2048, p)
        for rec in ("none", "selective", "full")
    }
    act = {k: v.memory.activations for k, v in sims.items()}
    step = {k: v.step_time_s for k, v in sims.items()}
    assert act["full"] < act["selective"] < act["none"]
    assert step["none"] < step["selective"] < step["full"]
    with pytest.raises(TrainingParamsError, match="selective_recompute='layer'"):
        ex.TrainingParams(selective_recompute="layer")


def test_compile_switch_fuses_pointwise_ops():
    on = stacks.row_params("torchtitan_2024_h100", "torchtitan", "bf16", "compile=true")
    off = stacks.row_params("torchtitan_2024_h100", "torchtitan", "bf16", "compile=false")
    assert set(off.fused_ops) < set(on.fused_ops) == set(stacks.COMPILE_FUSED_OPS)
    par = ex.ParallelConfig(dp=8, zero=3, microbatch_size=2)
    fast = ex.estimate("llama3-8b", par, "h100-sxm", 16, 2048, on)
    slow = ex.estimate("llama3-8b", par, "h100-sxm", 16, 2048, off)
    assert fast.step_time_s < slow.step_time_s


def test_optimizer_state_dtype_knob_sizes_the_optimizer_states():
    # NeMo's distributed_fused_adam with optim.dtype bf16 keeps Adam's two moments in BF16
    # and no master copy: 4 bytes per parameter instead of 12, sharded by ZeRO-1 alike
    bf16 = stacks.row_params("dgxc_2411_h100", "nemo", "bf16", "optim_dtype=bf16 (yaml)")
    plain = stacks.row_params("dgxc_2411_h100", "nemo", "bf16", "")
    assert (bf16.state.optimizer_bytes, plain.state.optimizer_bytes) == (4.0, 12.0)
    par = ex.ParallelConfig(dp=2, tp=8, pp=8, microbatch_size=1, zero=1)
    small = ex.estimate("nemotron4-340b", par, "h100-sxm", 32, 4096, bf16).memory
    big = ex.estimate("nemotron4-340b", par, "h100-sxm", 32, 4096, plain).memory
    assert small.optimizer_states == pytest.approx(big.optimizer_states / 3)
    assert small.parameters == big.parameters and small.gradients == big.gradients


def test_fp8_saved_inputs_keep_one_byte_gemm_inputs():
    # Transformer Engine keeps the FP8 copies of the GEMM inputs for the weight gradient:
    # a Llama 3 405B layer keeps (6, 21.5) bytes per token over h instead of (8, 23.75)
    par = ex.ParallelConfig(dp=2, tp=4, pp=16, sp=True, microbatch_size=1, zero=1)
    base = ex.stacks.params("megatron-core")
    assert base.fp8_saved_inputs and not ex.TrainingParams().fp8_saved_inputs

    def act(**kw):
        p = base.replace(**kw)
        return ex.estimate("llama3-405b", par, "gb200-nvl72", 64, 8192, p).memory.activations

    fp8, fp8_bf16_copies = act(precision="fp8"), act(precision="fp8", fp8_saved_inputs=False)
    assert fp8 / fp8_bf16_copies == pytest.approx((6 + 21.5) / (8 + 23.75), rel=0.02)
    assert act(precision="bf16") == act(precision="bf16", fp8_saved_inputs=False)


def test_rowwise_fp8_recipe_slows_fp8_gemms_only():
    knobs = "compile=true; float8=true; float8_recipe=rowwise"
    row = stacks.row_params("torchtitan_2025_asynctp", "torchtitan", "fp8", knobs)
    plain = stacks.row_params("torchtitan_2025_asynctp", "torchtitan", "fp8", "float8=true")
    assert row.fp8_scaling_matmul_ratio == stacks.FP8_ROWWISE_MATMUL_RATIO < 1.0
    assert plain.fp8_scaling_matmul_ratio == 1.0
    par = ex.ParallelConfig(dp=8, tp=8, sp=True, zero=3, microbatch_size=2)
    fp8 = [ex.estimate("llama3-8b", par, "h100-sxm", 16, 4096, p).step_time_s for p in (row, plain)]
    assert fp8[0] > fp8[1]
    bf16 = [p.replace(precision="bf16") for p in (row, plain)]
    t = [ex.estimate("llama3-8b", par, "h100-sxm", 16, 4096, p).step_time_s for p in bf16]
    assert t[0] == t[1]
    with pytest.raises(TrainingParamsError):
        ex.TrainingParams(fp8_scaling_matmul_ratio=0.0)


# --- MaxText's remat_policy=custom: the named tensors it saves ---------------------------------
def test_named_remat_fractions_count_flops_and_bytes_of_the_saved_tensors():
    cfg = ex.models.load("llama2-70b")  # hidden 8192, 64 heads (8 kv), ffn 28672, SwiGLU
    h, q, kv, f, s = 8192, 8192, 1024, 28672, 4096
    flops = {"q": 2 * h * q, "kv": 2 * 2 * h * kv, "o": 2 * q * h, "wi": 2 * 2 * h * f,
             "wo": 2 * f * h, "ctx": 2 * s * q}  # fmt: skip
    elements = q + 2 * kv + h + 2 * f + h + q + 4 * h + f  # outputs, norms, SwiGLU out
    t, b = stacks.named_remat_fractions(cfg, s, ("qkv_proj", "out_proj", "mlpwo"))
    assert t == pytest.approx((flops["q"] + flops["kv"] + flops["o"] + flops["wo"])
                              / sum(flops.values()))  # fmt: skip
    assert b == pytest.approx((q + 2 * kv + h + h) / elements)
    # saving more tensors keeps more; the three projections equal qkv_proj
    t2, b2 = stacks.named_remat_fractions(cfg, s, ("query_proj", "key_proj", "value_proj"))
    t3, _ = stacks.named_remat_fractions(cfg, s, ("qkv_proj",))
    assert t2 == pytest.approx(t3) and t2 < t and b2 < b
    with pytest.raises(TrainingParamsError, match="'mlp_up'.*REMAT_NAMES"):
        stacks.named_remat_fractions(cfg, s, ("mlp_up",))


def test_remat_saved_knob_recomputes_between_none_and_full():
    cfg = ex.models.load("llama2-70b")
    knob = "remat_saved=query_proj+key_proj+value_proj+qkv_proj+out_proj+mlpwo"
    p = stacks.row_params("dgxc_2411_h100", "maxtext", "bf16", knob, cfg, 4096)
    t, b = stacks.named_remat_fractions(cfg, 4096, ("qkv_proj", "out_proj", "mlpwo"))
    assert p.selective_recompute == "op"
    assert (p.op_recompute_saved_fraction, p.op_recompute_saved_bytes) == (t, b)
    # without the model the knob cannot be sized and leaves the preset alone
    assert stacks.row_params("dgxc_2411_h100", "maxtext", "bf16", knob) == stacks.params("maxtext")
    par = {r: ex.ParallelConfig(dp=64, zero=3, microbatch_size=2, recompute=r)
           for r in ("none", "selective", "full")}  # fmt: skip
    sims = {r: ex.estimate(cfg, c, "h100-sxm", 128, 4096, p) for r, c in par.items()}
    act = {r: v.memory.activations for r, v in sims.items()}
    step = {r: v.step_time_s for r, v in sims.items()}
    assert act["full"] < act["selective"] < act["none"]
    assert step["none"] < step["selective"] < step["full"]
    # the bytes share, not the time share, sizes the kept activations
    full, none = act["full"], act["none"]
    assert (act["selective"] - full) / (none - full) == pytest.approx(b, rel=1e-6)


# --- Megatron-Core's per-local-expert host cost ------------------------------------------------
def test_moe_expert_overhead_is_paid_per_local_expert_each_way_per_microbatch():
    cfg = ex.models.load("qwen3-30b-a3b")  # 48 MoE layers of 128 experts
    moe_layers = sum(cfg.layer_is_moe(i) for i in range(cfg.num_layers))
    base = stacks.params("nemo", moe_expert_overhead_s=0.0, moe_layer_overhead_s=0.0)
    assert stacks.params("nemo").moe_expert_overhead_s > 0
    for ep in (8, 16):
        par = ex.ParallelConfig(dp=16, ep=ep, microbatch_size=1, zero=1)
        t0 = ex.estimate(cfg, par, "h100-sxm", 64, 4096, base).step_time_s
        on = base.replace(moe_expert_overhead_s=1e-4)
        t1 = ex.estimate(cfg, par, "h100-sxm", 64, 4096, on).step_time_s
        # 4 microbatches, forward and backward, num_experts / ep local experts per layer
        assert t1 - t0 == pytest.approx(2 * 4 * moe_layers * 1e-4 * 128 / ep, rel=0.05)
    dense = ex.estimate("llama3-8b", ex.ParallelConfig(dp=8), "h100-sxm", 16, 4096, base)
    dense_on = ex.estimate("llama3-8b", ex.ParallelConfig(dp=8), "h100-sxm", 16, 4096, on)
    assert dense.step_time_s == dense_on.step_time_s
