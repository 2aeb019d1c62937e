"""``Timeline``: simulated per-device events of one training step, as plain data.

`simulate_schedule` runs a `Schedule` with durations: each device executes its steps in
order; a forward of stage g waits for the forward of stage g-1 (plus the point-to-point
transfer), a backward waits for the backward of stage g+1 (the last stage's for its own
forward). Gaps on a device are ``idle`` events, so every device's events cover the whole
step and the bubble can be read off the data.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, get_args

from ..errors import TrainingError
from .step_times import compiled, step_bounds, step_times

__all__ = [
    "EventKind", "EVENT_KINDS", "TimelineEvent", "Timeline", "simulate_schedule", "schedule_times",
]  # fmt: skip

EventKind = Literal[
    "compute-forward", "compute-backward", "recompute", "tp-comm", "ep-comm", "cp-comm",
    "dp-comm", "pp-comm", "zero-gather", "optimizer", "idle",
]  # fmt: skip
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
_KIND_SET = frozenset(EVENT_KINDS)
Stream = Literal["compute", "comm"]


class PipelineStep(Protocol):
    """One unit of pipeline work as the simulator reads it (`schedule.Step` is one)."""

    chunk: int
    microbatch: int
    phase: str


class StepOrder(Protocol):
    """What `simulate_schedule` reads of a schedule (`schedule.Schedule` is one): the
    steps each device runs in order. The schedule stands above the simulator (it draws
    itself by simulating, `Schedule.table`), so the simulator names no class of it."""

    kind: str
    pp: int
    order: tuple[tuple[PipelineStep, ...], ...]

    @property
    def stages(self) -> int: ...


Segments = Sequence[tuple[str, float]]
#: The order of a timeline's events: device, start, then stream (compute before comm).
_ORDER = operator.itemgetter(0, 2, 7)
Durations = float | Sequence[float | Segments]


class TimelineEvent(NamedTuple):
    """One interval on one device (an immutable named tuple: cheap to make by the
    hundred thousand). ``stream`` is ``compute`` for work that occupies the device
    (compute and blocking collectives) and ``comm`` for transfers that overlap it (pipeline
    sends). ``stage``, ``chunk`` and ``microbatch`` are -1 where not applicable."""

    device: int
    kind: EventKind
    start_s: float
    end_s: float
    stage: int = -1
    chunk: int = -1
    microbatch: int = -1
    stream: Stream = "compute"

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def as_dict(self) -> dict[str, object]:
        return self._asdict()


@dataclass(frozen=True)
class Timeline:
    """Events of one step on the ``devices`` of one pipeline (one data-parallel replica;
    the replicas run the same timeline).

    >>> from explorer.training.pipeline.schedule import one_f_one_b
    >>> tl = simulate_schedule(one_f_one_b(4, 8), forward_s=1.0, backward_s=2.0)
    >>> tl.step_time_s, round(tl.bubble_fraction(), 4)  # (m+p-1)(f+b); (p-1)/(m+p-1)
    (33.0, 0.2727)
    """

    devices: int
    step_time_s: float
    events: tuple[TimelineEvent, ...]

    def for_device(self, device: int) -> tuple[TimelineEvent, ...]:
        return tuple(e for e in self.events if e.device == device)

    def time_by_kind(self, device: int | None = None) -> dict[str, float]:
        """Seconds per event kind, summed over the devices (or one device)."""
        out = dict.fromkeys(EVENT_KINDS, 0.0)
        for e in self.events:
            if device is None or e.device == device:
                out[e.kind] += e.end_s - e.start_s  # duration_s, without a property call
        return out

    def bubble_fraction(self) -> float:
        """Idle time over devices x step time (the pipeline bubble and any other waits)."""
        if self.step_time_s == 0:
            return 0.0
        return self.time_by_kind()["idle"] / (self.devices * self.step_time_s)

    def records(self) -> list[dict[str, object]]:
        """Every event as a plain dict (what a plotting view draws)."""
        return [e.as_dict() for e in self.events]

    def __str__(self) -> str:
        return (
            f"Timeline: {self.devices} devices, step {self.step_time_s:.4g} s, "
            f"{len(self.events)} events, bubble {self.bubble_fraction():.1%}"
        )


def _segments(d: float | Segments, default: str) -> tuple[tuple[str, float], ...]:
    if isinstance(d, int | float):
        return ((default, float(d)),)
    return tuple((str(k), float(v)) for k, v in d)


def _per_stage(d: Durations, stages: int, default: str) -> list[tuple[tuple[str, float], ...]]:
    if isinstance(d, int | float):
        return [_segments(d, default)] * stages
    if len(d) != stages:
        raise TrainingError(
            f"durations for {len(d)} stages given but the schedule has {stages} stages; "
            "give one entry per stage (pp * virtual stages)"
        )
    return [_segments(x, default) for x in d]


def simulate_schedule(
    schedule: StepOrder, forward_s: Durations, backward_s: Durations,
    p2p_s: float = 0.0, tail: Sequence[Segments] | Segments = (),
) -> Timeline:  # fmt: skip
    """Run ``schedule`` with per-stage durations and return its `Timeline`.

    Args:
        schedule: the order of steps per device.
        forward_s, backward_s: seconds per step, as one number for every stage, or per
            stage either a number or ``(kind, seconds)`` segments run back to back (e.g.
            ``[("zero-gather", g), ("compute-forward", f), ("tp-comm", c)]``).
        p2p_s: transfer time of activations (or their gradients) between stages on
            different devices; it delays the consumer and shows as ``pp-comm`` on the
            sender's ``comm`` stream.
        tail: segments each device runs after its last step (gradient reduction,
            optimizer); one list for all devices or one per device.
    """
    step, events = _run(schedule, forward_s, backward_s, p2p_s, tail)
    events.sort(key=_ORDER)  # (device, start_s, stream): tuples of plain values
    return Timeline(schedule.pp, step, tuple(events))


def schedule_times(
    schedule: StepOrder, forward_s: Durations, backward_s: Durations,
    p2p_s: float = 0.0, tail: Sequence[Segments] | Segments = (),
) -> tuple[float, dict[str, float]]:  # fmt: skip
    """`simulate_schedule` without its events: (the step time, `Timeline.time_by_kind`),
    equal to the timeline's to the last bit (the same additions in the same order) with no
    event built or sorted: the schedule's order worked out once and the times run over it
    (`step_times`; GPT-3 175B's 24,576-step simulation: 10 ms against 68 ms with the
    timeline). A plan that keeps the step's numbers alone (a scaling curve's points) asks
    for this.

    >>> from explorer.training.pipeline.schedule import one_f_one_b
    >>> step, kinds = schedule_times(one_f_one_b(4, 8), forward_s=1.0, backward_s=2.0)
    >>> step, kinds["idle"]
    (33.0, 36.0)
    """
    fwd, bwd, tails = _prepared(schedule, forward_s, backward_s, tail)
    return step_times(schedule, fwd, bwd, p2p_s, tails, EVENT_KINDS)


def _prepared(schedule, forward_s, backward_s, tail) -> tuple[list, list, list]:
    """Each stage's forward and backward segments (the zero ones left out) and each
    device's tail segments."""
    p, S = schedule.pp, schedule.stages
    fwd = [tuple(x for x in seg if x[1] > 0) for seg in _per_stage(forward_s, S, "compute-forward")]
    bwd = [
        tuple(x for x in seg if x[1] > 0) for seg in _per_stage(backward_s, S, "compute-backward")
    ]
    if tail and isinstance(tail[0], tuple) and isinstance(tail[0][0], str):
        tails = [tuple(tail)] * p  # one list of segments for every device
    else:
        tails = [tuple(t) for t in tail] if tail else [()] * p
    for segs in (*fwd, *bwd, *tails):
        for kind, _ in segs:
            if kind not in _KIND_SET:
                raise TrainingError(
                    f"segment kind {kind!r} is not an event kind; use one of "
                    f"{', '.join(EVENT_KINDS)}"
                )
    return fwd, bwd, tails


