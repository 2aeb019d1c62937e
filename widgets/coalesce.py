"""``Coalescer``: a burst of slider events becomes one call with the latest value.

A slider drag sends one comm message per step; if each one re-plans (~0.4 s) the kernel
queues stale work for seconds. In a kernel (a running asyncio loop) ``submit`` only records
the latest arguments and (re)arms a short timer, so the call runs once, after the burst,
with the newest value. Without a running loop (tests, scripts) it calls at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["Coalescer"]


class Coalescer:
    """Debounce ``fn``: the last ``submit`` within ``delay_s`` wins.

    Args:
        fn: the (slow) work, e.g. a re-plan.
        delay_s: quiet time that ends a burst. 50 ms is below what a person notices and
            above the gap between two comm messages of one slider drag.

    >>> calls = []
    >>> c = Coalescer(calls.append)
    >>> c.submit(1); c.submit(2); calls   # no event loop: immediate
    [1, 2]
    """

    def __init__(self, fn: Callable[..., Any], delay_s: float = 0.05) -> None:
        self.fn = fn
        self.delay_s = delay_s
        self.submitted = 0  # every submit (what a burst would have cost)
        self.calls = 0  # what actually ran
        self._pending: tuple[tuple, dict] | None = None
        self._handle: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def submit(self, *args: Any, **kwargs: Any) -> None:
        self.submitted += 1
        self._pending = (args, kwargs)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = loop.call_later(self.delay_s, self.flush)

    def flush(self) -> None:
        """Run the pending call now (if any)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._pending is None:
            return
        args, kwargs = self._pending
        self._pending = None
        self.calls += 1
        self.fn(*args, **kwargs)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._pending = None, None
