"""build_schedule keeps the schedules it built (immutable values): a kept one equals what the
builders make afresh, bad arguments still raise the project's error, and the live chunk counts
of interleaved 1F1B (one walk per schedule for every device) match a walk of each device's
whole order."""

from __future__ import annotations

import pytest

from explorer.training.errors import ParallelConfigError
from explorer.training.pipeline.schedule import (
    build_schedule,
    gpipe,
    interleaved_1f1b,
    one_f_one_b,
)
from explorer.training.simulate import chunk_live_counts


@pytest.mark.parametrize(
    ("kind", "pp", "m", "v"),
    [("gpipe", 4, 8, 1), ("1f1b", 8, 24, 1), ("interleaved_1f1b", 4, 12, 3),
     ("interleaved_1f1b", 16, 96, 2)],
)  # fmt: skip
def test_a_kept_schedule_equals_a_fresh_one(kind, pp, m, v):
    fresh = {"gpipe": lambda: gpipe(pp, m), "1f1b": lambda: one_f_one_b(pp, m),
             "interleaved_1f1b": lambda: interleaved_1f1b(pp, m, v)}[kind]()  # fmt: skip
    first = build_schedule(kind, pp, m, v)
    assert first == fresh and build_schedule(kind, pp, m, v) is first
    assert first.order == fresh.order  # step by step, every device


@pytest.mark.parametrize(
    ("args", "match"),
    [(("1f1b", [4], 8), "pp=\\[4\\]"), (("1f1b", 4, 8.0), "microbatches=8.0"),
     (("zigzag", 4, 8), "unknown schedule 'zigzag'"), (("interleaved_1f1b", 4, 6, 2), "divisible")],
)  # fmt: skip
def test_bad_arguments_raise_the_projects_error(args, match):
    with pytest.raises(ParallelConfigError, match=match):
        build_schedule(*args)


@pytest.mark.parametrize(("pp", "v"), [(2, 2), (4, 3), (8, 2), (16, 2)])
def test_live_counts_of_every_device_match_a_walk_of_its_whole_order(pp, v):
    for m in (pp, 4 * pp, 6 * pp):
        order = interleaved_1f1b(pp, m, v).order
        for d in range(pp):
            live, states = [0] * v, set()
            for s in order[d]:
                live[s.chunk] += 1 if s.phase == "F" else -1
                if s.phase == "F":
                    states.add(tuple(live))
            kept = chunk_live_counts("interleaved_1f1b", pp, m, d, v)
            # the kept states are among the walk's, and every walked state is covered by one
            assert set(kept) <= states
            assert all(
                any(all(x >= y for x, y in zip(k, s, strict=True)) for k in kept) for s in states
            )
