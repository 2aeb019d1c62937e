"""The training memos (explorer.memo): registered, cleared by clear_all, and keyed on every
input: two calls that differ in one input only are two entries with their own results."""

import dataclasses

import pytest

import explorer as ex
from explorer.memo import all_memos, clear_all
from explorer.training.simulate import _balanced_split
from explorer.training.step_model.model import _collective_s
from explorer.training.step_model.stage_costs import stage_costs

HW = ex.hardware.load("a100-80g")
GPT2 = ex.models.load("gpt2")
BASE = dict(cfg=GPT2, seq=256, tp=2, microbatch_size=1, cluster=HW, params=ex.CostParams())
FUSED = ("scale", "mask")


def test_training_memos_are_registered_and_cleared_together():
    names = {m.name for m in all_memos()}
    assert {"training.stage_costs", "training.collective_s", "training.balanced_split"} <= names
    ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=2), "a100-80g", 8, 256)
    assert len(stage_costs.memo) and len(_collective_s.memo) and len(_balanced_split.memo)
    clear_all()
    assert not len(stage_costs.memo) and not len(_collective_s.memo)
    assert not len(_balanced_split.memo)


def _faster_chip():
    flops = tuple((k, 2 * v) for k, v in HW.chip.peak_flops_per_s)
    chip = dataclasses.replace(HW.chip, peak_flops_per_s=flops)
    return dataclasses.replace(HW, chip=chip)


@pytest.mark.parametrize("field, other", [
    ("seq", 512),
    ("tp", 4),
    ("microbatch_size", 2),
    ("cluster", "faster chip"),
    ("params", ex.CostParams(compute_efficiency=0.4)),
    ("fused", ()),
])  # fmt: skip
def test_stage_costs_key_holds_every_input(field, other):
    if other == "faster chip":
        other = _faster_chip()
    base = BASE | {"fused": FUSED}
    a = stage_costs(**base)
    misses = stage_costs.memo.stats()[1]
    b = stage_costs(**(base | {field: other}))
    assert stage_costs.memo.stats()[1] == misses + 1  # a new entry, not a hit on ``a``
    assert a.layer != b.layer
    assert stage_costs(**base) is a  # and ``a`` is still served as it was


def test_stage_costs_key_holds_the_search_method():
    a = stage_costs(**BASE, method="dynamic_programming")
    misses = stage_costs.memo.stats()[1]
    stage_costs(**BASE, method="ilp")
    assert stage_costs.memo.stats()[1] == misses + 1
    assert stage_costs(**BASE, method="dynamic_programming") is a


def test_collective_key_holds_the_links():
    """Two meshes that differ only in the inter-node latency, or only in which link an axis
    uses, time the same all-reduce differently."""
    slow = dataclasses.replace(HW, inter_node_latency_s=HW.inter_node_latency_s * 100)
    axes, inter = {"dp": 4, "tp": 2}, {"dp": "inter"}
    t = _collective_s(ex.Mesh(axes, hardware=HW, links=inter), "all-reduce", 2**20, ("dp",))
    t_slow = _collective_s(ex.Mesh(axes, hardware=slow, links=inter), "all-reduce", 2**20, ("dp",))
    t_intra = _collective_s(ex.Mesh(axes, hardware=HW), "all-reduce", 2**20, ("dp",))
    assert t_intra < t < t_slow


def test_simulate_sees_a_cluster_change_after_a_memoized_run():
    par = ex.ParallelConfig(dp=16, microbatch_size=1)
    a = ex.simulate("gpt2", par, HW, 16, 256)
    slow = dataclasses.replace(
        HW, inter_node_bandwidth_bytes_per_s=HW.inter_node_bandwidth_bytes_per_s / 4
    )
    b = ex.simulate("gpt2", par, slow, 16, 256)
    assert b.step_time_s > a.step_time_s
    assert dict(b.time_by_kind)["dp-comm"] > dict(a.time_by_kind)["dp-comm"]


def test_balanced_split_key_holds_the_times():
    a = _balanced_split((1.0, 4.0, 4.0, 4.0, 4.0, 3.0), 2)
    b = _balanced_split((1.0, 4.0, 4.0, 4.0, 9.0, 3.0), 2)
    assert str(a) == "embed+2 | 2+head" and str(b) == "embed+3 | 1+head"
