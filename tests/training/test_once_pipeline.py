"""Pipeline and planning knowledge written once, so that two copies cannot drift: each merged formula's
numbers, captured as literals before the copies were merged, so the one definition keeps
them.

- the closed-form pipeline step ``sum_g t_g + (m-1) max_g t_g`` (interleaved:
  ``m max_d W_d + (p-1) max_g t_g``): `explorer.training.pipeline.pipeline_time`, read by
  `estimate`, `simulate`'s recompute walk and interleaved split choice, the hetero
  pipeline's step and the straggler's layer rebalance.
- the tensor-parallel candidates (divisors of the heads that fit in a node):
  `explorer.training.planning.space.tp_candidates`, read by the one-cluster structures,
  the least-memory search behind "fits nowhere" and the hetero pipeline's pools.
- the recompute ladder (none -> selective -> per_layer -> full) and its walk:
  `explorer.training.planning.space.RECOMPUTE_LADDER` and `cheapest_recompute`, read by
  `plan_training`'s search, the re-planning screen and the hetero pipeline search.
"""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import resolve
from explorer.models import load, names
from explorer.training import ParallelConfigError, TrainingParams
from explorer.training.hetero.pipeline import evaluate_pipeline
from explorer.training.planning.space import (
    RECOMPUTE_LADDER,
    SearchSpace,
    cheapest_recompute,
    structures,
    tp_candidates,
)
from explorer.training.replanning.layers import rebalance_layers
from explorer.training.replanning.screen import screen
from explorer.training.step_model.model import StepModel

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

P = ex.ParallelConfig
EXACT = 1e-12


# ----- the closed-form pipeline step ------------------------------------------------------
# (model, config, global batch, sequence) -> (estimate's step, its split), captured before
# the merge (commit ff2f619).
ESTIMATES = {
    "1f1b": (
        ("gpt2", P(dp=2, pp=4, microbatch_size=2), 32, 512),
        (0.3020217151768549, "embed+3 | 4 | 4 | 1+head"),
    ),
    "gpipe": (
        ("gpt2", P(dp=2, pp=4, microbatch_size=2, schedule="gpipe"), 32, 512),
        (0.3020217151768549, "embed+3 | 4 | 4 | 1+head"),
    ),
    "interleaved_uneven": (
        ("gpt2", P(pp=4, schedule="interleaved_1f1b", virtual_stages=2), 16, 512),
        (0.4112644283407695, "embed+1 | 1 | 1 | 2 | 2 | 2 | 2 | 1+head"),
    ),
    "interleaved_5_chunks": (
        ("gpt2", P(pp=2, schedule="interleaved_1f1b", virtual_stages=5), 8, 512),
        (0.2797517422645469, "embed+1 | 1 | 1 | 1 | 1 | 1 | 1 | 2 | 2 | 1+head"),
    ),
}


@pytest.mark.parametrize("name", list(ESTIMATES))
def test_estimate_pipeline_step_is_pinned(name):
    (model, par, gb, seq), (step, split) = ESTIMATES[name]
    r = ex.estimate(model, par, global_batch=gb, seq=seq)
    assert r.step_time_s == pytest.approx(step, rel=EXACT)
    assert str(r.partition) == split


def test_simulate_recompute_walk_under_memory_caps_is_pinned():
    """per_layer recompute whose fewest count fits only a memory-capped split: the walk
    ranks the counts by the closed-form step."""
    par = P(dp=2, tp=4, pp=8, microbatch_size=1, zero=1, recompute="per_layer")
    r = ex.simulate("gpt3-175b", par, hardware="a100-80g", global_batch=128, seq=2048)
    assert r.partition_choice.method == "memory_capped"
    assert r.config.recompute_num_layers == 0
    assert str(r.partition) == "embed+10 | 11 | 12 | 12 | 13 | 13 | 13 | 12+head"
    assert r.step_time_s == pytest.approx(31.499624674658016, rel=EXACT)