def _run(schedule, forward_s, backward_s, p2p_s, tail) -> tuple[float, list]:
    """The step's events (unsorted) and its step time: each step's start from
    `step_times.step_bounds` (the timeline's rule, over the schedule's dependency order),
    its segments back to back, a gap before it an ``idle`` event, its send a ``pp-comm``
    on the ``comm`` stream."""
    p = schedule.pp
    fwd, bwd, tails = _prepared(schedule, forward_s, backward_s, tail)
    c = compiled(schedule)
    segs = [x for g in range(schedule.stages) for x in (fwd[g], bwd[g])]
    starts, _ = step_bounds(c, [tuple(x for _, x in sg) for sg in segs], p, p2p_s)
    free = [0.0] * p
    events: list[TimelineEvent] = []
    add = events.append
    # the named tuple's own constructor is a Python function; a step makes ~10^5 events,
    # so they are built from their eight fields in order (defaults spelled out)
    event = functools.partial(tuple.__new__, TimelineEvent)
    sends = (c.sends & (p2p_s > 0)).tolist()
    for (d, sid, _, _), mb, send, start in zip(
        c.steps, c.microbatches, sends, starts, strict=True
    ):  # fmt: skip
        g = sid >> 1
        chunk = g // p
        if start > free[d]:
            add(event((d, "idle", free[d], start, -1, -1, -1, "compute")))
        t = start
        for kind, dur in segs[sid]:  # the same additions as `step_bounds`: the same ends
            add(event((d, kind, t, t + dur, g, chunk, mb, "compute")))
            t += dur
        if send:
            add(event((d, "pp-comm", t, t + p2p_s, g, chunk, mb, "comm")))
        free[d] = t
    for d in range(p):
        t = free[d]
        for kind, dur in tails[d]:
            if dur > 0:
                add(event((d, kind, t, t + dur, -1, -1, -1, "compute")))
                t += dur
        free[d] = t
    step = max(free) if free else 0.0
    for d in range(p):
        if free[d] < step:
            add(event((d, "idle", free[d], step, -1, -1, -1, "compute")))
    return step, events
