"""replan after a node loss screens a few device counts and every tp, then plans the best few
structures in full: no worse than planning the largest usable count with the old tp alone."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import resolve
from explorer.models import load
from explorer.training import ReplanError, TrainingParams
from explorer.training.replanning.screen import final_spaces, screen, usable_counts

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

SPACE = ex.training.SearchSpace


@pytest.fixture(scope="module")
def job():  # the notebook's case: 8 nodes of 8 A100s, the batch does not split over 56 well
    return ex.plan_training("gpt3-1.3b", devices=64, hardware="a100-80g", global_batch=256,
                            seq=2048)  # fmt: skip


@pytest.fixture(scope="module")
def lost(job):
    return ex.replan(job, ex.NodeLoss(1, nodes=(7,)))


def test_no_worse_than_the_largest_count_alone(job, lost) -> None:
    alone = ex.plan_training("gpt3-1.3b", devices=56, hardware="a100-80g", global_batch=256,
                             seq=2048, space=SPACE(tp=(job.config.tp,)))  # fmt: skip
    assert lost.new.sim.fits
    assert lost.step_time_s <= alone.sim.step_time_s
    # the full search of the largest count (every tp, planned in full) is the reference the
    # screen approximates; on this case it finds the same step (the claim: within 1 %)
    full = ex.plan_training("gpt3-1.3b", devices=56, hardware="a100-80g", global_batch=256,
                            seq=2048)  # fmt: skip
    assert lost.step_time_s <= full.sim.step_time_s * 1.01


def test_tried_counts_are_reported(lost) -> None:
    assert [t.split(" ")[0] for t in lost.tried] == ["56", "48", "40"]
    assert all(" structure(s), best " in t for t in lost.tried)
    assert "screened: 56 devices" in lost.report()
    assert lost.as_dict()["tried"] == list(lost.tried)
    chosen = [o for o in lost.options if o.plan is lost.new]
    assert chosen and chosen[0].name == f"replan ({lost.new.devices} devices)"


def test_one_candidate_screens_the_largest_count_only(job) -> None:
    r = ex.replan(job, ex.NodeLoss(1, nodes=(7,)), candidates=1, finalists=1)
    assert len(r.tried) == 1 and r.new.devices == 56 and len(r.options) == 1


def test_a_given_space_is_kept(job) -> None:
    r = ex.replan(job, ex.NodeLoss(1, nodes=(7,)), space=SPACE(tp=(2,)))
    assert r.new.config.tp == 2
    assert all(o.plan.config.tp == 2 for o in r.options)


def test_screen_structures_are_valid() -> None:
    cfg, cluster = load("gpt3-1.3b"), resolve("a100-80g")
    counts = usable_counts(cfg, 60, cluster, 256, 2048, SPACE(), 2)
    assert counts == [56, 48]
    found, tried = screen(cfg, counts, cluster, 256, 2048, SPACE(), TrainingParams())
    assert [t.devices for t in tried] == counts
    assert [s.step_time_s for s in found] == sorted(s.step_time_s for s in found)
    for s in found:
        c = s.config
        assert c.dp * c.tp * c.pp * c.cp == s.devices and 256 % c.dp == 0
    for t in tried:  # each count's best is the fastest of its screened structures
        mine = [s.step_time_s for s in found if s.devices == t.devices]
        assert t.best is not None and t.best.step_time_s == min(mine)
    spaces = final_spaces(found[:3], SPACE())
    assert spaces[0][0] == found[0].devices
    assert found[0].config.tp in spaces[0][1].tp and found[0].config.pp in spaces[0][1].pp


def test_bad_finalists(job) -> None:
    with pytest.raises(ReplanError, match="finalists"):
        ex.replan(job, ex.NodeLoss(1), finalists=0)


def test_a_smaller_count_can_win() -> None:
    # gpt3-6.7b on 16 nodes, batch 512: 120 survivors split 512 poorly (dp 8 x pp 15 at
    # best), 112 devices (dp 8 x tp 2 x pp 7) beat them; measured: the screen picks the full
    # search's plan over the three counts (the claim: within 1 %)
    job = ex.plan_training("gpt3-6.7b", devices=128, global_batch=512, seq=2048)
    r = ex.replan(job, ex.NodeLoss(1))
    counts = [int(t.split(" ")[0]) for t in r.tried]
    assert counts == [120, 112, 104]
    full = min(
        (ex.plan_training("gpt3-6.7b", devices=n, global_batch=512, seq=2048) for n in counts),
        key=lambda p: p.sim.step_time_s,
    )
    assert r.step_time_s <= full.sim.step_time_s * 1.01
    assert r.new.devices < counts[0] and full.devices < counts[0]


def test_memory_cap_searches_every_tp() -> None:
    # under a cap some tp cannot hold one layer (the graph search raises SearchError): the
    # search skips those configurations instead of failing, and replan may change tp
    job = ex.plan_training("gpt3-125m", devices=32, global_batch=128, seq=1024)
    cap = job.sim.memory.total * 0.6
    r = ex.replan(job, ex.MemoryCap(cap))
    assert r.new.sim.fits and r.new.sim.memory.total <= cap
    assert r.tried and r.tried[0].startswith("32 devices")
    params = TrainingParams()
    params = params.replace(cost=params.cost.replace(device_memory_cap_bytes=cap))
    full = ex.plan_training("gpt3-125m", devices=32, global_batch=128, seq=1024, params=params)
    assert full.sim.memory.total <= cap
    assert r.step_time_s <= full.sim.step_time_s * 1.01  # measured: equal on this case


def test_a_given_space_is_kept_on_the_same_devices(job) -> None:
    # the old tp (2) is outside the given space: the new plan never uses it
    r = ex.replan(job, ex.NewGlobalBatch(512), space=SPACE(tp=(1, 4)))
    new = next(o.plan for o in r.options if o.name == "replan")  # keep may still win
    assert job.config.tp == 2 and new.config.tp in (1, 4)
