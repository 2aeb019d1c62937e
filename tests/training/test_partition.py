"""The stage split: a DP over part times under per-stage memory caps."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.training import PartitionError, partition_layers, uniform_partition


def brute_force(times, static, acts, flight, caps):
    n, S = len(times), len(caps)
    best = None
    for cuts in itertools.combinations(range(1, n), S - 1):
        b = (0, *cuts, n)
        ok, worst = True, 0.0
        for g in range(S):
            lo, hi = b[g], b[g + 1]
            layers = (hi - lo) - (lo == 0) - (hi == n)
            mem = sum(static[lo:hi]) + flight[g] * sum(acts[lo:hi])
            if layers < 1 or mem > caps[g]:
                ok = False
                break
            worst = max(worst, sum(times[lo:hi]))
        if ok and (best is None or worst < best):
            best = worst
    return best


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_dp_equals_brute_force(data):
    L = data.draw(st.integers(2, 7))
    S = data.draw(st.integers(1, min(L, 4)))
    times = data.draw(st.lists(st.integers(1, 9), min_size=L + 2, max_size=L + 2))
    static = data.draw(st.lists(st.integers(0, 5), min_size=L + 2, max_size=L + 2))
    acts = data.draw(st.lists(st.integers(0, 3), min_size=L + 2, max_size=L + 2))
    flight = [S - g for g in range(S)]
    caps = [data.draw(st.integers(5, 40))] * S
    want = brute_force(times, static, acts, flight, caps)
    if want is None:
        with pytest.raises(PartitionError):
            partition_layers(times, static, acts, flight, caps)
        return
    part = partition_layers(times, static, acts, flight, caps)
    b = part.bounds
    got = max(sum(times[b[g] : b[g + 1]]) for g in range(S))
    assert got == want and min(part.layer_counts()) >= 1


def test_memory_cap_moves_layers_off_the_first_stage():
    # Stage 0 keeps 4 microbatches in flight: with one unit of activation per layer and
    # a cap of 8 it can hold the embedding and one layer only.
    p = partition_layers([0.1] + [1] * 8 + [0.5], [0] * 10, [1] * 10, [4, 3, 2, 1], [8] * 4)
    assert p.layers(0) == 1 and sum(p.layer_counts()) == 8
    assert str(uniform_partition(10, 4)) == "embed+3 | 3 | 2 | 2+head"


def test_infeasible_split_says_by_how_much():
    with pytest.raises(PartitionError, match="over by at least"):
        partition_layers([1] * 6, [10 * 2**30] * 6, [0] * 6, [1, 1], [2**30] * 2)
    with pytest.raises(PartitionError, match="without layers"):
        uniform_partition(2, 5)  # 2 layers + embedding + head fill at most 4 stages


# ----- which split simulate() used, and why --------------------------------------------------
def _sim175(**kw):
    par = ex.ParallelConfig(dp=2, tp=4, pp=8, microbatch_size=1, zero=1).replace(**kw)
    return ex.simulate("gpt3-175b", par, hardware="a100-80g", global_batch=128, seq=2048)


def test_split_over_memory_is_capped_with_the_step_models_memory_terms():
    """The time-balanced split of GPT-3 on 64 devices needs ~95 GiB on its first stage; the
    capped split reserves exactly what the step model charges (recompute working set,
    ZeRO buffers, embedding dropout), so the split it returns fits."""
    r = _sim175(recompute="selective")
    assert r.partition_choice.method == "memory_capped"
    assert "GiB" in r.partition_choice.reason and "80.00 GiB cap" in r.partition_choice.reason
    assert r.fits and max(m.total for m in r.memory_per_device) <= r.memory_cap_bytes
    counts = r.partition.layer_counts()
    assert counts[0] < counts[-1]  # the first stage keeps the most microbatches in flight
    assert r.as_dict()["partition_method"] == "memory_capped"


def test_split_that_cannot_fit_is_reported_not_silent():
    # microbatch 2: with microbatch 1 and no dropout (the zoo's GPT-3) a capped split fits
    r = _sim175(zero=3, recompute="none", microbatch_size=2)
    assert r.partition_choice.method == "uniform" and not r.fits
    assert "no split fits under it" in r.partition_choice.reason
    assert r.partition == uniform_partition(96, 8)


@pytest.mark.parametrize("kw, method, words", [
    (dict(dp=8, microbatch_size=4), "uniform", "one pipeline stage"),
    (dict(pp=4, schedule="interleaved_1f1b", virtual_stages=3), "uniform", "equal chunks"),
    (dict(pp=2, schedule="interleaved_1f1b", virtual_stages=4), "time_balanced", "fits"),
    (dict(dp=2, tp=2, pp=2, microbatch_size=2), "time_balanced", "fits"),
])  # fmt: skip
def test_every_result_names_its_split(kw, method, words):
    r = ex.simulate("gpt2", ex.ParallelConfig(**kw), hardware="a100-80g", global_batch=32,
                    seq=512)  # fmt: skip
    assert r.partition_choice.method == method and words in r.partition_choice.reason
    e = ex.training.estimate("gpt2", ex.ParallelConfig(**kw), "a100-80g", 32, 512)
    assert e.partition_choice.method == method
