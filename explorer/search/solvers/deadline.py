"""``Deadline``: the time limit every search method honours.

A solver asks ``deadline.passed("where")`` at points where it can stop with a valid plan
(the best found so far); the first passed check records where the search stopped, and the
planner reports it (``plan.status == "time-limited"``, ``plan.diagnostics["stopped_early"]``).
"""

from __future__ import annotations

import time

__all__ = ["Deadline"]


class Deadline:
    """Seconds from its creation; one per search call (not shared between threads)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.start = time.perf_counter()
        self.end = self.start + self.seconds
        self.stopped_at: str | None = None

    def passed(self, where: str) -> bool:
        """Whether the time is up; the first time it is, remember ``where``."""
        if time.perf_counter() <= self.end:
            return False
        if self.stopped_at is None:
            self.stopped_at = where
        return True

    def report(self) -> str | None:
        """One sentence for the plan's diagnostics, or None when the search finished."""
        if self.stopped_at is None:
            return None
        return (
            f"time_limit_s={self.seconds:g} ran out {self.stopped_at}; the plan is the best "
            "found by then: raise time_limit_s to let the search finish"
        )
