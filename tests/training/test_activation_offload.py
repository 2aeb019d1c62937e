"""Activation offload to host memory (TrainingParams.activation_offload_layers: Megatron-Core's
cpu_offloading_num_layers over Transformer Engine's CPU offload): the activations a stage no
longer holds, the host copies and where they hide, the row knob that sets it."""

import dataclasses

import pytest

import explorer as ex
from explorer.hardware.host import host_link
from explorer.training import TrainingParams
from explorer.training.errors import TrainingParamsError
from explorer.training.pipeline.partition import StagePartition
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.terms import recompute

# Llama 3 70B on 64 GB200 with Megatron-FSDP, micro batch 2, 8K tokens (Megatron-Bridge's
# LLAMA3_70B GB200 FP8-CS recipe, which offloads 40 of the 80 layers)
PAR = ex.ParallelConfig(dp=64, tp=1, pp=1, microbatch_size=2, zero=3, recompute="none")
GB, SEQ = 256, 8192


def _params(layers: int) -> TrainingParams:
    base = ex.stacks.params("megatron-core")
    return dataclasses.replace(base, precision="fp8", activation_offload_layers=layers)


def _model(layers: int, hw: str = "gb200-nvl72", par=PAR) -> StepModel:
    cfg = ex.models.load("llama3-70b")
    return StepModel(cfg, par, ex.hardware.load(hw), GB, SEQ, _params(layers))


def test_row_knob_sets_the_offloaded_layers():
    p = ex.stacks.row_params(
        "megatron_bridge_2511", "megatron-bridge", "fp8", "cpu_offload_layers=40 (recipe)"
    )
    assert p.activation_offload_layers == 40
    assert (
        ex.stacks.row_params(
            "megatron_bridge_2511", "megatron-bridge", "fp8"
        ).activation_offload_layers
        == 0
    )


def test_bad_layer_count_is_refused():
    with pytest.raises(TrainingParamsError, match="activation_offload_layers"):
        TrainingParams(activation_offload_layers=-1)
    with pytest.raises(TrainingParamsError, match="activation_offload_layers"):
        TrainingParams(activation_offload_layers=2.5)


def test_the_last_layer_of_a_stage_is_never_offloaded():
    m = _model(200)
    assert recompute.offloaded_layers(m, 80) == 79
    assert recompute.offloaded_layers(m, 1) == 0
    assert recompute.offloaded_layers(_model(0), 80) == 0


def test_offloaded_layers_leave_the_device():
    on, off = _model(40), _model(0)
    per_layer = off.layer_act("none")
    assert per_layer > 0
    # 40 of 80 layers' activations go to the host; the 40 kept hold more than the 2 reload
    # buffers, so the peak loses all 40
    part = StagePartition.from_layers([80])
    saved = off.stage_act(part, 0, None) - on.stage_act(part, 0, None)
    assert saved == pytest.approx(40 * per_layer)
    a = ex.estimate("llama3-70b", PAR, "gb200-nvl72", GB, SEQ, _params(40)).memory
    b = ex.estimate("llama3-70b", PAR, "gb200-nvl72", GB, SEQ, _params(0)).memory
    assert b.activations - a.activations == pytest.approx(40 * per_layer, rel=1e-9)
    assert a.parameters == b.parameters and a.optimizer_states == b.optimizer_states


def test_reload_buffers_stay_when_few_layers_are_kept():
    # 79 of 80 offloaded: one layer kept, the two reload buffers hold one more layer
    m, off = _model(79), _model(0)
    per_layer = off.layer_act("none")
    assert recompute.offload_saved_bytes(m, 80, None) == pytest.approx(78 * per_layer)


def test_host_copies_take_the_host_link_and_hide_behind_compute():
    m = _model(40)
    link = host_link(m.cluster)
    per_layer = m.layer_act("none")
    want = 40 * per_layer / link.bandwidth_bytes_per_s + 40 * link.latency_s
    assert recompute.offload_copy_s(m, 80, None) == pytest.approx(want)
    assert link.bandwidth_bytes_per_s == pytest.approx(225e9)  # NVLink-C2C per GPU, one way
    # on a GB200 the copies (~0.7 s a microbatch) hide behind the stage's compute: the step
    # grows by nothing
    a = ex.estimate("llama3-70b", PAR, "gb200-nvl72", GB, SEQ, _params(40)).step_time_s
    b = ex.estimate("llama3-70b", PAR, "gb200-nvl72", GB, SEQ, _params(0)).step_time_s
    assert a == pytest.approx(b, rel=1e-12)


def test_copies_longer_than_the_compute_are_exposed():
    # an H100's PCIe Gen5 (64 GB/s a direction) behind the short compute of a 4-layer model
    # on TP 4 without sequence parallelism (the norms' inputs stay whole on every rank)
    cfg = ex.models.load("llama3-8b").replace(num_layers=4)
    hw = ex.hardware.load("h100-sxm")
    base = dataclasses.replace(ex.stacks.params("megatron-core"), overlap_interference=0.0)
    part = StagePartition.from_layers([4])
    layouts = (
        ex.ParallelConfig(dp=2, tp=4, pp=1, microbatch_size=1, zero=1, recompute="none", sp=False),
        ex.ParallelConfig(dp=8, tp=1, pp=1, microbatch_size=1, zero=1, recompute="none"),
    )
    exposed = []
    for par in layouts:
        on = StepModel(
            cfg, par, hw, 8, 8192, dataclasses.replace(base, activation_offload_layers=3)
        )
        off = StepModel(cfg, par, hw, 8, 8192, base)
        fwd_on = dict(on.stage_segments(part, 0, None)[0])["compute-forward"]
        fwd_off = dict(off.stage_segments(part, 0, None)[0])["compute-forward"]
        copy = recompute.offload_copy_s(on, 4, None)
        # the forward waits for what sticks out of its own compute
        assert fwd_on == pytest.approx(fwd_off + max(copy - fwd_off, 0.0))
        exposed.append(copy > fwd_off)
    assert exposed[0]  # TP 4: the copies outlast the compute


def test_offload_on_a_chip_without_a_host_link_is_refused():
    with pytest.raises(TrainingParamsError, match="host link"):
        ex.estimate("llama3-8b", ex.ParallelConfig(dp=8, microbatch_size=1), "b200", 8, 8192,
                    _params(4))  # fmt: skip
