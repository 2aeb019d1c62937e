"""MoE token exchange as Megatron-Core runs it today: the flex dispatcher (DeepEP, HybridEP)
sends a token once per node holding its experts (TrainingParams.moe_flex_dispatcher), and
overlap_moe_expert_parallel_comm hides the all-to-alls behind another microbatch's compute
(TrainingParams.ep_comm_overlap_fraction); both set from a published row's knobs."""

import dataclasses
from math import comb

import pytest

import explorer as ex
from explorer.training.pipeline.partition import StagePartition
from explorer.training.step_model.model import StepModel, exposed_s
from explorer.training.step_model.terms import ep

# DeepSeek-V3 on 256 B200 (8 a node): PP 8, EP 32 folded out of DP 32 (Megatron-Bridge's
# B200 MXFP8 preset); EP 32 spans 4 nodes
PAR = ex.ParallelConfig(dp=32, tp=1, pp=8, ep=32, etp=1, microbatch_size=1, recompute="full")
GB, SEQ = 4096, 4096


def _model(par=PAR, hw="b200", **kw) -> StepModel:
    params = dataclasses.replace(ex.stacks.params("megatron-core"), **kw)
    return StepModel(ex.models.load("deepseek-v3"), par, ex.hardware.load(hw), GB, SEQ, params)


def test_row_knobs_set_the_dispatcher_and_the_overlap():
    p = ex.stacks.row_params(
        "megatron_bridge_2604", "megatron-bridge", "fp8",
        "moe_flex_dispatcher=deepep (preset); moe_a2a_overlap=true (preset)",
    )  # fmt: skip
    assert p.moe_flex_dispatcher is True and p.ep_comm_overlap_fraction == 1.0
    q = ex.stacks.row_params("megatron_bridge_2604", "megatron-bridge", "fp8", "")
    assert q.moe_flex_dispatcher is False and q.ep_comm_overlap_fraction == 0.0
    off = ex.stacks.row_params(
        "megatron_bridge_2604", "megatron-bridge", "fp8", "moe_flex_dispatcher=alltoall"
    )
    assert off.moe_flex_dispatcher is False


def test_flex_dispatch_sends_a_token_once_per_remote_node():
    flex, plain = _model(moe_flex_dispatcher=True), _model()
    # 4 nodes of 64 experts: a node holds none of a token's 8 with chance q
    q = comb(256 - 64, 8) / comb(256, 8)
    assert ep.network_copies(flex) == pytest.approx(4 * (1 - q) / 8)
    assert ep.network_copies(plain) == 1.0
    assert flex.ep_s < plain.ep_s
    assert flex.ep_bytes == pytest.approx(plain.ep_bytes * ep.network_copies(flex))


def test_flex_dispatch_inside_one_nvlink_domain_changes_nothing():
    # EP 8 on one B200 node, EP 64 in a GB200 NVL72 rack: nothing crosses the network
    par8 = ex.ParallelConfig(dp=16, tp=1, pp=16, ep=8, microbatch_size=1, recompute="full")
    assert ep.network_copies(_model(par8, moe_flex_dispatcher=True)) == 1.0
    par64 = ex.ParallelConfig(dp=64, tp=1, pp=4, ep=64, microbatch_size=1, recompute="full")
    assert ep.network_copies(_model(par64, "gb200-nvl72", moe_flex_dispatcher=True)) == 1.0


def test_all_to_all_overlap_hides_behind_the_other_phase():
    part = StagePartition.from_layers([8] * 7 + [5])
    plain, over = _model(), _model(ep_comm_overlap_fraction=1.0)
    f0, b0 = (dict(x) for x in plain.stage_segments(part, 1, None))
    f1, b1 = (dict(x) for x in over.stage_segments(part, 1, None))
    raw = f0["ep-comm"]
    assert raw > 0 and b0["ep-comm"] == raw
    io = over.tparams.overlap_interference
    # a forward's all-to-alls behind the other microbatch's backward, and the reverse
    assert f1["ep-comm"] == pytest.approx(exposed_s(raw, b1["compute-backward"], 1.0, io))
    assert b1["ep-comm"] == pytest.approx(exposed_s(raw, f1["compute-forward"], 1.0, io))
    assert f1["ep-comm"] < raw and b1["ep-comm"] < raw
    slow = ex.estimate("deepseek-v3", PAR, "b200", GB, SEQ, plain.tparams).step_time_s
    fast = ex.estimate("deepseek-v3", PAR, "b200", GB, SEQ, over.tparams).step_time_s
    assert fast < slow
