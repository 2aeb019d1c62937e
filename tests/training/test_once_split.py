"""Every way of cutting layers into pipeline stages is one splitter, so that two cannot disagree:
`explorer.training.pipeline.partition.partition_layers`, a dynamic programme over part
times that may differ per stage, with a fixed time and a memory (or layer-count) cap per
stage. It minimises the slowest stage, then the sum of the stage times, then the slowest
stage before each cut. `split_layers` (the pools' pipeline and the straggler's layer
rebalance) is its per-layer form; `step_model.split` reads the layer, embedding and head
times and the most layers a stage holds off the step model.

Before the merge the pools and the straggler used a bisection on the stage time with the
surplus taken off the slowest stages (`hetero/pipeline.split_layers`): the same slowest
stage, but not always the least sum, so the 1F1B step's ``sum_g T_g`` term could be longer
than need be. The literals below were captured before the merge (commit 0682079); the
rows marked "moved" are where the one splitter returns another split, each with the old
value and why the new one is no worse.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.export.megatron_split import megatron_stage_layers
from explorer.hardware import resolve
from explorer.models import load
from explorer.training import TrainingParams, partition_layers
from explorer.training.hetero.pipeline import evaluate_pipeline
from explorer.training.pipeline.partition import StagePartition, split_layers
from explorer.training.pipeline.schedule import pipeline_time
from explorer.training.replanning.layers import rebalance_layers
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.split import layer_seconds

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

P = ex.ParallelConfig
EXACT = 1e-12


# ----- one cluster: one time per part on every stage (unchanged) ---------------------------
# ((times, static, activations, in flight, caps, end stages alone), bounds)
PARTITION_CASES = [
    (([1, 4, 4, 4, 4, 3], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1], [1, 1], False), (0, 3, 6)),
    (([0.1, 1, 1, 1, 1, 1, 1, 1, 1, 0.5], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [4, 3, 2, 1], [8, 8, 8, 8], False), (0, 2, 4, 7, 10)),
    (([0.3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2.2], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], False), (0, 4, 8, 12, 14)),
    (([0.3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2.2], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [4, 3, 2, 1], [14, 14, 14, 14], False), (0, 3, 7, 11, 14)),
    (([2, 1, 1, 1, 3], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], True), (0, 1, 2, 3, 4, 5)),
    (([1, 5, 7, 7, 9, 6, 3, 4, 5, 8], [0, 1, 4, 3, 0, 0, 0, 5, 3, 3], [0, 3, 2, 0, 1, 0, 2, 1, 1, 2], [2, 1], [48, 48], False), (0, 5, 10)),
    (([2, 8, 3, 8, 8, 3, 3, 3, 9, 6], [5, 4, 1, 4, 0, 0, 0, 3, 0, 4], [2, 2, 2, 0, 2, 2, 2, 3, 1, 2], [4, 3, 2, 1], [34, 34, 34, 34], False), (0, 3, 5, 8, 10)),
    (([8, 4, 6, 9, 3, 2, 7], [1, 3, 0, 0, 5, 3, 3], [0, 1, 1, 0, 1, 0, 3], [2, 1], [30, 30], False), (0, 3, 7)),
    (([7, 8, 4, 1, 2, 5, 8, 9, 4, 8, 5], [1, 0, 0, 4, 4, 5, 1, 5, 4, 4, 1], [2, 0, 3, 1, 0, 3, 2, 3, 1, 3, 0], [2, 1], [40, 40], False), (0, 6, 11)),
    (([7, 7, 5, 9, 9, 1, 5, 2, 1, 3, 6, 9, 7, 4], [1, 5, 0, 2, 4, 5, 4, 0, 1, 4, 3, 3, 5, 2], [0, 2, 3, 0, 1, 3, 1, 0, 1, 3, 3, 0, 3, 2], [4, 3, 2, 1], [55, 55, 55, 55], False), (0, 3, 5, 11, 14)),
    (([9, 9, 5, 5, 2, 4, 1, 8, 7, 1, 8, 7, 5, 6], [3, 2, 2, 2, 2, 1, 3, 0, 3, 5, 3, 4, 2, 4], [2, 0, 3, 1, 2, 1, 2, 0, 3, 0, 2, 3, 0, 0], [3, 2, 1], [41, 41, 41], False), (0, 3, 9, 14)),
    (([8, 1, 7, 2, 5, 4, 6], [4, 1, 4, 0, 1, 5, 4], [3, 2, 2, 0, 1, 0, 0], [3, 2, 1], [36, 36, 36], False), (0, 2, 5, 7)),
    (([3, 5, 8, 5, 1, 1], [4, 4, 0, 2, 0, 1], [2, 0, 1, 1, 1, 3], [2, 1], [45, 45], False), (0, 2, 6)),
]  # fmt: skip


@pytest.mark.parametrize("case, bounds", PARTITION_CASES)
def test_one_cluster_splits_are_pinned(case, bounds):
    times, static, acts, flight, caps, alone = case
    assert partition_layers(times, static, acts, flight, caps, alone).bounds == bounds


@pytest.mark.parametrize("case, bounds", PARTITION_CASES)
def test_the_same_times_per_stage_give_the_same_split(case, bounds):
    """The tie-break's claim: with the times written out per stage (the second pass runs)
    the split is the one-list split (the second pass skipped: every sum is the same)."""
    times, static, acts, flight, caps, alone = case
    per_stage = [list(times)] * len(caps)
    assert partition_layers(per_stage, static, acts, flight, caps, alone).bounds == bounds


@pytest.mark.parametrize("L, pp", [(10, 4), (14, 4), (30, 8), (126, 16), (94, 8)])
def test_ends_costing_a_layer_give_megatrons_embedding_and_loss_split(L, pp):
    """The tie-break against Megatron-Core's uneven convention (`export.megatron_split`,
    get_num_layers_to_build with --account-for-embedding/loss-in-pipeline-split: the first
    and last stage build one layer fewer). With the embedding and the head as slow as a
    layer the slowest stage alone gives that split."""
    z = [0] * (L + 2)
    part = partition_layers([1.0] * (L + 2), z, z, [1] * pp, [1] * pp)
    want = megatron_stage_layers(L, pp, account_for_embedding=True, account_for_loss=True)
    assert part.layer_counts() == want


def test_a_tie_puts_the_work_on_the_later_stages():
    """Free embedding and head: every split with 3 layers at most is as slow and as long;
    the earlier stages (more microbatches in flight under 1F1B) stay lighter, the last
    stage included among the heavier (not Megatron's lighter last stage: that comes from
    the head's own time, above)."""
    z = [0] * 12
    part = partition_layers([0] + [1] * 10 + [0], z, z, [1] * 4, [1] * 4)
    assert part.layer_counts() == (2, 2, 3, 3)


# (config, split, how it was chosen, simulated step), captured before the merge
SIMULATED = [
    (dict(dp=8, microbatch_size=4), "embed+12+head", "uniform", 0.18038450848195653),
    (dict(pp=4, schedule="interleaved_1f1b", virtual_stages=3),
     "embed+1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1+head", "uniform", 0.7362151779381441),
    (dict(pp=2, schedule="interleaved_1f1b", virtual_stages=4),
     "embed+1 | 1 | 1 | 2 | 2 | 2 | 2 | 1+head", "time_balanced", 1.0538782799858024),
    (dict(dp=2, tp=2, pp=2, microbatch_size=2), "embed+8 | 4+head", "time_balanced",
     0.25203012540225095),
]  # fmt: skip


@pytest.mark.parametrize("kw, split, method, step", SIMULATED)
def test_simulate_splits_are_pinned(kw, split, method, step):
    r = ex.simulate("gpt2", P(**kw), hardware="a100-80g", global_batch=32, seq=512)
    assert (str(r.partition), r.partition_choice.method) == (split, method)
    assert r.step_time_s == pytest.approx(step, rel=EXACT)


def test_memory_capped_simulate_split_is_pinned():
    par = P(dp=2, tp=4, pp=8, microbatch_size=1, zero=1, recompute="selective")
    r = ex.simulate("gpt3-175b", par, hardware="a100-80g", global_batch=128, seq=2048)
    assert r.partition_choice.method == "memory_capped"
    assert str(r.partition) == "embed+10 | 11 | 12 | 12 | 13 | 13 | 13 | 12+head"
    assert r.step_time_s == pytest.approx(31.499624674658016, rel=EXACT)


# ----- one time per layer per stage, a layer cap per stage ---------------------------------
# ((layers, per-layer seconds, extra seconds, most layers) per stage, split)
SPLIT_CASES = [
    ((9, [1.0, 2.0], [0.0, 0.0], [9, 9]), [6, 3]),
    ((9, [1.0, 2.0], [0.0, 0.0], [4, 9]), [4, 5]),
    ((10, [1.0, 1.0], [0.0, 2.0], [10, 10]), [6, 4]),
    ((10, [1.0, 1.0], [0.0, 0.0], [4, 4]), None),
    ((11, [1.8, 2.82, 2.02], [1.06, 0.44, 1.12], [12, 5, 8]), [4, 3, 4]),
    ((8, [1.2, 2.34, 2.51], [0.08, 0.79, 1.45], [11, 9, 3]), [5, 2, 1]),
    ((8, [1.28, 0.27, 1.02], [0.85, 1.65, 1.18], [7, 6, 4]), [1, 5, 2]),
    ((4, [2.05, 1.39, 0.6, 2.48], [1.15, 1.94, 1.07, 1.25], [7, 10, 3, 8]), [1, 1, 1, 1]),
    ((13, [2.34, 2.95, 1.42], [0.01, 1.27, 0.51], [12, 1, 7]), [5, 1, 7]),
    ((10, [2.93, 2.25, 2.16, 2.04, 0.89], [0.34, 1.2, 0.13, 1.18, 1.03], [9, 2, 2, 7, 8]), [1, 1, 2, 2, 4]),
    ((13, [2.42, 0.44, 0.15], [1.04, 0.42, 1.29], [6, 5, 5]), [3, 5, 5]),
    ((10, [1.53, 1.68, 2.39, 0.96], [1.93, 0.04, 1.58, 1.14], [9, 3, 2, 12]), [2, 3, 1, 4]),
    ((13, [2.79, 2.12, 1.0], [0.5, 1.91, 1.16], [2, 1, 12]), [2, 1, 10]),
    ((5, [1.58, 0.89, 1.76, 2.98, 1.98], [1.75, 0.39, 1.47, 1.46, 0.14], [3, 3, 4, 8, 1]), [1, 1, 1, 1, 1]),
    ((7, [2.93, 0.1, 2.45], [1.52, 1.14, 1.14], [1, 11, 1]), [1, 5, 1]),
    ((5, [2.41, 1.13, 1.79], [1.02, 1.81, 0.83], [8, 2, 8]), [1, 2, 2]),
    ((8, [2.04, 1.87, 2.51, 0.7], [1.61, 1.59, 0.29, 0.28], [10, 11, 2, 10]), [1, 1, 1, 5]),
    ((13, [0.67, 0.6, 2.06, 1.98, 1.84], [1.78, 0.41, 0.13, 1.31, 0.2], [10, 12, 3, 2, 9]), [3, 6, 1, 1, 2]),
    ((10, [0.29, 2.07, 1.2, 1.07, 2.46], [1.42, 0.3, 1.26, 0.85, 0.43], [9, 9, 4, 6, 1]), [5, 1, 1, 2, 1]),
    ((14, [0.48, 2.61], [0.14, 0.75], [1, 1]), None),
    ((5, [0.57, 2.68, 1.11, 0.7, 2.15], [1.35, 0.6, 1.6, 1.82, 1.58], [2, 7, 9, 11, 7]), [1, 1, 1, 1, 1]),
    ((5, [0.61, 2.65, 2.84, 0.17, 2.59], [1.56, 1.39, 0.21, 1.47, 1.54], [11, 6, 7, 11, 12]), [1, 1, 1, 1, 1]),
    ((9, [0.97, 1.64, 1.62], [1.91, 1.27, 1.24], [10, 11, 9]), [4, 2, 3]),
    ((7, [1.84, 1.27, 1.08, 0.55, 0.13], [0.67, 0.6, 0.16, 0.97, 0.7], [1, 7, 11, 2, 5]), [1, 1, 1, 1, 3]),
    ((4, [0.16, 1.87, 2.72], [0.73, 1.79, 1.66], [10, 2, 11]), [2, 1, 1]),
    # moved: [1, 1, 2, 4] before (bisection, surplus off the slowest stages): same slowest
    # stage 3.92 s, sum 12.03 -> 11.91 s
    ((8, [2.84, 0.68, 0.72, 0.6], [1.08, 1.97, 0.98, 0.64], [12, 7, 6, 6]), [1, 1, 1, 5]),
    ((12, [1.34, 2.26, 2.27], [1.8, 1.18, 1.47], [2, 1, 3]), None),
    ((4, [0.44, 1.36], [1.73, 0.71], [2, 11]), [2, 2]),
    ((9, [0.95, 2.62, 2.45, 2.76], [2.0, 0.41, 1.13, 0.79], [10, 12, 10, 5]), [4, 2, 2, 1]),
    ((14, [2.0, 0.57], [1.28, 0.08], [8, 9]), [5, 9]),
    ((5, [0.47, 0.14, 1.15, 2.37, 1.96], [1.56, 1.09, 0.28, 1.43, 1.41], [5, 10, 4, 2, 5]), [1, 1, 1, 1, 1]),
    ((14, [2.68, 0.11, 0.88, 1.51, 1.49], [1.7, 1.98, 0.84, 0.4, 1.42], [7, 1, 7, 2, 12]), [1, 1, 7, 2, 3]),
    ((6, [0.87, 2.47, 0.73, 0.12], [1.37, 1.03, 0.83, 1.93], [7, 4, 4, 1]), [1, 1, 3, 1]),
    ((4, [2.19, 0.11, 1.18], [1.48, 0.05, 0.82], [6, 10, 8]), [1, 2, 1]),
]  # fmt: skip


def _key(ls, per, extra):
    t = [n * p + e for n, p, e in zip(ls, per, extra, strict=True)]
    return max(t), sum(t)


@pytest.mark.parametrize("case, want", SPLIT_CASES)
def test_per_layer_splits_are_pinned(case, want):
    assert split_layers(*case) == want


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 4).flatmap(
        lambda S: st.tuples(
            st.integers(S, 12),
            st.lists(st.floats(0.1, 5.0), min_size=S, max_size=S),
            st.lists(st.floats(0.0, 3.0), min_size=S, max_size=S),
            st.lists(st.integers(1, 12), min_size=S, max_size=S),
        )
    )
)
def test_split_is_the_least_slowest_stage_then_the_least_sum(case):
    """Brute force over every split: the slowest stage is the least, and among the splits
    as slow the sum of the stage times is the least."""
    L, per, extra, most = case
    got = split_layers(L, per, extra, most)
    splits = [ls for ls in itertools.product(*(range(1, m + 1) for m in most)) if sum(ls) == L]
    if not splits:
        assert got is None
        return
    assert sum(got) == L and all(1 <= n <= m for n, m in zip(got, most, strict=True))
    worst, total = _key(got, per, extra)
    best = min(_key(ls, per, extra)[0] for ls in splits)
    assert worst == pytest.approx(best, rel=1e-9)
    as_slow = [_key(ls, per, extra)[1] for ls in splits if _key(ls, per, extra)[0] <= worst]
    assert total == pytest.approx(min(as_slow), rel=1e-9)


