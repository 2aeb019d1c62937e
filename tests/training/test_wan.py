"""The WAN level, plans across datacenters (dp across, tp and pp inside), hierarchical sync."""

from __future__ import annotations

import dataclasses

import pytest

import explorer as ex
from explorer.hardware import HardwareError, Mesh, load
from explorer.hardware.wan import WAN, collective_time, datacenter_size, datacenters
from explorer.training.datacenters import gradient_sync, placement
from explorer.training.step_model.placement import mesh_axes


@pytest.fixture(scope="module")
def two():  # two datacenters of 8 A100 nodes each
    return datacenters(dataclasses.replace(load("a100-80g"), max_nodes=8), 2)


def test_catalog_entry_and_builder(two) -> None:
    c = load("dgx-h100-2dc")
    wan, fabric = c.levels[-1], c.levels[1]
    assert wan.name == WAN and "assumption" in wan.source
    assert 0.005 <= wan.bandwidth_bytes_per_s / fabric.bandwidth_bytes_per_s <= 0.05
    assert wan.latency_s >= 1e-3
    assert datacenter_size(c) == 1024 and c.capacity == 2048
    assert two.levels[-1].bandwidth_bytes_per_s == pytest.approx(0.02 * 25e9)
    assert datacenter_size(two) == 64 and two.capacity == 128
    with pytest.raises(HardwareError, match="count"):
        datacenters(load("a100-80g"), 1)
    with pytest.raises(HardwareError, match="already"):
        datacenters(two)


def test_one_datacenter_keeps_the_old_order() -> None:
    par = ex.ParallelConfig(dp=4, tp=2, pp=2)
    assert list(mesh_axes(par, load("a100-80g"))) == ["pp", "dp", "ep", "cp", "tp"]
    assert list(mesh_axes(par, load("dgx-h100-2dc"))) == ["pp", "dp", "ep", "cp", "tp"]
    across = ex.ParallelConfig(dp=128, tp=4, pp=4)  # 2048 devices: both datacenters
    assert list(mesh_axes(across, load("dgx-h100-2dc"))) == ["dp", "pp", "ep", "cp", "tp"]


def test_a_job_inside_one_datacenter_plans_as_on_it() -> None:
    job = {"devices": 64, "global_batch": 128, "seq": 2048}
    inside = ex.plan_training("gpt3-1.3b", hardware="dgx-h100-2dc", **job)
    alone = ex.plan_training("gpt3-1.3b", hardware="dgx-h100-superpod", **job)
    assert inside.config == alone.config
    assert inside.sim.step_time_s == pytest.approx(alone.sim.step_time_s, rel=1e-12)


@pytest.mark.parametrize("pp", [1, 2])
def test_plan_puts_dp_across_and_keeps_tp_pp_inside(two, pp) -> None:
    plan = ex.plan_training("gpt3-1.3b", devices=128, hardware=two, global_batch=256,
                            seq=2048, space=ex.training.SearchSpace(pp=(pp,)))  # fmt: skip
    where = placement(plan, two)
    assert where.datacenters == 2 and where.crossing == ("dp",)
    levels = dict(where.levels)
    assert WAN not in levels["tp"] and WAN not in levels["pp"]
    assert plan.config.dp % 2 == 0 and plan.config.pp == pp


def test_hierarchical_beats_flat_and_matches_its_phases(two) -> None:
    plan = ex.plan_training("gpt3-1.3b", devices=128, hardware=two, global_batch=256, seq=2048)
    s = gradient_sync(plan, hardware=two)
    assert s.datacenters == 2 and s.dp_inside * 2 == plan.config.dp // plan.config.ep
    assert s.hierarchical_s == pytest.approx(s.inside_s + s.wan_s, rel=1e-12)
    assert s.hierarchical_s < s.flat_s
    # the flat ring pays the WAN latency on every one of its 2(dp-1) steps
    assert s.flat_s >= 2 * (plan.config.dp - 1) * two.levels[-1].latency_s


def test_collective_time_falls_back_inside_one_datacenter() -> None:
    mesh = Mesh({"pp": 2, "dp": 4, "tp": 8}, hardware="a100-80g")
    assert collective_time(mesh, "all-reduce", 1e9, ("dp",)) == mesh.collective_time(
        "all-reduce", 1e9, ("dp",)
    )


def test_a_job_not_filling_its_datacenters_is_priced_as_a_ring(two) -> None:
    # 96 devices: 64 in the first datacenter, 32 in the second; no equal halves to split
    mesh = Mesh({"dp": 24, "pp": 1, "ep": 1, "cp": 1, "tp": 4}, hardware=two)
    assert WAN in mesh.levels(("dp",))
    assert collective_time(mesh, "all-reduce", 1e9, ("dp",)) == mesh.collective_time(
        "all-reduce", 1e9, ("dp",)
    )
    full = Mesh({"dp": 32, "pp": 1, "ep": 1, "cp": 1, "tp": 4}, hardware=two)
    assert collective_time(full, "all-reduce", 1e9, ("dp",)) < full.collective_time(
        "all-reduce", 1e9, ("dp",)
    )
