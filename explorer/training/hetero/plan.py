"""Training one model over pools of different chips (a heterogeneous job).

``plan_hetero(cfg, [Pool("h100-sxm", 512), Pool("a100-80g", 512)], global_batch, seq)``
(also ``plan_training(cfg, pools=[...])``) searches two arrangements and keeps the faster:

- ``pipeline`` (`hetero_pipeline`): one pipeline crossing the pools, each pool holding
  consecutive stages whose layer counts follow its per-layer speed and its memory
  (non-uniform split), data parallelism and tensor parallelism inside each pool;
- ``data`` (`hetero_data`): each pool runs whole replicas with its own best configuration
  and a batch share proportional to its throughput; the gradients are exchanged across
  pools over the slowest link.

The step is the slowest pipeline (or replica) plus what crosses pools. A `HeteroPlan` says
which pool runs which stages or replicas, how many layers and sequences each holds, the
step time and, when every pool has a price, the cost of a step. `compare_hetero` sets a
heterogeneous plan beside the best homogeneous plan on one pool alone (bench/beyond.py).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, get_args

from ...checks import is_int
from ...models import ModelConfig, load
from .. import stacks
from ..config import ParallelConfig
from ..errors import PoolError, TrainingPlanError
from ..memory import MemoryBreakdown
from ..params import TrainingParams
from ..pipeline.partition import StagePartition
from ..pipeline.timeline import Timeline
from ..planning.homogeneous import plan_homogeneous
from ..planning.result import TrainingPlan
from ..planning.space import (
    RECOMPUTE_LADDER,
    SearchSpace,
    cheapest_recompute,
    divisors,
    tp_candidates,
)
from ..simulate import check_seq
from .data import DataArrangement, plan_data
from .pipeline import PipelineArrangement, evaluate_pipeline, pipeline_timeline
from .pools import Pool, check_pools, cross_pool_link

__all__ = [
    "HeteroMode", "HETERO_MODES", "PoolAssignment", "HeteroPlan", "HeteroComparison",
    "plan_hetero", "compare_hetero",
]  # fmt: skip

HeteroMode = Literal["pipeline", "data"]
HETERO_MODES: tuple[str, ...] = get_args(HeteroMode)
_GIB = 2**30
#: pipeline arrangements simulated event by event before the final ranking.
SIMULATE_TOP = 3
#: microbatch sizes and recomputation ladder the pipeline arrangement searches.
PIPELINE_MICROBATCH_SIZES = (1, 2, 4, 8)
#: (the ladder without ``per_layer``: the hetero split prices whole-stage policies only)
PIPELINE_RECOMPUTE = tuple(r for r in RECOMPUTE_LADDER if r != "per_layer")


@dataclass(frozen=True)
class PoolAssignment:
    """What one pool runs.

    Attributes:
        pool: the pool; ``config``: the ParallelConfig its devices run (pipeline: ``pp`` is
            the whole pipeline's stage count, of which the pool holds ``stages``).
        replicas: data-parallel replicas on the pool (pipeline: every replica's ``stages``).
        sequences: sequences per step the pool processes (pipeline: the whole batch passes
            every stage; data: the pool's share).
        stages: the pipeline stages the pool holds (``()`` in data mode: whole replicas);
            ``layers``: layers per stage held (data: the pool's own split).
        busy_s: the pool's own step (data) or its slowest stage per microbatch (pipeline).
        memory: the pool's device needing the most; ``memory_cap_bytes``: its chips' memory.
        offload: ``none`` or what lives in host memory (`terms.offload`).
    """

    pool: Pool
    config: ParallelConfig
    replicas: int
    sequences: int
    stages: tuple[int, ...]
    layers: tuple[int, ...]
    busy_s: float
    memory: MemoryBreakdown
    memory_cap_bytes: float
    offload: str = "none"

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.memory_cap_bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool.label, "chips": self.pool.chips, "config": str(self.config),
            "replicas": self.replicas, "sequences": self.sequences, "stages": list(self.stages),
            "layers": list(self.layers), "busy_s": self.busy_s,
            "memory_bytes": self.memory.total, "memory_cap_bytes": self.memory_cap_bytes,
            "offload": self.offload,
        }  # fmt: skip

    def __str__(self) -> str:
        c = self.config
        where = (
            f"stages {self.stages[0]}-{self.stages[-1]} ({'/'.join(map(str, self.layers))} "
            f"layers) on dp{c.dp} x tp{c.tp}{' +sp' if c.sp else ''}, mb{c.microbatch_size}, "
            f"recompute {c.recompute}" if self.stages else f"replicas {c}"
        )  # fmt: skip
        return (
            f"{self.pool}: {where}, {self.sequences} sequences, memory "
            f"{self.memory.total / _GIB:.1f}/{self.memory_cap_bytes / _GIB:.0f} GiB"
            + (f", {self.offload} states in host memory" if self.offload != "none" else "")
        )


@dataclass(frozen=True)
class HeteroPlan:
    """The result of `plan_hetero`: which pool runs what, and the step it gives.

    Attributes:
        mode: ``pipeline`` or ``data`` (module docstring).
        assignments: one per pool, in the order of ``pools``.
        step_time_s: the job's step; ``cross_pool_s``: the part of it spent crossing pools
            (data: the gradient exchange; pipeline: the transfers at pool boundaries on the
            critical path, one forward and one backward per boundary as `estimate` counts
            them; the others overlap compute).
        partition, stage_pool: the pipeline's stage split and each stage's pool index
            (pipeline mode; data mode: None and ``()``).
        alternatives: the runners-up, one line each with why they lost.
        timeline: the chosen pipeline simulated event by event (pipeline mode): its step is
            ``step_time_s``; ``estimate_s``: the closed form the search ranked with.
        pool_plans: each pool's own `TrainingPlan` (data mode; ``()`` in pipeline mode).
    """

    model: str
    pools: tuple[Pool, ...]
    global_batch: int
    seq: int
    mode: HeteroMode
    assignments: tuple[PoolAssignment, ...]
    step_time_s: float
    cross_pool_s: float
    partition: StagePartition | None
    stage_pool: tuple[int, ...]
    alternatives: tuple[str, ...]
    searched: int
    search_time_s: float = field(compare=False, default=0.0)
    timeline: Timeline | None = field(compare=False, default=None, repr=False)
    model_config: ModelConfig | None = field(compare=False, default=None, repr=False)
    pool_plans: tuple[TrainingPlan, ...] = field(compare=False, default=(), repr=False)
    estimate_s: float | None = None

    @property
    def devices(self) -> int:
        return sum(p.chips for p in self.pools)

    @property
    def tokens_per_s(self) -> float:
        return self.global_batch * self.seq / self.step_time_s

    @property
    def fits(self) -> bool:
        return all(a.fits for a in self.assignments)

    @property
    def cost_per_step(self) -> float | None:
        """Price of one step (every pool's chips for ``step_time_s``), or None when a pool
        has no price."""
        rates = [p.cost_per_s() for p in self.pools]
        if any(r is None for r in rates):
            return None
        return sum(rates) * self.step_time_s

    def pool_of_stage(self, g: int) -> Pool:
        """The pool holding pipeline stage ``g`` (pipeline mode)."""
        if not self.stage_pool:
            raise TrainingPlanError(
                "this plan is data-parallel across pools (mode 'data'): each pool holds whole "
                "replicas, no pipeline stage crosses pools; read .assignments instead"
            )
        if not 0 <= g < len(self.stage_pool):
            raise TrainingPlanError(
                f"stage {g!r}: the pipeline has stages 0..{len(self.stage_pool) - 1}"
            )
        return self.pools[self.stage_pool[g]]

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "pools": [repr(p) for p in self.pools],
            "global_batch": self.global_batch, "seq": self.seq, "mode": self.mode,
            "assignments": [a.as_dict() for a in self.assignments],
            "step_time_s": self.step_time_s, "cross_pool_s": self.cross_pool_s,
            "partition": str(self.partition) if self.partition else None,
            "stage_pool": list(self.stage_pool), "cost_per_step": self.cost_per_step,
            "alternatives": list(self.alternatives), "searched": self.searched,
            "search_time_s": self.search_time_s, "estimate_s": self.estimate_s,
        }  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def report(self) -> str:
        """The arrangement, per pool, the step and the runners-up, as text."""
        cost = self.cost_per_step
        lines = [
            f"{self.model} on {' + '.join(map(str, self.pools))}, global batch "
            f"{self.global_batch}, sequence {self.seq}",
            f"mode: {self.mode}; step {self.step_time_s:.3f} s ({self.tokens_per_s:,.0f} "
            f"tokens/s), crossing pools {self.cross_pool_s:.3g} s"
            + (f", cost {cost:.4g} per step" if cost is not None else ""),
        ]
        if len(self.pools) > 1:
            link = cross_pool_link(self.pools)
            lines.append(
                f"  between pools: {link.bandwidth_bytes_per_s / 1e9:g} GB/s per chip, "
                f"{link.latency_s * 1e6:g} us ({link.source})"
            )
        if self.partition is not None:
            lines.append(f"  stages: {self.partition}")
        lines += [f"  {a}" for a in self.assignments]
        lines.append(f"alternatives ({self.searched} arrangements in {self.search_time_s:.2f} s):")
        lines += [f"  {a}" for a in self.alternatives] or ["  none"]
        return "\n".join(lines)

    def __str__(self) -> str:
        pools = " + ".join(map(str, self.pools))
        return f"HeteroPlan({self.model} on {pools}, {self.mode}): step {self.step_time_s:.3f} s"


# --- building plans from arrangements ----------------------------------------------------
def _from_pipeline(arr: PipelineArrangement, pools, gb) -> tuple[PoolAssignment, ...]:
    out = {}
    for k, i in enumerate(arr.order):
        stages = tuple(g for g, p in enumerate(arr.stage_pool) if p == i)
        out[i] = PoolAssignment(
            pool=pools[i], config=arr.configs[k].replace(num_microbatches=arr.microbatches),
            replicas=arr.dp, sequences=gb, stages=stages,
            layers=tuple(arr.partition.layers(g) for g in stages),
            busy_s=max(arr.stage_s[g] for g in stages), memory=arr.memory[k],
            memory_cap_bytes=arr.caps[k], offload="optimizer" if arr.offload else "none",
        )  # fmt: skip
    return tuple(out[i] for i in range(len(pools)))


def _from_data(arr: DataArrangement, pools) -> tuple[PoolAssignment, ...]:
    out = []
    for pool, b, plan in zip(pools, arr.batches, arr.plans, strict=True):
        s = plan.sim
        out.append(
            PoolAssignment(
                pool=pool, config=plan.config, replicas=plan.config.dp, sequences=b, stages=(),
                layers=s.partition.layer_counts(), busy_s=s.step_time_s, memory=s.memory,
                memory_cap_bytes=s.memory_cap_bytes,
                offload=plan.offload.kind if plan.offload is not None else "none",
            )
        )  # fmt: skip
    return tuple(out)


def _orders(pools: tuple[Pool, ...]) -> list[tuple[int, ...]]:
    """Pipeline orders tried: the pools as given and reversed, and (three pools or more)
    by chip speed both ways (the first stage keeps the embedding and the most microbatches
    in flight; the last, the head's logits). Every order of P pools would be P! searches.

    >>> a, b = Pool("a100-80g", 8), Pool("h100-sxm", 8)
    >>> _orders((a, b, Pool("a100-40g", 8)))
    [(0, 1, 2), (2, 1, 0), (1, 0, 2), (2, 0, 1)]
    """
    ident = tuple(range(len(pools)))
    out = [ident, ident[::-1]]
    if len(pools) > 2:
        fast = tuple(sorted(ident, key=lambda i: (-pools[i].peak_flops, i)))
        out += [fast, fast[::-1]]
    return list(dict.fromkeys(out))


#: Tensor-parallel tuples (one degree per pool) the pipeline search may walk for one order
#: and data-parallel degree; each is then timed at every microbatch size and recomputation.
MAX_PIPELINE_STRUCTURES = 20_000


def _tuple_counts(stages: list[list[int]], layers: int) -> list[list[int]]:
    """``counts[i][s]``: the choices for pools ``i..`` whose stages sum to at most ``layers -
    s`` (every pool holds at least one stage per layer it runs, so a tuple whose stages
    outnumber the layers is never a pipeline)."""
    n = len(stages)
    counts = [[0] * (layers + 1) for _ in range(n + 1)]
    counts[n] = [1] * (layers + 1)
    for i in range(n - 1, -1, -1):
        for used in range(layers + 1):
            counts[i][used] = sum(counts[i + 1][used + k] for k in stages[i]
                                  if used + k <= layers)  # fmt: skip
    return counts


def _check_structure_count(stages: list[list[int]], layers: int, dp: int) -> None:
    """Count the tuples before walking them (a product over 1000 pools never ends)."""
    n = _tuple_counts(stages, layers)[0][0]
    if n > MAX_PIPELINE_STRUCTURES:
        raise TrainingPlanError(
            f"{len(stages)} pools at dp={dp} give {n:,} tensor-parallel layouts whose stages fit "
            f"the model's {layers} layers, more than the {MAX_PIPELINE_STRUCTURES:,} the "
            "pipeline search walks; merge pools of one chip kind, or restrict each pool's "
            "tensor parallelism (space=SearchSpace(tp=(...)))"
        )


def _tp_tuples(per_pool: list, stages: list[list[int]], layers: int):
    """The tensor-parallel tuples (one per pool) whose stages sum to at most ``layers``,
    in product order, cut as soon as a prefix cannot fit."""
    counts = _tuple_counts(stages, layers)

    def walk(i: int, used: int, prefix: tuple):
        if i == len(per_pool):
            yield prefix
            return
        for t, k in zip(per_pool[i], stages[i], strict=True):
            if used + k <= layers and counts[i + 1][used + k]:
                yield from walk(i + 1, used + k, prefix + (t,))

    yield from walk(0, 0, ())


def _pools_text(pools) -> str:
    """``8 x a + 8 x b``; past six pools, counted by hardware (a message stays readable)."""
    if len(pools) <= 6:
        return " + ".join(map(str, pools))
    kinds: dict[str, int] = {}
    for p in pools:
        kinds[p.cluster.name] = kinds.get(p.cluster.name, 0) + p.chips
    return f"{len(pools)} pools (" + ", ".join(f"{c} x {k}" for k, c in kinds.items()) + ")"


def _pipeline_search(
    cfg, pools, gb, seq, tparams, offload: bool = False
) -> tuple[list[PipelineArrangement], int]:
    """Every structure (order, dp, tp per pool, microbatch size) with the cheapest
    recomputation that fits; with ``offload``, a structure that fits no rung on the devices
    alone is tried again with the optimizer states in host memory."""
    found: list[PipelineArrangement] = []
    searched = 0
    g = math.gcd(*(p.chips for p in pools))
    for order in _orders(pools):
        for dp in divisors(g):
            if gb % dp:
                continue
            per_pool = []
            for i in order:
                c = pools[i]
                per_pool.append(tp_candidates(cfg, c.cluster.chips_per_node, c.chips // dp))
            stages = [[pools[i].chips // (dp * t) for t in ts]
                      for i, ts in zip(order, per_pool, strict=True)]  # fmt: skip
            _check_structure_count(stages, cfg.num_layers, dp)
            for tps in _tp_tuples(per_pool, stages, cfg.num_layers):
                for mbs in PIPELINE_MICROBATCH_SIZES:
                    if gb % (dp * mbs):
                        continue
                    for off in (False, True) if offload else (False,):
                        at = partial(evaluate_pipeline, cfg, pools, order, dp, tps, mbs,
                                     gb=gb, seq=seq, tparams=tparams, offload=off)  # fmt: skip
                        tried = cheapest_recompute(PIPELINE_RECOMPUTE, at, fits=lambda a: a.fits)
                        if tried and tried[-1][1].fits:  # the cheapest recomputation that fits
                            searched += PIPELINE_RECOMPUTE.index(tried[-1][0]) + 1
                            found.append(tried[-1][1])
                            break
                        searched += len(PIPELINE_RECOMPUTE)
    found.sort(key=lambda a: a.step_time_s)
    return found, searched


def plan_hetero(
    cfg: ModelConfig | str, pools, global_batch: int, seq: int | None = None,
    params: TrainingParams | None = None, space: SearchSpace | None = None,
    modes: tuple[str, ...] = HETERO_MODES, offload: bool = False,
) -> HeteroPlan:  # fmt: skip
    """The fastest arrangement of ``cfg`` over ``pools`` that fits in memory.

    Args:
        pools: a list of `Pool` (distinct labels).
        global_batch, seq: sequences per step and their length.
        params: the training cost model; ``space``: restricts each pool's own search in
            ``data`` mode; ``modes``: the arrangements searched (both by default).
        offload: a structure that fits only with host offload of the optimizer states uses
            it (`terms.offload`; pipeline: per structure after the recomputation ladder;
            data: `plan_training`'s ``offload``); ``assignments[i].offload`` says so.

    Raises `PoolError` for bad pools and `TrainingPlanError` when no arrangement fits,
    naming why each failed and what would help.

    >>> import explorer as ex
    >>> plan = ex.plan_hetero("gpt2", [ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8)],
    ...                       global_batch=64, seq=512)
    >>> plan.fits, sum(a.pool.chips for a in plan.assignments)
    (True, 16)
    """
    t0 = time.perf_counter()
    pools = check_pools(pools)
    cfg = load(cfg) if isinstance(cfg, str) else cfg
    seq = cfg.max_seq_len if seq is None else seq
    tparams = stacks.resolve(params, None, "plan_hetero")  # the default stack's
    _check(cfg, global_batch, seq, tparams, modes)
    for p in pools:
        if cfg.dtype not in p.cluster.chip.dtypes:
            raise PoolError(
                f"pool {p}: {p.cluster.chip.name} has no peak rate for {cfg.name!r}'s dtype "
                f"{cfg.dtype!r} (it has {', '.join(p.cluster.chip.dtypes)}); train in one of "
                "those (cfg.replace(dtype=...)) or leave the pool out"
            )
    candidates: list[tuple[float, str, object]] = []
    why: list[str] = []
    searched = 0
    timelines = {}
    if "pipeline" in modes:
        found, n = _pipeline_search(cfg, pools, global_batch, seq, tparams, offload)
        searched += n
        for a in found[:SIMULATE_TOP]:  # re-ranked by their event simulation, as plan_training
            timelines[id(a)] = pipeline_timeline(a, cfg, pools, global_batch, seq, tparams)
            candidates.append((timelines[id(a)].step_time_s, "pipeline", a))
        if not found and len(pools) > cfg.num_layers:
            why.append(
                f"pipeline across pools: {len(pools)} pools need at least {len(pools)} "
                f"stages, more than {cfg.name!r}'s {cfg.num_layers} layers"
            )
        elif not found:
            why.append(
                f"pipeline across pools: none of {n} arrangements fits (every stage needs a "
                "layer within its pool's memory)"
            )
    # one pool in data mode is plan_training on its chips (no exchange across pools): a job
    # of one pool is never slower than the same job given as devices= (it was: 11% on
    # gpt3-1.3b over 16 A100, pipeline mode alone took ZeRO-1)
    if "data" in modes:
        best, fails = plan_data(cfg, pools, global_batch, seq, tparams, space, offload)
        searched += len(fails) + (best is not None)
        if best is not None:
            candidates.append((best.step_time_s, "data", best))
        else:
            why.append("data-parallel across pools: " + "; ".join(fails[:2]))
    if not candidates:
        raise TrainingPlanError(
            f"{cfg.name!r} fits no arrangement over {_pools_text(pools)} with global "
            f"batch {global_batch}: {'; '.join(why)}. Add chips, use pools with more memory, "
            "a global batch with more divisors, or offload=True (host offload of optimizer "
            "states in each pool's replicas)"
        )
    candidates.sort(key=lambda c: c[0])
    step, mode, arr = candidates[0]
    alts = tuple(
        f"{m}: step {t:.3f} s, slower by {(t - step) / step:.1%}" + _describe(a, pools)
        for t, m, a in candidates[1:]
    )
    common = dict(
        model=cfg.name, pools=pools, global_batch=global_batch, seq=seq, mode=mode,
        step_time_s=step, alternatives=alts, searched=searched, model_config=cfg,
    )  # fmt: skip
    if mode == "pipeline":
        return HeteroPlan(
            **common, assignments=_from_pipeline(arr, pools, global_batch),
            cross_pool_s=_cross_pipeline_s(arr), partition=arr.partition,
            stage_pool=arr.stage_pool, timeline=timelines[id(arr)],
            search_time_s=time.perf_counter() - t0, estimate_s=arr.step_time_s,
        )  # fmt: skip
    return HeteroPlan(
        **common, assignments=_from_data(arr, pools), cross_pool_s=arr.allreduce_s,
        partition=None, stage_pool=(), search_time_s=time.perf_counter() - t0,
        pool_plans=arr.plans,
    )  # fmt: skip


def _cross_pipeline_s(arr: PipelineArrangement) -> float:
    cross = [
        t for g, t in enumerate(arr.p2p_s) if arr.stage_pool[g] != arr.stage_pool[g + 1]
    ]  # fmt: skip
    return 2 * sum(cross)


def _describe(arr, pools) -> str:
    if isinstance(arr, PipelineArrangement):
        per = ", ".join(
            f"{pools[i].label} tp{t} x {n} stages"
            for i, t, n in zip(arr.order, arr.tps, arr.pps, strict=True)
        )  # fmt: skip
        c = arr.configs[0]
        off = ", optimizer offloaded" if arr.offload else ""
        return (
            f" (dp{arr.dp}: {per}; mb{c.microbatch_size}, recompute {c.recompute}{off}; "
            f"{arr.partition})"
        )
    return " (" + ", ".join(
        f"{p.label} {b} seq: {pl.config}" for p, b, pl in zip(pools, arr.batches, arr.plans, strict=True)
    ) + ")"  # fmt: skip


def _check(cfg, gb, seq, tparams, modes) -> None:
    if not is_int(gb, minimum=1):
        raise TrainingPlanError(f"global_batch={gb!r}; expected an int >= 1")
    check_seq(seq)
    if not isinstance(tparams, TrainingParams):
        raise TrainingPlanError(f"params={tparams!r}; expected a TrainingParams or None")
    if isinstance(modes, str) or not modes or any(m not in HETERO_MODES for m in modes):
        raise TrainingPlanError(
            f"modes={modes!r}; expected a non-empty tuple of {', '.join(HETERO_MODES)}"
        )
    if cfg.arch == "mlp":
        raise TrainingPlanError(
            f"model {cfg.name!r} is an MLP; plan_hetero models transformer training"
        )


# --- hetero vs homogeneous ----------------------------------------------------------------
@dataclass(frozen=True)
class HeteroComparison:
    """A heterogeneous plan beside the best homogeneous plan on one of its pools alone.

    ``speedup`` = homogeneous step / heterogeneous step; ``cost_ratio`` = heterogeneous
    cost per step / homogeneous (None without prices).
    """

    hetero: HeteroPlan
    homogeneous: TrainingPlan
    reference: Pool

    @property
    def speedup(self) -> float:
        return self.homogeneous.sim.step_time_s / self.hetero.step_time_s

    @property
    def homogeneous_cost_per_step(self) -> float | None:
        rate = self.reference.cost_per_s()
        return None if rate is None else rate * self.homogeneous.sim.step_time_s

    @property
    def cost_ratio(self) -> float | None:
        a, b = self.hetero.cost_per_step, self.homogeneous_cost_per_step
        return None if a is None or b is None or b == 0 else a / b

    def rows(self) -> list[dict[str, object]]:
        h, o = self.hetero, self.homogeneous
        return [
            {"plan": f"{' + '.join(map(str, h.pools))} ({h.mode})", "step_time_s": h.step_time_s,
             "cost_per_step": h.cost_per_step},
            {"plan": f"{self.reference} alone ({o.config})", "step_time_s": o.sim.step_time_s,
             "cost_per_step": self.homogeneous_cost_per_step},
        ]  # fmt: skip

    def table(self) -> str:
        """Both plans' step time and cost per step, the speedup and the cost ratio."""

        def money(x):
            return "n/a" if x is None else f"{x:.4g}"

        rows = self.rows()
        w = max(len(str(r["plan"])) for r in rows)
        lines = [f"{'plan':{w}s} {'step s':>9s} {'cost/step':>10s}"]
        for r in rows:
            lines.append(
                f"{r['plan']:{w}s} {r['step_time_s']:9.3f} {money(r['cost_per_step']):>10s}"
            )
        ratio = self.cost_ratio
        lines.append(
            f"speedup {self.speedup:.2f}x"
            + (f", cost ratio {ratio:.2f}" if ratio is not None else ", cost: no prices")
        )
        return "\n".join(lines)


def compare_hetero(
    cfg: ModelConfig | str, pools, global_batch: int, seq: int | None = None,
    params: TrainingParams | None = None, reference: int = 0,
) -> HeteroComparison:  # fmt: skip
    """`plan_hetero` over ``pools`` vs `plan_training` on ``pools[reference]`` alone (same
    global batch and sequence): the bench line "a 50/50 H100/A100 job vs the H100 half".

    >>> import explorer as ex
    >>> c = ex.compare_hetero("gpt2", [ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8)],
    ...                       global_batch=64, seq=512)
    >>> c.speedup > 1
    True
    """
    pools = check_pools(pools)
    if not is_int(reference, minimum=0, maximum=len(pools) - 1):
        raise PoolError(f"reference={reference!r}; expected a pool index 0..{len(pools) - 1}")
    cfg = load(cfg) if isinstance(cfg, str) else cfg
    hetero = plan_hetero(cfg, pools, global_batch, seq, params)
    ref = pools[reference]
    homo = plan_homogeneous(
        cfg, devices=ref.chips, hardware=ref.cluster, global_batch=global_batch,
        seq=hetero.seq, params=params,
    )  # fmt: skip
    return HeteroComparison(hetero, homo, ref)
