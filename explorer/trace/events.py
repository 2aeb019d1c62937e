"""Traces of eager and compiled runs: ``TraceEvent``, ``Trace``, ``compare`` and the
Chrome trace-event JSON format (opens in Perfetto; PyTorch profiler traces import too).

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
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .errors import ExplorerError

__all__ = [
    "TraceEvent", "Trace", "Recorder", "record", "active", "compare", "Comparison",
    "to_chrome", "from_chrome", "save_chrome", "load_chrome", "TraceError", "Timing",
    "RepeatedRuns", "repeat_runs", "Flow", "flows", "slice_names", "comparison_to_chrome",
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
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise TraceError(f"TraceEvent {self.name!r}: {field_name}={v!r}; expected a "
                                 "finite number of microseconds")  # fmt: skip
        if self.dur_us < 0:
            raise TraceError(f"TraceEvent {self.name!r}: dur_us={self.dur_us!r} is negative; "
                             "a duration is >= 0 (end before start?)")  # fmt: skip
        for field_name, low in (("bytes_allocated", 0), ("flops", 0), ("live_bytes", -1)):
            v = getattr(self, field_name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < low:
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
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
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


# --- comparison ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Eager and compiled traces aligned: each row is one compiled kernel and the eager ops
    it stands for (a fused kernel stands for several)."""

    rows: tuple[tuple[tuple[TraceEvent, ...], TraceEvent | None], ...]
    eager: Trace
    static: Trace
    unmatched_eager: tuple[TraceEvent, ...] = field(default=())

    @property
    def speedup(self) -> float:
        """Eager total time / static total time. A static run of 0 µs (no events) raises
        ``TraceError``: the ratio is undefined, not infinite."""
        a, b = self.eager.summary()["total_us"], self.static.summary()["total_us"]
        if not b > 0:
            raise TraceError(
                f"speedup of {self.eager.name!r} over {self.static.name!r} is undefined: the "
                f"static run took {b} us ({len(self.static.events)} events); record the static "
                "run inside ex.trace.record(...) so it has events"
            )
        return a / b

    def table(self) -> str:
        lines = [f"{'eager ops':40s} {'us':>9s}   {'kernel':24s} {'us':>9s}"]
        for ev, k in self.rows:
            names = "+".join(e.name for e in ev) or "-"
            lines.append(
                f"{names[:40]:40s} {sum(e.dur_us for e in ev):9.1f}   "
                f"{(k.name if k else '-')[:24]:24s} {(k.dur_us if k else 0.0):9.1f}"
            )
        try:
            lines.append(f"speedup (total time): {self.speedup:.2f}x")
        except TraceError:
            lines.append("speedup (total time): undefined (the static run took 0 us)")
        return "\n".join(lines)


def compare(eager: Trace, static: Trace) -> Comparison:
    """Align eager ops with compiled kernels in order; a fused kernel consumes as many
    eager ops as it replaced. Eager ops the compiler removed (folded, CSE'd) are listed
    as rows with no kernel."""
    ops = list(eager.compute_events)
    rows: list[tuple[tuple[TraceEvent, ...], TraceEvent | None]] = []
    i = 0
    for k in static.compute_events:
        want = list(k.replaced) if k.replaced else [k.name]
        taken: list[TraceEvent] = []
        j = i
        while want and j < len(ops):
            if ops[j].name == want[0]:
                taken.append(ops[j])
                want.pop(0)
                j += 1
            elif ops[j].name in want:
                want.remove(ops[j].name)
                taken.append(ops[j])
                j += 1
            else:
                # an eager op with no kernel (removed by a pass) before this kernel's ops
                if any(o.name == want[0] for o in ops[j + 1 : j + 8]):
                    rows.append(((ops[j],), None))
                    j += 1
                    continue
                break
        rows.append((tuple(taken), k))
        i = j
    rest = tuple(ops[i:])
    return Comparison(tuple(rows), eager, static, rest)


