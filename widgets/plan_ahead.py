"""``PlanAhead``: plan the jobs a user's next likely change needs, in a thread, while the user
reads what is drawn.

A re-plan of GPT-3 175B takes about half a second and a scaling curve one per device count;
a view that has drawn its result knows what the next change most likely asks for (the
neighbouring device counts, the other scaling mode) and plans it in the background, so that
the change is answered from the caches the views already keep (the dashboard's plans,
`explorer.training.planning.scaling`'s points). Nothing it computes is shown: each job's
result goes to a cache keyed by every input, so a change that arrives before the job is done
plans it itself and gets the same result.

A view stops the thread (``stop()``) before any computation of its own: one planning thread
at a time gets the interpreter, and the user's change comes first. The job in flight notices
at its next progress step (``live()`` False) and stops there.

>>> ahead = PlanAhead("example")
>>> ahead.start([1, 2], lambda job, live: None)  # doctest: +SKIP
>>> ahead.wait(); ahead.done  # doctest: +SKIP
[1, 2]
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence

from .figures.errors import ViewError

__all__ = ["PlanAhead", "Stopped", "in_kernel"]


def in_kernel() -> bool:
    """Whether this runs under a running event loop (a Jupyter kernel's): the views plan
    ahead there by default, never in scripts and tests unless asked."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Stopped(Exception):
    """Raised inside a job's computation (from its progress callback) once ``stop()`` was
    called: the job ends without storing anything."""


class PlanAhead:
    """One background thread planning a list of jobs in order, until stopped.

    ``compute(job, live)`` plans one job and stores its result where the view looks for it;
    it calls ``live()`` often (a planner's progress callback) and raises `Stopped` when it
    returns False. A job that fails (a model that does not fit) is skipped: the view's own
    change will report why.

    Attributes: ``done`` (jobs finished by the last ``start``), ``current`` (the job being
    planned, or None), ``name`` (the thread's name).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._generation = 0
        self._last = -1  # the generation whose thread ends after its current job
        self._thread: threading.Thread | None = None
        self.current: Hashable | None = None
        self.done: list[Hashable] = []
        _ALL.add(self)

    def start(
        self, jobs: Sequence[Hashable], compute: Callable[[Hashable, Callable[[], bool]], None]
    ) -> None:
        """Stop what runs, then plan ``jobs`` in order in a new thread."""
        with self._lock:
            self._generation += 1
            generation = self._generation
            self.done = []
        jobs = list(jobs)
        if not jobs:
            return

        def live() -> bool:
            return generation == self._generation

        def run() -> None:
            for job in jobs:
                with self._lock:
                    if not live() or self._last == generation:
                        return
                    self.current = job
                try:
                    compute(job, live)
                except Stopped:
                    return
                except Exception:  # noqa: BLE001, S112  (the user's own change reports it)
                    continue
                finally:
                    with self._lock:
                        self.current = None
                if live():
                    self.done.append(job)

        thread = threading.Thread(target=run, name=f"{self.name} ahead", daemon=True)
        self._thread = thread
        thread.start()

    def stop(self) -> None:
        """Stop planning ahead: the job in flight ends at its next progress step."""
        with self._lock:
            self._generation += 1

    @staticmethod
    def stop_all() -> None:
        """Stop every view's planning ahead (a view's own computation is about to start:
        it gets the interpreter to itself)."""
        for ahead in list(_ALL):
            ahead.stop()

    def finish(self, job: Hashable) -> bool:
        """When ``job`` is the one being planned ahead: let it finish, plan nothing after
        it, and wait for it (True: its result is in the cache now, or it failed and the
        caller's own attempt says why). Otherwise stop planning ahead (False)."""
        with self._lock:
            thread = self._thread
            if thread is None or self.current is None or self.current != job:
                self._generation += 1
                return False
            self._last = self._generation
        thread.join()
        return True

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the jobs started last (tests and benchmarks; a start while waiting is
        waited for too)."""
        while True:
            thread = self._thread
            if thread is None:
                return
            thread.join(timeout_s)
            if thread.is_alive():
                raise ViewError(f"planning ahead still runs after {timeout_s} s; wait longer")
            if thread is self._thread:
                return


_ALL: weakref.WeakSet[PlanAhead] = weakref.WeakSet()
