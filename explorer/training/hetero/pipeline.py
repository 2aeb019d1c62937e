"""One pipeline across pools: stages sized to each pool's speed and memory.

Structure: ``dp`` replicas of one pipeline of ``S = sum_i pp_i`` stages; pool ``i`` holds
``pp_i`` consecutive stages of every replica, each stage on ``tp_i`` chips of that pool
(``chips_i = dp * tp_i * pp_i``). Tensor parallelism never spans two pools and the
gradient all-reduce of a stage runs inside the pool holding it; only the pipeline's
activations cross between pools (`pools.cross_pool_link`).

Layer split (non-uniform): with ``t_i`` the seconds of one layer (forward + backward +
tensor-parallel collectives + recomputation, one microbatch) on pool ``i`` and ``e_g`` the
embedding/head on the first/last stage, stage ``g`` gets ``l_g`` layers minimising the
slowest ``T_g = l_g t_i + e_g`` subject to ``l_g <= lmax_g`` (the most layers whose weights,
optimizer states and in-flight activations fit the pool's memory on that stage, found with
the step model's own `StepModel.device_memory`) and ``sum l_g = L``, then the least
``sum_g T_g``: `pipeline.partition.split_layers`, the one exact splitter (``t_i``, ``e_g``
and ``lmax_g`` read off the step model by `step_model.split`). A pool twice as fast per
layer gets about twice the layers.

The step is the closed-form 1F1B time (`pipeline_time`: ``sum T_g + (m - 1) max T_g``)
plus the transfers and the slowest stage's tail (gradient reduction in its pool,
optimizer), as `estimate` does; the search ranks with it; `pipeline_timeline` then
simulates the best few event by event (`simulate_schedule`, every transfer at the slowest
boundary's time: the simulator takes one transfer time) and `plan_hetero` ranks those by
their simulated step, as `plan_training` does.

With ``offload`` the optimizer states live in host memory (`terms.offload`, ``optimizer``):
a stage's memory drops them, its tail's ``optimizer`` segment becomes the host update with
its PCIe copies (the gradient copy behind the stage's last backward).
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.hardware.host import HostLink, host_link

from ...models import ModelConfig
from ..config import ParallelConfig
from ..errors import OffloadError, ParallelConfigError
from ..memory import MemoryBreakdown
from ..offload import offloaded_memory, optimizer_offload_s
from ..params import TrainingParams
from ..pipeline.partition import StagePartition, split_layers
from ..pipeline.schedule import build_schedule, peak_in_flight, pipeline_time
from ..pipeline.timeline import Timeline, simulate_schedule
from ..step_model.model import StepModel
from ..step_model.split import layer_seconds, most_layers, stage_memory
from ..step_model.terms import zero
from .pools import Pool, cross_pool_link

__all__ = ["PipelineArrangement", "evaluate_pipeline", "pipeline_timeline"]


@dataclass(frozen=True)
class PipelineArrangement:
    """One evaluated pipeline over pools (pools in pipeline order).

    Attributes:
        order: indices into the job's pools, first stage's pool first.
        dp: replicas; ``tps``/``pps``: tensor-parallel size and stages per pool (in ``order``).
        configs: per pool, the ParallelConfig its devices run (``pp`` is the whole
            pipeline's stage count ``S``).
        partition: the stage split; ``stage_pool``: the job-pool index of each stage.
        stage_s: seconds of one microbatch's forward + backward per stage.
        step_time_s: the closed-form step; ``p2p_s``: each boundary's transfer time.
        memory: the worst device's breakdown per pool (in ``order``), ``caps`` their caps.
        offload: the optimizer states live in host memory (`terms.offload`, ``optimizer``).
    """

    order: tuple[int, ...]
    dp: int
    tps: tuple[int, ...]
    pps: tuple[int, ...]
    configs: tuple[ParallelConfig, ...]
    partition: StagePartition
    stage_pool: tuple[int, ...]
    stage_s: tuple[float, ...]
    tail_s: tuple[float, ...]
    p2p_s: tuple[float, ...]
    microbatches: int
    step_time_s: float
    memory: tuple[MemoryBreakdown, ...]
    caps: tuple[float, ...]
    offload: bool = False

    @property
    def fits(self) -> bool:
        return all(m.total <= c for m, c in zip(self.memory, self.caps, strict=True))


def _memory(step: StepModel, part: StagePartition, g: int, flight: int, offload: bool):
    """Stage ``g``'s device memory; with ``offload`` its optimizer states (and their share of
    fragmentation) are in host memory (`offload.offloaded_memory`)."""
    mem = stage_memory(step, part, g, flight)
    return offloaded_memory(mem, "optimizer", step.tparams) if offload else mem


def _tail(step: StepModel, part: StagePartition, g: int, offload: bool, link: HostLink | None):
    """Stage ``g``'s step tail; with ``offload`` its ``optimizer`` segment is the host's
    update with its PCIe copies (`terms.offload.optimizer_offload_s`)."""
    window = step.device_backward_s(part, g, None)
    params = step.stage_params(part, g)
    tail = step.tail(params, window)
    if not offload:
        return tail
    par = step.par
    opt = zero.optimizer_params(params, par.shard_replicas, par.zero)
    exposed = optimizer_offload_s(opt, window, link, step.tparams)[3]
    return [(k, exposed if k == "optimizer" else x) for k, x in tail]


def _most_layers(step: StepModel, L: int, S: int, g: int, flight: int, offload: bool) -> int:
    """`most_layers` of stage ``g``, its optimizer states in host memory with ``offload``."""
    if not offload:
        return most_layers(step, L, S, g, flight)
    return most_layers(step, L, S, g, flight, lambda *a: _memory(*a, offload=True))


def evaluate_pipeline(
    cfg: ModelConfig, pools: tuple[Pool, ...], order: tuple[int, ...], dp: int,
    tps: tuple[int, ...], mbs: int, recompute: str, gb: int, seq: int, tparams: TrainingParams,
    offload: bool = False,
) -> PipelineArrangement | None:  # fmt: skip
    """Evaluate one structure; None when it is invalid or some stage cannot hold a layer.
    ``offload``: the optimizer states in host memory (`terms.offload`); None also when a
    pool's host link is unknown or its host memory cannot hold them."""
    L = cfg.num_layers
    pps = tuple(pools[i].chips // (dp * t) for i, t in zip(order, tps, strict=True))
    S = sum(pps)
    if S > L or gb % (dp * mbs):
        return None
    steps = []
    for i, t in zip(order, tps, strict=True):
        par = ParallelConfig(
            dp=dp, tp=t, pp=S, sp=t > 1, microbatch_size=mbs, schedule="1f1b",
            zero=1 if dp > 1 else 0, recompute=recompute,
        )  # fmt: skip
        try:
            steps.append(StepModel(cfg, par, pools[i].cluster, gb, seq, tparams))
        except ParallelConfigError:
            return None
    m = steps[0].m
    stage_step = [steps[k] for k, n in enumerate(pps) for _ in range(n)]
    stage_pool = tuple(order[k] for k, n in enumerate(pps) for _ in range(n))
    flight = [peak_in_flight("1f1b", S, m, g) for g in range(S)]
    if L == S or S == 1:  # one layer per stage, or one stage: nothing to balance
        layers = [L // S] * S
        if any(_most_layers(s, L, S, g, flight[g], offload) < 1 for g, s in enumerate(stage_step)):
            return None
        return _finish(
            pools, order, dp, tps, pps, steps, stage_step, stage_pool, flight, layers, m, offload
        )
    per_layer, extra, most = [], [], []
    times = {id(s): layer_seconds(s) for s in steps}
    for g, s in enumerate(stage_step):
        layer, emb, head = times[id(s)]
        per_layer.append(layer)
        extra.append((emb if g == 0 else 0.0) + (head if g == S - 1 else 0.0))
        most.append(_most_layers(s, L, S, g, flight[g], offload))
    layers = split_layers(L, per_layer, extra, most)
    if layers is None:
        return None
    return _finish(
        pools, order, dp, tps, pps, steps, stage_step, stage_pool, flight, layers, m, offload
    )


def _finish(pools, order, dp, tps, pps, steps, stage_step, stage_pool, flight, layers, m, offload):
    """The arrangement of a chosen split: stage times, tails, memory, the closed-form step."""
    part = StagePartition.from_layers(layers)
    links = _host_links(pools) if offload else {}
    if links is None:
        return None
    stage_s, tails, mems = [], [], {}
    for g, s in enumerate(stage_step):
        f, b = s.stage_segments(part, g, None)
        stage_s.append(sum(x for _, x in f) + sum(x for _, x in b))
        tail = _tail(s, part, g, offload, links.get(stage_pool[g]))
        tails.append(sum(x for _, x in tail))
        mem = _memory(s, part, g, flight[g], offload)
        if offload:
            host = s.device_memory(part, g, None, 0.0).optimizer_states
            if host > links[stage_pool[g]].host_memory_bytes:
                return None
        k = stage_pool[g]
        if k not in mems or mem.total > mems[k].total:
            mems[k] = mem
    p2p = _boundary_p2p(pools, stage_step, stage_pool)
    step_time = pipeline_time(stage_s, m) + 2 * sum(p2p) + max(tails)
    return PipelineArrangement(
        order=order, dp=dp, tps=tps, pps=pps, configs=tuple(s.par for s in steps),
        partition=part, stage_pool=stage_pool, stage_s=tuple(stage_s), tail_s=tuple(tails),
        p2p_s=tuple(p2p), microbatches=m, step_time_s=step_time,
        memory=tuple(mems[i] for i in order), caps=tuple(s.cap for s in steps),
        offload=offload,
    )  # fmt: skip


def _host_links(pools) -> dict[int, HostLink] | None:
    try:
        return {i: host_link(p.cluster) for i, p in enumerate(pools)}
    except OffloadError:
        return None


def _boundary_p2p(pools, stage_step, stage_pool) -> list[float]:
    """Seconds of one activation transfer across each stage boundary: the step model's
    within a pool, the cross-pool link for the bytes the sender sends between pools."""
    out = []
    link = cross_pool_link(pools)
    for g in range(len(stage_step) - 1):
        s = stage_step[g]
        if stage_pool[g] == stage_pool[g + 1]:
            out.append(s.p2p_s)
            continue
        eff = s.tparams.cost.bandwidth_efficiency
        out.append(link.latency_s + s.p2p_bytes / (link.bandwidth_bytes_per_s * eff))
    return out


def pipeline_timeline(
    arr: PipelineArrangement, cfg: ModelConfig, pools: tuple[Pool, ...], gb: int, seq: int,
    tparams: TrainingParams,
) -> Timeline:  # fmt: skip
    """The arrangement's step simulated event by event (one transfer time: the slowest)."""
    S = arr.partition.stages
    links = (_host_links(pools) or {}) if arr.offload else {}
    steps = {}
    for k, i in enumerate(arr.order):
        steps[i] = StepModel(cfg, arr.configs[k], pools[i].cluster, gb, seq, tparams)
    fwd, bwd, tails = [], [], []
    for g in range(S):
        s = steps[arr.stage_pool[g]]
        f, b = s.stage_segments(arr.partition, g, None)
        fwd.append(f)
        bwd.append(b)
        tails.append(_tail(s, arr.partition, g, arr.offload, links.get(arr.stage_pool[g])))
    schedule = build_schedule("1f1b", S, arr.microbatches, 1)
    return simulate_schedule(schedule, fwd, bwd, max(arr.p2p_s, default=0.0), tails)
