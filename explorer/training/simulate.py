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
from dataclasses import dataclass, field

from ..hardware import Cluster, resolve
from ..models import ModelConfig, load
from .config import ParallelConfig
from .memory import MemoryBreakdown, model_state_bytes
from .pipeline.partition import PartitionError, StagePartition, partition_layers, uniform_partition
from .pipeline.schedule import build_schedule, peak_in_flight
from .pipeline.timeline import Timeline, simulate_schedule
from .stage_costs import PartCost
from .step_model import CALIBRATED_COST, COMM_KINDS, StepModel, TrainingParams

__all__ = ["TrainingParams", "SimResult", "simulate", "estimate", "COMM_KINDS", "CALIBRATED_COST"]


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
        partition: the stage split; ``timeline``: the simulated events (None for an
            estimate); ``strategies``: the searched layouts of the layer's matmuls.
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
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    strategies: str = ""

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
            "partition": str(self.partition), "strategies": self.strategies,
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
def _resolve(cfg, hardware) -> tuple[ModelConfig, Cluster]:
    return (load(cfg) if isinstance(cfg, str) else cfg), resolve(hardware)


def _live_activations(step: StepModel, part: StagePartition, schedule, n_full) -> list[float]:
    """Peak live activation bytes per device, walking each device's step order."""
    out = []
    for d, order in enumerate(schedule.order):
        live = peak = 0.0
        acts = [step.stage_act(part, c * step.par.pp + d, n_full) for c in range(schedule.chunks)]
        for s in order:
            live += acts[s.chunk] if s.phase == "F" else -acts[s.chunk]
            peak = max(peak, live)
        out.append(peak)
    return out


def _in_flight(step: StepModel) -> list[int]:
    par = step.par
    return [
        peak_in_flight(par.schedule, par.pp, step.m, d, par.virtual_stages) for d in range(par.pp)
    ]


def _n_full_candidates(step: StepModel) -> list[int | None]:
    par = step.par
    if par.recompute != "per_layer":
        return [None]
    if par.recompute_num_layers is not None:
        return [par.recompute_num_layers]
    return list(range(0, math.ceil(step.cfg.num_layers / par.stages) + 1))


def _result(step: StepModel, part, n_full, step_time, mems, timeline, by_kind) -> SimResult:
    par = step.par
    worst = max(range(len(mems)), key=lambda d: mems[d].total)
    model_f, hw_f = step.flops()
    devices = par.devices
    peak = step.cluster.chip.peak_flops(step.cfg.dtype)
    tflops = model_f / step_time / devices / 1e12
    config = par.replace(num_microbatches=step.m)
    if par.recompute == "per_layer":
        config = config.replace(recompute_num_layers=n_full)
    idle = by_kind.get("idle", 0.0)
    return SimResult(
        config=config, model=step.cfg.name, hardware=step.cluster.name,
        global_batch=step.gb, seq=step.seq, step_time_s=step_time,
        tokens_per_s=step.gb * step.seq / step_time, tflops_per_device=tflops,
        hardware_tflops_per_device=hw_f / step_time / devices / 1e12,
        mfu=tflops * 1e12 / peak, memory=mems[worst], memory_per_device=tuple(mems),
        memory_cap_bytes=step.cap, comm_bytes=step.comm_bytes(part, mems[worst].stage),
        time_by_kind=tuple(sorted(by_kind.items())), bubble_fraction=idle / step_time,
        partition=part, timeline=timeline, strategies=step.costs.describe(),
    )  # fmt: skip


