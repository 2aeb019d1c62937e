"""Trace events and their recording: ``TraceEvent``, ``Trace``, ``record`` and ``active``.

Eager ops and compiled kernels record the same event type, so the two runs of one model
line up op by op:

>>> import explorer as ex, numpy as np
>>> with ex.trace.record("eager") as t:
...     y = ex.F.relu(ex.tensor(np.ones((2, 3))) * 2.0)
>>> [e.name for e in t.events]
['scale', 'relu']
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..checks import is_int, is_number
from ..errors import ExplorerError

__all__ = [
    "TraceError", "EventKind", "EVENT_KINDS", "TraceEvent", "Trace", "Recorder", "record", "active",
]  # fmt: skip


class TraceError(ExplorerError, ValueError):
    """A trace computation got input it cannot use (no runs, a negative time, bad index)."""


EventKind = Literal["op", "kernel", "compile", "recompile", "bind", "graph_break", "cache_hit",
                    "note", "python"]  # fmt: skip
EVENT_KINDS: tuple[str, ...] = EventKind.__args__
_KINDS = frozenset(EVENT_KINDS)
_INF = math.inf


@dataclass(frozen=True)
class TraceEvent:
    """One thing that happened: an eager op, a compiled kernel, a compilation, a graph break.

    Args:
        name: op or kernel name (``matmul``, ``fused``), or what happened.
        kind: ``op`` (eager), ``kernel`` (compiled), ``compile``, ``recompile``, ``bind``,
            ``graph_break``, ``cache_hit``, ``note``, ``python`` (imported host code).
        start_us, dur_us: start and duration in microseconds from the trace's origin.
        shapes: input shapes then the output shape.
        bytes_allocated: bytes this event allocated (0 when it wrote into a reused buffer).
        flops: floating-point operations.
        live_bytes: bytes of tensors alive right after the event (-1 if unknown).
        replaced: for a fused kernel, the eager ops it does in one pass.
        detail: free text (a graph break's reason and source line, a recompile's cause).
    """

    name: str
    kind: EventKind = "op"
    start_us: float = 0.0
    dur_us: float = 0.0
    shapes: tuple[tuple[int, ...], ...] = ()
    bytes_allocated: int = 0
    flops: int = 0
    live_bytes: int = -1
    replaced: tuple[str, ...] = ()
    detail: str = ""

    def __post_init__(self) -> None:
        """Checked at construction: a trace built in Python is held to what an imported one
        is (a negative or NaN time would make every total after it wrong). Every recorded
        op builds one, so the common well-formed case is one comparison chain; the checks
        below name what is wrong otherwise."""
        s, d = self.start_us, self.dur_us
        if (type(self.name) is str and self.kind in _KINDS and type(s) is float
                and type(d) is float and -_INF < s < _INF and 0.0 <= d < _INF
                and type(self.bytes_allocated) is int and self.bytes_allocated >= 0
                and type(self.flops) is int and self.flops >= 0
                and type(self.live_bytes) is int and self.live_bytes >= -1):  # fmt: skip
            return
        self._check()

    def _check(self) -> None:
        if not isinstance(self.name, str):
            raise TraceError(f"TraceEvent name={self.name!r}: expected a str")
        if self.kind not in EVENT_KINDS:
            raise TraceError(f"TraceEvent {self.name!r}: kind={self.kind!r} is not one of "
                             f"{', '.join(EVENT_KINDS)}")  # fmt: skip
        for field_name in ("start_us", "dur_us"):
            v = getattr(self, field_name)
            if not is_number(v):
                raise TraceError(f"TraceEvent {self.name!r}: {field_name}={v!r}; expected a "
                                 "finite number of microseconds")  # fmt: skip
        if self.dur_us < 0:
            raise TraceError(f"TraceEvent {self.name!r}: dur_us={self.dur_us!r} is negative; "
                             "a duration is >= 0 (end before start?)")  # fmt: skip
        for field_name, low in (("bytes_allocated", 0), ("flops", 0), ("live_bytes", -1)):
            v = getattr(self, field_name)
            if not is_int(v, minimum=low, numpy=True):
                raise TraceError(f"TraceEvent {self.name!r}: {field_name}={v!r}; expected an "
                                 f"int >= {low}")  # fmt: skip

    def __str__(self) -> str:
        rep = f" = {'+'.join(self.replaced)}" if self.replaced else ""
        return f"{self.kind} {self.name}{rep} {self.dur_us:.1f} us"


@dataclass(frozen=True)
class Trace:
    """An ordered tuple of events plus the run's wall time.

    ``summary()`` gives total time, number of ops or kernels, the time outside any op
    (an estimate of Python overhead), and peak live memory.
    """

    events: tuple[TraceEvent, ...] = ()
    name: str = "trace"
    wall_us: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.events, tuple):
            raise TraceError(f"Trace {self.name!r}: events is a {type(self.events).__name__}; "
                             "pass a tuple of TraceEvent")  # fmt: skip
        for k, e in enumerate(self.events):
            if not isinstance(e, TraceEvent):
                raise TraceError(f"Trace {self.name!r}: events[{k}] is a {type(e).__name__}, "
                                 "not a TraceEvent")  # fmt: skip
        w = self.wall_us
        if not is_number(w, minimum=0):
            raise TraceError(f"Trace {self.name!r}: wall_us={w!r}; expected a finite number "
                             "of microseconds >= 0")  # fmt: skip

    def __len__(self) -> int:
        return len(self.events)

    @property
    def compute_events(self) -> tuple[TraceEvent, ...]:
        return tuple(e for e in self.events if e.kind in ("op", "kernel"))

    def of_kind(self, kind: EventKind) -> tuple[TraceEvent, ...]:
        return tuple(e for e in self.events if e.kind == kind)

    def summary(self) -> dict[str, Any]:
        ops = self.compute_events
        busy = sum(e.dur_us for e in ops)
        wall = self.wall_us or (
            max((e.start_us + e.dur_us for e in self.events), default=0.0)
            - min((e.start_us for e in self.events), default=0.0)
        )
        live = [e.live_bytes for e in ops if e.live_bytes >= 0]
        return {
            "name": self.name,
            "total_us": wall,
            "ops": len(ops),
            "op_us": busy,
            "python_overhead_us": max(wall - busy, 0.0),
            "flops": sum(e.flops for e in ops),
            "bytes_allocated": sum(e.bytes_allocated for e in ops),
            "peak_bytes": max(live, default=0),
            "compiles": len(self.of_kind("compile")) + len(self.of_kind("recompile")),
            "graph_breaks": len(self.of_kind("graph_break")),
        }

    def __str__(self) -> str:
        s = self.summary()
        return (
            f"trace {self.name}: {s['ops']} ops, {s['total_us']:.0f} us total, "
            f"{s['python_overhead_us']:.0f} us outside ops, peak {s['peak_bytes']} B"
        )


class Recorder:
    """Collects events while active; the clock origin is the moment it starts."""

    def __init__(self, name: str = "trace") -> None:
        self.name = name
        self.events: list[TraceEvent] = []
        self.live_bytes = 0
        self.t0 = time.perf_counter()
        self.trace: Trace | None = None

    def now_us(self) -> float:
        return (time.perf_counter() - self.t0) * 1e6

    def add(self, event: TraceEvent) -> None:
        self.events.append(event)

    def note(self, kind: EventKind, name: str, detail: str = "", dur_us: float = 0.0) -> None:
        self.events.append(TraceEvent(name, kind, self.now_us() - dur_us, dur_us, detail=detail))

    def finish(self) -> Trace:
        self.trace = Trace(tuple(self.events), self.name, self.now_us())
        return self.trace


_STACK: list[Recorder] = []


def active() -> Recorder | None:
    """The innermost active recorder, or None (then nothing is recorded: no cost)."""
    return _STACK[-1] if _STACK else None


@contextlib.contextmanager
def record(name: str = "trace") -> Iterator[_TraceHandle]:
    """Record every eager op and compiled kernel run inside the block.

    The handle's ``.trace`` (also its ``.events``) is filled when the block ends.
    """
    rec = Recorder(name)
    handle = _TraceHandle(rec)
    _STACK.append(rec)
    try:
        yield handle
    finally:
        _STACK.remove(rec)
        handle.trace = rec.finish()


@dataclass
class _TraceHandle:
    recorder: Recorder
    trace: Trace | None = None

    @property
    def events(self) -> tuple[TraceEvent, ...]:
        return self.trace.events if self.trace else tuple(self.recorder.events)

    def summary(self) -> dict[str, Any]:
        return self.trace.summary()
