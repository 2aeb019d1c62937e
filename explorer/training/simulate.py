"""``simulate(cfg, parallel, hardware, global_batch, seq)``: one training step, timed.

Pipeline: per-part costs from the strategy search (`stage_costs`), memory per device
(`memory`), a stage split (`partition`), the schedule (`schedule`) and its simulation
(`timeline`), then the data-parallel gradient reduction and the optimizer step.
`estimate` is the same model (`step_model.StepModel`) without the event simulation
(closed-form pipeline time, same stage split); `plan_training` ranks the whole space with
it and simulates the best few.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from ..checks import is_int
from ..hardware import Cluster, resolve
from ..memo import memoize
from ..models import ModelConfig, load
from . import stacks
from .bands import PredictionBand, band, bands_path, stack_of
from .config import ParallelConfig
from .errors import ParallelConfigError, PartitionError, TrainingError
from .memory import MemoryBreakdown
from .params import CALIBRATED_COST, TrainingParams
from .pipeline.partition import (
    StagePartition,
    device_chunks,
    distinct_devices,
    partition_layers,
    uniform_partition,
)
from .pipeline.schedule import build_schedule, peak_in_flight, pipeline_time
from .pipeline.timeline import Timeline, schedule_times, simulate_schedule
from .stacks import Stack
from .step_model.balanced_split import balanced_split
from .step_model.costs import PartCost
from .step_model.model import COMM_KINDS, StepModel
from .step_model.terms import cp, dense, ep, recompute, zero

__all__ = [
    "TrainingParams", "SimResult", "PartitionChoice", "PartitionMethod", "simulate", "estimate",
    "COMM_KINDS", "CALIBRATED_COST",
]  # fmt: skip

PartitionMethod = Literal["uniform", "time_balanced", "memory_capped", "given"]


@dataclass(frozen=True)
class PartitionChoice:
    """Which stage split a result used, and why (never chosen silently).

    Attributes:
        method: ``uniform`` (Megatron-LM's even split), ``time_balanced`` (the dynamic
            programme over the parts' times) or ``memory_capped`` (the same programme
            under each stage's memory cap); ``given``: the configuration's own
            ``stage_layers``.
        reason: one sentence: why this split, and what was tried before it.

    >>> print(PartitionChoice("uniform", "one pipeline stage"))
    uniform: one pipeline stage
    """

    method: PartitionMethod
    reason: str

    def __str__(self) -> str:
        return f"{self.method}: {self.reason}"


@dataclass(frozen=True)
class SimResult:
    """One simulated training step.

    Attributes:
        config: the configuration simulated (microbatch count and per-layer recompute
            count filled in).
        step_time_s, tokens_per_s: time of one step and throughput of the whole job.
        tflops_per_device: model FLOP/s per device in TFLOP/s (forward + backward, no
            recomputation); ``hardware_tflops_per_device`` counts recomputation too.
        mfu: model FLOPs utilisation, ``tflops_per_device`` over the chip's peak.
        memory: the per-device breakdown of the device that needs the most;
            ``memory_per_device``: one per pipeline device (`estimate`: one per distinct
            stage shape, the others need no more); ``memory_cap_bytes``, ``fits``.
        comm_bytes: bytes each device sends per step, by kind (tp, pp, dp, zero, ep).
        time_by_kind: seconds per event kind, averaged over the pipeline's devices.
        partition: the stage split; ``partition_choice``: which split and why (a split
            that could not meet the memory cap says so here and in ``fits``);
            ``timeline``: the simulated events (None for an
            estimate); ``strategies``: the searched layouts of the layer's matmuls.
        stack: the stack preset the run's params are (`bands.stack_of`; None: hand-set).
        band, memory_band: how far a measured step time / peak memory is expected from
            this prediction (`explorer.training.bands`: the 10th-90th percentile of
            measured / predicted on published check rows of the stack and chip family);
            None where no check rows were measured.
    """

    config: ParallelConfig
    model: str
    hardware: str
    global_batch: int
    seq: int
    step_time_s: float
    tokens_per_s: float
    tflops_per_device: float
    hardware_tflops_per_device: float
    mfu: float
    memory: MemoryBreakdown
    memory_per_device: tuple[MemoryBreakdown, ...]
    memory_cap_bytes: float
    comm_bytes: tuple[tuple[str, float], ...]
    time_by_kind: tuple[tuple[str, float], ...]
    bubble_fraction: float
    partition: StagePartition
    partition_choice: PartitionChoice
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    strategies: str = ""
    stack: str | None = None
    band: PredictionBand | None = field(default=None, repr=False, compare=False)
    memory_band: PredictionBand | None = field(default=None, repr=False, compare=False)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.memory_cap_bytes

    @property
    def over_memory_bytes(self) -> float:
        return max(0.0, self.memory.total - self.memory_cap_bytes)

    def as_dict(self) -> dict[str, object]:
        return {
            "config": self.config.as_dict(), "config_text": str(self.config),
            "model": self.model, "hardware": self.hardware,
            "global_batch": self.global_batch, "seq": self.seq,
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "tflops_per_device": self.tflops_per_device,
            "hardware_tflops_per_device": self.hardware_tflops_per_device, "mfu": self.mfu,
            "memory": self.memory.as_dict(), "memory_cap_bytes": self.memory_cap_bytes,
            "fits": self.fits, "comm_bytes": dict(self.comm_bytes),
            "time_by_kind": dict(self.time_by_kind), "bubble_fraction": self.bubble_fraction,
            "partition": str(self.partition),
            "partition_method": self.partition_choice.method,
            "partition_reason": self.partition_choice.reason, "strategies": self.strategies,
            "stack": self.stack,
            "band": None if self.band is None else self.band.as_dict(),
            "memory_band": None if self.memory_band is None else self.memory_band.as_dict(),
        }  # fmt: skip

    def __str__(self) -> str:
        gib = 2**30
        return (
            f"{self.config}: step {self.step_time_s:.3f} s, "
            f"{self.tflops_per_device:.1f} TFLOP/s/device (MFU {self.mfu:.1%}), "
            f"memory {self.memory.total / gib:.1f}/{self.memory_cap_bytes / gib:.0f} GiB, "
            f"bubble {self.bubble_fraction:.1%}"
        )


# ----- the model of one configuration -----------------------------------------------------
def _setup(
    cfg, parallel, hardware, seq, params, stack=None, where="simulate"
) -> tuple[ModelConfig, Cluster, int, TrainingParams]:
    """The model, cluster, sequence length and training params of a run, checked (the
    global batch is checked by `ParallelConfig.microbatches`); the params are ``params``,
    else ``stack``'s, else the default stack's (`stacks.resolve`)."""
    if not isinstance(parallel, ParallelConfig):
        raise ParallelConfigError(
            f"parallel={parallel!r}; expected a ParallelConfig, e.g. ParallelConfig(dp=8)"
        )
    if params is not None and not isinstance(params, TrainingParams):
        raise ParallelConfigError(f"params={params!r}; expected a TrainingParams or None")
    cfg = load(cfg) if isinstance(cfg, str) else cfg
    seq = cfg.max_seq_len if seq is None else seq
    check_seq(seq)
    return cfg, resolve(hardware), seq, stacks.resolve(params, stack, where)


def check_seq(seq: object) -> None:
    """Raise `ParallelConfigError` unless ``seq`` is an int >= 1."""
    if not is_int(seq, minimum=1):
        raise ParallelConfigError(f"seq={seq!r}; expected a sequence length, an int >= 1")


def chunk_live_counts(
    kind: str, pp: int, microbatches: int, device: int, chunks: int = 1
) -> tuple[tuple[int, ...], ...]:
    """Where ``device`` may peak: per model chunk, the microbatches whose activations it
    keeps after each of its forwards (the states no other state matches or exceeds in
    every chunk). One state for GPipe and 1F1B (`peak_in_flight` on its one chunk);
    interleaved 1F1B keeps unequal counts per chunk (Megatron-LM's warm-up runs its
    forwards chunk by chunk: device 0 of pp=8, v=2 peaks at 15 microbatches of chunk 0 and
    8 of chunk 1, or 16 and 7), so a device's peak activations are
    ``max over states of sum_c count_c x act_c``, the chunks' activations weighted by
    their own counts, not their average by the total. The states repeat with period
    pp x v forwards once the warm-up is done, so the walk stops at 4 x pp microbatches
    (exact: tests/training/test_memory_agreement.py walks the whole schedule)."""
    if kind != "interleaved_1f1b" or chunks == 1:
        return _chunk_live_counts(kind, pp, microbatches, device, chunks)
    # Only the first 4 x pp microbatches matter (both multiples of pp: interleaved 1F1B
    # needs it), and one walk of that schedule gives every device's states: the memo is
    # keyed by the schedule, not by (microbatches, device) (a planner's ~80 misses per
    # plan_training each built a whole schedule for one device).
    return _interleaved_live_counts(pp, min(microbatches, 4 * pp), chunks)[device]


@memoize(maxsize=4096)
def _chunk_live_counts(kind, pp, microbatches, device, chunks):
    return ((peak_in_flight(kind, pp, microbatches, device, chunks),),)


@memoize(maxsize=1024)
def _interleaved_live_counts(pp, m, chunks) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """`chunk_live_counts` of every device of an interleaved 1F1B schedule of ``m``
    microbatches over ``pp`` devices and ``chunks`` chunks, one walk of its order."""
    order = build_schedule("interleaved_1f1b", pp, m, chunks).order
    out = []
    for device in range(pp):
        live = [0] * chunks
        states = []
        for s in order[device]:
            live[s.chunk] += 1 if s.phase == "F" else -1
            if s.phase == "F":
                states.append(tuple(live))
        out.append(_undominated(set(states)))
    return tuple(out)


def _undominated(states: set[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """The states no other state is at least as large as in every chunk, sorted (the peak
    over any weights is at one of them). One array comparison of every pair (a pp 16 x 48
    schedule has ~1,000 states: pairs by the million in Python).

    >>> _undominated({(2, 0), (1, 1), (1, 0), (0, 2)})
    ((0, 2), (1, 1), (2, 0))
    """
    ordered = sorted(states)
    a = np.array(ordered, dtype=np.int64).reshape(len(ordered), -1)
    geq = (a[None, :, :] >= a[:, None, :]).all(axis=2)  # geq[i, j]: state j >= state i
    np.fill_diagonal(geq, False)  # the states are distinct: none dominates itself
    return tuple(s for s, dominated in zip(ordered, geq.any(axis=1), strict=True) if not dominated)


def peak_activations(step: StepModel, part: StagePartition, device: int, n_full) -> float:
    """The most activation bytes ``device`` keeps during the step: its chunks' activations
    (`StepModel.stage_act`) weighted by `chunk_live_counts`. `estimate`, `simulate` and
    the stage split's memory check all use it, so they report the same memory."""
    par = step.par
    acts = [step.stage_act(part, c * par.pp + device, n_full) for c in range(par.virtual_stages)]
    states = step.live_states.get(device)
    if states is None:
        states = step.live_states[device] = chunk_live_counts(
            par.schedule, par.pp, step.m, device, par.virtual_stages
        )
    if len(acts) == 1:  # one chunk: the sum of one product is that product (non-negative)
        a = acts[0]
        return max(state[0] * a for state in states)
    return max(sum(n * a for n, a in zip(state, acts, strict=True)) for state in states)


def _in_flight(step: StepModel) -> list[int]:
    """Per pipeline device, the microbatches it keeps in flight at its peak (worked out
    once per step model: every memory question asks)."""
    flight = step.derived.get(("in flight",))
    if flight is None:
        par = step.par
        flight = step.derived[("in flight",)] = [
            peak_in_flight(par.schedule, par.pp, step.m, d, par.virtual_stages)
            for d in range(par.pp)
        ]
    return flight


def ladder_fits(step: StepModel, n_full: int | None) -> bool:
    """Whether `estimate`'s stage split of ``step`` with ``n_full`` fully recomputed layers
    per stage (``per_layer``; None otherwise) fits the memory cap: the question its
    recompute ladder asks of each count, asked ahead by the plan's search
    (`planning.bounded`) to raise a configuration's step-time floor before its estimate."""
    flight = _in_flight(step)
    fixed, balanced, uni = _splits(step, n_full)
    if fixed is not None:
        return _fits(step, fixed[0], n_full, flight)
    # `_partition(memory_capped=False)` keeps the time-balanced split when it fits, else
    # whichever of the two needs less: some split fits when either does
    return _fits(step, balanced, n_full, flight) or (
        uni != balanced and _fits(step, uni, n_full, flight)
    )


def _fits(step: StepModel, part: StagePartition, n_full, flight) -> bool:
    """Whether every device of ``part`` fits the cap (`_formula_memories` below it): the
    devices in turn, stopping at the first over it (most questions of the ladder's
    bisection are answered by device 0, which keeps the most microbatches); when all fit
    their memories are kept as `_formula_memories` keeps them (the estimate reads them)."""
    key = ("formula_memories", part, n_full, tuple(flight))
    mems = step.derived.get(key)
    if mems is not None:
        return max(m.total for m in mems) <= step.cap
    over = ("over the cap", *key[1:])  # answered no before (the estimate asks again)
    if over in step.derived:
        return False
    par, out = step.par, []
    for d in distinct_devices(part, par.pp, par.virtual_stages):
        m = step.device_memory(part, d, n_full, peak_activations(step, part, d, n_full))
        if m.total > step.cap:
            step.derived[over] = True
            return False
        out.append(m)
    step.derived[key] = tuple(out)
    return True


def states_over_cap(step: StepModel) -> bool:
    """Whether no stage split and no recompute count of ``step`` can fit the memory cap: the
    model states (`zero.state_bytes`) of the pipeline device holding the most parameters,
    at least the mean over the ``pp`` devices, with their fragmentation and the allowances
    outside the allocator exceed it already (`StepModel.device_memory`'s terms; the
    others are never negative). The plan's search asks it before `ladder_fits`."""
    par = step.par
    part = uniform_partition(step.cfg.num_layers, par.stages)
    params = sum(step.stage_params(part, g) for g in range(par.stages)) / par.pp
    al = step.tparams.allowances
    held = sum(zero.state_bytes(step, params)) * (1.0 + al.fragmentation_fraction)
    need = held + al.runtime_context_bytes + al.communication_buffer_bytes
    return need * (1.0 - 1e-9) > step.cap  # the margin: the terms are summed in another order


def fewest_fitting(
    n: int, fits: Callable[[int], bool], enough: Callable[[int], bool] | None = None
) -> int | None:
    """The index of the fewest of ``n`` recompute counts that fits, as the ladder finds it:
    the last checked first (None when it does not fit), then bisection (memory falls as
    layers are added). `_fewest_recompute` and the plan's search ask the same questions in
    the same order (`planning.bounded`), so the search never expects fewer layers.

    ``enough(lo)`` (the plan's search) is asked of the lower end of the range the answer
    lies in before each question; True stops there and returns ``lo``: no more than the
    ladder's answer, or than every count when none fits (the search stops once the floor
    of ``lo`` recomputed layers is above the step times it keeps)."""
    lo, hi = 0, n - 1
    if enough is not None and enough(lo):
        return lo
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
            if enough is not None and lo < hi and enough(lo):
                return lo
    return lo


def recompute_counts(step: StepModel) -> list[int | None]:
    """The fully recomputed layer counts per stage `estimate`'s ladder chooses among (fewest
    first): ``[None]`` unless ``per_layer`` without a count."""
    par = step.par
    if par.recompute != "per_layer":
        return [None]
    if par.recompute_num_layers is not None:
        return [par.recompute_num_layers]
    return list(range(0, math.ceil(step.cfg.num_layers / par.stages) + 1))


def _result(step: StepModel, split, n_full, step_time, mems, timeline, by_kind) -> SimResult:
    par = step.par
    part, choice = split
    worst = max(range(len(mems)), key=lambda d: mems[d].total)
    model_f, hw_f = step.flops()
    devices = par.devices
    peak = step.cluster.chip.peak_flops(step.cfg.dtype)
    tflops = model_f / step_time / devices / 1e12
    changes: dict[str, object] = {"num_microbatches": step.m}
    if par.recompute == "per_layer":
        changes["recompute_num_layers"] = n_full
    config = par.replace(**changes)  # one validated copy, not two
    idle = by_kind.get("idle", 0.0)
    stack_name = stack_of(step.tparams)
    bands_file = _bands_file()  # one path for both bands
    return SimResult(
        config=config, model=step.cfg.name, hardware=step.cluster.name,
        global_batch=step.gb, seq=step.seq, step_time_s=step_time,
        tokens_per_s=step.gb * step.seq / step_time, tflops_per_device=tflops,
        hardware_tflops_per_device=hw_f / step_time / devices / 1e12,
        mfu=tflops * 1e12 / peak, memory=mems[worst], memory_per_device=tuple(mems),
        memory_cap_bytes=step.cap, comm_bytes=step.comm_bytes(part, mems[worst].stage),
        time_by_kind=tuple(sorted(by_kind.items())), bubble_fraction=idle / step_time,
        partition=part, partition_choice=choice, timeline=timeline,
        strategies=step.costs.describe(), stack=stack_name,
        band=band(stack_name, step.cluster, path=bands_file),
        memory_band=band(stack_name, step.cluster, "memory", path=bands_file),
    )  # fmt: skip


_BANDS_FILES: dict[str | None, Path] = {}


def _bands_file() -> Path:
    """`bands_path`, resolved once per ``$EXPLORER_DATASETS`` value: resolving the checkout
    took a third of a millisecond, on every one of a plan's ~1,000 estimates."""
    env = os.environ.get("EXPLORER_DATASETS")
    path = _BANDS_FILES.get(env)
    if path is None:
        path = _BANDS_FILES[env] = bands_path()
    return path


#: Microbatches (times interleaved chunks) one event simulation schedules at most; each is
#: a forward and a backward event per stage (a global batch of 2**62 built them one by one
#: until memory ran out).
MAX_SIMULATED_MICROBATCHES = 1 << 16


def simulate(
    cfg: ModelConfig | str, parallel: ParallelConfig, hardware: str | Cluster = "a100-80g",
    global_batch: int = 1, seq: int | None = None, params: TrainingParams | None = None,
    stack: str | Stack | None = None, timeline: bool = True,
) -> SimResult:  # fmt: skip
    """Simulate one training step of ``cfg`` under ``parallel`` on ``hardware``.

    ``params``: the step model's knobs as given; ``stack``: a training stack's preset
    (`explorer.training.stacks`, e.g. ``"torchtitan"``); neither: the default stack
    (``megatron-core``); both: an error naming the fix. ``timeline=False``: the same result
    without its ``timeline`` (None), the events not kept (`pipeline.timeline.schedule_times`:
    the same step time and time by kind, about six times faster).

    The stage split is `partition_layers` under the per-stage memory cap (the uniform
    split when nothing fits, reported with ``fits == False`` rather than raised, so a
    caller can see by how much); per-layer recompute (``recompute="per_layer"`` without a
    count) takes the fewest fully recomputed layers that fit (or a few more when that
    is faster than the unbalanced split the fewest need).

    >>> import explorer as ex
    >>> r = ex.simulate("gpt2", ex.ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=4),
    ...                 hardware="a100-80g", global_batch=32, seq=512)
    >>> r.fits, r.config.num_microbatches, r.timeline.devices
    (True, 4, 2)
    """
    if not isinstance(timeline, bool):
        raise TrainingError(
            f"timeline={timeline!r}: expected True (keep the step's events) or False (the "
            "same result without them)"
        )
    cfg, cluster, seq, tparams = _setup(cfg, parallel, hardware, seq, params, stack)
    step = StepModel(cfg, parallel, cluster, global_batch, seq, tparams)
    par = step.par
    if step.m * par.virtual_stages > MAX_SIMULATED_MICROBATCHES:
        raise ParallelConfigError(
            f"global_batch={global_batch} is {step.m:,} microbatches per pipeline "
            f"(x{par.virtual_stages} chunks): the event simulation schedules each one, and past "
            f"{MAX_SIMULATED_MICROBATCHES:,} it is refused; estimate() prices the same step "
            "in closed form, or raise microbatch_size"
        )
    schedule = build_schedule(par.schedule, par.pp, step.m, par.virtual_stages)
    in_flight = _in_flight(step)

    def evaluate(n_full):
        split = _partition(step, n_full, in_flight)
        part = split[0]
        return split, [
            step.device_memory(part, d, n_full, peak_activations(step, part, d, n_full))
            for d in range(par.pp)
        ]

    split, n_full, mems = _fewest_recompute(step, evaluate)
    part = split[0]
    fwd, bwd = zip(*(step.stage_segments(part, g, n_full) for g in range(par.stages)), strict=True)
    tails = []
    for d in range(par.pp):
        chunks = [c * par.pp + d for c in range(par.virtual_stages)]
        params_d = sum(step.stage_params(part, g) for g in chunks)
        windows = step.device_backward_s(part, d, n_full), step.device_forward_s(part, d)
        tails.append(step.tail(params_d, *windows))
    if timeline:
        tl = simulate_schedule(schedule, list(fwd), list(bwd), step.p2p_s, tails)
        step_time, kinds = tl.step_time_s, tl.time_by_kind()
    else:
        tl = None
        step_time, kinds = schedule_times(schedule, list(fwd), list(bwd), step.p2p_s, tails)
    by_kind = {k: v / par.pp for k, v in kinds.items()}
    return _result(step, split, n_full, step_time, mems, tl, by_kind)


def _busy(P: PartCost) -> float:
    return P.forward_s + P.backward_s + P.tp_forward_s + P.tp_backward_s


def _formula_memories(
    step: StepModel, part: StagePartition, n_full, flight
) -> list[MemoryBreakdown]:
    """Per-device memory with activations = `peak_activations` (the chunks' activations
    weighted by the microbatches of each the device keeps at its peak; ``flight`` keys
    the memo). Only the first device of each distinct stage shape is computed: later devices with
    the same layers keep fewer microbatches in flight, so they never need more.
    Computed once per (split, recompute count, microbatches in flight) of a step: the
    split's memory check and the recompute ladder ask for the same ones."""
    key = ("formula_memories", part, n_full, tuple(flight))
    mems = step.derived.get(key)
    if mems is None:
        mems = step.derived[key] = _formula_memories_of(step, part, n_full, flight)
    return list(mems)


def _formula_memories_of(
    step: StepModel, part: StagePartition, n_full, flight
) -> tuple[MemoryBreakdown, ...]:
    par = step.par
    firsts = distinct_devices(part, par.pp, par.virtual_stages)
    return tuple(
        step.device_memory(part, d, n_full, peak_activations(step, part, d, n_full)) for d in firsts
    )


def _fewest_recompute(step: StepModel, evaluate):
    """(split, recomputed layers, memories) for the fewest fully recomputed layers that
    fit (``per_layer``; one candidate otherwise). Memory falls as layers are added, so
    the first that fits is found by bisection; the last candidate when none fits. When
    that count fits only by a memory-capped (time-unbalanced) split, the larger counts up
    to the first whose split is not capped are tried too and the fastest is kept."""
    cands = recompute_counts(step)
    done: dict = {}

    def fits(i: int) -> bool:
        if i not in done:
            done[i] = evaluate(cands[i])
        return max(m.total for m in done[i][1]) <= step.cap

    lo = fewest_fitting(len(cands), fits)
    if lo is None:
        lo = len(cands) - 1
    fits(lo)
    best = lo
    if done[lo][0][1].method == "memory_capped" and fits(lo):
        # Fitting under the caps can unbalance the stages by more than recomputing a few
        # more layers costs: walk up to the first count whose time-balanced split fits,
        # keeping the fastest (`pipeline_time`'s closed form).
        def closed_form(i: int) -> float:
            return pipeline_time(_stage_times(step, done[i][0][0], cands[i]), step.m)

        best_s = closed_form(lo)
        for i in range(lo + 1, len(cands)):
            if not fits(i):
                break
            s = closed_form(i)
            if s < best_s:
                best, best_s = i, s
            if done[i][0][1].method != "memory_capped":
                break
    split, mems = done[best]
    return split, cands[best], mems


def _stage_times(step: StepModel, part: StagePartition, n_full) -> list[float]:
    """Seconds per stage of ``part`` for one microbatch (`_layer_times` summed)."""
    times = _layer_times(step, n_full)
    return [sum(times[lo:hi]) for lo, hi in zip(part.bounds, part.bounds[1:], strict=False)]


def _fits_better(step, a: StagePartition, b: StagePartition, n_full, in_flight) -> bool:
    need = [max(m.total for m in _formula_memories(step, x, n_full, in_flight)) for x in (a, b)]
    return need[0] <= need[1]


def _layer_times(step: StepModel, n_full) -> list[float]:
    """Seconds per part ``[embed, layers..., head]`` for one microbatch: compute and
    tensor-parallel collectives, plus each layer's share of recomputation (averaged over a
    stage of the uniform size: ``per_layer`` mixes policies) and its all-to-alls.
    Computed once per recompute count of a step (the split and the ladder's closed form)."""
    key = ("layer_times", n_full)
    times = step.derived.get(key)
    if times is None:
        times = step.derived[key] = tuple(_layer_times_of(step, n_full))
    return list(times)


def _layer_times_of(step: StepModel, n_full) -> list[float]:
    c, L = step.costs, step.cfg.num_layers
    n = math.ceil(L / step.par.stages)
    rec = recompute.layers_s(step, n, n_full) / n
    layer = _busy(c.layer) + rec + 2 * ep.stage_s(step, 1)  # all-to-alls forward + backward
    layer += sum(cp.stage_s(step, n, n_full)) / n  # key/value exchanges, context parallel
    return dense.layer_times(step, [_busy(c.embed)] + [layer] * L + [_busy(c.head)])


def _interleaved_s(part: StagePartition, times: list[float], p: int, m: int) -> float:
    """Closed-form interleaved pipeline time of ``part`` (as `estimate`): m times the
    busiest device's work plus (p-1) times the slowest chunk. Minimising the slowest chunk
    alone can pile the larger chunks onto one device; Megatron-LM's even split (extra
    layers to the first chunks, one per device) keeps the devices even."""
    t = [sum(times[lo:hi]) for lo, hi in zip(part.bounds, part.bounds[1:], strict=False)]
    return pipeline_time(t, m, p)


@memoize(maxsize=4096, name="training.balanced_split")
def _balanced_split(times: tuple[float, ...], stages: int) -> StagePartition:
    """The split of the parts minimising the slowest stage's time, memory ignored
    (`partition_layers`'s, on the window of its programme a split can use)."""
    alone = stages > len(times) - 2  # more stages than layers: embedding / head alone
    return balanced_split(times, stages, end_stages_alone=alone)


def _capped_split(step: StepModel, times: list[float], n_full, in_flight) -> StagePartition:
    """The time-balanced split under each stage's memory cap, with the step model's own
    memory terms (model states by ZeRO, activations by recompute policy, the embedding's
    dropout, the recompute working set, ZeRO-3's gather buffer); the head's logits and
    the working set are reserved on every stage (the worst case). Raises `PartitionError`."""
    par, L = step.par, step.cfg.num_layers
    n = math.ceil(L / par.stages)
    per_param = sum(zero.model_state_bytes(1.0, par.shard_replicas, par.zero, step.tparams.state))
    static = [step.embed_params * per_param] + [step.layer_params * per_param] * L
    static.append(step.head_params * per_param)
    static = dense.layer_static(step, static, per_param)  # dense first layers' own weights
    acts = [step.embed_act()] + [recompute.layers_act(step, n, n_full) / n] * L + [0.0]
    al = step.tparams.allowances
    rest = al.runtime_context_bytes + al.communication_buffer_bytes  # outside the allocator
    usable = (step.cap - rest) / (1 + al.fragmentation_fraction)
    usable -= recompute.working_set(step, [n], n_full) + step.head_act()
    usable -= zero.gather_buffer_bytes(step) + step.reduce_buffer(None, [])
    alone = par.stages > L
    return partition_layers(times, static, acts, in_flight, [usable] * par.stages, alone)


def _splits(
    step: StepModel, n_full
) -> tuple[tuple[StagePartition, PartitionChoice] | None, StagePartition, StagePartition]:
    """(the split `_partition` takes whatever the memory, or None; else the time-balanced
    split and the uniform one it chooses between)."""
    par = step.par
    L = step.cfg.num_layers
    if par.stage_layers is not None:
        if sum(par.stage_layers) != L:
            raise ParallelConfigError(
                f"stage_layers={par.stage_layers} holds {sum(par.stage_layers)} layers, the "
                f"model {L}; give counts adding up to {L}"
            )
        split = StagePartition.from_layers(par.stage_layers)
        return (split, PartitionChoice("given", "the configuration's stage_layers")), split, split
    uni = uniform_partition(L, par.stages)
    if par.pp == 1:
        return (uni, PartitionChoice("uniform", "one pipeline stage")), uni, uni
    if par.virtual_stages > 1 and L % par.stages == 0:
        why = "interleaved 1F1B over equal chunks (Megatron-LM's rule)"
        return (uni, PartitionChoice("uniform", why)), uni, uni
    times = _layer_times(step, n_full)
    balanced = _balanced_split(tuple(times), par.stages)
    if par.virtual_stages > 1 and _interleaved_s(uni, times, par.pp, step.m) < _interleaved_s(
        balanced, times, par.pp, step.m
    ):
        balanced = uni  # the slowest chunk is not the slowest device: spread the extra layers
    return None, balanced, uni


def _partition(
    step: StepModel, n_full, in_flight, memory_capped: bool = True
) -> tuple[StagePartition, PartitionChoice]:
    """The stage split and why: the time-balanced split if it fits; else
    (``memory_capped``) the time-balanced split under the memory caps; else the uniform
    split, reported with why (the memory check that follows says by how much it is over).
    Interleaved schedules keep Megatron-LM's equal chunks when the layers divide into
    pp * v; otherwise they split the model into chunks with the same programme (chunks of
    unequal layer counts: Llama 3 ran 126 layers on 16 stages with one layer fewer on the
    first and the last), or the even split when it keeps the devices more even
    (`_interleaved_s`); the per-stage memory caps of the capped split
    do not apply to a device holding v chunks, so an interleaved split that does not fit
    falls back to the uniform one when that needs less. `estimate` skips the capped split
    to stay fast and keeps whichever of the two needs less memory."""
    par = step.par
    fixed, balanced, uni = _splits(step, n_full)
    if fixed is not None:
        return fixed
    need = max(m.total for m in _formula_memories(step, balanced, n_full, in_flight))
    gib = 2**30
    over = f"the time-balanced split needs {need / gib:.2f} GiB, over the {step.cap / gib:.2f}"
    if need <= step.cap:
        return balanced, PartitionChoice("time_balanced", "it fits the memory cap")
    if not memory_capped or par.virtual_stages > 1:
        why = "interleaved: no per-stage cap" if memory_capped else "estimate"
        if _fits_better(step, balanced, uni, n_full, in_flight):
            return balanced, PartitionChoice(
                "time_balanced", f"{over} GiB cap; the uniform split needs more ({why})"
            )
        return uni, PartitionChoice(
            "uniform", f"{over} GiB cap; the uniform split needs less ({why})"
        )
    try:
        capped = _capped_split(step, _layer_times(step, n_full), n_full, in_flight)
    except PartitionError as e:
        return uni, PartitionChoice(
            "uniform", f"{over} GiB cap and no split fits under it ({e}); uniform reported"
        )
    return capped, PartitionChoice("memory_capped", f"{over} GiB cap")


def estimate(
    cfg: ModelConfig | str,
    parallel: ParallelConfig,
    hardware: str | Cluster = "a100-80g",
    global_batch: int = 1,
    seq: int | None = None,
    params: TrainingParams | None = None,
    stack: str | Stack | None = None,
) -> SimResult:
    """`simulate` without the event simulation: the same stage split and the closed-form
    pipeline time `pipeline_time` (``sum_g t_g + (m-1) max_g t_g``; ``m max_d W_d +
    (p-1) max_g t_g`` interleaved, W_d = a device's work) plus transfers and the tail.
    Exact for uniform stages without transfers; `plan_training` ranks with it. ``params``
    and ``stack`` as in `simulate`."""
    cfg, cluster, seq, tparams = _setup(cfg, parallel, hardware, seq, params, stack, "estimate")
    return estimate_step(StepModel(cfg, parallel, cluster, global_batch, seq, tparams))


def estimate_step(step: StepModel) -> SimResult:
    """`estimate` of a configuration's step model (the plan's search keeps the step models
    whose memory it asked before, `ladder_fits`, and estimates them)."""
    par, m = step.par, step.m
    flight = _in_flight(step)
    S, p, v = par.stages, par.pp, par.virtual_stages

    # the ladder's questions (`ladder_fits`: the split and memory `_fewest_recompute` would
    # ask of each count, answered at the first device over the cap), then the count's split
    # and memories (never memory-capped here: `_fewest_recompute`'s walk up does not apply)
    counts = recompute_counts(step)
    lo = fewest_fitting(len(counts), lambda i: ladder_fits(step, counts[i]))
    n_full = counts[len(counts) - 1 if lo is None else lo]
    split = _partition(step, n_full, flight, memory_capped=False)
    part = split[0]
    mems = _formula_memories(step, part, n_full, flight)
    memo: dict[tuple, tuple[float, list]] = {}
    t_stage = []
    names: list[str] = []  # the segments' kinds, in the order they first appear
    slots: list[int] = []  # each segment's index in names (the same for every stage)
    acc: list[float] = []  # each kind's seconds, summed stage by stage as the dict did
    shapes = part.shapes  # (layers, embedding?, head?) per stage
    for g in range(S):
        key = shapes[g]
        if key not in memo:
            f, b = step.stage_segments(part, g, n_full)
            if not names:
                for k, _ in f + b:
                    if k not in names:
                        names.append(k)
                slots = [names.index(k) for k, _ in f + b]
                acc = [0.0] * len(names)
            # each segment's share of the step (x * m / p), worked out once per stage shape;
            # the zero ones are left out (adding 0.0 to a sum that starts at 0.0 changes
            # no bit of it: most kinds are 0 on a given configuration)
            shares = [(i, x * m / p) for i, (_, x) in zip(slots, f + b, strict=True)]
            memo[key] = (sum(x for _, x in f) + sum(x for _, x in b),
                         [(i, x) for i, x in shares if x != 0.0])  # fmt: skip
        t, shares = memo[key]
        t_stage.append(t)
        for i, x in shares:
            acc[i] += x
    kinds: dict[str, float] = dict(zip(names, acc, strict=True))
    pipe = pipeline_time(t_stage, m, p) + 2 * (S - 1) * step.p2p_s
    tail = 0.0
    tails: dict[float, list] = {}
    device_params: dict[tuple, float] = {}  # by the shapes of a device's chunks
    for d, chunks in enumerate(device_chunks(part, p, v)):
        params_d = device_params.get(chunks) if step.dense is None else None
        if params_d is None:  # dense first layers: a stage's parameters depend on where it is
            params_d = device_params[chunks] = sum(
                step.stage_params(part, c * p + d) for c in range(v)
            )
        if params_d not in tails:
            windows = step.device_backward_s(part, d, n_full), step.device_forward_s(part, d)
            tails[params_d] = step.tail(params_d, *windows)
        segs = tails[params_d]
        tail = max(tail, sum(x for _, x in segs))
        for k, x in segs:
            kinds[k] = kinds.get(k, 0.0) + x / p
    total = pipe + tail
    busy = sum(kinds.values())
    kinds["idle"] = max(0.0, total - busy)
    return _result(step, split, n_full, total, mems, None, kinds)