def test_from_layers_is_the_split_of_the_counts():
    p = StagePartition.from_layers([3, 4, 4, 1])
    assert str(p) == "embed+3 | 4 | 4 | 1+head" and p.layer_counts() == (3, 4, 4, 1)


# ----- pools: evaluate_pipeline ------------------------------------------------------------
H100, A100, A100_40 = "h100-sxm", "a100-80g", "a100-40g"
HETERO = [
    ((("gpt2", ((H100, 8), (A100, 8)), (0, 1), 2, (1, 1), 2, "none", 64, 512)),
     ("embed+2 | 2 | 2 | 2 | 1 | 1 | 1 | 1+head", 0.5056483360649565)),
    ((("gpt2", ((H100, 8), (A100, 8)), (1, 0), 1, (2, 1), 1, "none", 64, 512)),
     ("embed+1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1+head", 0.35819046284725)),
    ((("gpt3-1.3b", ((H100, 8), (A100_40, 16)), (0, 1), 1, (2, 2), 1, "selective", 32, 1024)),
     ("embed+4 | 4 | 4 | 4 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 1+head", 0.17182996492712907)),
    # moved: "embed+2 | 2 | 3 | 3 | ..." before; the 2 and a 3 swap places between two stages
    # of one pool (a tie in slowest stage and sum: the step is the same to the last digit)
    ((("gpt3-1.3b", ((A100, 8), (H100, 16)), (1, 0), 2, (1, 2), 1, "full", 32, 1024)),
     ("embed+2 | 3 | 2 | 3 | 3 | 3 | 3 | 3 | 1 | 1+head", 0.11293573565281609)),
]  # fmt: skip


