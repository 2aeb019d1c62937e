"""``side_by_side(trace, sim)``: a profiled step and the simulator's predicted step for the
same layout on one time axis, with tracks named alike.

Tracks (`TRACKS`): ``compute``; communication by the mesh axis its group spans (``TP
comm``, ``DP comm``, ``CP comm``, ``EP comm``, ``PP send/recv``; ``comm`` when the axis is
unknown); ``bubble`` (idle). A measured lane is one rank's step (`explorer.traces.breakdown`'s
intervals: the union of compute, each axis's collectives, the rest idle); a predicted lane is
one pipeline device of `SimResult.timeline` (the data-parallel replicas run the same). Both
start at 0. `SideBySide.differences` lists per track the measured and predicted seconds
(mean over lanes), the largest difference first; `to_chrome` writes both as one Chrome
trace (Perfetto shows the measured ranks above the predicted devices).

>>> import explorer as ex
>>> from explorer.traces.cpu_runs import tiny_gpt_config
>>> t = ex.traces.load_kineto(ex.traces.vendored("cpu_gloo_ddp"))
>>> sim = ex.simulate(tiny_gpt_config(), ex.ParallelConfig(dp=2, microbatch_size=4),
...                   "a100-80g", 8, 32)
>>> s = side_by_side(t, sim, axes={"dp": 2})
>>> [lane.label for lane in s.lanes]
['measured rank 0', 'measured rank 1', 'predicted device 0']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..checks import is_int
from .breakdown import _check_axes, _self_segments, axis_of, cpu_communication, kernels_by_step
from .errors import TracesError
from .events import Collective, KinetoTrace, RankTrace
from .intervals import clip, merge, subtract

__all__ = ["TRACKS", "Slice", "Lane", "SideBySide", "side_by_side"]

TRACKS: tuple[str, ...] = ("compute", "TP comm", "DP comm", "CP comm", "EP comm",
                           "PP send/recv", "comm", "bubble")  # fmt: skip
_AXIS_TRACK = {"tp": "TP comm", "dp": "DP comm", "cp": "CP comm", "ep": "EP comm",
               "pp": "PP send/recv"}  # fmt: skip
_KIND_TRACK = {
    "compute-forward": "compute", "compute-backward": "compute", "recompute": "compute",
    "optimizer": "compute", "tp-comm": "TP comm", "dp-comm": "DP comm",
    "zero-gather": "DP comm", "cp-comm": "CP comm", "ep-comm": "EP comm",
    "pp-comm": "PP send/recv", "idle": "bubble",
}  # fmt: skip


@dataclass(frozen=True)
class Slice:
    """One interval of a lane: its track, start and duration (seconds from the lane's start)
    and a name (the step model's event kind, or the track)."""

    track: str
    start_s: float
    dur_s: float
    name: str = ""


@dataclass(frozen=True)
class Lane:
    """One measured rank's or predicted device's step."""

    source: str  # "measured" or "predicted"
    index: int | None
    step_s: float
    slices: tuple[Slice, ...]

    @property
    def label(self) -> str:
        who = "rank" if self.source == "measured" else "device"
        return f"{self.source} {who} {self.index if self.index is not None else '?'}"

    def track_s(self, track: str) -> float:
        return sum(s.dur_s for s in self.slices if s.track == track)


@dataclass(frozen=True)
class SideBySide:
    """Measured lanes then predicted lanes; ``differences``: ``(track, measured s, predicted
    s)`` per track used by either, the largest ``|measured - predicted|`` first; ``step``: the
    profiled step shown."""

    lanes: tuple[Lane, ...]
    differences: tuple[tuple[str, float, float], ...]
    step: int

    def lanes_of(self, source: str) -> tuple[Lane, ...]:
        return tuple(lane for lane in self.lanes if lane.source == source)

    def text(self) -> str:
        """The differences as a table (ms), largest first."""
        lines = [f"{'track':13} {'measured':>10} {'predicted':>10} {'diff':>10}"]
        for track, m, p in self.differences:
            lines.append(f"{track:13} {m * 1e3:8.3f}ms {p * 1e3:8.3f}ms {(m - p) * 1e3:+8.3f}ms")
        return "\n".join(lines)

    __str__ = text

    def to_chrome(self) -> dict[str, Any]:
        """Both timelines as one Chrome trace-event document (``json.dump`` it and open it in
        Perfetto): one process per lane, one thread per track, times in microseconds."""
        events: list[dict[str, Any]] = []
        for pid, lane in enumerate(self.lanes):
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": lane.label}})  # fmt: skip
            for tid, track in enumerate(TRACKS):
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": track}})  # fmt: skip
            for s in lane.slices:
                events.append({"ph": "X", "name": s.name or s.track, "cat": lane.source,
                               "pid": pid, "tid": TRACKS.index(s.track),
                               "ts": s.start_s * 1e6, "dur": s.dur_s * 1e6})  # fmt: skip
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def _track_of(c: Collective | None, world, axes) -> str:
    if c is None:
        return "comm"
    return _AXIS_TRACK.get(axis_of(c, world, axes), "comm")


def _lane(index, lo, hi, compute, comm_by_track) -> Lane:
    slices = [Slice("compute", a - lo, b - a, "compute") for a, b in compute]
    busy = list(compute)
    for track, spans in sorted(comm_by_track.items()):
        slices += [Slice(track, a - lo, b - a, track) for a, b in spans]
        busy += spans
    idle = subtract(((lo, hi),), merge(busy))
    slices += [Slice("bubble", a - lo, b - a, "idle") for a, b in idle]
    slices.sort(key=lambda s: (s.start_s, TRACKS.index(s.track)))
    return Lane("measured", index, (hi - lo) * 1e-6, tuple(_seconds(s) for s in slices))


def _seconds(s: Slice) -> Slice:
    return Slice(s.track, s.start_s * 1e-6, s.dur_s * 1e-6, s.name)


def _measured_lane(r: RankTrace, step: int, world, axes) -> Lane | None:
    st = next((s for s in r.steps if s.number == step), None)
    if st is None:
        return None
    comm: dict[str, list] = {}
    if r.device == "gpu":
        ks = list(kernels_by_step(r)[r.steps.index(st)])
        if not ks:
            return None
        lo, hi = min(k.ts for k in ks), max(k.end for k in ks)
        compute = clip(((k.ts, k.end) for k in ks if k.category != "communication"), lo, hi)
        for k in ks:
            if k.category == "communication":
                comm.setdefault(_track_of(k.collective, world, axes), []).append((k.ts, k.end))
    else:
        lo, hi = st.ts, st.end
        main = [a for a in r.ops if a.tid == r.main_tid and lo <= a.ts < hi
                and not a.name.startswith("ProfilerStep#")]  # fmt: skip
        segs = _self_segments(main, hi)
        compute = merge((a, b) for a, b, c in segs if c != "communication")
        others = [a for a in r.ops if a.tid != r.main_tid and a.category == "communication"]
        # a CPU trace's backend slices carry no group: the trace's one group, if one
        group = r.groups[0].ranks if len({g.ranks for g in r.groups}) == 1 else None
        track = _track_of(Collective("?", group_ranks=group), world, axes) if group else "comm"
        comm[track] = list(cpu_communication(segs, others, lo, hi))
    comm = {t: list(clip(s, lo, hi)) for t, s in comm.items()}
    return _lane(r.rank, lo, hi, compute, comm)


def _predicted_lanes(sim) -> list[Lane]:
    tl = getattr(sim, "timeline", None)
    if tl is None:
        raise TracesError(
            "side_by_side needs the simulator's timeline: pass ex.simulate(...)'s result "
            "(ex.estimate's has no timeline)"
        )
    lanes = []
    for d in range(tl.devices):
        slices = tuple(
            Slice(_KIND_TRACK.get(e.kind, "comm"), e.start_s, e.end_s - e.start_s, e.kind)
            for e in tl.for_device(d)
            if e.end_s > e.start_s
        )
        lanes.append(Lane("predicted", d, tl.step_time_s, slices))
    return lanes


def side_by_side(
    trace: KinetoTrace | RankTrace,
    sim,
    *,
    step: int | None = None,
    axes: Mapping[str, int] | None = None,
) -> SideBySide:
    """The measured step ``step`` of every rank (default: the last profiled step) next to
    ``sim``'s predicted step (`explorer.simulate`'s `SimResult`, with its timeline).

    Raises:
        TracesError: not a trace, no such step, a result without a timeline, bad ``axes``.
    """
    if isinstance(trace, RankTrace):
        trace = KinetoTrace((trace,))
    if not isinstance(trace, KinetoTrace) or not trace.ranks:
        raise TracesError(f"side_by_side({trace!r}): expected a KinetoTrace from load_kineto")
    axes = _check_axes(axes)
    numbers = sorted({s.number for r in trace.ranks for s in r.steps})
    if not numbers:
        raise TracesError("side_by_side: the trace has no ProfilerStep#N markers")
    if step is not None and not is_int(step, numpy=True):
        raise TracesError(f"side_by_side(step={step!r}); expected a step number (an int) or None")
    step = numbers[-1] if step is None else int(step)
    if step not in numbers:
        raise TracesError(f"side_by_side(step={step!r}): no such step; the trace has {numbers}")
    predicted = _predicted_lanes(sim)
    measured = [_measured_lane(r, step, r.world_size or trace.world_size, axes)
                for r in trace.ranks]  # fmt: skip
    measured = [m for m in measured if m is not None]
    lanes = tuple(measured) + tuple(predicted)

    def mean(ls, track):
        return sum(lane.track_s(track) for lane in ls) / len(ls) if ls else 0.0

    diffs = [(t, mean(measured, t), mean(predicted, t)) for t in TRACKS]
    diffs = [d for d in diffs if d[1] or d[2]]
    diffs.sort(key=lambda d: -abs(d[1] - d[2]))
    return SideBySide(lanes, tuple(diffs), step)
