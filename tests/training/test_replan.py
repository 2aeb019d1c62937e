"""ex.replan: the new plan, the migration of every state, the switch time and break-even."""

from __future__ import annotations

import math

import pytest

import explorer as ex
from explorer.hardware import load
from explorer.training import MigrationError, ParallelConfig, ReplanError
from explorer.training.memory import StateBytes
from explorer.training.pipeline.partition import uniform_partition
from explorer.training.replanning.migration import JobLayout, plan_migration
from explorer.training.replanning.replan import job_layout

SPACE = ex.training.SearchSpace(tp=(1,), pp=(1,), microbatch_sizes=(1,))


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt3-125m", devices=32, global_batch=128, seq=1024)


@pytest.fixture(scope="module")
def dp_plan():  # dp=16, 8 microbatches per replica: a straggler can be rebalanced
    return ex.plan_training("gpt3-125m", devices=16, global_batch=128, seq=1024, space=SPACE)


def _needed(layout: JobLayout, state: StateBytes) -> float:
    """Bytes the job holds: every state once per copy (replicas unless ZeRO shards it)."""
    total = sum(layout.part_params)
    c = layout.config
    copies_w = 1 if c.zero >= 3 else layout.replicas
    copies_o = 1 if c.zero >= 1 else layout.replicas
    return total * (state.weight_bytes * copies_w + state.optimizer_bytes * copies_o)


def test_toy_migration_by_hand() -> None:
    # dp2 x tp2 -> tp4 on the same 4 devices: quarters 1 and 2 move, 0 and 3 stay
    parts = (10.0, 100.0, 100.0, 10.0)
    a = JobLayout(ParallelConfig(dp=2, tp=2), uniform_partition(2, 1), tuple(range(4)), parts)
    b = JobLayout(ParallelConfig(dp=1, tp=4), uniform_partition(2, 1), tuple(range(4)), parts)
    m = plan_migration(a, b, load("a100-80g"))
    assert dict(m.by_state) == {"parameters": 2 * 220 / 4 * 2, "optimizer_states": 12 * 220 / 2}
    assert m.received_bytes[0] == 0 and m.received_bytes[3] == 0
    assert m.received_bytes[1] == m.received_bytes[2] == 220 / 4 * 14
    assert m.checkpoint_bytes == 0 and m.time_s > 0


def test_same_layout_moves_nothing(plan) -> None:
    lay = job_layout(plan)
    m = plan_migration(lay, lay, load(plan.hardware))
    assert m.total_bytes == 0 and m.time_s == 0 and m.checkpoint_bytes == 0
    assert m.local_bytes == pytest.approx(_needed(lay, StateBytes()), rel=1e-12)


def test_node_loss(plan) -> None:
    r = ex.replan(plan, ex.NodeLoss(1))
    assert r.new.devices <= plan.devices - 8 and r.new.devices % 8 == 0
    assert r.new.sim.fits and r.chosen.startswith("replan")
    assert math.isinf(r.keep_step_s) and r.break_even_steps == 0
    assert r.break_even_text.startswith("required")
    m = r.migration
    assert sum(m.sent_bytes) == pytest.approx(sum(m.received_bytes), rel=1e-12)
    assert sum(v for _, v in m.by_state) == pytest.approx(m.total_bytes, rel=1e-12)
    # every byte the new job holds was already there, came over the network or from the
    # checkpoint
    new = job_layout(r.new)
    got = m.local_bytes + m.total_bytes + m.checkpoint_bytes
    assert got == pytest.approx(_needed(new, StateBytes()), rel=1e-9)
    # the lost node sends nothing
    lost = set(range(plan.devices - 8, plan.devices))
    assert all(b == 0 for d, b in zip(m.devices, m.sent_bytes, strict=True) if d in lost)


def test_checkpoint_bytes_are_the_lost_shards(dp_plan) -> None:
    # ZeRO >= 1 keeps one copy of each optimizer shard: losing node 0 loses its shards
    c = dp_plan.config
    assert c.zero >= 1 and c.dp == 16 and c.tp == 1 and c.pp == 1
    r = ex.replan(dp_plan, ex.NodeLoss(1, nodes=(0,)))
    lay = job_layout(dp_plan)
    per_device_opt = sum(lay.part_params) * StateBytes().optimizer_bytes / c.dp
    per_device_w = sum(lay.part_params) * StateBytes().weight_bytes / (c.dp if c.zero >= 3 else 1)
    lost_w = 8 * per_device_w if c.zero >= 3 else 0.0
    assert r.migration.checkpoint_bytes == pytest.approx(8 * per_device_opt + lost_w, rel=1e-9)


