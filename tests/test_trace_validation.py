"""A Trace built in Python is checked as an imported one is."""

import math

import pytest

from explorer import ExplorerError
from explorer.trace import Trace, TraceError, TraceEvent


@pytest.mark.parametrize(
    "fields, named",
    [({"dur_us": -100.0}, "dur_us=-100.0 is negative"),
     ({"start_us": math.nan}, "start_us=nan"),
     ({"dur_us": math.inf}, "dur_us=inf"),
     ({"kind": "kernal"}, "kind='kernal' is not one of op, kernel"),
     ({"flops": -1}, "flops=-1"),
     ({"bytes_allocated": 2.5}, "bytes_allocated=2.5"),
     ({"live_bytes": -2}, "live_bytes=-2"),
     ({"start_us": "0"}, "start_us='0'")],
)  # fmt: skip
def test_a_bad_event_is_a_named_trace_error(fields, named):
    with pytest.raises(TraceError, match=named.replace("(", r"\(").replace("[", r"\[")) as err:
        TraceEvent("matmul", **fields)
    assert isinstance(err.value, ExplorerError) and "'matmul'" in str(err.value)


def test_a_good_event_and_trace_are_kept_as_given():
    e = TraceEvent("matmul", "kernel", 1.0, 2.5, ((2, 3), (3, 4), (2, 4)), 96, 48, 160)
    t = Trace((e,), "run", 3.0)
    assert t.events == (e,) and t.summary()["total_us"] == 3.0 and t.summary()["flops"] == 48


@pytest.mark.parametrize(
    "kwargs, named",
    [({"events": [TraceEvent("a")]}, "events is a list"),
     ({"events": ("a",)}, r"events\[0\] is a str"),
     ({"wall_us": -1.0}, "wall_us=-1.0"),
     ({"wall_us": math.nan}, "wall_us=nan")],
)  # fmt: skip
def test_a_bad_trace_is_a_named_trace_error(kwargs, named):
    with pytest.raises(TraceError, match=named):
        Trace(**kwargs)
