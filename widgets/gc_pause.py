"""``gc_paused``: run one burst of work (a simulate and a redraw) without the cyclic garbage
collector.

A view's update at real size makes some 10^5 objects in a fraction of a second (PipelineView
on GPT-3 175B, pp 16: the simulated events, and the bubble breakdown's two re-simulated
schedules). With the collector on, that many allocations set off a full collection of the
whole heap on every other update: measured 110-180 ms each (under load), which made the
first microbatch change cost 3x the others. Paused, the update counts as one young
collection when it ends, so full collections come much more rarely, not merely later.
Reference counting still frees everything that is not a cycle, and the collector's previous
state is restored (a caller that turned it off keeps it off).

>>> import gc
>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, back as it was after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