def test_hetero_pipeline_step_is_pinned():
    pools = (ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8))
    arr = evaluate_pipeline(load("gpt2"), pools, (0, 1), 2, (1, 1), 2, "none", 64, 512,
                            TrainingParams())  # fmt: skip
    assert str(arr.partition) == "embed+2 | 2 | 2 | 2 | 1 | 1 | 1 | 1+head"
    assert arr.step_time_s == pytest.approx(0.5056483360649565, rel=EXACT)


def test_straggler_layer_rebalance_ratio_is_pinned():
    est = ex.estimate("gpt3-1.3b", P(dp=8, pp=4, microbatch_size=1), global_batch=128, seq=2048)
    step = StepModel(load("gpt3-1.3b"), est.config, resolve("a100-80g"), 128, 2048,
                     TrainingParams())  # fmt: skip
    s = rebalance_layers(step, est.partition, frozenset({1}), 0.5)
    assert s.new_layers == (7, 3, 8, 6)
    assert s.ratio == pytest.approx(0.7020190178861057, rel=EXACT)
    assert rebalance_layers(step, est.partition, frozenset({1}), 0.9).ratio == 1.0


# ----- tensor-parallel candidates ---------------------------------------------------------
# Per zoo model, the tp degrees searched on 8-chip nodes: the divisors of the attention
# heads up to a node (captured before the merge from the three copies, which agreed).
TP_ON_8 = {
    "bert-base": (1, 2, 3, 4, 6), "bert-large": (1, 2, 4, 8), "bloom-176b": (1, 2, 4, 7, 8),
    "gpt2": (1, 2, 3, 4, 6), "gpt2-medium": (1, 2, 4, 8), "gpt2-xl": (1, 5),
    "gpt3-1.3b": (1, 2, 4, 8), "gpt3-125m": (1, 2, 3, 4, 6), "gpt3-13b": (1, 2, 4, 5, 8),
    "gpt3-175b": (1, 2, 3, 4, 6, 8), "gpt3-6.7b": (1, 2, 4, 8), "llama2-13b": (1, 2, 4, 5, 8),
    "llama2-70b": (1, 2, 4, 8), "llama2-7b": (1, 2, 4, 8), "llama3-405b": (1, 2, 4, 8),
    "llama3-70b": (1, 2, 4, 8), "llama3-8b": (1, 2, 4, 8), "megatron-1.7b": (1, 2, 3, 4, 6, 8),
    "megatron-1008b": (1, 2, 4, 5, 8), "megatron-145.6b": (1, 2, 3, 4, 6, 8),
    "megatron-18.4b": (1, 2, 3, 4, 6, 8), "megatron-3.6b": (1, 2, 4, 8),
    "megatron-310.1b": (1, 2, 4, 8), "megatron-39.1b": (1, 2, 4, 8),
    "megatron-529.6b": (1, 2, 4, 8), "megatron-7.5b": (1, 2, 4, 8),
    "megatron-76.1b": (1, 2, 4, 5, 8), "mixtral-8x7b": (1, 2, 4, 8), "mlp-small": (),
    "pangu-alpha-13b": (1, 2, 4, 5, 8), "pangu-alpha-2.6b": (1, 2, 4, 8),
    "pangu-alpha-200b": (1, 2, 4, 8),
}  # fmt: skip


def test_tp_candidates_per_zoo_model_are_pinned():
    assert set(TP_ON_8) == set(names())
    for name, want in TP_ON_8.items():
        cfg = load(name)
        assert tuple(tp_candidates(cfg, chips_per_node=8)) == want, name
        # devices: only the degrees that divide them (a hetero pool's chips per replica)
        assert tuple(tp_candidates(cfg, 8, devices=12)) == tuple(t for t in want if 12 % t == 0)


def test_structures_use_the_tp_candidates():
    cluster = resolve("a100-80g")
    st, _ = structures(load("bloom-176b"), 56, cluster, 56, 2048, SearchSpace())
    assert sorted({tp for tp, _, _, _ in st}) == [1, 2, 4, 7, 8]


