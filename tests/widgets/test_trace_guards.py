"""TraceCompare with symbolic dims: a call whose size fails a shape guard shows a
recompile labelled as caused by the failed guard, with the guard in its hover text; sizes
the guards accept are cache hits."""

from __future__ import annotations

import numpy as np

import explorer as ex
from widgets import TraceCompare
from widgets.figures.trace import TRACE_COMPILE


def small_or_large(x):
    if x.shape[0] > 4:
        return (x * 2.0).sum(1)
    return (x - 1.0).sum(1)


def _args(batch: int, size: int) -> tuple:
    return (ex.tensor(np.random.default_rng(batch).standard_normal((batch, size))),)


def test_a_failed_shape_guard_is_a_labelled_recompile():
    view = TraceCompare(small_or_large, _args, batch=8, size=16, runs=1, dynamic={"x": {0: "B"}})
    c = view.figure.data[TRACE_COMPILE]
    assert c.text[0].startswith("<b>compile</b>") and view.guard_failures == 0
    view.controls["batch"].value = 16  # the guard B > 4 holds: the same compilation
    c = view.figure.data[TRACE_COMPILE]
    assert "cache hit" in c.text[0] and view.recompiles == 0
    view.controls["batch"].value = 2  # B > 4 fails: one recompile, labelled
    c = view.figure.data[TRACE_COMPILE]
    assert view.recompiles == 1 and view.guard_failures == 1
    assert c.text[-1].startswith("<b>recompile (shape guard failed)</b>")
    assert "B > 4" in c.hovertext[-1] and "guard failed" in c.hovertext[-1]
    assert "1 after a failed shape guard" in view.headline.value
    assert len(view.jitted.cache) == 2
