"""``breakdown(trace)``: where each rank's steps went.

Per rank and ``ProfilerStep#N``: the step's time, its compute (the union of compute
kernels, or on a CPU-only trace the main thread's self time in non-communication ops),
communication split into the part hidden behind compute (overlapped) and the part that is
not (exposed), and idle (no compute, no communication: launch gaps, pipeline bubbles,
waiting for other ranks, host overhead). Per category (`explorer.traces.classify`): the
busy time (sum of kernel durations on a GPU trace; self time on a CPU one). Per collective
kind and mesh axis: time, count and bytes.

A GPU kernel belongs to the step whose CPU window contains its launch (the runtime call
with its correlation id); the step's GPU window runs from its first kernel to the next
step's first kernel (to its last kernel's end for the last step).

The mesh axis of a collective comes from its process group's ranks and ``axes``
(``{"tp": 2, "dp": 4}``, the first axis varying fastest over the ranks, Megatron's order):
a group of ranks ``base + k * stride`` of ``n`` ranks is the axis of size ``n`` whose stride
is the product of the sizes before it. Without ``axes`` (or ranks), a group of the whole
world is ``world``, another ``group of N``; a collective whose group the trace does not
record is ``?``.

>>> import explorer as ex
>>> t = ex.traces.load_kineto(ex.traces.vendored("nccl_data.json.gz"))
>>> b = ex.traces.breakdown(t, axes={"dp": 2})
>>> [r.step for r in b.rows], sorted({k for r in b.rows for k, _ in r.comm_by_axis})
([4, 5, 6], ['all-reduce dp', 'broadcast dp'])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..checks import is_int
from .classify import CATEGORIES
from .errors import TracesError
from .events import Activity, Collective, KinetoTrace, RankTrace, Step
from .intervals import Intervals, clip, length, merge, overlap, subtract
from .table import ActivityTable

__all__ = ["StepBreakdown", "Breakdown", "breakdown", "axis_of"]

US = 1e-6  # trace times are microseconds; the table is in seconds


@dataclass(frozen=True)
class StepBreakdown:
    """One rank's step, in seconds.

    Attributes:
        rank, step: which rank and ``ProfilerStep#N``.
        step_s: the step marker's duration (CPU side); ``window_s``: the span analysed
            (GPU: the step's kernels; CPU: the marker).
        compute_s, exposed_comm_s, overlapped_comm_s, idle_s: they add up to ``window_s``
            less the overlapped part (``compute + exposed + idle == window``).
        by_category: ``((category, seconds), ...)`` in `CATEGORIES` order.
        comm_by_axis: ``(("all-reduce dp", seconds), ...)``; ``comm_bytes``:
            ``(("all-reduce dp", bytes), ...)`` (buffer bytes ``S`` summed where recorded);
            ``comm_counts``: how many collectives of each.
    """

    rank: int | None
    step: int
    step_s: float
    window_s: float
    compute_s: float
    exposed_comm_s: float
    overlapped_comm_s: float
    idle_s: float
    by_category: tuple[tuple[str, float], ...]
    comm_by_axis: tuple[tuple[str, float], ...] = ()
    comm_bytes: tuple[tuple[str, float], ...] = ()
    comm_counts: tuple[tuple[str, int], ...] = ()

    @property
    def comm_s(self) -> float:
        return self.exposed_comm_s + self.overlapped_comm_s

    def category(self, name: str) -> float:
        return dict(self.by_category).get(name, 0.0)


@dataclass(frozen=True)
class Breakdown:
    """`StepBreakdown` rows, by rank then step; ``str()`` is the text table."""

    rows: tuple[StepBreakdown, ...]

    def ranks(self) -> tuple[int | None, ...]:
        return tuple(dict.fromkeys(r.rank for r in self.rows))

    def mean(self, field_name: str, rank: int | None = None) -> float:
        """The mean of a row field (``"step_s"``, ``"compute_s"``, ...) or of a category
        (``"matmul"``) over the rows (of one rank if given)."""
        rows = [r for r in self.rows if rank is None or r.rank == rank]
        if not rows:
            raise TracesError(f"no rows for rank {rank!r}; ranks: {self.ranks()}")
        if field_name in CATEGORIES:
            return sum(r.category(field_name) for r in rows) / len(rows)
        if not hasattr(rows[0], field_name):
            raise TracesError(
                f"mean({field_name!r}): not a row field or category; expected one of "
                f"step_s, window_s, compute_s, exposed_comm_s, overlapped_comm_s, idle_s, "
                f"{', '.join(CATEGORIES)}"
            )
        return sum(getattr(r, field_name) for r in rows) / len(rows)

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": [
                {
                    "rank": r.rank,
                    "step": r.step,
                    "step_s": r.step_s,
                    "window_s": r.window_s,
                    "compute_s": r.compute_s,
                    "exposed_comm_s": r.exposed_comm_s,
                    "overlapped_comm_s": r.overlapped_comm_s,
                    "idle_s": r.idle_s,
                    "by_category": dict(r.by_category),
                    "comm_by_axis": dict(r.comm_by_axis),
                    "comm_bytes": dict(r.comm_bytes),
                    "comm_counts": dict(r.comm_counts),
                }  # fmt: skip
                for r in self.rows
            ]
        }

    def __str__(self) -> str:
        head = (f"{'rank':>4} {'step':>5} {'step ms':>9} {'window':>9} {'compute':>9} "
                f"{'exposed':>9} {'overlap':>9} {'idle':>9}  top categories (ms)")  # fmt: skip
        lines = [head]
        for r in self.rows:
            top = sorted((v, k) for k, v in r.by_category if v > 0)[::-1][:3]
            cats = ", ".join(f"{k} {v * 1e3:.3g}" for v, k in top)
            lines.append(
                f"{r.rank if r.rank is not None else '?':>4} {r.step:>5} {r.step_s * 1e3:9.3f} "
                f"{r.window_s * 1e3:9.3f} {r.compute_s * 1e3:9.3f} {r.exposed_comm_s * 1e3:9.3f} "
                f"{r.overlapped_comm_s * 1e3:9.3f} {r.idle_s * 1e3:9.3f}  {cats}"
            )
        return "\n".join(lines)


def _check_axes(axes) -> dict[str, int]:
    if axes is None or (isinstance(axes, Mapping) and not axes):
        return {}
    if not isinstance(axes, Mapping):
        raise TracesError(f"axes={axes!r}; expected a dict such as {{'tp': 2, 'dp': 4}} or None")
    for k, v in axes.items():
        if not isinstance(k, str) or not is_int(v, minimum=1, numpy=True):
            raise TracesError(
                f"axes[{k!r}]={v!r}; expected axis names (str) mapped to sizes (ints >= 1)"
            )
    return {k: int(v) for k, v in axes.items()}


def axis_of(c: Collective, world: int | None, axes: Mapping[str, int] | None = None) -> str:
    """The mesh axis (or axes, joined by ``+``) whose devices form ``c``'s group.

    >>> axis_of(Collective("all-reduce", group_ranks=(1, 3)), 4, {"tp": 2, "dp": 2})
    'dp'
    """
    axes = _check_axes(axes)
    ranks = c.group_ranks
    n = len(ranks) if ranks else c.group_size
    if n is None:  # the trace does not say (NCCL kernels without their arguments)
        return "?"
    names, sizes = list(axes), list(axes.values())
    if ranks and len(ranks) > 1:
        r = sorted(ranks)
        stride = r[1] - r[0]
        if all(b - a == stride for a, b in zip(r, r[1:], strict=False)):
            # a run of consecutive axes i..j (one axis, or tp+cp, dp+pp, ...)
            for i in range(len(names)):
                if math.prod(sizes[:i]) != stride:
                    continue
                for j in range(i, len(names)):
                    if math.prod(sizes[i : j + 1]) == n:
                        return "+".join(names[i : j + 1])
    elif axes:
        hits = [name for name, size in axes.items() if size == n]
        if len(hits) == 1:
            return hits[0]
    if world is not None and n == world:
        return "world"
    return f"group of {n}"


def breakdown(trace: KinetoTrace | RankTrace, axes: Mapping[str, int] | None = None) -> Breakdown:
    """Per rank and step: compute, exposed and overlapped communication, idle, time per
    category and per collective (see the module doc).

    Args:
        trace: a `KinetoTrace` (`load_kineto`) or one `RankTrace`.
        axes: mesh axis sizes in rank order (fastest first), to name collective groups.

    Raises:
        TracesError: not a trace, bad ``axes``, or a rank without ``ProfilerStep#N`` markers.
    """
    if isinstance(trace, RankTrace):
        trace = KinetoTrace((trace,))
    if not isinstance(trace, KinetoTrace):
        raise TracesError(f"breakdown({trace!r}): expected a KinetoTrace from load_kineto")
    axes = _check_axes(axes)
    rows: list[StepBreakdown] = []
    for r in trace.ranks:
        if not r.steps:
            raise TracesError(
                f"{r.path}: no ProfilerStep#N markers, so no step to break down; profile with "
                "torch.profiler.profile(schedule=...) and call prof.step() once per step"
            )
        world = r.world_size or trace.world_size
        rows.extend(_gpu_rows(r, world, axes) if r.device == "gpu" else _cpu_rows(r, world, axes))
    return Breakdown(tuple(rows))


def _comm_tables(acts, world, axes):
    t: dict[str, float] = {}
    b: dict[str, float] = {}
    n: dict[str, int] = {}
    for a in acts:
        c = a.collective
        if c is None:
            continue
        key = f"{c.kind} {axis_of(c, world, axes)}"
        t[key] = t.get(key, 0.0) + a.dur * US
        n[key] = n.get(key, 0) + 1
        if c.size_bytes is not None:
            b[key] = b.get(key, 0.0) + c.size_bytes
    return tuple(sorted(t.items())), tuple(sorted(b.items())), tuple(sorted(n.items()))


def _row(r: RankTrace, st: Step, lo, hi, compute, comm, cats, comm_acts, world, axes):
    window = max(hi - lo, 0.0)
    c, m = length(compute), length(comm)
    over = overlap(compute, comm)
    t, b, n = _comm_tables(comm_acts, world, axes)
    return StepBreakdown(
        rank=r.rank, step=st.number, step_s=st.dur * US, window_s=window * US,
        compute_s=c * US, exposed_comm_s=(m - over) * US, overlapped_comm_s=over * US,
        idle_s=max(window - c - (m - over), 0.0) * US,
        by_category=tuple((k, cats.get(k, 0.0) * US) for k in CATEGORIES),
        comm_by_axis=t, comm_bytes=b, comm_counts=n,
    )  # fmt: skip


def kernels_by_step(r: RankTrace) -> list[Sequence[Activity]]:
    """Per step of ``r.steps``, the kernels launched inside its CPU window (by their
    ``launched`` time, else their start), in start order. On a columnar trace
    (`explorer.traces.table.ActivityTable`) the assignment is done on the columns and each
    step's kernels stay a table: no more than one step's tuples are made at a time."""
    steps, ks = r.steps, r.kernels
    if not isinstance(ks, ActivityTable):
        per: list[list[Activity]] = [[] for _ in steps]
        starts = [s.ts for s in steps]
        for k in ks:
            i = _step_index(starts, steps, k.ts if k.launched is None else k.launched)
            if i is not None:
                per[i].append(k)
        return per
    launched, ts = ks.column("launched"), ks.column("ts")
    at = np.where(np.isnan(launched), ts, launched)
    starts = np.array([s.ts for s in steps])
    ends = np.array([s.end for s in steps])
    i = np.searchsorted(starts, at, side="right") - 1
    ok = i >= 0
    ok[ok] = at[ok] <= ends[i[ok]]
    rows = np.flatnonzero(ok)
    order = np.argsort(i[rows], kind="stable")  # by step, start order within each
    rows, i = rows[order], i[rows][order]
    cuts = np.searchsorted(i, np.arange(len(steps) + 1))
    return [ks.rows(rows[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _gpu_rows(r: RankTrace, world, axes) -> list[StepBreakdown]:
    steps = r.steps
    per = kernels_by_step(r)
    rows = []
    firsts = [ks[0].ts if len(ks) else None for ks in per]  # each step's in start order
    for i, (st, ks) in enumerate(zip(steps, per, strict=True)):
        if not ks:
            continue
        ks = list(ks)
        lo = firsts[i]
        nxt = next((f for f in firsts[i + 1 :] if f is not None), None)
        hi = nxt if nxt is not None and nxt > lo else max(k.end for k in ks)
        comm_k = [k for k in ks if k.category == "communication"]
        compute = clip(((k.ts, k.end) for k in ks if k.category != "communication"), lo, hi)
        comm = clip(((k.ts, k.end) for k in comm_k), lo, hi)
        cats: dict[str, float] = {}
        for k in ks:
            cats[k.category] = cats.get(k.category, 0.0) + k.dur
        rows.append(_row(r, st, lo, hi, compute, comm, cats, comm_k, world, axes))
    return rows


def _step_index(starts, steps, at) -> int | None:
    import bisect

    i = bisect.bisect_right(starts, at) - 1
    if i >= 0 and at <= steps[i].end:
        return i
    return None


def _cpu_rows(r: RankTrace, world, axes) -> list[StepBreakdown]:
    rows = []
    main = [a for a in r.ops if a.tid == r.main_tid and not a.name.startswith("ProfilerStep#")]
    others = [a for a in r.ops if a.tid != r.main_tid and a.category == "communication"]
    for st in r.steps:
        lo, hi = st.ts, st.end
        ops = [a for a in main if a.ts >= lo and a.ts < hi]
        selfs = _self_segments(ops, hi)
        cats: dict[str, float] = {}
        for a, b, cat in selfs:
            cats[cat] = cats.get(cat, 0.0) + (b - a)
        compute = merge((a, b) for a, b, cat in selfs if cat != "communication")
        comm = cpu_communication(selfs, others, lo, hi)
        cats["communication"] = length(comm)
        calls = [a for a in ops if a.collective is not None]
        rows.append(_row(r, st, lo, hi, compute, comm, cats, calls, world, axes))
    return rows


def cpu_communication(selfs, others: list[Activity], lo: float, hi: float) -> Intervals:
    """A CPU step's communication: where the backend runs collectives on a thread of its own
    (gloo's ``gloo:all_reduce`` slices; ``others``, the trace's communication slices off the
    main thread), that thread's busy time: the bytes on the wire. The main thread's
    communication code outside it is the framework's host work around the collective
    (FSDP2's copy-in and bookkeeping, its hooks) and counts as idle, as a GPU's launch gaps
    do. Without such a thread, the main thread's communication self time (``selfs``)."""
    if others:
        return clip(((a.ts, a.end) for a in others), lo, hi)
    return merge((a, b) for a, b, cat in selfs if cat == "communication")


def _self_segments(ops: list[Activity], hi: float) -> list[tuple[float, float, str]]:
    """Self-time pieces ``(start, end, category)`` of nested ops on one thread (sorted by
    start). A piece's category: communication or optimizer if an enclosing op is one (an
    optimizer's ``aten::add_`` is optimizer time), else the op's own, else the nearest
    enclosing op's, else ``other``."""
    ops = sorted(ops, key=lambda a: (a.ts, -a.dur))
    children: dict[int, list[int]] = {i: [] for i in range(len(ops))}
    roots: list[int] = []
    ends = [min(a.end, hi) for a in ops]
    stack: list[int] = []
    for i, a in enumerate(ops):
        while stack and ends[stack[-1]] <= a.ts:
            stack.pop()
        if stack:
            ends[i] = min(ends[i], ends[stack[-1]])
            children[stack[-1]].append(i)
        else:
            roots.append(i)
        stack.append(i)
    out: list[tuple[float, float, str]] = []
    todo = [(i, None, None) for i in reversed(roots)]
    while todo:
        i, override, inherited = todo.pop()
        a = ops[i]
        own = a.category
        cat = override or own or inherited or "other"
        span = ((a.ts, ends[i]),)
        kids = merge((ops[j].ts, ends[j]) for j in children[i])
        out.extend((x, y, cat) for x, y in subtract(span, kids))
        new_override = override or (own if own in ("communication", "optimizer") else None)
        for j in reversed(children[i]):
            todo.append((j, new_override, own or inherited))
    return out
