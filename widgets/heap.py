"""Keep CPython's full garbage collections out of what the user waits for: ``settle_heap()``
once the views are drawn, ``gc_paused()`` around one update.

``settle_heap``:

A kernel holding the dashboard tracks about 320,000 objects (plotly's figure classes and
validators, the models, the planner's tables). A full collection walks all of them: 105 ms
measured, holding the interpreter, and one falls every few re-plans (the planner allocates
enough to trigger it) in the planning thread, where it delays the plan drawn by that much.
Those objects live as long as the kernel. After the first view is drawn, ``settle_heap``
collects once and moves every object then alive to the permanent generation
(``gc.freeze()``): later full collections walk only what was allocated since (5 ms measured
after a re-plan, against 105 ms).

The price: an object alive at that moment that later becomes part of unreachable cycles is
never freed by the cycle collector (objects freed by reference counting are freed as
always). Everything alive then is imports, the views and their caches, which live as long
as the kernel. It runs once per process, in a kernel only (a running event loop: scripts
and tests are left alone), and ``FREEZE = False`` turns it off before the first view is
built; ``gc.unfreeze()`` undoes it.

``gc_paused``: a view's update at real size makes some 10^5 objects in a fraction of a
second (PipelineView on GPT-3 175B, pp 16: the simulated events, and the bubble breakdown's
two re-simulated schedules; MemoryView's recompute ladder). With the collector on, that many
allocations set off a full collection of the whole heap on every other update: measured
110-180 ms each (under load), which made PipelineView's first microbatch change cost 3x the
others and MemoryView's first ZeRO / recompute change 173-189 ms (46-70 ms paused). Paused,
the update counts as one young collection when it ends, so full collections come much more
rarely, not merely later. Reference counting still frees everything that is not a cycle.
Pauses nest and may overlap across threads: the collector is turned back on when the last
pause ends, and only if it was on when the first began.

>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .plan_ahead import in_kernel

__all__ = ["FREEZE", "gc_paused", "settle_heap"]

#: set to False before the first view is built to leave the collector as CPython sets it
FREEZE = True
_done = False
_lock = threading.Lock()  # views may be built from more than one thread


def settle_heap() -> bool:
    """Once per process, in a kernel: a full collection, then ``gc.freeze()``. True when
    it ran now."""
    global _done
    if not FREEZE or not in_kernel():  # a script or a test
        return False
    with _lock:
        if _done:
            return False
        _done = True
        gc.collect()
        gc.freeze()
    return True


_pauses = 0  # gc_paused blocks open now, in any thread (under _lock)
_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside the block; back as it was once the last open pause
    (of any thread) ends."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
        _pauses += 1
        gc.disable()
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()