# ----- the cheapest recomputation that fits -----------------------------------------------
def test_plan_training_recompute_ladder_is_pinned():
    space = SearchSpace(tp=(2, 4), microbatch_sizes=(1, 2), schedules=("1f1b",))
    plan = ex.plan_training("gpt3-13b", devices=8, hardware="a100-40g", global_batch=32,
                            seq=2048, space=space)  # fmt: skip
    assert str(plan.config) == "dp4 x tp2 x pp1 +sp, mb2, 1f1b, zero3, recompute per_layer(7)"
    assert plan.sim.step_time_s == pytest.approx(4.925534973171167, rel=EXACT)
    # estimates: each rung walked until one fits (objectives=: every configuration; the
    # default skips those whose step-time floor is above the kept plans)
    every = ex.plan_training("gpt3-13b", devices=8, hardware="a100-40g", global_batch=32,
                             seq=2048, space=space, objectives=("step_time", "memory"))  # fmt: skip
    assert every.searched == 40 and every.pruned == 0 and every.config == plan.config
    assert plan.searched < 40 and plan.pruned > 0


def test_replan_screen_recompute_ladder_is_pinned():
    found, tried = screen(load("gpt3-13b"), [8], resolve("a100-40g"), 32, 2048,
                          SearchSpace(microbatch_sizes=(1, 2)), TrainingParams())  # fmt: skip
    got = [(str(s.config), s.step_time_s) for s in found]
    want = [
        ("dp4 x tp2 x pp1 +sp, mb1, 1f1b, zero3, recompute per_layer(0)", 5.0281583631323485),
        ("dp8 x tp1 x pp1, mb1, 1f1b, zero3, recompute per_layer(10)", 5.169605598089461),
        ("dp2 x tp2 x pp2 +sp, mb1, 1f1b, zero2, recompute per_layer(0)", 5.201719024407907),
        ("dp2 x tp4 x pp1 +sp, mb1, 1f1b, zero1, recompute none", 5.272647062499837),
        ("dp1 x tp4 x pp2 +sp, mb1, 1f1b, zero0, recompute none", 5.504065557736621),
        ("dp4 x tp1 x pp2, mb1, 1f1b, zero3, recompute per_layer(5)", 5.809286290496284),
        ("dp1 x tp8 x pp1 +sp, mb1, 1f1b, zero0, recompute none", 6.7995041053107),
    ]
    assert [c for c, _ in got] == [c for c, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a == pytest.approx(b, rel=EXACT)
    assert [t.estimated for t in tried] == [7]


def test_hetero_pipeline_recompute_ladder_is_pinned():
    plan = ex.plan_hetero("gpt3-6.7b", [ex.Pool("a100-40g", 4), ex.Pool("a100-80g", 4)], 32,
                          2048, modes=("pipeline",))  # fmt: skip
    assert plan.searched == 135  # arrangements evaluated: each rung until one fits
    assert plan.step_time_s == pytest.approx(2.594056046269743, rel=EXACT)
    assert plan.estimate_s == pytest.approx(2.5996701940546765, rel=EXACT)
    assert str(plan.partition) == "embed+17 | 15+head"


def test_the_ladder_is_walked_cheapest_first():
    seen = []

    def evaluate(policy):
        seen.append(policy)
        return {"none": 90, "selective": 70, "per_layer": 60, "full": 50}[policy]

    tried = cheapest_recompute(("full", "per_layer", "none", "selective"), evaluate,
                               fits=lambda gib: gib <= 70)  # fmt: skip
    assert seen == ["none", "selective"] and tried == [("none", 90), ("selective", 70)]
    assert RECOMPUTE_LADDER == ("none", "selective", "per_layer", "full")
    # a rung that is not valid (None) is skipped; an error in stop_on ends the walk
    assert cheapest_recompute(RECOMPUTE_LADDER, lambda p: None if p == "none" else 1,
                              fits=lambda r: True) == [("selective", 1)]  # fmt: skip

    def invalid(policy):
        raise ParallelConfigError("not valid")

    assert cheapest_recompute(RECOMPUTE_LADDER, invalid, bool, stop_on=(ParallelConfigError,)) == []
