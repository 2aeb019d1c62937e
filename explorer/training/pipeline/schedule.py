"""Pipeline schedules as data: the order in which each device runs (chunk, microbatch, phase).

A `Schedule` only orders work; `explorer.training.pipeline.timeline.simulate_schedule` gives it
durations and dependencies and produces a `Timeline`. Stage ``g`` of the whole pipeline
is chunk ``g // pp`` on device ``g % pp`` (Megatron-LM's interleaved placement; with one
chunk per device, stage = device).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ...checks import is_int
from ...memo import memoize
from ..config import SCHEDULES, ScheduleKind
from ..errors import ParallelConfigError
from .timeline import simulate_schedule

__all__ = [
    "Phase",
    "Step",
    "Schedule",
    "build_schedule",
    "gpipe",
    "one_f_one_b",
    "interleaved_1f1b",
    "bubble_fraction",
    "pipeline_time",
    "peak_in_flight",
]

Phase = Literal["F", "B"]


@dataclass(frozen=True)
class Step:
    """One unit of pipeline work: ``phase`` of ``microbatch`` on model ``chunk``."""

    chunk: int
    microbatch: int
    phase: Phase

    def __str__(self) -> str:
        return f"{self.phase}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


@dataclass(frozen=True)
class Schedule:
    """Per device, the ordered steps it runs in one training step.

    Args:
        kind: the schedule's name.
        pp: devices (pipeline stages per chunk).
        microbatches: microbatches per step, m.
        chunks: model chunks per device, v.
        order: ``order[d]`` is device d's steps in execution order.
    """

    kind: ScheduleKind
    pp: int
    microbatches: int
    chunks: int
    order: tuple[tuple[Step, ...], ...]

    @property
    def stages(self) -> int:
        return self.pp * self.chunks

    def stage(self, device: int, chunk: int) -> int:
        """The pipeline-wide stage of ``chunk`` on ``device``."""
        return chunk * self.pp + device

    def in_flight(self, device: int) -> int:
        """Most (chunk, microbatch) forwards whose backward has not run yet, on ``device``:
        how many microbatches' activations the device keeps at its peak."""
        live = peak = 0
        for s in self.order[device]:
            live += 1 if s.phase == "F" else -1
            peak = max(peak, live)
        return peak

    def table(self, width: int = 3) -> str:
        """The schedule drawn on unit clock ticks (forward = backward = one tick), one row
        per device, as in the docstrings of the builders."""
        tl = simulate_schedule(self, forward_s=1.0, backward_s=1.0)
        ticks = int(round(tl.step_time_s))
        rows = []
        for d in range(self.pp):
            cells = ["."] * ticks
            for e in tl.for_device(d):
                if e.kind in ("compute-forward", "compute-backward"):
                    cells[int(round(e.start_s))] = str(
                        Step(e.chunk, e.microbatch, "F" if e.kind == "compute-forward" else "B")
                    )
            rows.append(f"d{d}: " + " ".join(c.ljust(width) for c in cells).rstrip())
        return "\n".join(rows)


def gpipe(pp: int, microbatches: int) -> Schedule:
    """GPipe (Huang et al. 2019): every forward, then every backward.

    Keeps all m microbatches' activations. pp=3, m=4 on unit ticks::

        d0: F0  F1  F2  F3  .   .   .   .   B0  B1  B2  B3
        d1: .   F0  F1  F2  F3  .   .   B0  B1  B2  B3  .
        d2: .   .   F0  F1  F2  F3  B0  B1  B2  B3  .   .

    The backward of microbatch 0 goes first, as in Alpa's GPipe table.
    """
    _check(pp, microbatches)
    order = []
    for _ in range(pp):
        fw = [Step(0, i, "F") for i in range(microbatches)]
        bw = [Step(0, i, "B") for i in range(microbatches)]
        order.append(tuple(fw + bw))
    return Schedule("gpipe", pp, microbatches, 1, tuple(order))