@pytest.mark.parametrize("args, want", HETERO)
def test_pools_pipeline_splits_are_pinned(args, want):
    model, pools, order, dp, tps, mbs, rec, gb, seq = args
    pools = tuple(ex.Pool(h, n) for h, n in pools)
    arr = evaluate_pipeline(load(model), pools, order, dp, tps, mbs, rec, gb, seq,
                            TrainingParams())  # fmt: skip
    assert str(arr.partition) == want[0]
    assert arr.step_time_s == pytest.approx(want[1], rel=EXACT)


def test_plan_hetero_is_pinned():
    plan = ex.plan_hetero("gpt2", [ex.Pool(H100, 8), ex.Pool(A100, 8)], global_batch=64,
                          seq=512, modes=("pipeline",))  # fmt: skip
    assert str(plan.partition) == "embed+4 | 8+head"
    assert plan.step_time_s == pytest.approx(0.12858958851973276, rel=EXACT)


# ----- the straggler's layer rebalance -----------------------------------------------------
# (slow stages, speed) -> (new layers, pipeline time new / old); gpt3-1.3b dp8 x pp4, old
# split (6, 6, 7, 5). "moved": (before) -> after; each moved ratio is smaller: the bisection
# had the least slowest stage but a longer sum_g T_g (so a longer 1F1B step).
REBALANCE = {
    ((1,), 0.9): ((6, 6, 7, 5), 1.0),
    ((1,), 0.7): ((7, 5, 7, 5), 0.8603963929206961),
    ((1,), 0.5): ((7, 3, 8, 6), 0.7020190178861057),
    ((1,), 0.3): ((8, 2, 8, 6), 0.44314868679529906),
    ((0,), 0.9): ((5, 7, 7, 5), 0.9991524185981857),  # moved: ((6, 6, 7, 5), 1.0)
    ((0,), 0.7): ((5, 7, 7, 5), 0.860817710337017),
    ((0,), 0.5): ((2, 8, 8, 6), 0.6951814947041914),  # moved: ((3, 7, 8, 6), 0.6998963613467953)
    ((0,), 0.3): ((2, 8, 8, 6), 0.4408655833071344),
    ((3,), 0.9): ((6, 7, 7, 4), 0.986463996173357),
    ((3,), 0.7): ((7, 7, 7, 3), 0.8022162030110397),
    ((3,), 0.5): ((7, 8, 8, 1), 0.6603409691218963),  # moved: ((7, 7, 8, 2), 0.6648080417895126)
    ((3,), 0.3): ((7, 8, 8, 1), 0.4191949834249246),
    ((1, 2), 0.9): ((7, 6, 6, 5), 0.9202103631339204),
    ((1, 2), 0.7): ((8, 5, 5, 6), 0.8289423518787742),
    ((1, 2), 0.5): ((9, 4, 4, 7), 0.6792777494251432),
    ((1, 2), 0.3): ((10, 3, 3, 8), 0.46764074196931815),
}
# gpt2 dp2 x pp4, old split (3, 4, 4, 1)
REBALANCE_GPT2 = {
    ((1,), 0.8): ((4, 3, 4, 1), 0.9654333763808629),
    ((1,), 0.5): ((4, 2, 5, 1), 0.6965185518165012),
    ((0,), 0.8): ((3, 4, 4, 1), 1.0),
    ((0,), 0.5): ((1, 5, 5, 1), 0.85055261415969),  # moved: ((2, 4, 5, 1), 0.866974338485732)
    ((3,), 0.8): ((3, 4, 4, 1), 1.0),
    ((3,), 0.5): ((3, 4, 4, 1), 1.0),
}


