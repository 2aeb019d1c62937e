"""Local SGD / DiLoCo: per-step communication saved by syncing across datacenters every H."""

from __future__ import annotations

import dataclasses

import pytest

import explorer as ex
from explorer.hardware import load
from explorer.hardware.wan import datacenters
from explorer.training.errors import TrainingError
from explorer.training.local_sgd import CAVEAT, local_sgd

# Set on the 2021 physics (the gradient all-reduce not hidden behind the backward): runs
# without params use the megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")


@pytest.fixture(scope="module")
def setup():
    two = datacenters(dataclasses.replace(load("a100-80g"), max_nodes=8), 2)
    plan = ex.plan_training("gpt3-1.3b", devices=128, hardware=two, global_batch=256, seq=2048)
    return two, plan


def test_saving_grows_with_h_towards_the_wan_share(setup) -> None:
    two, plan = setup
    r = local_sgd(plan, (1, 10, 100, 500), hardware=two)
    assert [row.h for row in r.rows] == [1, 10, 100, 500]
    assert r.rows[0].saving_s == 0
    assert r.rows[0].step_time_s == pytest.approx(plan.sim.step_time_s, rel=1e-9)
    savings = [row.saving_s for row in r.rows]
    assert savings == sorted(savings) and savings[-1] > 0
    s = r.sync
    for row in r.rows:
        assert row.comm_s == pytest.approx(s.inside_s + s.wan_s / row.h, rel=1e-12)
        assert row.wan_bytes_per_step == pytest.approx(r.rows[0].wan_bytes_per_step / row.h)
    assert r.rows[-1].saving_s <= s.wan_s  # never more than the WAN sync it removes


def test_caveat_cites_diloco(setup) -> None:
    two, plan = setup
    r = local_sgd(plan, (1, 500), hardware=two)
    assert r.caveat == CAVEAT and "arXiv:2311.08105" in r.table()
    assert "not modelled" in r.table()


def test_one_datacenter_is_refused() -> None:
    plan = ex.plan_training("gpt3-125m", devices=16, global_batch=64, seq=1024)
    with pytest.raises(TrainingError, match="does not cross datacenters"):
        local_sgd(plan)
    with pytest.raises(TrainingError, match="h="):
        local_sgd(plan, (0,))