def one_f_one_b(pp: int, microbatches: int) -> Schedule:
    """1F1B, PipeDream-Flush (Narayanan et al. 2021): warm-up, steady one-forward-one-
    backward, cool-down. Same bubble as GPipe, (p-1)/(m+p-1) of the step, but device d keeps
    at most p-d microbatches in flight instead of m. pp=3, m=4 on unit ticks::

        d0: F0  F1  F2  .   .   B0  F3  B1  .   B2  .   B3
        d1: .   F0  F1  .   B0  F2  B1  F3  B2  .   B3  .
        d2: .   .   F0  B0  F1  B1  F2  B2  F3  B3  .   .

    warm-up: device d runs p-d-1 forwards; steady: F then B until the forwards run out;
    cool-down: the remaining backwards.
    """
    _check(pp, microbatches)
    order = []
    for d in range(pp):
        warm = min(pp - d - 1, microbatches)
        steps = [Step(0, i, "F") for i in range(warm)]
        for k in range(microbatches - warm):
            steps += [Step(0, warm + k, "F"), Step(0, k, "B")]
        steps += [Step(0, k, "B") for k in range(microbatches - warm, microbatches)]
        order.append(tuple(steps))
    return Schedule("1f1b", pp, microbatches, 1, tuple(order))


def interleaved_1f1b(pp: int, microbatches: int, chunks: int) -> Schedule:
    """Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021 section 2.2.2): each device
    holds v chunks (device d has stages d, d+p, ...), microbatches go through in groups of
    p, and the bubble shrinks v-fold to (p-1)/v chunk-times of idle per device.
    pp=2, m=4, v=2 (``F1.1`` = forward of microbatch 1 on chunk 1) on unit ticks::

        d0: F0   F1   F0.1 F1.1 F2   B0.1 F3   B1.1 F2.1 B0   F3.1 B1   .    B2.1 .    B3.1 B2   B3
        d1: .    F0   F1   F0.1 B0.1 F1.1 B1.1 F2   B0   F3   B1   F2.1 B2.1 F3.1 B3.1 B2   B3   .

    warm-up: device d runs (p-d-1)*2 + (v-1)*p forwards; then one forward, one backward;
    cool-down: the remaining backwards. Forward k is on chunk (k // p) % v, backward k on
    chunk v-1-(k // p) % v; both on microbatch (k // (p*v))*p + k % p. Needs m % p == 0.
    Each picture here is ``Schedule.table()`` of the schedule it describes.
    """
    _check(pp, microbatches)
    if chunks < 1:
        raise ParallelConfigError(f"chunks={chunks}; expected an int >= 1")
    if microbatches % pp:
        raise ParallelConfigError(
            f"interleaved 1F1B needs microbatches ({microbatches}) divisible by pp={pp}; "
            "change the batch or microbatch size, or use the 1f1b schedule"
        )
    total = microbatches * chunks
    # every device runs the same 2 x total steps in its own order: each made once (a pp16 x
    # 192-microbatch step made 12k of them, the garbage collector walking them as it went)
    made: dict[tuple[int, Phase], Step] = {}

    def step(k: int, phase: Phase) -> Step:
        s = made.get((k, phase))
        if s is None:
            c = (k // pp) % chunks
            mb = (k // (pp * chunks)) * pp + k % pp
            s = made[(k, phase)] = Step(c if phase == "F" else chunks - 1 - c, mb, phase)
        return s

    order = []
    for d in range(pp):
        if chunks == 1:
            warm = min(pp - d - 1, total)
        else:
            warm = min((pp - d - 1) * 2 + (chunks - 1) * pp, total)
        steps = [step(k, "F") for k in range(warm)]
        for k in range(total - warm):
            steps += [step(warm + k, "F"), step(k, "B")]
        steps += [step(k, "B") for k in range(total - warm, total)]
        order.append(tuple(steps))
    return Schedule("interleaved_1f1b", pp, microbatches, chunks, tuple(order))


def build_schedule(kind: ScheduleKind, pp: int, microbatches: int, chunks: int = 1) -> Schedule:
    """The schedule ``kind`` for ``pp`` devices, ``microbatches`` and ``chunks`` per device.
    Schedules are immutable values: the last few built are kept (`simulate` asks for the
    same one whenever only the step's costs change: a view's ZeRO or recompute control).

    >>> s = build_schedule("1f1b", pp=4, microbatches=8)
    >>> [s.in_flight(d) for d in range(4)]
    [4, 3, 2, 1]
    """
    if isinstance(kind, str) and all(is_int(v) for v in (pp, microbatches, chunks)):
        return _build_memoized(kind, pp, microbatches, chunks)
    return _build(kind, pp, microbatches, chunks)  # the builders say what is wrong


def _build(kind: ScheduleKind, pp: int, microbatches: int, chunks: int) -> Schedule:
    if kind == "gpipe":
        return gpipe(pp, microbatches)
    if kind == "1f1b":
        return one_f_one_b(pp, microbatches)
    if kind == "interleaved_1f1b":
        return interleaved_1f1b(pp, microbatches, chunks)
    raise ParallelConfigError(
        f"unknown schedule {kind!r}; expected one of {', '.join(repr(s) for s in SCHEDULES)}"
    )


_build_memoized = memoize(maxsize=32, name="training.build_schedule")(_build)


def bubble_fraction(kind: ScheduleKind, pp: int, microbatches: int, chunks: int = 1) -> float:
    """Idle fraction of the step for uniform stages: (p-1)/(m+p-1) for GPipe and 1F1B,
    ((p-1)/v) / (m + (p-1)/v) interleaved (the bubble divided by v).

    >>> bubble_fraction("1f1b", 8, 24)
    0.22580645161290322
    """
    bubble = (pp - 1) / (chunks if kind == "interleaved_1f1b" else 1)
    return bubble / (microbatches + bubble)


def pipeline_time(stage_s: Sequence[float], microbatches: int, pp: int | None = None) -> float:
    """Closed-form pipeline time of one step from each stage's seconds per microbatch
    (forward + backward), transfers and tail left out: the one formula `estimate`, the
    hetero pipeline and the straggler's rebalance rank with.

    One chunk per device (GPipe, 1F1B; ``pp`` None or ``len(stage_s)``)::

        sum_g t_g + (m - 1) max_g t_g

        |-- t_0 --|---- t_1 ----|-- t_2 --|                  one microbatch, every stage
                                |---- t_1 ----|---- t_1 ----|  m - 1 more, slowest pace

    Interleaved (``pp`` devices, stage ``g`` is chunk ``g // pp`` on device ``g % pp``,
    ``W_d`` the work of device ``d``: the sum of its chunks)::

        m max_d W_d + (p - 1) max_g t_g

    The two agree for uniform stages (``m t + (p-1) t``); the bubble is `bubble_fraction`'s.

    >>> pipeline_time([1.0, 2.0, 1.0], microbatches=4)
    10.0
    >>> pipeline_time([1.0, 1.0, 1.0, 2.0], microbatches=4, pp=2)
    14.0
    """
    t = list(stage_s)
    if pp is None or pp == len(t):
        return sum(t) + (microbatches - 1) * max(t)
    work = [sum(t[d::pp]) for d in range(pp)]
    return microbatches * max(work) + (pp - 1) * max(t)


def peak_in_flight(
    kind: ScheduleKind, pp: int, microbatches: int, device: int, chunks: int = 1
) -> int:
    """`Schedule.in_flight` by formula (no schedule built): m for GPipe, min(p-d, m) for
    1F1B, min((p-d-1)*2 + (v-1)*p + 1, m*v) chunk-microbatches interleaved."""
    if kind == "gpipe":
        return microbatches
    if kind == "1f1b" or chunks == 1:
        return min(pp - device, microbatches)
    return min((pp - device - 1) * 2 + (chunks - 1) * pp + 1, microbatches * chunks)


def _check(pp: int, microbatches: int) -> None:
    for name, v in (("pp", pp), ("microbatches", microbatches)):
        if not is_int(v, minimum=1):
            raise ParallelConfigError(f"{name}={v!r}; expected an int >= 1")
