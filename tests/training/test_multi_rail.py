"""Today's stack physics: multi-rail ring collectives (NCCL channels, one ring per NIC),
all-to-alls split by level, NVLink domains aligned to the job, SearchSpace.etp, the MoE
layer overhead and the MaxText preset."""

from __future__ import annotations

import dataclasses

import pytest

import explorer as ex
from explorer.hardware import HardwareError, Mesh, load
from explorer.training import TrainingParams
from explorer.training.errors import TrainingParamsError

GIB = 2**30


def _mesh(shape: dict[str, int], rails: bool) -> Mesh:
    cluster = dataclasses.replace(load("h100-sxm"), multi_rail_rings=rails)
    return Mesh(shape, hardware=cluster)


def test_a_ring_with_a_whole_node_per_group_moves_at_the_nodes_nic_total() -> None:
    one, many = _mesh({"dp": 64}, False), _mesh({"dp": 64}, True)
    nic = load("h100-sxm").bandwidth("inter")
    assert one.axis_link("dp").bandwidth_bytes_per_s == nic
    slow = one.collective_time("all-gather", GIB, ("dp",))
    fast = many.collective_time("all-gather", GIB, ("dp",))
    # 8 members a node: 8 NICs; the latency term is the same on both
    lat = one.collective_time("all-gather", 0.0, ("dp",))
    assert (slow - lat) / (fast - lat) == pytest.approx(8.0)


def test_rings_beside_tensor_parallelism_keep_one_nic_each() -> None:
    a = _mesh({"dp": 8, "tp": 8}, False).collective_time("all-reduce", GIB, ("dp",))
    b = _mesh({"dp": 8, "tp": 8}, True).collective_time("all-reduce", GIB, ("dp",))
    assert a == b


def test_all_to_all_does_not_spread_over_rails() -> None:
    """Every device of an all-to-all sends at once: its remote share at one NIC's rate."""
    b = _mesh({"dp": 64}, True).collective_time("all-to-all", GIB, ("dp",))
    lat = _mesh({"dp": 64}, True).collective_time("all-to-all", 0.0, ("dp",))
    assert b - lat == pytest.approx(56 / 64 * GIB / load("h100-sxm").bandwidth("inter"))


def test_a_hierarchical_phase_spreads_too() -> None:
    """dp across nodes with size-1 intra axes goes through the hierarchical path."""
    shape = {"dp": 64, "ep": 1, "cp": 1}
    a = _mesh(shape, False).collective_time("reduce-scatter", GIB, ("dp", "ep", "cp"))
    b = _mesh(shape, True).collective_time("reduce-scatter", GIB, ("dp", "ep", "cp"))
    assert b < a / 4


def test_flags_refuse_non_bools() -> None:
    with pytest.raises(HardwareError, match="multi_rail_rings"):
        dataclasses.replace(load("h100-sxm"), multi_rail_rings=1)
    with pytest.raises(TrainingParamsError, match="multi_rail_collectives"):
        TrainingParams(multi_rail_collectives="yes")


def test_current_stacks_spread_and_the_2021_ones_do_not() -> None:
    for name in ("megatron-core", "nemo", "torchtitan", "pytorch-fsdp", "maxtext"):
        assert ex.stacks.params(name).multi_rail_collectives is True
    for name in ("megatron-lm-2021", "deepspeed"):
        assert ex.stacks.params(name).multi_rail_collectives is False


def test_the_step_model_prices_fsdp_on_many_rails() -> None:
    cfg, hw = ex.models.load("llama2-7b"), load("h100-sxm")
    par = ex.ParallelConfig(dp=64, zero=3, recompute="full")
    on = ex.stacks.params("maxtext")
    off = on.replace(multi_rail_collectives=False)
    zero_on = dict(ex.estimate(cfg, par, hw, 64, 4096, on).time_by_kind)
    zero_off = dict(ex.estimate(cfg, par, hw, 64, 4096, off).time_by_kind)
    assert zero_on.get("zero-gather", 0.0) < zero_off.get("zero-gather", 0.0)


