"""FSDP's gather, compute, free, as a lesson: why prefetching the next layer's weights hides
the all-gathers, and what it costs in memory.

ZeRO-3 / FSDP keeps each layer's weights sharded over the data-parallel group. Before a layer
runs, its weights are all-gathered (on the communication stream); after it ran, the full copy
is freed. Without prefetch the compute stream waits for each gather; with prefetch the gather
of layer ``i + 1`` is issued when layer ``i`` starts, so it runs behind that layer's compute
(FSDP's ``forward_prefetch`` / PyTorch FSDP2's default of one layer ahead), and two layers'
full weights are alive at once instead of one.

`fsdp_overlap_lesson` computes both forward passes event by event on two streams, states
each number it then uses, and checks the schedule against closed forms.

>>> les = fsdp_overlap_lesson(layers=4, gather_s=1.0, compute_s=2.0)
>>> les.serial.step_s, les.prefetch.step_s, les.check_ok
(12.0, 9.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import positive_int, positive_number
from .errors import ParallelConfigError

__all__ = ["StreamEvent", "OverlapRun", "FsdpOverlapLesson", "fsdp_overlap_lesson"]


@dataclass(frozen=True)
class StreamEvent:
    """One interval on one stream: ``stream`` is ``compute`` or ``comm``; ``kind`` is
    ``all-gather``, ``compute`` or ``wait`` (compute stream idle, waiting for a gather)."""

    stream: str
    kind: str
    layer: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class OverlapRun:
    """One forward pass: its events, its length, the compute stream's waiting time and
    the most layers' full weights alive at once."""

    prefetch: bool
    events: tuple[StreamEvent, ...]
    step_s: float
    exposed_s: float
    peak_layers: int


@dataclass(frozen=True)
class FsdpOverlapLesson:
    layers: int
    gather_s: float
    compute_s: float
    layer_bytes: float
    serial: OverlapRun
    prefetch: OverlapRun
    check_ok: bool
    steps: tuple[str, ...]

    def __str__(self) -> str:
        return "\n".join(f"{k}. {s}" for k, s in enumerate(self.steps, 1))


def _forward(layers: int, g: float, c: float, prefetch: bool) -> OverlapRun:
    events: list[StreamEvent] = []
    comm_free = 0.0  # when the communication stream can start the next gather
    compute_free = 0.0
    gathered: list[float] = []  # when each layer's gather ends
    alive: list[tuple[float, float]] = []  # (gather start, free time) of each full copy
    for i in range(layers):
        # without prefetch layer i's gather is issued when layer i-1 has finished; with it,
        # when layer i-1 starts (one layer ahead); the first is issued at 0
        issue = 0.0 if i == 0 else (_compute_start(events, i - 1) if prefetch else compute_free)
        start = max(issue, comm_free)
        end = start + g
        events.append(StreamEvent("comm", "all-gather", i, start, end))
        comm_free = end
        gathered.append(end)
        begin = max(compute_free, end)
        if begin > compute_free:
            events.append(StreamEvent("compute", "wait", i, compute_free, begin))
        events.append(StreamEvent("compute", "compute", i, begin, begin + c))
        compute_free = begin + c
        alive.append((start, compute_free))
    exposed = sum(e.end_s - e.start_s for e in events if e.kind == "wait")
    points = sorted({t for a in alive for t in a})
    peak = max(sum(1 for s, f in alive if s <= t < f) for t in points)
    return OverlapRun(prefetch, tuple(events), compute_free, exposed, peak)


def _compute_start(events: list[StreamEvent], layer: int) -> float:
    """When ``layer``'s compute started."""
    return next(e.start_s for e in events if e.kind == "compute" and e.layer == layer)


def fsdp_overlap_lesson(layers: int = 4, gather_s: float = 1.0, compute_s: float = 2.0, *,
                        layer_bytes: float = 2.0 * 2**30) -> FsdpOverlapLesson:  # fmt: skip
    """One forward pass of ``layers`` FSDP layers, without and with prefetch.

    Args:
        layers: layers (FSDP units) in the pass.
        gather_s, compute_s: one layer's all-gather and compute time.
        layer_bytes: one layer's full weights (what a gathered copy holds).
    """
    n = positive_int(layers, "layers", error=ParallelConfigError, numpy=True)
    g = positive_number(gather_s, "gather_s", error=ParallelConfigError, numpy=True)
    c = positive_number(compute_s, "compute_s", error=ParallelConfigError, numpy=True)
    size = positive_number(layer_bytes, "layer_bytes", error=ParallelConfigError, numpy=True)
    serial, pre = _forward(n, g, c, False), _forward(n, g, c, True)
    # closed forms: serial = n(g + c); prefetched = g + n*c + (n-1)*max(0, g - c)
    want_serial = n * (g + c)
    want_pre = g + n * c + (n - 1) * max(0.0, g - c)
    ok = (abs(serial.step_s - want_serial) < 1e-9 and abs(pre.step_s - want_pre) < 1e-9
          and serial.peak_layers == 1 and pre.peak_layers == min(2, n))  # fmt: skip
    gib = size / 2**30
    hidden = serial.exposed_s - pre.exposed_s
    steps = (
        f"ZeRO-3 / FSDP keeps each of the {n} layers' weights sharded; a layer's all-gather "
        f"takes {g:g} and its compute {c:g}. Gathering on demand, the compute stream waits "
        f"for every gather: the pass takes {serial.step_s:g} = {n} x ({g:g} + {c:g}), "
        f"{serial.exposed_s:g} of it waiting.",
        "Prefetching one layer ahead, layer i+1's gather runs while layer i computes: only "
        "the first gather is exposed"
        + (f", and each later one by the {g - c:g} it exceeds a layer's compute" if g > c
           else "")
        + f". The pass takes {pre.step_s:g}, waiting {pre.exposed_s:g}: {hidden:g} hidden.",
        f"The price is memory: {pre.peak_layers} layers' full weights are alive at once "
        f"({pre.peak_layers * gib:.3g} GiB at {gib:.3g} GiB a layer) instead of "
        f"{serial.peak_layers} ({serial.peak_layers * gib:.3g} GiB).",
        "Check: the event schedule equals the closed forms n(g + c) and g + n c + (n-1) "
        f"max(0, g - c) ({'yes' if ok else 'NO'}).",
    )  # fmt: skip
    return FsdpOverlapLesson(n, g, c, size, serial, pre, ok, steps)
