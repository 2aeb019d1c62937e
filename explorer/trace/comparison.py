"""Eager and compiled runs side by side: ``compare`` aligns a compiled kernel with the eager
ops it stands for, ``repeat_runs`` times N interleaved runs of both (``Timing``: the median
and the spread), ``flows`` pairs each eager op with its kernel and ``slice_names`` gives the
stable colour ids the trace views use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..checks import is_int
from .events import Trace, TraceError, TraceEvent, record

__all__ = [
    "Comparison", "compare", "Timing", "RepeatedRuns", "repeat_runs", "Flow", "flows",
    "slice_names",
]  # fmt: skip


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
    if not is_int(n, minimum=1, numpy=True):
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
