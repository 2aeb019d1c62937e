"""The 2024-2025 chips (B200, GB200 NVL72, MI300X, TPU v5p, Ascend 910C; H200 checked) and
clusters larger than their profile.

Profiles: each loads, every figure it holds is written in the text that cites it (a level's
figures in the level's source, the chip's in the profile's source or notes), every latency
is marked an assumption, and the chip and link figures equal the datasheets' own numbers
converted here (dense = half the 2:4-sparse figure, per-GPU = system figure / GPUs, one
direction = both directions / 2). Topologies: an NVLink domain larger than a node, a TPU
pod and a supernode are link levels like any other, and a job that crosses them lands on
the scale-out network.

Extension: a job larger than a profile grows it (its outermost level repeats), visibly,
with the levels a hand-built larger cluster would have, and prices the same as one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

import explorer as ex
from explorer.hardware import Cluster, HardwareError, Mesh, load
from explorer.hardware.catalog import datasets_dir
from explorer.training import ParallelConfig, Pool, SearchSpace, TrainingPlanError

GIB = 2**30
NEW = ("b200", "gb200-nvl72", "mi300x", "tpu-v5p", "ascend-910c")


def _raw(name: str) -> dict:
    return json.loads((datasets_dir() / "hardware" / f"{name}.json").read_text())


def _cites(text: str, value: float) -> bool:
    """``value`` is written in ``text`` as a number of its own (thousands commas allowed)."""
    plain = text.replace(",", "")
    number = f"{value:g}"
    return re.search(rf"(?<![\d.]){re.escape(number)}(?![\d]|\.\d)", plain) is not None


# ----- every figure has a source ------------------------------------------------------------
@pytest.mark.parametrize("name", [*NEW, "h200"])
def test_every_figure_is_written_where_it_is_cited(name: str) -> None:
    raw = _raw(name)
    cluster = load(name)
    assert cluster.name == name and cluster.chip.dtypes
    chip, prose = raw["chip"], raw["source"] + " " + raw.get("notes", "")
    figures = [*chip["peak_tflops"].values(), chip["memory_bandwidth_gb_per_s"],
               chip.get("memory_gib", chip.get("memory_gb"))]  # fmt: skip
    missing = [v for v in figures if not _cites(prose, v)]
    assert not missing, f"{name}: chip figures {missing} are not in its source or notes"
    for level in raw["cluster"].get("levels", ()):
        text = level["source"]
        assert _cites(text, level["bandwidth_gb_per_s"]), (name, level["name"], "bandwidth")
        assert _cites(text, level["latency_us"]), (name, level["name"], "latency")
        assert "assumption" in text.lower(), (name, level["name"], "latency is an assumption")


@pytest.mark.parametrize("name", NEW)
def test_new_profiles_state_their_levels_and_are_dense(name: str) -> None:
    raw = _raw(name)
    assert raw["cluster"]["levels"], "the new profiles list their link levels"
    assert "dense" in (raw["source"] + raw.get("notes", "")).lower()


# Datasheet figures in the datasheet's own units and form, converted here:
# (bf16 TFLOP/s, fp8 TFLOP/s or None, memory GiB, HBM GB/s, first level GB/s one direction,
#  scale-out Gb/s per chip one direction).
PUBLISHED = {
    # HGX B200: 36 PFLOPS BF16 and 72 PFLOPS FP8 with sparsity for 8 GPUs; 1,440 GB; 64 TB/s
    # for 8; NVLink5 1.8 TB/s both ways; one 400 Gb/s ConnectX-7 per GPU
    "b200": (36e3 / 8 / 2, 72e3 / 8 / 2, 1440 / 8, 64e3 / 8, 1800 / 2, 400),
    # GB200 NVL72: 360 / 720 PFLOPS sparse for 72 GPUs; 13.4 TB at 576 TB/s; 130 TB/s NVLink
    "gb200-nvl72": (360e3 / 72 / 2, 720e3 / 72 / 2, 13.4e3 / 72, 576e3 / 72, 1800 / 2, 400),
    # MI300X: dense 1,307.4 / 2,614.9; 192 GB at 5.3 TB/s; 7 links x 128 GB/s both ways
    "mi300x": (1307.4, 2614.9, 192, 5300, 7 * 128 / 2, 400),
    # TPU v5p: 459 BF16 and FP8; 95 GiB at 2,765 GBps; ICI 1,200 GBps both ways over 6
    # links; DCN 50 Gbps per chip
    "tpu-v5p": (459, 459, 95, 2765, 1200 / 6 / 2, 50),
    # Ascend 910C (CloudMatrix384 paper): 752 dense BF16, 128 GB at 3.2 TB/s, UB 392 GB/s
    # unidirectional, RDMA 400 Gbps unidirectional
    "ascend-910c": (752, None, 128, 3200, 392, 400),
    # H200 SXM: 1,979 / 3,958 sparse; 141 GB at 4.8 TB/s; NVLink 900 GB/s both ways
    "h200": (1979 / 2, 3958 / 2, 141, 4800, 900 / 2, 400),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_figures_are_the_datasheets(name: str) -> None:
    bf16, fp8, mem_gib, hbm, first, scale_out_gbit = PUBLISHED[name]
    cluster = load(name)
    chip = cluster.chip
    assert chip.peak_flops("bf16") == pytest.approx(bf16 * 1e12, rel=2e-4)
    if fp8 is not None:
        assert chip.peak_flops("fp8") == pytest.approx(fp8 * 1e12, rel=2e-4)
    assert chip.memory_bytes == pytest.approx(mem_gib * GIB, rel=1e-3)
    assert chip.memory_bandwidth_bytes_per_s == pytest.approx(hbm * 1e9)
    assert cluster.levels[0].bandwidth_bytes_per_s == pytest.approx(first * 1e9, rel=3e-3)
    assert cluster.levels[-1].bandwidth_bytes_per_s == scale_out_gbit * 1e9 / 8


def test_h200_matches_its_datasheet_and_dgx_h200() -> None:
    """H200 SXM: same GH100 compute as H100 SXM, 141 GB (DGX H200: 1,128 GB for 8) at
    4.8 TB/s; checked, nothing needed fixing."""
    h200, h100 = load("h200"), load("h100-sxm")
    assert h200.chip.peak_flops_per_s == h100.chip.peak_flops_per_s
    assert h200.chip.memory_bytes * 8 == 1128 * GIB
    assert h200.chip.compute_units == 132


# ----- topologies: bounded domains are levels, scale-out is above them ----------------------
def test_gb200_nvl72_nvlink_domain_is_a_level_above_the_tray() -> None:
    gb = load("gb200-nvl72")
    assert gb.chips_per_node == 4  # a compute tray
    assert [(lv.name, lv.group_size) for lv in gb.levels] == [
        ("compute-tray", 4), ("nvlink", 72), ("ib", 576)]  # fmt: skip
    axes = {"dp": 8, "tp": 72}
    # a ring over 72 GPUs (18 trays) stays on NVLink at one GPU's 900 GB/s ...
    tp = gb.axis_bandwidth(axes, "tp")
    assert tp.levels == ("compute-tray", "nvlink") and tp.bandwidth_bytes_per_s == 900e9
    # ... one across racks runs on InfiniBand, one NIC per GPU
    dp = gb.axis_bandwidth(axes, "dp")
    assert dp.levels == ("ib",) and dp.bandwidth_bytes_per_s == 50e9


def test_scale_up_domain_is_the_nvlink_level_not_the_node() -> None:
    # tensor parallelism may span a GB200 NVL72 rack's NVLink domain, not just its tray
    assert load("gb200-nvl72").scale_up_chips == 72
    assert load("h100-sxm").scale_up_chips == load("h100-sxm").chips_per_node == 8
    assert load("dgx-h100-superpod").scale_up_chips == 8  # the leaf is slower than NVLink


def test_tpu_v5p_pod_is_ici_and_pods_join_over_dcn() -> None:
    v5p = load("tpu-v5p")
    assert v5p.capacity == 2 * 8960 and v5p.chips_per_node == 4
    axes = {"dp": 2, "fsdp": 2240, "tp": 4}  # two pods of 2,240 hosts
    within = v5p.axis_bandwidth(axes, "fsdp")
    assert within.levels == ("ici-cube", "ici-pod") and within.bandwidth_bytes_per_s == 100e9
    across = v5p.axis_bandwidth(axes, "dp")
    assert across.levels == ("dcn",)
    assert across.bandwidth_bytes_per_s < 100e9 / 10  # DCN: 6.25 GB/s per chip at most


def test_ascend_910c_supernode_is_ub_and_supernodes_join_over_rdma() -> None:
    c = load("ascend-910c")
    axes = {"dp": 2, "ep": 48, "tp": 8}
    assert c.axis_bandwidth(axes, "ep").levels == ("ub-supernode",)
    assert c.axis_bandwidth(axes, "ep").bandwidth_bytes_per_s == 392e9
    assert c.axis_bandwidth(axes, "dp").levels == ("rdma",)


@pytest.mark.parametrize("name", NEW)
def test_each_new_profile_simulates_a_step(name: str) -> None:
    sim = ex.simulate("gpt3-125m", ParallelConfig(dp=2, tp=4, microbatch_size=1),
                      hardware=name, global_batch=8, seq=512)  # fmt: skip
    assert sim.hardware == name
    assert math.isfinite(sim.step_time_s) and sim.step_time_s > 0
    assert 0 < sim.mfu < 1


# ----- a job larger than its profile --------------------------------------------------------
def test_extension_is_visible_and_leaves_the_profile_alone() -> None:
    h100 = load("h100-sxm")
    big = h100.extended(16384)
    assert (big.max_nodes, big.capacity, big.extended_from) == (2048, 16384, 1024)
    assert big.extension == "extended from 1024 to 2048 nodes over its outermost level 'inter-node'"
    assert big.extension in str(big)
    assert "extended from 1024 to 2048 nodes (assumption:" in big.source
    assert big.name == "h100-sxm"  # still the catalog's profile: resolve(plan.hardware) works
    assert (h100.max_nodes, h100.extended_from, h100.extension) == (1024, None, "")
    assert h100.extended(8192) is h100 and h100.extended(1) is h100
    assert big.extended(32768).extended_from == 1024  # grown twice, from the same profile
    assert h100.extended(16383) == big  # a partial node counts as a node


def test_extended_two_level_profile_has_a_larger_inter_node_level() -> None:
    h100, big = load("h100-sxm"), load("h100-sxm").extended(16384)
    (intra, inter), (intra0, inter0) = big.levels, h100.levels
    assert intra == intra0
    assert inter == dataclasses.replace(inter0, group_size=16384)
    # the same cluster as the hand-built one tests and calibration used before
    by_hand = dataclasses.replace(h100, max_nodes=2048)
    assert big.levels == by_hand.levels
    assert Mesh({"dp": 2048, "tp": 8}, hardware=big).collective_time(
        "all-reduce", 1e9, ("dp",)) == Mesh({"dp": 2048, "tp": 8}, hardware=by_hand
    ).collective_time("all-reduce", 1e9, ("dp",))  # fmt: skip


def test_extended_multi_level_profile_repeats_its_outermost_level() -> None:
    pod = load("dgx-h100-superpod")
    big = pod.extended(16384)
    assert [(lv.name, lv.group_size) for lv in big.levels] == [
        ("nvlink", 8), ("ib-leaf", 256), ("ib-spine", 16384)]  # fmt: skip
    assert big.levels[:2] == pod.levels[:2]
    spine, spine0 = big.levels[-1], pod.levels[-1]
    assert dataclasses.replace(spine, group_size=1024, source=spine0.source) == spine0
    assert spine.source.startswith(spine0.source) and "extended from 127 to 2048" in spine.source
    # a bounded domain keeps its size: GB200's NVLink rack stays 72, InfiniBand grows
    gb = load("gb200-nvl72").extended(16384)
    sizes = [(lv.name, lv.group_size) for lv in gb.levels]
    assert sizes == [("compute-tray", 4), ("nvlink", 72), ("ib", 228 * 72)]  # last rack part-full
    v5p = load("tpu-v5p").extended(3 * 8960)
    assert [lv.group_size for lv in v5p.levels] == [4, 64, 8960, 3 * 8960]  # 3 pods over DCN


def test_a_cluster_with_no_link_between_nodes_cannot_grow() -> None:
    node = dataclasses.replace(load("a100-80g"), max_nodes=1)
    only_node = dataclasses.replace(node, link_levels=node.levels)
    with pytest.raises(HardwareError, match=r"cannot grow to 2 nodes.*no link between nodes"):
        only_node.extended(16)
    # the two-level profile's inter-node fields are that link: it grows
    assert node.extended(16).levels[-1].name == "inter-node"
    for bad in (0, -8, 2.0, "16", True):
        with pytest.raises(HardwareError, match=r"extended\(devices=.*expected an int >= 1"):
            node.extended(bad)
    with pytest.raises(TrainingPlanError, match=r"devices=16: .*cannot grow"):
        ex.plan_training("gpt2", devices=16, hardware=only_node, global_batch=16, seq=512)


def test_llama3_405b_plans_on_16384_h100() -> None:
    """Llama 3 405B trained on 16,384 H100 (Llama 3 paper, section 3.3): twice the h100-sxm
    profile, planned without a larger profile. The search is narrowed to tp 8 x pp 16 (the
    paper's layout) to keep the test small; the profile is extended either way."""
    plan = ex.plan_training(
        "llama3-405b", devices=16384, hardware="h100-sxm", global_batch=2048, seq=8192,
        space=SearchSpace(tp=(8,), pp=(16,), microbatch_sizes=(1,), zero=(1,)),
    )  # fmt: skip
    assert plan.devices == 16384 and plan.config.devices == 16384
    assert (plan.config.tp, plan.config.pp, plan.config.dp) == (8, 16, 128)
    assert plan.sim.memory.total <= plan.sim.memory_cap_bytes
    # the plan re-simulates on the profile by name: simulate extends it the same way
    again = ex.simulate("llama3-405b", plan.config, hardware="h100-sxm", global_batch=2048,
                        seq=8192)  # fmt: skip
    assert again.step_time_s == pytest.approx(plan.sim.step_time_s, rel=1e-9)


def test_bad_device_counts_are_still_refused() -> None:
    for bad in (0, -1, 2.5, "16384"):
        with pytest.raises(TrainingPlanError, match=r"devices=.*expected an int >= 1"):
            ex.plan_training("gpt2", devices=bad, hardware="h100-sxm", global_batch=8, seq=512)


def test_simulate_and_pools_extend_like_the_planner() -> None:
    one_node = dataclasses.replace(load("a100-80g"), max_nodes=1)  # 8 chips
    two_nodes = dataclasses.replace(one_node, max_nodes=2)
    par = ParallelConfig(dp=4, tp=4, microbatch_size=1)
    grown = ex.simulate("gpt2", par, hardware=one_node, global_batch=8, seq=512)
    built = ex.simulate("gpt2", par, hardware=two_nodes, global_batch=8, seq=512)
    assert grown.step_time_s == built.step_time_s and grown.memory == built.memory
    pool = Pool(one_node, 16)
    assert isinstance(pool.cluster, Cluster) and pool.cluster.extended_from == 1
    assert pool.cluster.capacity == 16
