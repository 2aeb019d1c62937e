"""``settle_heap()``: keep CPython's full garbage collections short once the views are drawn.

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
"""

from __future__ import annotations

import gc
import threading

from .plan_ahead import in_kernel

__all__ = ["FREEZE", "settle_heap"]

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
