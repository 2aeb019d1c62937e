"""Pipeline and planning knowledge written once (issue 23, item 2): each merged formula's
numbers, captured as literals before the copies were merged, so the one definition keeps
them.

- the closed-form pipeline step ``sum_g t_g + (m-1) max_g t_g`` (interleaved:
  ``m max_d W_d + (p-1) max_g t_g``): `explorer.training.pipeline.pipeline_time`, read by
  `estimate`, `simulate`'s recompute walk and interleaved split choice, the hetero
  pipeline's step and the straggler's layer rebalance.
"""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import resolve
from explorer.models import load
from explorer.training import TrainingParams
from explorer.training.hetero.pipeline import evaluate_pipeline
from explorer.training.replanning.layers import rebalance_layers
from explorer.training.step_model.model import StepModel

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
