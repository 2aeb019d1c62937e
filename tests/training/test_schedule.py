"""Pipeline schedules as data, and the simulator that times them."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.training import (
    ParallelConfigError,
    bubble_fraction,
    build_schedule,
    peak_in_flight,
    simulate_schedule,
)
from explorer.training.errors import TrainingError
from explorer.training.pipeline import schedule as sched_mod
from explorer.training.pipeline.timeline import schedule_times


@given(st.integers(1, 8), st.integers(1, 24), st.floats(0.1, 3), st.floats(0.1, 3))
@settings(max_examples=60, deadline=None)
def test_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m, f, b):
    tl = simulate_schedule(build_schedule("1f1b", p, m), forward_s=f, backward_s=b)
    assert tl.step_time_s == pytest.approx((m + p - 1) * (f + b))
    assert tl.bubble_fraction() == pytest.approx((p - 1) / (m + p - 1))
    assert bubble_fraction("1f1b", p, m) == pytest.approx((p - 1) / (m + p - 1))


@given(st.integers(2, 6), st.integers(1, 4), st.integers(2, 4), st.floats(0.2, 2))
@settings(max_examples=40, deadline=None)
def test_interleaving_divides_the_bubble_by_v(p, groups, v, f):
    m = p * groups
    tl = simulate_schedule(build_schedule("interleaved_1f1b", p, m, v), f / v, 2 * f / v)
    bubble = (p - 1) / v
    assert tl.bubble_fraction() == pytest.approx(bubble / (m + bubble))
    assert bubble_fraction("interleaved_1f1b", p, m, v) == pytest.approx(bubble / (m + bubble))
    one = simulate_schedule(build_schedule("1f1b", p, m), f, 2 * f)
    idle_1f1b = one.bubble_fraction() * one.step_time_s
    assert tl.bubble_fraction() * tl.step_time_s == pytest.approx(idle_1f1b / v)


@given(st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b"]), st.integers(1, 6),
       st.integers(1, 5), st.integers(1, 3))  # fmt: skip
def test_every_step_once_and_in_flight_formula(kind, p, groups, v):
    if kind != "interleaved_1f1b":
        v = 1
    elif p == 1:
        return
    m = p * groups
    s = build_schedule(kind, p, m, v)
    for d in range(p):
        counts = Counter((x.chunk, x.microbatch, x.phase) for x in s.order[d])
        assert set(counts.values()) == {1} and len(counts) == 2 * m * v
        assert s.in_flight(d) == peak_in_flight(kind, p, m, d, v)
    if kind == "gpipe":
        assert s.in_flight(0) == m


@pytest.mark.parametrize("builder, args", [(sched_mod.gpipe, (3, 4)),
                                           (sched_mod.one_f_one_b, (3, 4)),
                                           (sched_mod.interleaved_1f1b, (2, 4, 2))])  # fmt: skip
def test_docstring_pictures_are_the_schedules(builder, args):
    table = builder(*args).table(width=4 if builder is sched_mod.interleaved_1f1b else 3)
    doc = "\n".join(line.strip() for line in builder.__doc__.splitlines())
    for row in table.splitlines():
        assert row.strip() in doc


def test_timeline_is_plain_data_and_compute_never_overlaps():
    s = build_schedule("1f1b", 4, 8)
    segs = [("compute-forward", 1.0), ("tp-comm", 0.25)]
    tl = simulate_schedule(s, [segs] * 4, 2.0, p2p_s=0.1, tail=[("dp-comm", 0.5)])
    rec = tl.records()[0]
    assert set(rec) == {"device", "stage", "chunk", "microbatch", "kind", "start_s", "end_s",
                        "stream"}  # fmt: skip
    for d in range(4):
        ev = [e for e in tl.for_device(d) if e.stream == "compute"]
        for a, b in zip(ev, ev[1:], strict=False):
            assert a.end_s <= b.start_s + 1e-12
        assert ev[0].start_s == 0 and ev[-1].end_s == pytest.approx(tl.step_time_s)
    kinds = tl.time_by_kind()
    assert kinds["pp-comm"] > 0 and kinds["dp-comm"] == pytest.approx(4 * 0.5)


# (schedule kind, pp, microbatches / pp, transfer s, forward s, backward s)
RUNS = (
    st.sampled_from(["1f1b", "gpipe", "interleaved_1f1b"]), st.integers(1, 6),
    st.integers(1, 4), st.floats(0.0, 0.3), st.floats(0.1, 3), st.floats(0.1, 3),
)  # fmt: skip


def _schedule(kind: str, p: int, groups: int) -> tuple:
    v = 2 if kind == "interleaved_1f1b" else 1
    return build_schedule(kind, p, p * groups, v), v


@given(*RUNS)
@settings(max_examples=60, deadline=None)
def test_schedule_times_are_the_timeline_s_to_the_last_bit(kind, p, groups, p2p, f, b):
    # uneven stages, segments, transfers, a tail per device: the step time and the time
    # by kind without events equal the timeline's exactly (the same additions, same order)
    s, v = _schedule(kind, p, groups)
    # a kind twice in one step (its order within the step kept) and zero segments (left out)
    fwd = [[("compute-forward", f * (1 + g % 3)), ("tp-comm", f / 7), ("ep-comm", 0.0),
            ("tp-comm", f / 13 * (g % 2))] for g in range(p * v)]  # fmt: skip
    bwd = [[("zero-gather", b / 5), ("compute-backward", b + g / 10)] for g in range(p * v)]
    tails = [[("dp-comm", 0.3 * d), ("optimizer", 0.1)] for d in range(p)]
    tl = simulate_schedule(s, fwd, bwd, p2p, tails)
    step, kinds = schedule_times(s, fwd, bwd, p2p, tails)
    assert step == tl.step_time_s and kinds == tl.time_by_kind()
    assert kinds["idle"] > 0 or p == 1


def test_bad_schedules():
    with pytest.raises(ParallelConfigError, match="divisible by pp=4"):
        build_schedule("interleaved_1f1b", 4, 6, 2)
    with pytest.raises(ParallelConfigError, match="unknown schedule"):
        build_schedule("zigzag", 2, 2)
    with pytest.raises(ValueError, match="durations for 3 stages"):
        simulate_schedule(build_schedule("1f1b", 2, 2), [1.0, 1.0, 1.0], 1.0)


def test_a_segment_of_an_unknown_kind_is_refused_by_name():
    s = build_schedule("1f1b", 2, 4)
    for run in (simulate_schedule, schedule_times):
        with pytest.raises(TrainingError, match="segment kind 'warmup' is not an event kind"):
            run(s, [[("warmup", 1.0)]] * 2, 1.0)


@given(*RUNS)
@settings(max_examples=60, deadline=None)
def test_every_step_starts_when_its_device_and_its_input_are_ready(kind, p, groups, p2p, f, b):
    # the timeline's defining rule, checked on its events whatever order they were worked
    # out in: each step starts exactly at the later of its device's previous end and its
    # input's end plus the transfer (a forward's: the previous stage's forward; a
    # backward's: the next stage's backward, or on the last stage its own forward)
    s, v = _schedule(kind, p, groups)
    S = p * v
    fwd = [[("compute-forward", f * (1 + g % 3)), ("tp-comm", f / 7)] for g in range(S)]
    bwd = [[("compute-backward", b + g / 10)] for g in range(S)]
    tl = simulate_schedule(s, fwd, bwd, p2p)
    ends, checked = {}, 0
    for d in range(p):
        work = [e for e in tl.for_device(d) if e.stream == "compute" and e.kind != "idle"]
        at, prev_end = 0, 0.0
        for step in s.order[d]:
            g = step.chunk * p + d
            n = len(fwd[g]) if step.phase == "F" else len(bwd[g])
            mine, at = work[at : at + n], at + n
            assert {(e.stage, e.microbatch) for e in mine} == {(g, step.microbatch)}
            ends[step.phase, g, step.microbatch] = (mine[0].start_s, mine[-1].end_s, prev_end)
            prev_end = mine[-1].end_s
    hop = p2p if p > 1 else 0.0
    for (phase, g, mb), (start, _, prev_end) in ends.items():
        if phase == "F":
            ready = 0.0 if g == 0 else ends["F", g - 1, mb][1] + hop
        elif g == S - 1:
            ready = ends["F", g, mb][1]
        else:
            ready = ends["B", g + 1, mb][1] + hop
        assert start == max(prev_end, ready), (phase, g, mb)
        checked += 1
    assert checked == 2 * S * p * groups
