"""torchtitan's memory as its 2024 runs used it: the eager loss on FP32 logits
(stacks.EAGER_LOSS_ACTIVATIONS, row knob loss_compiled=false), checked against the
published peaks of torchtitan's Llama 3 8B FSDP rows."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.training import stacks
from explorer.training.calibration.fit import predict
from explorer.training.calibration.published import measured_params, published_runs


def test_an_eager_loss_keeps_ten_bytes_per_logit() -> None:
    eager = stacks.row_params("torchtitan_2024_h100", "torchtitan", "bf16", "loss_compiled=false")
    assert eager.activations.head_bytes == 10.0
    off = stacks.row_params("torchtitan_2024_h100", "torchtitan", "bf16", "compile=false")
    assert off.activations == stacks.EAGER_LOSS_ACTIVATIONS
    compiled = stacks.row_params("torchtitan_2025_h200", "torchtitan", "fp8", "compile=true")
    assert compiled.activations.head_bytes == ex.TrainingParams().activations.head_bytes


def test_the_eager_loss_adds_the_fp32_logits_to_the_peak() -> None:
    cfg = ex.models.load("llama3-8b")
    hw = ex.hardware.load("h100-hbm2e-96g")
    par = ex.ParallelConfig(dp=8, microbatch_size=2, zero=3, recompute="selective")
    base = stacks.params("torchtitan")
    a = ex.training.estimate(cfg, par, hw, global_batch=16, seq=8192, params=base)
    b = ex.training.estimate(
        cfg, par, hw, global_batch=16, seq=8192,
        params=base.replace(activations=stacks.EAGER_LOSS_ACTIVATIONS),
    )  # fmt: skip
    # 6 more bytes per logit of the microbatch: 2 x 8192 tokens x 128256 vocabulary
    extra = 6 * 2 * 8192 * (cfg.vocab_size + cfg.hidden_size)
    assert b.memory.activations - a.memory.activations == pytest.approx(extra, rel=0.01)


def test_llama3_8b_fsdp_peaks_within_ten_percent_of_torchtitans_table() -> None:
    rows = [
        r for r in published_runs("torchtitan_2024_h100", skipped=[])
        if r.model_name == "llama3-8b" and r.config.cp == 1 and r.memory_bytes
        and r.config.microbatch_size == 2
    ]  # fmt: skip
    assert len(rows) == 6
    for r in rows:
        sim = predict(r, measured_params(r))
        assert sim.memory.total / r.memory_bytes - 1 == pytest.approx(0.0, abs=0.10), r.label


def test_eager_norms_and_rotary_embeddings_move_their_fp32_passes() -> None:
    from explorer.training.step_model.kernels import memory_s, part_times
    from explorer.training.step_model.stage_costs import stage_costs

    eager = stacks.row_params("torchtitan_2024_h100", "torchtitan", "bf16", "compile=false")
    assert (eager.eager_norm_bytes_ratio, eager.eager_rope_bytes_ratio) == (
        stacks.EAGER_NORM_ROPE_RATIOS
    )
    compiled = stacks.row_params("torchtitan_2024_h100", "torchtitan", "bf16", "compile=true")
    assert compiled.eager_norm_bytes_ratio == 1.0
    hw = ex.hardware.load("h100-hbm2e-96g")
    cfg = ex.models.load("llama3-8b")
    c = stage_costs(cfg, 2048, 1, 1, hw, eager.cost, eager.search_method, eager.fused_ops)
    a = part_times(c.layer.kernels, hw.chip, compiled.replace(fused_ops=eager.fused_ops)
                   .resolved(hw.chip))  # fmt: skip
    b = part_times(c.layer.kernels, hw.chip, eager.resolved(hw.chip))
    p = eager.resolved(hw.chip)
    extra = 0.0
    for o in c.layer.kernels:
        short = o.name.split(".")[-1]
        r = 9.0 if short.endswith("norm") else 5.0 if short.endswith("_rope") else 1.0
        n = o.read_bytes + o.written_bytes
        extra += memory_s(r * n, hw.chip, p) - memory_s(n, hw.chip, p)
    assert extra > 0
    assert b.forward_s - a.forward_s == pytest.approx(extra, rel=1e-6)