def simulate(
    cfg: ModelConfig | str, parallel: ParallelConfig, hardware: str | Cluster = "a100-80g",
    global_batch: int = 1, seq: int | None = None, params: TrainingParams | None = None,
) -> SimResult:  # fmt: skip
    """Simulate one training step of ``cfg`` under ``parallel`` on ``hardware``.

    The stage split is `partition_layers` under the per-stage memory cap (the uniform
    split when nothing fits, reported with ``fits == False`` rather than raised, so a
    caller can see by how much); per-layer recompute (``recompute="per_layer"`` without a
    count) takes the fewest fully recomputed layers that fit.

    >>> import explorer as ex
    >>> r = ex.simulate("gpt2", ex.ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=4),
    ...                 hardware="a100-80g", global_batch=32, seq=512)
    >>> r.fits, r.config.num_microbatches, r.timeline.devices
    (True, 4, 2)
    """
    cfg, cluster = _resolve(cfg, hardware)
    seq = cfg.max_seq_len if seq is None else seq
    tparams = params or TrainingParams()
    step = StepModel(cfg, parallel, cluster, global_batch, seq, tparams)
    par = step.par
    schedule = build_schedule(par.schedule, par.pp, step.m, par.virtual_stages)
    in_flight = _in_flight(step)

    def evaluate(n_full):
        part = _partition(step, n_full, in_flight)
        live = _live_activations(step, part, schedule, n_full)
        return part, [step.device_memory(part, d, n_full, live[d]) for d in range(par.pp)]

    part, n_full, mems = _fewest_recompute(step, evaluate)
    fwd, bwd = zip(*(step.stage_segments(part, g, n_full) for g in range(par.stages)), strict=True)
    tails = []
    for d in range(par.pp):
        chunks = [c * par.pp + d for c in range(par.virtual_stages)]
        tails.append(step.tail(sum(step.stage_params(part, g) for g in chunks)))
    tl = simulate_schedule(schedule, list(fwd), list(bwd), step.p2p_s, tails)
    by_kind = {k: v / par.pp for k, v in tl.time_by_kind().items()}
    return _result(step, part, n_full, tl.step_time_s, mems, tl, by_kind)


def _busy(P: PartCost) -> float:
    return P.forward_s + P.backward_s + P.tp_forward_s + P.tp_backward_s


def _formula_memories(
    step: StepModel, part: StagePartition, n_full, flight
) -> list[MemoryBreakdown]:
    """Per-device memory with activations = microbatches in flight x the stage's
    activations (exact for one chunk per device; the chunk average when interleaved).
    Only the first device of each distinct stage shape is computed: later devices with
    the same layers keep fewer microbatches in flight, so they never need more."""
    par = step.par
    p, v = par.pp, par.virtual_stages
    out, seen = [], set()
    shapes = part.shapes
    for d in range(p):
        chunks = [c * p + d for c in range(v)]
        shape = tuple(shapes[g] for g in chunks) if v > 1 else shapes[d]
        if shape in seen:
            continue
        seen.add(shape)
        act = sum(step.stage_act(part, g, n_full) for g in chunks) / v
        out.append(step.device_memory(part, d, n_full, act * flight[d]))
    return out


_TIME_SPLITS: dict[tuple, StagePartition] = {}


def _fewest_recompute(step: StepModel, evaluate):
    """(split, recomputed layers, memories) for the fewest fully recomputed layers that
    fit (``per_layer``; one candidate otherwise). Memory falls as layers are added, so
    the first that fits is found by bisection; the last candidate when none fits."""
    cands = _n_full_candidates(step)
    done: dict = {}

    def fits(i: int) -> bool:
        if i not in done:
            done[i] = evaluate(cands[i])
        return max(m.total for m in done[i][1]) <= step.cap

    lo, hi = 0, len(cands) - 1
    if not fits(hi):
        lo = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    fits(lo)
    part, mems = done[lo]
    return part, cands[lo], mems


def _fits_better(step, a: StagePartition, b: StagePartition, n_full, in_flight) -> bool:
    need = [max(m.total for m in _formula_memories(step, x, n_full, in_flight)) for x in (a, b)]
    return need[0] <= need[1]


