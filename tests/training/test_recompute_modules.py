"""Megatron-Core's selective recompute by module (TrainingParams.recompute_modules) and the
FP8 GEMM inputs a MoE / MLA layer keeps in one byte (memory.inner_bytes_per_token)."""

import dataclasses

import pytest

import explorer as ex
from explorer.training import TrainingParams
from explorer.training.errors import TrainingParamsError
from explorer.training.memory import inner_bytes_per_token
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.terms import recompute

# DeepSeek-V3 on B200 as Megatron-Bridge's B200 MXFP8 preset lays it out
PAR = ex.ParallelConfig(
    dp=32, tp=1, pp=8, ep=32, etp=1, microbatch_size=1, recompute="selective",
    schedule="interleaved_1f1b", virtual_stages=2,
)  # fmt: skip
SEQ = 4096


def _model(**kw) -> StepModel:
    p = dataclasses.replace(ex.stacks.params("megatron-core"), precision="fp8", **kw)
    return StepModel(ex.models.load("deepseek-v3"), PAR, ex.hardware.load("b200"), 4096, SEQ, p)


def test_row_knob_keeps_the_modules_the_model_counts():
    p = ex.stacks.row_params(
        "megatron_bridge_2604", "megatron-bridge", "fp8", "recompute_modules=mla_up_proj+mlp (x)"
    )
    assert p.recompute_modules == ("mla_up_proj",)
    with pytest.raises(TrainingParamsError, match="recompute_modules"):
        TrainingParams(recompute_modules=("attention",))
    with pytest.raises(TrainingParamsError, match="recompute_modules"):
        TrainingParams(recompute_modules="mla_up_proj")


def test_mla_up_proj_drops_q_k_v_and_recomputes_the_up_projections():
    plain, mla = _model(), _model(recompute_modules=("mla_up_proj",))
    # Q and K: 128 heads x (128 + 64), V: 128 x 128, in BF16, per token
    per_token = 2 * 128 * (2 * 192 + 128)
    assert recompute.module_bytes_per_token(mla.cfg, "mla_up_proj") == (per_token, 0.0)
    assert plain.layer_act("none") - mla.layer_act("selective") == pytest.approx(SEQ * per_token)
    # the up-projections' FLOPs: q_b 1536 -> 128 x 192, kv_b 512 -> 128 x (128 + 128)
    flops = 2 * SEQ * 128 * (1536 * 192 + 512 * 256)
    L = mla.costs.layer
    assert recompute.selective_s(mla) == pytest.approx(L.forward_s * flops / L.flops)
    assert 0 < recompute.selective_s(mla) < 0.2 * L.forward_s


def test_moe_act_is_memory_bound():
    m = _model(recompute_modules=("moe_act",))
    out = SEQ * 2 * 8 * 2048  # top-8 experts' SwiGLU outputs of 2048, BF16
    assert m.layer_act("none") - m.layer_act("selective") == pytest.approx(out)
    bw = m.cluster.chip.memory_bandwidth_bytes_per_s * m.tparams.hbm_efficiency
    assert recompute.selective_s(m) == pytest.approx(3 * out / bw)


def test_fp8_moe_layers_keep_their_gemm_inputs_in_one_byte():
    cfg = ex.models.load("deepseek-v3")
    # BF16, counted by hand: MLA 2n(2qk + 2v) + 4 (q_lora + kv_lora) + 2 d_rope; router 8 E;
    # routed k (4h + 6 f); shared 6 f
    bf16 = 2 * 128 * (384 + 256) + 4 * 2048 + 128 + 8 * 256 + 8 * (4 * 7168 + 6 * 2048) + 6 * 2048
    assert inner_bytes_per_token(cfg) == bf16
    # FP8: latents' norm outputs, routed copies in, the down GEMMs' inputs in one byte; the
    # output projection's FP8 copy of O beside the BF16 one
    fp8 = bf16 - 2048 - 8 * (7168 + 2048) - 2048 + 128 * 128
    assert inner_bytes_per_token(cfg, gemm_input_bytes=1.0) == fp8
    kept = _model().layer_act("none")
    bf = StepModel(cfg, PAR, ex.hardware.load("b200"), 4096, SEQ, ex.stacks.params("megatron-core"))
    assert kept < bf.layer_act("none")
