"""The values a PyTorch profiler (Kineto) trace is read into: `KinetoTrace` (one or more
ranks), `RankTrace` (one file), `Activity` (a GPU kernel, copy or memset, or a CPU op),
`Collective`, `ProcessGroup` and `Step` (a ``ProfilerStep#N`` marker).

Times are microseconds as the trace writes them (``ts``, ``dur``); every value is frozen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .classify import dtype_bytes
from .errors import TracesError

__all__ = ["Collective", "Activity", "ProcessGroup", "Step", "RankTrace", "KinetoTrace"]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective as the trace records it.

    Attributes:
        kind: ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
            ``send/recv``, ``broadcast``, ... (`explorer.traces.classify.CollectiveName`).
        nelems: elements of the buffer in the planner's convention (the gathered output of an
            all-gather, the input of a reduce-scatter; `explorer.hardware.collectives`), or
            None when the trace does not record it.
        dtype: ``float32``, ``bfloat16``, ... or None.
        group_size, group_ranks, group_name: the process group where recorded.
    """

    kind: str
    nelems: int | None = None
    dtype: str | None = None
    group_size: int | None = None
    group_ranks: tuple[int, ...] | None = None
    group_name: str | None = None

    @property
    def size_bytes(self) -> int | None:
        """``nelems`` x the dtype's bytes (`S` of `explorer.hardware.collectives`), or None."""
        b = dtype_bytes(self.dtype)
        return None if self.nelems is None or b is None else self.nelems * b


class Activity(NamedTuple):
    """A GPU kernel, memcpy or memset, or a CPU op or annotation (an immutable named tuple:
    a trace holds millions).

    Attributes:
        name, cat: as in the trace (``cat``: ``kernel``, ``gpu_memcpy``, ``cpu_op``, ...).
        ts, dur: start and duration in microseconds.
        tid: the thread (CPU) or stream (GPU) the trace files it under; ``stream`` the GPU
            stream (None on CPU).
        correlation: the CUDA correlation id linking a kernel to its runtime launch;
            ``external_id``: the id linking a kernel to the CPU op that launched it.
        category: the `Category` (None for a CPU op whose name says nothing: a view, an
            autograd wrapper).
        op: for a kernel, the name of the CPU op that launched it ("" when not linked).
        shapes: the input shapes the trace records (``Input Dims``), of the op or, for a
            kernel, of the op that launched it.
        collective: the collective it runs, or None.
        launched: for a kernel, the CPU time (us) of the runtime call that launched it
            (``cudaLaunchKernel`` with the same correlation id), or None when not recorded.
    """

    name: str
    cat: str
    ts: float
    dur: float
    tid: int | str = 0
    stream: int | None = None
    correlation: int | None = None
    external_id: int | None = None
    category: str | None = None
    op: str = ""
    shapes: tuple = ()
    collective: Collective | None = None
    launched: float | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class ProcessGroup:
    """A process group from the trace's ``distributedInfo.pg_config``."""

    name: str
    description: str
    ranks: tuple[int, ...]
    backend: str = ""


@dataclass(frozen=True)
class Step:
    """A ``ProfilerStep#N`` marker: the step number and its CPU-side window (us)."""

    number: int
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace file.

    Attributes:
        path: the file read.
        rank, world_size, backend: from ``distributedInfo`` (rank from the file name, such as
            ``rank-3.json``, when the trace has none; None when neither says).
        groups: the process groups (``pg_config``).
        device: ``gpu`` when the trace holds GPU activity, else ``cpu``.
        kernels: GPU kernels, copies and memsets, in start order, each with its launch time
            (``launched``, for step assignment); an `explorer.traces.table.ActivityTable`
            (columnar: a GB trace's millions of kernels stay compact) or a tuple.
        ops: CPU ops and annotations, in start order (the same kind of sequence).
        steps: the ``ProfilerStep#N`` markers, in order.
        main_tid: the thread that ran the steps (the markers' thread).
        events: how many trace events the file held (all phases).
        meta: the file's other top-level scalar fields (``schemaVersion``, ...).
        launches: correlation id -> CPU launch time (us) of each kernel's runtime launch call
            (`explorer.traces.table.LaunchTimes`, read from the kernels' columns).
    """

    path: str
    rank: int | None
    world_size: int | None
    backend: str
    groups: tuple[ProcessGroup, ...]
    device: str
    kernels: Sequence[Activity]
    ops: Sequence[Activity]
    steps: tuple[Step, ...]
    main_tid: int | str | None
    events: int
    meta: tuple[tuple[str, object], ...] = ()
    launches: Mapping = field(default_factory=dict, repr=False, compare=False)

    @property
    def collectives(self) -> tuple[Activity, ...]:
        """The activities that carry a `Collective`: NCCL kernels on a GPU trace; the c10d
        ops (``c10d::allreduce_``: the collective as called, with its size) on a CPU one."""
        src = self.kernels if self.device == "gpu" else self.ops
        out = tuple(a for a in src if a.collective is not None)
        if self.device == "gpu" and not out:
            out = tuple(a for a in self.ops if a.collective is not None)
        return out

    def __str__(self) -> str:
        return (
            f"rank {self.rank} of {self.world_size} ({self.backend or '?'}, {self.device}): "
            f"{len(self.kernels)} kernels, {len(self.ops)} CPU ops, {len(self.steps)} steps, "
            f"{len(self.collectives)} collectives"
        )


@dataclass(frozen=True)
class KinetoTrace:
    """The ranks read by `load_kineto`, ordered by rank."""

    ranks: tuple[RankTrace, ...]

    @property
    def world_size(self) -> int | None:
        sizes = {r.world_size for r in self.ranks if r.world_size is not None}
        return max(sizes) if sizes else None

    def rank(self, rank: int) -> RankTrace:
        for r in self.ranks:
            if r.rank == rank:
                return r
        have = [r.rank for r in self.ranks]
        raise TracesError(f"trace.rank({rank!r}): no such rank; the trace holds ranks {have}")

    @property
    def events(self) -> int:
        return sum(r.events for r in self.ranks)

    def __str__(self) -> str:
        return "\n".join(str(r) for r in self.ranks)
