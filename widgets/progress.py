"""``Progress``: a bar and a line of text shown while work over ~0.5 s runs.

The kernel is busy during the work, but widget state messages sent before it starts reach
the page at once, so showing the bar first and hiding it after is enough. Each task's last
duration is remembered: a task known to be fast never flashes a bar; a task never seen
before, or known to be slow, shows it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import ipywidgets as ipw

__all__ = ["Progress", "SHOW_AFTER_S", "MIN_UPDATE_S"]

SHOW_AFTER_S = 0.5  # the threshold: work longer than this shows progress
MIN_UPDATE_S = 0.05  # progress messages closer than this are coalesced (the last is kept)


class Progress(ipw.HBox):
    """``with progress.task("re-planning", steps=2) as step: ...; step("searching")``.

    >>> p = Progress()
    >>> with p.task("demo", steps=2) as step:
    ...     step("half way")
    >>> p.layout.display, round(p.bar.value, 2)
    ('none', 1.0)
    """

    def __init__(self) -> None:
        self.bar = ipw.FloatProgress(value=0.0, min=0.0, max=1.0, layout=ipw.Layout(width="14em"))
        self.label = ipw.Label()
        self.last_s: dict[str, float] = {}
        self.shown: list[str] = []  # tasks that showed the bar (tests read it)
        self.updates = 0  # bar updates sent by ``callback`` (bursts are coalesced)
        super().__init__([self.bar, self.label], layout=ipw.Layout(display="none"))

    def expected(self, name: str) -> float | None:
        return self.last_s.get(name)

    @contextlib.contextmanager
    def task(self, name: str, steps: int = 1, slow: bool | None = None) -> Iterator:
        """Show the bar unless ``name`` last took under ``SHOW_AFTER_S`` (``slow`` forces)."""
        last = self.last_s.get(name)
        show = slow if slow is not None else (last is None or last >= SHOW_AFTER_S)
        done = [0]

        def step(text: str = "") -> None:
            done[0] += 1
            self.bar.value = min(done[0] / max(steps, 1), 1.0)
            if show:
                self.label.value = f"{name}: {text}" if text else name

        self.bar.value = 0.0
        self.bar.bar_style = "info"
        if show:
            self.shown.append(name)
            self.label.value = f"{name}..."
            self.layout.display = "flex"
        t0 = time.perf_counter()
        try:
            yield step
        finally:
            self.last_s[name] = time.perf_counter() - t0
            self.bar.value = 1.0
            self.layout.display = "none"

    def callback(
        self, name: str = "", min_interval_s: float = MIN_UPDATE_S
    ) -> Callable[[int, int], None]:
        """A ``(done, total)`` callback for core functions (``plan_training(progress=...)``)
        that moves the bar. A burst of calls sends one update per ``min_interval_s``; the
        final call (done == total) is always sent. ``self.updates`` counts what was sent.

        >>> p = Progress()
        >>> cb = p.callback("planning")
        >>> for i in range(1000):
        ...     cb(i, 1000)
        >>> cb(1000, 1000); p.bar.value, p.updates < 10
        (1.0, True)
        """
        last = [-1.0]

        def report(done: int, total: int) -> None:
            now = time.perf_counter()
            if done < total and now - last[0] < min_interval_s:
                return
            last[0] = now
            self.updates += 1
            self.bar.value = min(done / max(total, 1), 1.0)
            if self.layout.display != "none":
                self.label.value = f"{name}: {done}/{total}" if name else f"{done}/{total}"

        return report