def test_maxtext_rows_run_with_the_maxtext_preset() -> None:
    assert ex.stacks.FRAMEWORK_STACKS["maxtext"] == "maxtext"
    p = ex.stacks.params("maxtext")
    assert (p.flash_attention, p.zero3_gather_granularity, p.zero3_recompute_regather) == (
        True, "block", False)  # fmt: skip
    st = ex.stacks.get("maxtext")
    for key, _ in st.values:
        assert st.source(key).strip()


def test_aligned_nvlink_domains_keep_an_ep64_group_in_one_gb200_rack() -> None:
    """pp=4 x EP64 on 256 GB200: filled in order, the second stage's group straddles two
    72-GPU racks and its all-to-all runs on InfiniBand; aligned (64 GPUs a rack) it stays
    on NVLink."""
    cfg, hw = ex.models.load("deepseek-v3"), load("gb200-nvl72")
    par = ex.ParallelConfig(dp=64, pp=4, ep=64, recompute="full", zero=1)
    on = ex.stacks.params("nemo")
    off = on.replace(aligned_nvlink_domains=False)
    ep_on = dict(ex.estimate(cfg, par, hw, 4096, 4096, on).time_by_kind)["ep-comm"]
    ep_off = dict(ex.estimate(cfg, par, hw, 4096, 4096, off).time_by_kind)["ep-comm"]
    assert ep_on < ep_off / 5
    with pytest.raises(TrainingParamsError, match="aligned_nvlink_domains"):
        TrainingParams(aligned_nvlink_domains=1)


def test_all_to_all_sends_only_the_remote_share_across_nodes() -> None:
    """EP32 over four 8-GPU nodes: 24 of 32 shares cross InfiniBand, not 31."""
    a = _mesh({"ep": 32}, False).collective_time("all-to-all", GIB, ("ep",))
    b = _mesh({"ep": 32}, True).collective_time("all-to-all", GIB, ("ep",))
    lat = _mesh({"ep": 32}, False).collective_time("all-to-all", 0.0, ("ep",))
    assert (b - lat) / (a - lat) == pytest.approx(24 / 31)


def test_search_space_etp_folds_experts_out_of_tp_x_dp() -> None:
    """Qwen3-235B on 256 GPUs, TP2 PP8 EP32 ETP1 (Megatron-Bridge): ep=32 does not divide
    dp=16, so only a space with etp plans it."""
    from explorer.training.planning.space import SearchSpace, configurations

    cfg = ex.models.load("qwen3-235b-a22b")
    folded = list(configurations(cfg, 2, 8, 16, 1, 2048, SearchSpace(ep=(32,), etp=(1,))))
    assert folded and all((c.ep, c.expert_tp, c.edp) == (32, 1, 1) for c in folded)
    assert not list(configurations(cfg, 2, 8, 16, 1, 2048, SearchSpace(ep=(32,))))
    with pytest.raises(ex.ExplorerError, match="etp"):
        SearchSpace(etp=(0,))


def test_moe_layer_overhead_is_paid_per_moe_layer_each_way_per_microbatch() -> None:
    cfg, hw = ex.models.load("qwen3-30b-a3b"), load("h100-sxm")
    par = ex.ParallelConfig(dp=8, ep=8, microbatch_size=1, zero=1)
    base = ex.stacks.params("nemo", moe_layer_overhead_s=0.0)
    t0 = ex.estimate(cfg, par, hw, 64, 4096, base).step_time_s
    t1 = ex.estimate(cfg, par, hw, 64, 4096, base.replace(moe_layer_overhead_s=1e-3)).step_time_s
    moe_layers = sum(cfg.layer_is_moe(i) for i in range(cfg.num_layers))
    assert t1 - t0 == pytest.approx(2 * moe_layers * 1e-3 * 8, rel=0.05)  # 8 microbatches
