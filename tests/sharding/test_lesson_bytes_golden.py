"""The bytes the ring lessons state, captured before `lesson.ring_collective` took its
figure from `explorer.hardware.bytes_sent_per_device` instead of its own copy of the ring
formula: per lesson, each collective's bytes per device counted from the chunk moves and
the cost model's; per standalone ring, the stated and predicted bytes."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.sharding import lesson
from explorer.sharding.lesson import ring_collective

# (lesson, mesh sizes dp x tp) -> [(kind, tensor, counted bytes, predicted bytes)]
LESSONS = {
    ("tensor", 2, 4): [("all-reduce", "y", 96.0, 96.0)],
    ("tensor", 3, 2): [("all-reduce", "y", 32.0, 32.0)],
    ("data", 2, 4): [("all-reduce", "dW", 224.0, 224.0)],
    ("data", 3, 2): [("all-reduce", "dW", 160.0, 160.0)],
    ("sequence", 2, 4): [
        ("all-gather", "ln(x)", 192.0, 192.0),
        ("reduce-scatter", "y", 192.0, 192.0),
    ],  # fmt: skip
    ("sequence", 3, 2): [
        ("all-gather", "ln(x)", 32.0, 32.0),
        ("reduce-scatter", "y", 32.0, 32.0),
    ],  # fmt: skip
    ("zero", 2, 4): [("all-gather", "W", 112.0, 112.0), ("reduce-scatter", "dW", 112.0, 112.0)],
    ("zero", 3, 2): [("all-gather", "W", 80.0, 80.0), ("reduce-scatter", "dW", 80.0, 80.0)],
}


@pytest.mark.parametrize("key", list(LESSONS))
def test_lesson_bytes_are_unchanged(key):
    kind, dp, tp = key
    seen = []
    for s in lesson(kind, ex.Mesh({"dp": dp, "tp": tp})):
        c = s.collective
        if c is not None and (c.kind, c.tensor) not in [x[:2] for x in seen]:
            seen.append((c.kind, c.tensor, c.bytes_per_device, c.predicted.bytes_per_device))
    assert seen == LESSONS[key]


# (kind, ring axes of a dp=3 x tp=4 mesh, buffer bytes) -> bytes sent per device
RINGS = {
    ("all-reduce", ("tp",), 128): 192.0,
    ("all-reduce", ("tp",), 1000): 1500.0,
    ("all-reduce", ("tp",), 3.5e9): 5250000000.0,
    ("all-reduce", ("dp",), 128): 170.66666666666666,
    ("all-reduce", ("dp",), 1000): 1333.3333333333333,
    ("all-reduce", ("dp",), 3.5e9): 4666666666.666667,
    ("all-reduce", ("dp", "tp"), 128): 234.66666666666666,
    ("all-reduce", ("dp", "tp"), 1000): 1833.3333333333333,
    ("all-reduce", ("dp", "tp"), 3.5e9): 6416666666.666667,
    ("all-gather", ("tp",), 128): 96.0,
    ("all-gather", ("tp",), 1000): 750.0,
    ("all-gather", ("tp",), 3.5e9): 2625000000.0,
    ("all-gather", ("dp",), 128): 85.33333333333333,
    ("all-gather", ("dp",), 1000): 666.6666666666666,
    ("all-gather", ("dp",), 3.5e9): 2333333333.3333335,
    ("all-gather", ("dp", "tp"), 128): 117.33333333333333,
    ("all-gather", ("dp", "tp"), 1000): 916.6666666666666,
    ("all-gather", ("dp", "tp"), 3.5e9): 3208333333.3333335,
    ("reduce-scatter", ("tp",), 128): 96.0,
    ("reduce-scatter", ("tp",), 1000): 750.0,
    ("reduce-scatter", ("tp",), 3.5e9): 2625000000.0,
    ("reduce-scatter", ("dp",), 128): 85.33333333333333,
    ("reduce-scatter", ("dp",), 1000): 666.6666666666666,
    ("reduce-scatter", ("dp",), 3.5e9): 2333333333.3333335,
    ("reduce-scatter", ("dp", "tp"), 128): 117.33333333333333,
    ("reduce-scatter", ("dp", "tp"), 1000): 916.6666666666666,
    ("reduce-scatter", ("dp", "tp"), 3.5e9): 3208333333.3333335,
}


@pytest.mark.parametrize("key", list(RINGS))
def test_ring_collective_bytes_are_unchanged(key):
    kind, axes, size = key
    c = ring_collective(kind, ex.Mesh({"dp": 3, "tp": 4}), axes, size_bytes=size)
    assert c.bytes_per_device == RINGS[key] == c.predicted.bytes_per_device
