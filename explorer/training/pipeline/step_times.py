"""A schedule's steps in the order their dependencies allow, worked out once per schedule
(`compiled`), and a step's times without its events over it: the times in one loop and the
seconds of each kind summed with numpy (`step_times`).

Which step can run next depends on the schedule alone, so the walk that finds it (devices
in turn, each as far as its next step's dependency has run) is made once per schedule and
kept (the last few, as `build_schedule` keeps the schedules); the event simulation
(`timeline._run`, events kept) and `timeline.schedule_times` (what a plan that keeps a
step's numbers alone asks for: a scaling curve's points) both run over it. The arithmetic is the event simulation's: each
step starts at the later of its device's free time and its dependency's end (plus the
transfer), its segments are added one by one, and each kind's seconds (``(t + d) - t`` per
segment, the idle gaps, the transfers, the tails) are summed device by device in time
order (`numpy.add.accumulate` adds one after another), so the step time and the time by
kind equal the timeline's to the last bit (tests/training/test_schedule.py). GPT-3 175B on
pp 8 x v 4 with 384 microbatches (24,576 steps): 26 -> ~10 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ...memo import Memo
from ..errors import TrainingError

__all__ = ["compiled", "Compiled", "step_bounds", "step_times"]

Segments = tuple[tuple[str, float], ...]


class Compiled(NamedTuple):
    """A schedule's steps in an order the dependencies allow: ``steps[i]`` is (device,
    ``2 * stage + (1 if backward)``, the index of the step it waits for or -1, 1 when a
    transfer comes between them else 0); ``by_device[d]`` the indices of device d's steps
    in its order; ``sends[i]`` whether step i sends its output to another device;
    ``microbatches[i]`` its microbatch."""

    order: tuple  # the schedule's order compiled (a kept entry is used for it alone)
    steps: list[tuple[int, int, int, int]]
    by_device: list[np.ndarray]
    sends: np.ndarray
    microbatches: list[int]


_COMPILED: Memo[Compiled] = Memo("training.step_order", maxsize=32)


def compiled(schedule) -> Compiled:
    """``schedule``'s steps in dependency order (`Compiled`), worked out once per schedule
    (keyed by its order's identity: `build_schedule` hands the same schedule out again)."""
    hit = _COMPILED.peek(id(schedule.order))
    if hit is not None and hit.order is schedule.order:
        return hit
    c = _compile(schedule)
    _COMPILED.put(id(schedule.order), c)
    return c


def _compile(schedule) -> Compiled:
    # the event simulation's own walk (timeline._run), without times: devices in turn, each
    # as far as its next step's dependency is done
    p, S = schedule.pp, schedule.stages
    done_f: dict[tuple[int, int], int] = {}
    done_b: dict[tuple[int, int], int] = {}
    ptr = [0] * p
    steps: list[tuple[int, int, int, int]] = []
    by_device: list[list[int]] = [[] for _ in range(p)]
    sends: list[bool] = []
    micro: list[int] = []
    remaining = sum(len(o) for o in schedule.order)
    while remaining:
        progressed = False
        for d in range(p):
            order = schedule.order[d]
            while ptr[d] < len(order):
                st = order[ptr[d]]
                g, mb = st.chunk * p + d, st.microbatch
                forward = st.phase == "F"
                if forward:
                    dep = -1 if g == 0 else done_f.get((g - 1, mb))
                    hop = g > 0 and p > 1
                else:
                    dep = done_f.get((g, mb)) if g == S - 1 else done_b.get((g + 1, mb))
                    hop = g < S - 1 and p > 1
                if dep is None:
                    break
                i = len(steps)
                steps.append((d, 2 * g + (not forward), dep, int(hop)))
                by_device[d].append(i)
                sends.append(((g < S - 1) if forward else (g > 0)) and p > 1)
                micro.append(mb)
                (done_f if forward else done_b)[g, mb] = i
                ptr[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise TrainingError(
                f"schedule {schedule.kind} deadlocks: no device can run its next step "
                f"(positions {ptr}); the step order violates a pipeline dependency"
            )
    return Compiled(
        schedule.order, steps, [np.array(ix, dtype=np.intp) for ix in by_device],
        np.array(sends, dtype=bool), micro,
    )  # fmt: skip


def step_bounds(
    c: Compiled, chains: Sequence[Sequence[float]], p: int, p2p_s: float
) -> tuple[list[float], list[float]]:
    """(start, end) of every step of ``c`` in its order, ``chains[2 * stage + backward?]``
    the seconds of its segments: each step starts at the later of its device's previous end
    and its dependency's end plus the transfer (the timeline's rule), and ends after its
    segments added one by one. The event simulation and `step_times` both time with it."""
    starts: list[float] = []
    ends: list[float] = []
    free = [0.0] * p
    start_at, end_at = starts.append, ends.append
    for d, sid, dep, hop in c.steps:
        s = free[d]
        if dep >= 0:
            x = ends[dep] + p2p_s if hop else ends[dep]
            if x > s:  # max(free, dependency + transfer), as max() keeps the first of equals
                s = x
        t = s
        for dur in chains[sid]:
            t += dur
        start_at(s)
        end_at(t)
        free[d] = t
    return starts, ends


def step_times(
    schedule, fwd: Sequence[Segments], bwd: Sequence[Segments], p2p_s: float,
    tails: Sequence[Segments], kinds: Sequence[str],
) -> tuple[float, dict[str, float]]:  # fmt: skip
    """(step time, seconds per kind of ``kinds``) of ``schedule`` with the stages'
    segments ``fwd`` / ``bwd`` (zero ones left out) and each device's ``tails``, summed
    over the devices as `Timeline.time_by_kind` sums them (module docstring)."""
    c = compiled(schedule)
    p, S = schedule.pp, schedule.stages
    chains: list[tuple[float, ...]] = []
    for g in range(S):
        chains += [tuple(x for _, x in fwd[g]), tuple(x for _, x in bwd[g])]
    starts, ends = step_bounds(c, chains, p, p2p_s)
    # each step's events as a row: idle before it, its segments (zero-padded: adding 0.0
    # changes no sum), its transfer; a column per position, a kind per cell (-1: none)
    kind_id = {k: i for i, k in enumerate(kinds)}
    width = max((len(ch) for ch in chains), default=0)
    seg_kinds = np.full((2 * S, width), -1, dtype=np.intp)
    seg_durs = np.zeros((2 * S, width))
    for g in range(S):
        for sid, segs in ((2 * g, fwd[g]), (2 * g + 1, bwd[g])):
            for j, (k, x) in enumerate(segs):
                seg_kinds[sid, j], seg_durs[sid, j] = kind_id[k], x
    n = len(c.steps)
    sid_of = np.fromiter((st[1] for st in c.steps), dtype=np.intp, count=n)
    start = t = np.array(starts)
    end = np.array(ends)
    values = np.empty((n, width + 2))
    cells = np.empty((n, width + 2), dtype=np.intp)
    cells[:, 0] = kind_id["idle"]
    cells[:, 1 : width + 1] = seg_kinds[sid_of]
    cells[:, width + 1] = np.where(c.sends & (p2p_s > 0), kind_id["pp-comm"], -1)
    durs = seg_durs[sid_of]
    for j in range(width):  # (t + d) - t, segment by segment, as the events are timed
        t_next = t + durs[:, j]
        values[:, j + 1] = t_next - t
        t = t_next
    values[:, width + 1] = (end + p2p_s) - end
    acc = np.zeros(len(kinds))
    tail_free = []
    for d in range(p):  # each device's tail after its last step
        last = float(end[c.by_device[d][-1]]) if len(c.by_device[d]) else 0.0
        tail = []
        for k, x in tails[d]:
            if x > 0:
                tail.append((kind_id[k], (last + x) - last))
                last += x
        tail_free.append((last, tail))
    step = max(f for f, _ in tail_free) if p else 0.0
    for d in range(p):
        rows = c.by_device[d]
        v = values[rows]
        v[:, 0] = start[rows] - np.concatenate(([0.0], end[rows][:-1]))  # 0 where no gap
        k = cells[rows]
        for kid in np.unique(k):
            if kid >= 0:
                picked = v[k == kid]  # row by row: time order, then the step's own order
                acc[kid] = np.add.accumulate(np.concatenate(([acc[kid]], picked)))[-1]
        last, tail = tail_free[d]
        for kid, x in tail:
            acc[kid] += x
        if last < step:
            acc[kind_id["idle"]] += step - last
    return step, {k: float(acc[i]) for i, k in enumerate(kinds)}
