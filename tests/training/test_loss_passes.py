"""Megatron-Core's unfused cross-entropy (TrainingParams.loss_forward_bytes_per_logit /
loss_backward_bytes_per_logit, stacks.UNFUSED_CE_BYTES): its FP32 passes over the logits
priced by the kernel model; the NeMo preset's fused loss; the row knob."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.training import TrainingParams, stacks
from explorer.training.errors import TrainingParamsError
from explorer.training.step_model.kernels import part_times
from explorer.training.step_model.stage_costs import stage_costs

HW = ex.hardware.load("h100-sxm")


def _head(p: TrainingParams):
    cfg = ex.models.load("megatron2024-1.7b")
    c = stage_costs(cfg, 4096, 1, 4, HW, p.cost, p.search_method, p.fused_ops, p.tp_layout)
    return c.head, part_times(c.head.kernels, HW.chip, p.resolved(HW.chip))


def test_the_unfused_loss_moves_its_bytes_per_logit_over_hbm() -> None:
    fused = stacks.params("megatron-core", loss_forward_bytes_per_logit=0.0,
                          loss_backward_bytes_per_logit=0.0)  # fmt: skip
    unfused = stacks.params("megatron-core")
    head, a = _head(fused)
    _, b = _head(unfused)
    logits = 4 * 4096 * 131072  # microbatch 4 x 4096 tokens x the vocabulary
    bw = HW.chip.memory_bandwidth_bytes_per_s * unfused.hbm_efficiency
    loss = next(o for o in head.kernels if o.name.endswith("token_loss"))
    fused_f = (loss.read_bytes + loss.written_bytes) / bw
    assert b.forward_s - a.forward_s == pytest.approx(logits * 38 / bw - fused_f, rel=1e-3)
    assert b.backward_s > a.backward_s


def test_presets_and_row_knob() -> None:
    assert stacks.params("megatron-core").loss_forward_bytes_per_logit == stacks.UNFUSED_CE_BYTES[0]
    assert stacks.params("nemo").loss_forward_bytes_per_logit == 0.0
    assert TrainingParams().loss_forward_bytes_per_logit == 0.0  # the 2021 tables: unchanged
    p = stacks.row_params("nemo_2024_h100", "nemo", "fp8", "loss_fusion=false")
    assert (p.loss_forward_bytes_per_logit, p.loss_backward_bytes_per_logit) == (
        stacks.UNFUSED_CE_BYTES
    )


def test_a_negative_byte_count_is_refused() -> None:
    with pytest.raises(TrainingParamsError, match="loss_forward_bytes_per_logit"):
        TrainingParams(loss_forward_bytes_per_logit=-1.0)
