"""Traces of eager and compiled runs: ``TraceEvent``, ``Trace``, ``compare`` and the
Chrome trace-event JSON format (opens in Perfetto; PyTorch profiler traces import too).

Three rooms, bottom-up: ``events`` (the event type and its recorder), ``comparison`` (eager
against compiled, repeated timing, flows) and ``chrome`` (the file format of both).

>>> import explorer as ex, numpy as np
>>> with ex.trace.record("eager") as t:
...     y = ex.F.relu(ex.tensor(np.ones((2, 3))) * 2.0)
>>> [e.name for e in t.events]
['scale', 'relu']
"""

from .chrome import comparison_to_chrome, from_chrome, load_chrome, save_chrome, to_chrome
from .comparison import (
    Comparison,
    Flow,
    RepeatedRuns,
    Timing,
    compare,
    flows,
    repeat_runs,
    slice_names,
)
from .events import Recorder, Trace, TraceError, TraceEvent, active, record

__all__ = [
    "TraceEvent", "Trace", "Recorder", "record", "active", "compare", "Comparison",
    "to_chrome", "from_chrome", "save_chrome", "load_chrome", "TraceError", "Timing",
    "RepeatedRuns", "repeat_runs", "Flow", "flows", "slice_names", "comparison_to_chrome",
]  # fmt: skip
