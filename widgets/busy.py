"""``busy(name)``: a progress bar in the notebook for a core call that takes over a second.

The views show their own progress; a notebook cell that calls the core directly
(``ex.plan_training``, ``ex.scaling_curve``, a search sweep) wraps the call so the reader sees
it working and, after, how long it took:

>>> with busy("planning") as progress:          # doctest: +SKIP
...     train = ex.plan_training(cfg, devices=1024, progress=progress)
planning: done in 2.31 s
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from .format import fmt_seconds
from .progress import Progress

__all__ = ["busy"]


@contextlib.contextmanager
def busy(name: str) -> Iterator[Callable[[int, int], None]]:
    """Display a progress bar named ``name``; yield a ``(done, total)`` callback for the core.

    The bar moves with the callback (a call without one shows the bar at rest with the
    name); when the block ends the line says how long it took.
    """
    from IPython.display import display

    bar = Progress()
    bar.layout.display = "flex"
    bar.bar.bar_style = "info"
    bar.label.value = f"{name}..."
    display(bar)
    report = bar.callback(name)
    t0 = time.perf_counter()
    try:
        yield report
    except BaseException:
        bar.bar.bar_style = "danger"
        bar.label.value = f"{name}: failed after {fmt_seconds(time.perf_counter() - t0)}"
        raise
    bar.bar.value = 1.0
    bar.bar.bar_style = "success"
    bar.label.value = f"{name}: done in {fmt_seconds(time.perf_counter() - t0)}"