def _job(model, par, gb, seq):
    est = ex.estimate(model, par, global_batch=gb, seq=seq)
    step = StepModel(load(model), est.config, resolve("a100-80g"), gb, seq, TrainingParams())
    return step, est.partition


@pytest.mark.parametrize("job, pins", [
    (("gpt3-1.3b", P(dp=8, pp=4, microbatch_size=1), 128, 2048), REBALANCE),
    (("gpt2", P(dp=2, pp=4, microbatch_size=2), 32, 512), REBALANCE_GPT2),
])  # fmt: skip
def test_straggler_rebalance_is_pinned(job, pins):
    step, part = _job(*job)
    for (slow, speed), (layers, ratio) in pins.items():
        s = rebalance_layers(step, part, frozenset(slow), speed)
        assert s.new_layers == layers, (slow, speed)
        assert s.ratio == pytest.approx(ratio, rel=EXACT), (slow, speed)


def test_moved_rebalances_have_the_least_slowest_stage_and_a_shorter_pipeline():
    """Where the split moved: the same slowest stage as the old bisection's, and the 1F1B
    pipeline time of the new split is shorter (the sum term)."""
    step, part = _job("gpt3-1.3b", P(dp=8, pp=4, microbatch_size=1), 128, 2048)
    layer, emb, head = layer_seconds(step)
    S = part.stages
    for slow, speed, before in [((0,), 0.5, (3, 7, 8, 6)), ((3,), 0.5, (7, 7, 8, 2))]:
        after = rebalance_layers(step, part, frozenset(slow), speed).new_layers

        def stage_s(ls, slow=slow, speed=speed):
            return [(n * layer + emb * (g == 0) + head * (g == S - 1))
                    / (speed if g in slow else 1.0) for g, n in enumerate(ls)]  # fmt: skip

        assert max(stage_s(after)) == pytest.approx(max(stage_s(before)), rel=1e-9)
        assert sum(stage_s(after)) < sum(stage_s(before))
        assert pipeline_time(stage_s(after), step.m) < pipeline_time(stage_s(before), step.m)
