"""`estimate` and `simulate` report the same per-device memory: both take a device's peak
activations from `peak_activations` (its chunks' activations weighted by the microbatches
of each it keeps, `chunk_live_counts`), which this file checks against a walk over the
whole schedule."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.training.pipeline.schedule import build_schedule
from explorer.training.simulate import chunk_live_counts, peak_activations
from explorer.training.step_model.model import StepModel

GIB = 2**30


def _walk_states(kind, pp, m, d, v):
    """Per-chunk live counts after every forward of device d, the whole schedule built."""
    live, out = [0] * v, []
    for s in build_schedule(kind, pp, m, v).order[d]:
        live[s.chunk] += 1 if s.phase == "F" else -1
        if s.phase == "F":
            out.append(tuple(live))
    return out


@pytest.mark.parametrize("pp, v", [(2, 2), (4, 2), (4, 3), (8, 2), (8, 4), (16, 8)])
@pytest.mark.parametrize("groups", [1, 2, 5, 9, 33])
def test_live_counts_match_the_whole_schedule(pp, v, groups):
    """The states kept are exactly the undominated states of the full walk, for any
    number of microbatches (the walk stops at 4 x pp of them)."""
    m = groups * pp
    for d in range(pp):
        full = set(_walk_states("interleaved_1f1b", pp, m, d, v))
        kept = chunk_live_counts("interleaved_1f1b", pp, m, d, v)
        assert set(kept) <= full
        for state in full:  # every state of the walk is matched or exceeded by a kept one
            assert any(all(k >= s for k, s in zip(ks, state, strict=True)) for ks in kept)
        # the largest total is Megatron-LM's warm-up plus one forward
        assert max(sum(k) for k in kept) == min((pp - d - 1) * 2 + (v - 1) * pp + 1, m * v)


def test_interleaved_peak_weights_the_first_chunk_more():
    """Device 0 of pp=8, v=2 peaks holding 15 microbatches of chunk 0 and 8 of chunk 1
    (warm-up: forwards 0-7 on chunk 0, 8-15 on chunk 1, 16-22 on chunk 0), or 16 and 7
    (the first backward frees chunk 1, the next forward is on chunk 0)."""
    assert chunk_live_counts("interleaved_1f1b", 8, 128, 0, 2) == ((15, 8), (16, 7))
    assert chunk_live_counts("1f1b", 8, 128, 3, 1) == ((5,),)
    assert chunk_live_counts("gpipe", 4, 6, 2, 1) == ((6,),)


LAYOUTS = [
    # (model, hardware, parallel, global batch, seq, stack)
    ("deepseek-v3", "b200", dict(dp=32, tp=1, pp=8, ep=32, microbatch_size=1,
                                 schedule="interleaved_1f1b", virtual_stages=2), 512, 4096, "nemo"),
    ("qwen3-30b-a3b", "h100-sxm", dict(dp=8, tp=1, pp=2, ep=8, microbatch_size=2,
                                       schedule="interleaved_1f1b", virtual_stages=6), 64, 4096,
     "nemo"),
    ("llama3-70b", "h100-sxm", dict(dp=2, tp=4, pp=8, microbatch_size=1,
                                    schedule="interleaved_1f1b", virtual_stages=5), 64, 8192,
     "megatron-core"),
    ("llama2-7b", "a100-80g", dict(dp=2, tp=2, pp=4, microbatch_size=2, schedule="1f1b"), 32,
     4096, "megatron-core"),
]  # fmt: skip


@pytest.mark.parametrize("model, hw, par, gb, seq, stack", LAYOUTS)
def test_estimate_and_simulate_report_the_same_memory(model, hw, par, gb, seq, stack):
    """MoE / MLA and dense layouts, interleaved and not: the worst device's memory and each
    distinct stage shape's memory are the same in both, and the same as the device's
    breakdown with `peak_activations`."""
    parallel = ex.ParallelConfig(**par)
    est = ex.estimate(model, parallel, hw, gb, seq, stack=stack)
    sim = ex.simulate(model, parallel, hw, gb, seq, stack=stack)
    assert est.partition == sim.partition
    assert est.memory.total == pytest.approx(sim.memory.total, rel=1e-12)
    sim_totals = [m.total for m in sim.memory_per_device]
    for m in est.memory_per_device:
        assert any(m.total == pytest.approx(t, rel=1e-12) for t in sim_totals)
    cfg = ex.models.load(model)
    step = StepModel(cfg, parallel, ex.hardware.resolve(hw), gb, seq, sim_params(stack))
    n_full = sim.config.recompute_num_layers if sim.config.recompute == "per_layer" else None
    for d, m in enumerate(sim.memory_per_device):
        act = peak_activations(step, sim.partition, d, n_full)
        assert step.device_memory(sim.partition, d, n_full, act).total == pytest.approx(
            m.total, rel=1e-12
        )


def sim_params(stack):
    from explorer.training import stacks

    return stacks.resolve(None, stack, "test")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e12, allow_nan=False), min_size=10, max_size=10))
def test_a_breakdowns_total_is_the_sum_of_its_rows_to_the_last_bit(rows):
    # `MemoryBreakdown.total` adds the rows one by one (the search compares it with the
    # cap ~10^4 times a plan): what sum() over the rows gives, bit for bit
    from explorer.training.memory import MemoryBreakdown

    m = MemoryBreakdown(**dict(zip(MemoryBreakdown.ROWS, rows, strict=True)))
    assert m.total == sum(getattr(m, r) for r in MemoryBreakdown.ROWS)
    assert m.total == sum(rows)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)), min_size=1))
def test_the_undominated_live_states_are_those_no_other_covers(states):
    # `simulate._undominated` (one array comparison of every pair) keeps exactly the states
    # that no other state is at least as large as in every chunk, sorted
    from explorer.training.simulate import _undominated

    want = sorted(
        a for a in states
        if not any(b != a and all(x >= y for x, y in zip(b, a, strict=True)) for b in states)
    )  # fmt: skip
    assert list(_undominated(states)) == want
