"""Why virtual stages shrink the pipeline bubble, as a lesson with its own check.

`interleaving_lesson` runs the same model on the same ``pp`` devices twice: plain 1F1B, each
device holding one block of ``L / pp`` layers, and interleaved 1F1B, each device holding ``v``
chunks of ``L / (pp v)`` layers (device d has stages d, d + pp, ...). A forward of one chunk
takes ``1/v`` of a plain stage's forward, so the last device waits ``(pp - 1)`` chunk
forwards, not ``(pp - 1)`` stage forwards, before its first one: the warm-up and cool-down
idle shrink ``v``-fold while the work stays the same. The lesson states each number it
computes (idle per device, bubble simulated and by the formula, the microbatches in flight
that interleaving costs in memory) and checks that both schedules run every (stage,
microbatch) forward and backward exactly once and do the same total work.

>>> les = interleaving_lesson(4, 8, 2)
>>> round(les.plain.bubble, 4), round(les.interleaved.bubble, 4), les.check_ok
(0.2727, 0.1579, True)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ...checks import int_at_least, positive_int, positive_number
from ..errors import ParallelConfigError
from .schedule import Schedule, bubble_fraction, build_schedule
from .timeline import Timeline, simulate_schedule

__all__ = ["InterleavingLesson", "ScheduleRun", "interleaving_lesson"]


@dataclass(frozen=True)
class ScheduleRun:
    """One schedule of the lesson: its order, timeline and what they add up to.

    Attributes:
        schedule, timeline: the steps per device and their simulated times.
        bubble: idle over devices x step time (simulated); ``formula``: the closed form.
        first_start_s: per device, when its first forward starts (the warm-up wait).
        idle_s: per device, the idle seconds of the step.
        in_flight: per device, the most microbatch activations held at once.
    """

    schedule: Schedule
    timeline: Timeline
    bubble: float
    formula: float
    first_start_s: tuple[float, ...]
    idle_s: tuple[float, ...]
    in_flight: tuple[int, ...]


@dataclass(frozen=True)
class InterleavingLesson:
    """Plain and interleaved 1F1B of one model on one pipeline, with the sentences that
    explain the difference (every number in them computed here) and the check."""

    pp: int
    microbatches: int
    chunks: int
    forward_s: float
    backward_s: float
    plain: ScheduleRun
    interleaved: ScheduleRun
    check_ok: bool
    steps: tuple[str, ...]

    def __str__(self) -> str:
        return "\n".join(f"{k}. {s}" for k, s in enumerate(self.steps, 1))


def _run(kind: str, pp: int, m: int, v: int, f: float, b: float) -> ScheduleRun:
    sched = build_schedule(kind, pp, m, v)
    tl = simulate_schedule(sched, forward_s=f / v, backward_s=b / v)
    first = tuple(
        min(e.start_s for e in tl.for_device(d) if e.kind == "compute-forward")
        for d in range(pp)
    )  # fmt: skip
    idle = tuple(tl.time_by_kind(d)["idle"] for d in range(pp))
    return ScheduleRun(sched, tl, tl.bubble_fraction(), bubble_fraction(kind, pp, m, v),
                       first, idle, tuple(sched.in_flight(d) for d in range(pp)))  # fmt: skip


def _work(run: ScheduleRun) -> Counter:
    """(stage, microbatch, phase) -> how often the schedule runs it."""
    s = run.schedule
    return Counter((s.stage(d, st.chunk), st.microbatch, st.phase)
                   for d in range(s.pp) for st in s.order[d])  # fmt: skip


def interleaving_lesson(pp: int = 4, microbatches: int = 8, chunks: int = 2, *,
                        forward_s: float = 1.0, backward_s: float = 2.0) -> InterleavingLesson:  # fmt: skip
    """Plain 1F1B against interleaved 1F1B with ``chunks`` virtual stages per device.

    Args:
        pp: pipeline devices (at least 2: one device has no bubble).
        microbatches: per step; interleaving needs a multiple of ``pp``.
        chunks: virtual stages per device, v (at least 2).
        forward_s, backward_s: one plain stage's forward and backward of one microbatch
            (a chunk takes ``1/v`` of them).
    """
    pp = int_at_least(pp, 2, "pp", error=ParallelConfigError, numpy=True,
                      fix="a pipeline of one device has no bubble to shrink")  # fmt: skip
    m = positive_int(microbatches, "microbatches", error=ParallelConfigError, numpy=True)
    v = int_at_least(chunks, 2, "chunks", error=ParallelConfigError, numpy=True,
                     fix="one chunk per device is plain 1F1B")  # fmt: skip
    f = positive_number(forward_s, "forward_s", error=ParallelConfigError)
    b = positive_number(backward_s, "backward_s", error=ParallelConfigError)
    if m % pp:
        raise ParallelConfigError(
            f"microbatches={m}: interleaved 1F1B sends microbatches in groups of pp={pp}; "
            f"choose a multiple of {pp}"
        )
    plain = _run("1f1b", pp, m, 1, f, b)
    # the same layers cut v-fold finer: chunk k of device d is stage k*pp + d
    inter = _run("interleaved_1f1b", pp, m, v, f, b)
    work_p, work_i = _work(plain), _work(inter)
    once = all(n == 1 for n in work_p.values()) and all(n == 1 for n in work_i.values())
    same_work = abs(sum(plain.timeline.time_by_kind(d)["compute-forward"] for d in range(pp))
                    - sum(inter.timeline.time_by_kind(d)["compute-forward"]
                          for d in range(pp))) < 1e-9  # fmt: skip
    formula_ok = all(abs(r.bubble - r.formula) < 1e-9 for r in (plain, inter))
    last = pp - 1
    steps = (
        f"Plain 1F1B: each of the {pp} devices holds one stage; a stage's forward takes {f:g} "
        f"and its backward {b:g} time units. The last device starts its first forward at "
        f"{plain.first_start_s[last]:g}: it waits for the {last} devices before it "
        f"({last} x {f:g}), and the first device waits as long at the end for the backwards.",
        f"Idle per device over the step of {plain.timeline.step_time_s:g}: "
        f"{[round(x, 3) for x in plain.idle_s]}; the bubble is {plain.bubble:.1%} simulated "
        f"and (p-1)/(m+p-1) = {plain.formula:.1%} by the formula.",
        f"Interleaved 1F1B with v = {v}: the same layers cut into {pp * v} stages, device d "
        f"holding stages d, d+{pp}, ...; one chunk's forward takes {f / v:g}. The last device "
        f"now starts at {inter.first_start_s[last]:g}, {v}x sooner: the warm-up waits for "
        f"{last} chunk forwards, not {last} stage forwards.",
        f"Idle per device over the step of {inter.timeline.step_time_s:g}: "
        f"{[round(x, 3) for x in inter.idle_s]}; the bubble is {inter.bubble:.1%} simulated "
        f"and ((p-1)/v)/(m+(p-1)/v) = {inter.formula:.1%} by the formula: the idle time is "
        f"divided by {v}, the work is not.",
        f"The price: more microbatches in flight on the first device, "
        f"{inter.in_flight[0]} chunk activations (each 1/{v} of a stage's) against "
        f"{plain.in_flight[0]} stage activations, and {v}x as many pipeline sends.",
        "Check: both schedules run every (stage, microbatch) forward and backward exactly "
        f"once ({'yes' if once else 'NO'}), the same total forward work "
        f"({'yes' if same_work else 'NO'}), and the simulated bubble equals the formula for "
        f"uniform stages ({'yes' if formula_ok else 'NO'}).",
    )  # fmt: skip
    return InterleavingLesson(pp, m, v, f, b, plain, inter, once and same_work and formula_ok,
                              steps)  # fmt: skip