def test_straggler_options(dp_plan) -> None:
    r = ex.replan(dp_plan, ex.Straggler(1, speed=0.5), horizon_steps=1000)
    opts = {o.name.split(" ")[0]: o for o in r.options}
    assert {"keep", "rebalance", "drop"} <= set(opts)
    old = dp_plan.sim.step_time_s
    assert opts["keep"].step_time_s > old
    assert old <= opts["rebalance"].step_time_s < opts["keep"].step_time_s
    assert opts["rebalance"].switch_s == 0 and opts["rebalance"].migration is None
    assert opts["drop"].migration is not None and opts["drop"].switch_s > 0
    costs = [o.cost_s(1000) for o in r.options]
    assert costs == sorted(costs)
    drop = opts["drop"]
    saving = r.keep_step_s - drop.step_time_s
    expected = drop.switch_s / saving if saving > 0 else math.inf
    assert drop.break_even_steps == pytest.approx(expected)


def test_memory_cap(plan) -> None:
    cap = plan.sim.memory.total * 0.6
    r = ex.replan(plan, ex.MemoryCap(cap))
    assert r.new.sim.memory.total <= cap
    assert r.break_even_text.startswith("required")


def test_new_global_batch(plan) -> None:
    r = ex.replan(plan, ex.NewGlobalBatch(256))
    assert r.new.global_batch == 256 and r.new.devices == plan.devices
    keep = [o for o in r.options if o.name == "keep"]
    if keep:  # the old layout still splits the batch: break-even against it
        assert r.keep_step_s == keep[0].step_time_s


def test_switch_segments(plan) -> None:
    r = ex.replan(plan, ex.NodeLoss(1))
    seg = r.switch_segments(before=2, after=3)
    assert [s[0] for s in seg] == ["old step 1", "old step 2", "migration", "new step 1",
                                   "new step 2", "new step 3"]  # fmt: skip
    assert all(a[2] == pytest.approx(b[1]) for a, b in zip(seg, seg[1:], strict=False))
    assert seg[2][2] - seg[2][1] == pytest.approx(r.switch_s)


def test_bad_events(plan) -> None:
    with pytest.raises(ReplanError, match="leaves no node"):
        ex.replan(plan, ex.NodeLoss(4))
    with pytest.raises(ReplanError, match="speed"):
        ex.Straggler(0, speed=0.0)
    with pytest.raises(ReplanError, match="not a node of the job"):
        ex.replan(plan, ex.Straggler(9))
    with pytest.raises(ReplanError, match="event"):
        ex.replan(plan, "node loss")
    with pytest.raises(ReplanError, match="distinct"):
        ex.NodeLoss(2, nodes=(1, 1))
    assert issubclass(ReplanError, ex.ExplorerError)
    assert issubclass(MigrationError, ex.ExplorerError)


@pytest.mark.parametrize(("src_zero", "dst_zero"), [(0, 3), (3, 0), (3, 3)])
def test_same_mesh_migration_matches_the_redistribution_planner(src_zero, dst_zero) -> None:
    # On one mesh the migration of a ZeRO change is the planner's slice or all-gather(dp)
    from explorer.hardware import Mesh
    from explorer.ir import TensorType
    from explorer.sharding import Layout
    from explorer.sharding.redistribute import redistribute

    def layout(zero):
        return JobLayout(ParallelConfig(dp=4, tp=2, zero=zero), uniform_partition(1, 1),
                         tuple(range(8)), (0.0, 4096.0, 0.0))  # fmt: skip

    def spec(zero):
        return Layout(((("tp", "dp") if zero >= 3 else ("tp",)),))

    state = StateBytes(weight_bytes=2.0, optimizer_bytes=0.0)
    m = plan_migration(layout(src_zero), layout(dst_zero), load("a100-80g"), state=state)
    mesh = Mesh({"dp": 4, "tp": 2}, hardware="a100-80g")
    r = redistribute(spec(src_zero), spec(dst_zero), TensorType((4096,), "bf16"), mesh)
    assert max(m.received_bytes) == pytest.approx(r.bytes_per_device, rel=1e-12)
    assert all(b == pytest.approx(r.bytes_per_device, rel=1e-12) for b in m.received_bytes)