# --- repeated timing ----------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Repeated measurements of one quantity: the samples and their median and spread.

    Quartiles use linear interpolation between order statistics (numpy's default), so
    ``q1 <= median <= q3`` and ``low <= q1``, ``q3 <= high``.

    >>> t = Timing.of([3.0, 1.0, 2.0, 10.0, 2.5])
    >>> t.median, t.low, t.high, (t.q1, t.q3)
    (2.5, 1.0, 10.0, (2.0, 3.0))
    """

    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples) -> Timing:
        vals = tuple(float(v) for v in samples)
        if not vals:
            raise TraceError("a Timing needs at least one sample; run the workload once or more")
        bad = [v for v in vals if not np.isfinite(v) or v < 0]
        if bad:
            raise TraceError(f"timing samples must be finite and >= 0, got {bad[:3]}; "
                             "check the runs that produced them")  # fmt: skip
        return cls(vals)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def q1(self) -> float:
        return float(np.percentile(self.samples, 25))

    @property
    def q3(self) -> float:
        return float(np.percentile(self.samples, 75))

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)

    def median_index(self) -> int:
        """The index of the sample closest to the median (the representative run)."""
        m = self.median
        return min(range(len(self.samples)), key=lambda i: (abs(self.samples[i] - m), i))


@dataclass(frozen=True)
class RepeatedRuns:
    """N interleaved eager and static runs of one workload.

    ``speedup`` holds the per-pair ratios eager[i] / static[i] (runs i were made back to
    back, so they share the machine's load); its median is the headline and its min-max
    and quartiles the spread. ``comparison`` aligns the representative pair: the eager and
    the static run whose total times are closest to their medians.
    """

    eager: tuple[Trace, ...]
    static: tuple[Trace, ...]

    def __post_init__(self) -> None:
        if not self.eager or len(self.eager) != len(self.static):
            raise TraceError(f"need the same number (>= 1) of eager and static runs, got "
                             f"{len(self.eager)} and {len(self.static)}")  # fmt: skip

    def __len__(self) -> int:
        return len(self.eager)

    @property
    def eager_time(self) -> Timing:
        """Total time of each eager run, in µs."""
        return Timing.of(t.summary()["total_us"] for t in self.eager)

    @property
    def static_time(self) -> Timing:
        return Timing.of(t.summary()["total_us"] for t in self.static)

    @property
    def speedup(self) -> Timing:
        e, s = self.eager_time.samples, self.static_time.samples
        if min(s) <= 0:
            raise TraceError("a static run took 0 µs: it recorded nothing; check that the "
                             "static function was called inside the recorder")  # fmt: skip
        return Timing.of(a / b for a, b in zip(e, s, strict=True))

    @property
    def representative(self) -> tuple[int, int]:
        """Indices of the eager and static runs closest to their medians."""
        return self.eager_time.median_index(), self.static_time.median_index()

    def comparison(self, static_prefix: tuple[TraceEvent, ...] = ()) -> Comparison:
        """``compare`` of the representative runs; ``static_prefix`` (e.g. the compile
        events of the first call) is put before the static run's events."""
        ie, is_ = self.representative
        st = self.static[is_]
        static = Trace(static_prefix + st.events, st.name, st.wall_us)
        return compare(self.eager[ie], static)


def repeat_runs(eager_fn, static_fn, args: tuple, n: int = 7) -> RepeatedRuns:
    """Run ``eager_fn(*args)`` and ``static_fn(*args)`` ``n`` times each, interleaved, each
    call recorded on its own. ``static_fn`` should already be compiled for ``args`` (call it
    once first): these runs measure the steady state, compilation is not part of them.

    >>> import explorer as ex, numpy as np
    >>> f = lambda x: ex.F.relu(x * 2.0)
    >>> x = ex.tensor(np.ones((2, 3)))
    >>> runs = repeat_runs(f, f, (x,), n=3)
    >>> len(runs), len(runs.speedup)
    (3, 3)
    """
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise TraceError(f"n={n!r} runs: need a whole number >= 1 (7 gives a stable median)")
    eager, static = [], []
    for _ in range(int(n)):
        with record("eager") as te:
            eager_fn(*args)
        with record("static") as ts:
            static_fn(*args)
        eager.append(te.trace)
        static.append(ts.trace)
    return RepeatedRuns(tuple(eager), tuple(static))


# --- flows and slice names ----------------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    """An eager op and the static kernel that does its work (a fused kernel absorbs several).

    ``eager_index`` and ``kernel_index`` index ``compute_events`` of the eager and the static
    trace; ``fused`` is true when the kernel stands for two or more eager ops.
    """

    eager_index: int
    kernel_index: int
    eager: TraceEvent
    kernel: TraceEvent
    fused: bool


def flows(cmp: Comparison) -> tuple[Flow, ...]:
    """One ``Flow`` per (eager op, kernel) pair of ``cmp.rows``, in kernel order.

    >>> e = Trace((TraceEvent("add"), TraceEvent("gelu", start_us=1.0)), "eager")
    >>> s = Trace((TraceEvent("fused", "kernel", replaced=("add", "gelu")),), "static")
    >>> [(f.eager.name, f.kernel_index, f.fused) for f in flows(compare(e, s))]
    [('add', 0, True), ('gelu', 0, True)]
    """
    e_pos = {id(e): i for i, e in enumerate(cmp.eager.compute_events)}
    k_pos = {id(k): i for i, k in enumerate(cmp.static.compute_events)}
    out = []
    for ops, k in cmp.rows:
        if k is None:
            continue
        for e in ops:
            out.append(Flow(e_pos[id(e)], k_pos[id(k)], e, k, len(ops) > 1))
    return tuple(out)


def slice_names(*traces: Trace) -> tuple[str, ...]:
    """The names of the compute slices of ``traces``, sorted: index i is a stable colour id
    per name (the same workload gives the same names, hence the same colours, every run)."""
    return tuple(sorted({e.name for t in traces for e in t.compute_events}))


# The Chrome trace-event JSON format lives in its own module; its names stay importable from
# here (imported last: it builds on the classes above).
from .chrome_trace import (  # noqa: E402
    comparison_to_chrome,
    from_chrome,
    load_chrome,
    save_chrome,
    to_chrome,
)