def _partition(step: StepModel, n_full, in_flight, memory_capped: bool = True) -> StagePartition:
    """The stage split: the time-balanced DP split if it fits, else (``memory_capped``)
    the DP under the memory caps, else the uniform split (the memory check that follows
    reports by how much it is over). Interleaved schedules use the uniform split: with
    unequal chunks the per-device work is unbalanced (layers divide evenly, checked in
    step_model._validate). `estimate` skips the capped DP to stay fast."""
    par, c = step.par, step.costs
    L = step.cfg.num_layers
    uni = uniform_partition(L, par.stages)
    if par.pp == 1 or par.virtual_stages > 1:
        return uni
    # Per-layer averages over a stage of the uniform size (per_layer mixes policies).
    n = math.ceil(L / par.stages)
    none_, sel, full = step.layer_policies(n, n_full)
    lay = c.layer
    rec = (full * (lay.forward_s + lay.tp_forward_s) + sel * lay.recompute_selective_s) / n
    ep = 2 * step.ep_s if step.cfg.is_moe else 0.0
    times = [_busy(c.embed)] + [_busy(lay) + rec + ep] * L + [_busy(c.head)]
    key = (tuple(times), par.stages)
    balanced = _TIME_SPLITS.get(key)
    if balanced is None:
        zeros, ones = [0.0] * (L + 2), [1.0] * par.stages
        balanced = partition_layers(times, zeros, zeros, ones, [math.inf] * par.stages)
        if len(_TIME_SPLITS) > 4096:
            _TIME_SPLITS.clear()
        _TIME_SPLITS[key] = balanced
    if max(m.total for m in _formula_memories(step, balanced, n_full, in_flight)) <= step.cap:
        return balanced
    if not memory_capped:
        return balanced if _fits_better(step, balanced, uni, n_full, in_flight) else uni
    act = none_ * step.layer_act("none") + sel * step.layer_act("selective")
    act = (act + full * step.layer_act("full")) / n
    w, gr, opt = model_state_bytes(1.0, par.dp, par.zero, step.tparams.state)
    per_param = w + gr + opt
    static = [step.embed_params * per_param] + [step.layer_params * per_param] * L
    static.append(step.head_params * per_param)
    a = step.tparams.activations
    sbh = step.seq * par.microbatch_size * step.cfg.hidden_size
    embed_act = sbh * a.embedding_dropout_bytes / (par.tp if par.sp else 1)
    acts = [embed_act] + [act] * L + [0.0]
    al = step.tparams.allowances
    usable = step.cap / (1 + al.fragmentation_fraction)
    usable -= al.runtime_context_bytes + al.communication_buffer_bytes
    usable -= step.layer_act("none") + step.head_act()  # working set and logits, worst case
    try:
        return partition_layers(times, static, acts, in_flight, [usable] * par.stages)
    except PartitionError:
        return uni


def estimate(
    cfg: ModelConfig | str,
    parallel: ParallelConfig,
    hardware: str | Cluster = "a100-80g",
    global_batch: int = 1,
    seq: int | None = None,
    params: TrainingParams | None = None,
) -> SimResult:
    """`simulate` without the event simulation: the same stage split and the closed-form
    pipeline time ``sum_g t_g + (m-1) max_g t_g`` (``m max_d W_d + (p-1) max_g t_g``
    interleaved, W_d = a device's work) plus transfers and the tail. Exact for uniform
    stages without transfers; `plan_training` ranks with it."""
    cfg, cluster = _resolve(cfg, hardware)
    seq = cfg.max_seq_len if seq is None else seq
    tparams = params or TrainingParams()
    step = StepModel(cfg, parallel, cluster, global_batch, seq, tparams)
    par, m = step.par, step.m
    flight = _in_flight(step)
    S, p, v = par.stages, par.pp, par.virtual_stages

    def evaluate(n_full):
        part = _partition(step, n_full, flight, memory_capped=False)
        return part, _formula_memories(step, part, n_full, flight)

    part, n_full, mems = _fewest_recompute(step, evaluate)
    memo: dict[tuple, tuple[float, list]] = {}
    t_stage = []
    kinds: dict[str, float] = {}
    for g in range(S):
        key = (part.layers(g), part.has_embed(g), part.has_head(g))
        if key not in memo:
            f, b = step.stage_segments(part, g, n_full)
            memo[key] = (sum(x for _, x in f) + sum(x for _, x in b), f + b)
        t, segs = memo[key]
        t_stage.append(t)
        for k, x in segs:
            kinds[k] = kinds.get(k, 0.0) + x * m / p
    if v == 1:
        pipe = sum(t_stage) + (m - 1) * max(t_stage)
    else:
        work = [sum(t_stage[c * p + d] for c in range(v)) for d in range(p)]
        pipe = m * max(work) + (p - 1) * max(t_stage)
    pipe += 2 * (S - 1) * step.p2p_s
    tail = 0.0
    tails: dict[float, list] = {}
    for d in range(p):
        params_d = sum(step.stage_params(part, c * p + d) for c in range(v))
        if params_d not in tails:
            tails[params_d] = step.tail(params_d)
        segs = tails[params_d]
        tail = max(tail, sum(x for _, x in segs))
        for k, x in segs:
            kinds[k] = kinds.get(k, 0.0) + x / p
    total = pipe + tail
    busy = sum(kinds.values())
    kinds["idle"] = max(0.0, total - busy)
    return _result(step, part, n_full, total, mems, None, kinds)
