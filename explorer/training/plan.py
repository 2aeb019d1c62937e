"""``plan_training``: the fastest ParallelConfig that fits, and why the others lost.

The space: every factorisation of the device count into dp x tp x pp x cp (tp among the
divisors of the head count up to a node's chips, every stage with a layer), microbatch
sizes, schedules (GPipe, 1F1B, interleaved with v chunks), ZeRO stages 0-3, sequence
parallelism, expert parallelism (MoE), context parallelism with its key/value exchange
(all-gather, ring) and recomputation. Each configuration is ranked by
`estimate`; the best few are then simulated event by event (`simulate`) and re-ranked.

Two rules keep the space small without losing the optimum of this cost model:

- recomputation: time grows none < selective < per-layer < full while memory shrinks,
  so per structure and ZeRO stage we take ``none`` if it fits, else ``per_layer`` with the
  fewest fully recomputed layers that fit (0 layers is ``selective``, all is ``full``);
- context parallelism is searched only for long sequences: cp = 2, 4, 8, ... while each
  device keeps at least ``SearchSpace.cp_min_positions`` positions (default 8192, the
  sequence Llama 3 pretrained at without CP) and ``2 cp`` divides the sequence; below
  ``2 x 8192`` only cp = 1 (`terms.cp.needs_cp`). Shorter chunks leave small attention
  matmuls against a key/value exchange per layer, and the space would grow ~5x for
  nothing at the usual 2-8K sequences;
- sequence parallelism costs no time here (its collectives are found by the operator
  search either way) and saves memory, so it is on whenever tp > 1 unless the space
  says otherwise;
- dominated options are skipped when the space also holds what dominates them: GPipe has
  1F1B's bubble but keeps all m microbatches in flight (1F1B: at most p), and ZeRO-0's
  all-reduce moves the bytes of ZeRO-1's reduce-scatter + all-gather while ZeRO-1 keeps
  1/dp of the optimizer states and updates 1/dp of the weights.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..hardware import Cluster, Mesh, resolve
from ..ir import Graph
from ..models import ModelConfig, build, load
from ..search.errors import SearchError
from . import pareto as _pareto
from . import search_space
from .config import (
    ParallelConfig,
    ParallelConfigError,
)
from .errors import TrainingPlanError
from .search_space import SearchSpace, configurations, divisors
from .simulate import SimResult, TrainingParams, check_seq, estimate, simulate
from .terms import cp as cp_terms

if TYPE_CHECKING:  # hetero imports this module
    from .hetero import HeteroPlan
    from .pools import Pool

__all__ = [
    "SearchSpace", "Candidate", "TrainingPlan", "TrainingPlanError", "plan_training",
    "ProgressFn", "stage_of_scope",
]  # fmt: skip

# ``progress(done, total)``: called as the work advances (views draw a progress bar).
ProgressFn = Callable[[int, int], None]

_GIB = 2**30
# Step times closer than this fraction are a tie (floating-point noise, not a cause).
_TIE_FRACTION = 1e-9


#: plan_training's default time limit (seconds); the largest searches here take ~10 s.
DEFAULT_TIME_LIMIT_S = 300.0


@dataclass(frozen=True)
class Candidate:
    """A configuration that lost, and why.

    ``reason`` is "slower by X% (+Y s): where" or "over memory by Z GiB".
    """

    config: ParallelConfig
    step_time_s: float
    tflops_per_device: float
    memory_bytes: float
    fits: bool
    simulated: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "config": self.config.as_dict(), "config_text": str(self.config),
            "step_time_s": self.step_time_s, "tflops_per_device": self.tflops_per_device,
            "memory_bytes": self.memory_bytes, "fits": self.fits,
            "simulated": self.simulated, "reason": self.reason,
        }  # fmt: skip

    def __str__(self) -> str:
        return f"{self.config}: {self.reason}"


@dataclass(frozen=True)
class TrainingPlan:
    """The result of `plan_training`.

    Attributes:
        config: the chosen ParallelConfig; ``sim``: its simulated step (SimResult).
        alternatives: the next best that fit, ranked, each with why it lost.
        over_memory: the fastest configurations that did not fit, with by how much.
        searched: configurations estimated; ``search_time_s``: wall time of the search.
        stopped_early: None, or where ``time_limit_s`` stopped the search (the plan is then
            the best of the configurations estimated by then).
        model_config: the ModelConfig planned (not compared, not serialised; lets
            ``sharding_plan`` rebuild the graph of a config that is not in the registry).
        pareto: with ``plan_training(..., objectives=...)``, the `ParetoFront` of the fitting
            configurations (``config`` is its fastest point); None otherwise.
    """

    model: str
    hardware: str
    devices: int
    global_batch: int
    seq: int
    config: ParallelConfig
    sim: SimResult
    alternatives: tuple[Candidate, ...]
    over_memory: tuple[Candidate, ...]
    searched: int
    search_time_s: float = field(compare=False, default=0.0)
    model_config: ModelConfig | None = field(compare=False, default=None, repr=False)
    stopped_early: str | None = field(compare=False, default=None)
    pareto: _pareto.ParetoFront | None = field(compare=False, default=None, repr=False)
    # host offload (terms/offload.py, issue 18): set when nothing fits on the devices alone
    offload: object | None = field(compare=False, default=None, repr=False)

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "hardware": self.hardware, "devices": self.devices,
            "global_batch": self.global_batch, "seq": self.seq,
            "config": self.config.as_dict(), "config_text": str(self.config),
            "sim": self.sim.as_dict(),
            "alternatives": [a.as_dict() for a in self.alternatives],
            "over_memory": [a.as_dict() for a in self.over_memory],
            "searched": self.searched, "search_time_s": self.search_time_s,
            **({"pareto": self.pareto.as_dict()} if self.pareto is not None else {}),
        }  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def report(self) -> str:
        """The chosen plan, the alternatives and the memory breakdown, as text."""
        s = self.sim
        lines = [
            f"{self.model} on {self.devices} x {self.hardware}, global batch "
            f"{self.global_batch}, sequence {self.seq}",
            f"chosen: {self.config}",
            f"  step {s.step_time_s:.3f} s, {s.tokens_per_s:,.0f} tokens/s, "
            f"{s.tflops_per_device:.1f} TFLOP/s per device (MFU {s.mfu:.1%}), "
            f"bubble {s.bubble_fraction:.1%}",
            f"  stages: {s.partition} ({s.partition_choice})",
            f"  layer strategies (searched): {s.strategies}",
            f"alternatives ({self.searched} configurations searched in "
            f"{self.search_time_s:.2f} s):",
        ]
        lines += [f"  {a}" for a in self.alternatives] or ["  none"]
        if self.over_memory:
            lines.append("faster but over memory:")
            lines += [f"  {a}" for a in self.over_memory]
        if self.offload is not None:
            lines.append(f"  {self.offload}")
        lines.append(s.memory.table(s.memory_cap_bytes))
        if self.pareto is not None:
            lines.append(str(self.pareto) + " (plan.pareto.table() lists the front)")
        return "\n".join(lines)

    def __str__(self) -> str:
        early = f" [{self.stopped_early}]" if self.stopped_early else ""
        return f"TrainingPlan({self.model}, {self.devices} devices): {self.sim}{early}"

    # --- links to the operator-level views (issue 7) ------------------------------------
    def stage_of(self, name: str) -> int:
        """The pipeline stage (0 .. pp * virtual_stages - 1) holding a scope such as
        ``"embed"``, ``"layers.7"`` or ``"head"``, or a node name inside one
        (``"layers.7.mlp.fc1"``). Stage g runs on pipeline device ``g % pp``.

        >>> plan = plan_training("gpt2", devices=8, global_batch=64, seq=512,
        ...                      space=SearchSpace(tp=(1,), pp=(2,)))
        >>> plan.stage_of("embed"), plan.stage_of("layers.11.mlp.fc1")
        (0, 1)
        """
        return stage_of_scope(self.sim.partition, name)

    def stage_map(self, graph: Graph) -> dict[str, int]:
        """``{node: pipeline stage}`` for every node of ``graph`` that belongs to a layer,
        the embedding or the head (graph inputs are left out).

        ``graph`` may be built with fewer layers than the model (drawing a 96-layer model
        as 4 layers): layer k of an n-layer graph then stands for model layers
        ``k*L/n .. (k+1)*L/n - 1`` and takes the stage of the first of them.
        """
        n = len(_graph_layers(graph)) or 1
        total = self.sim.partition.num_layers
        out = {}
        for node in graph.nodes:
            scope = node.scope
            if not scope:
                continue
            head, _, rest = scope.partition(".")
            if head == "layers" and n != total:
                k = int(rest.split(".")[0])
                scope = f"layers.{k * total // n}"
            out[node.name] = stage_of_scope(self.sim.partition, scope)
        return out

    def sharding_plan(
        self, layers: int = 2, method: str = "dynamic_programming", params=None
    ):  # -> ShardingPlan
        """The operator-level plan behind this configuration: ``explorer.search`` on a
        ``layers``-layer graph of the model (a repeated block; layers are identical) with
        one global microbatch (``dp * microbatch_size`` sequences; with context parallelism,
        the ``seq / cp`` positions of one rank) on a ``dp x tp`` mesh.

        Cheap on purpose (two layers and the dynamic programme: ~0.1 s for a 1.3B model
        on 32 x 2), so the widgets can show and link it after each re-plan.
        """
        from ..search.planner import search

        cfg = self.model_config or load(self.model)
        c = self.config
        graph = build(
            cfg.replace(num_layers=min(layers, cfg.num_layers)),
            batch=c.dp * c.microbatch_size, seq=self.seq // c.cp,
        )  # fmt: skip
        mesh = Mesh({"dp": c.dp, "tp": c.tp}, hardware=resolve(self.hardware))
        return search(graph, mesh, method=method, params=params)


def _graph_layers(graph: Graph) -> set[str]:
    return {n.scope.split(".")[1] for n in graph.nodes if n.scope.startswith("layers.")}


def stage_of_scope(partition, name: str) -> int:
    """The stage of ``partition`` (a StagePartition) holding scope or node ``name``.

    >>> from explorer.training.pipeline.partition import uniform_partition
    >>> p = uniform_partition(8, 4)
    >>> stage_of_scope(p, "embed.wte"), stage_of_scope(p, "layers.5"), stage_of_scope(p, "head")
    (0, 2, 3)
    """
    head, _, rest = name.partition(".")
    L = partition.num_layers
    if head == "embed":
        part = 0
    elif head == "head":
        part = L + 1
    elif head == "layers" and rest.split(".")[0].isdigit():
        i = int(rest.split(".")[0])
        if i >= L:
            raise TrainingPlanError(
                f"{name!r}: layer {i} but the model has {L} layers (0..{L - 1})"
            )
        part = i + 1
    else:
        raise TrainingPlanError(
            f"{name!r} is not in a pipeline stage; expected 'embed...', 'layers.<i>...' or "
            "'head...' (graph inputs such as 'tokens' belong to no stage)"
        )
    for g in range(partition.stages):
        if partition.bounds[g] <= part < partition.bounds[g + 1]:
            return g
    raise TrainingPlanError(f"part {part} outside {partition.bounds}")  # bounds cover all parts


def _normalize(r: SimResult) -> SimResult:
    """per_layer with 0 fully recomputed layers is selective; with all of them, full."""
    c = r.config
    if c.recompute != "per_layer":
        return r
    k = c.recompute_num_layers or 0
    most = max(r.partition.layer_counts())
    if k == 0:
        c = c.replace(recompute="selective", recompute_num_layers=None)
    elif k >= most:
        c = c.replace(recompute="full", recompute_num_layers=None)
    return r if c is r.config else _replace_config(r, c)


def _replace_config(r: SimResult, c: ParallelConfig) -> SimResult:
    from dataclasses import replace

    return replace(r, config=c)


def _rank(r: SimResult) -> tuple[float, float]:
    """Faster first; among equal times (to the nanosecond), less memory first."""
    return (round(r.step_time_s / _TIE_FRACTION) * _TIE_FRACTION, r.memory.total)


def _why(r: SimResult, best: SimResult) -> str:
    if not r.fits:
        return (
            f"over memory by {r.over_memory_bytes / _GIB:.2f} GiB "
            f"({r.memory.total / _GIB:.1f} of {r.memory_cap_bytes / _GIB:.0f} GiB, stage "
            f"{r.memory.stage}: largest row {max(r.memory.rows(), key=lambda kv: kv[1])[0]})"
        )
    dt = r.step_time_s - best.step_time_s
    tiny = _TIE_FRACTION * best.step_time_s
    if dt <= tiny:
        return (
            f"as fast (within {_TIE_FRACTION:.0e} of the step); ranked after it on "
            f"memory: {r.memory.total / _GIB:.1f} vs {best.memory.total / _GIB:.1f} GiB"
        )
    mine, theirs = dict(r.time_by_kind), dict(best.time_by_kind)
    deltas = sorted(((mine.get(k, 0) - theirs.get(k, 0), k) for k in mine), reverse=True)
    where = ", ".join(f"{k} +{d:.3g} s" for d, k in deltas[:2] if d > tiny) or "no single cause"
    return f"slower by {dt / best.step_time_s:.1%} (+{dt:.3g} s): {where}"


def _candidate(r: SimResult, best: SimResult, simulated: bool) -> Candidate:
    return Candidate(
        config=r.config, step_time_s=r.step_time_s, tflops_per_device=r.tflops_per_device,
        memory_bytes=r.memory.total, fits=r.fits, simulated=simulated, reason=_why(r, best),
    )  # fmt: skip


def plan_training(
    cfg: ModelConfig | str, devices: int | None = None, hardware: str | Cluster = "a100-80g",
    global_batch: int = 1, seq: int | None = None, params: TrainingParams | None = None,
    space: SearchSpace | None = None, top_k: int = 5, simulate_top: int = 3,
    progress: ProgressFn | None = None, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    objectives: tuple[str, ...] | None = None, pools: Sequence[Pool] | None = None,
    offload: bool = False,
) -> TrainingPlan | HeteroPlan:  # fmt: skip
    """The fastest configuration of ``cfg`` on ``devices`` chips that fits in memory.

    Args:
        devices: chips in the job (all used: dp * tp * pp * cp == devices).
        global_batch, seq: sequences per step and their length.
        params: the training cost model (`TrainingParams`).
        space: restrict the search (`SearchSpace`), e.g. to a published configuration.
        top_k: alternatives kept in the plan; ``simulate_top``: how many of the best
            estimates are simulated event by event before the final ranking.
        progress: ``progress(done, total)`` after each (tp, pp, dp) structure estimated
            and each simulation (total = structures + simulations; the last call has
            done == total).
        time_limit_s: when the estimates run past it, the structures not yet estimated are
            skipped and the plan is the best of those estimated, with ``stopped_early`` saying
            how far the search got (the simulations of the best few still run).
        objectives: names among ``"step_time"``, ``"memory"``, ``"communication"``,
            ``"cost"`` (needs a chip price): ``plan.pareto`` is then the Pareto front of the
            fitting configurations estimated (`explorer.training.pareto`); ``config`` stays
            the fastest.
        pools: a list of `Pool` (chips of different kinds in one job): the plan is then
            `explorer.training.hetero.plan_hetero`'s `HeteroPlan` (``devices`` and
            ``hardware`` come from the pools and must be left out).
        offload: when no configuration fits on the devices alone, plan with host offload of
            the optimizer states (then of the parameters too; `offload_plan.offload_fallback`);
            the plan then has ``offload`` set (`terms.offload.OffloadTerms`: bytes moved, time
            added). False: the no-fit error names the offload plan that would fit.

    Raises `TrainingPlanError` when no configuration is valid (device count, batch) or
    none fits, naming the smallest memory any needs and the device count that would fit.

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, hardware="a100-80g", global_batch=64,
    ...                         seq=512)
    >>> plan.sim.fits, plan.config.devices
    (True, 8)
    """
    if pools is not None:  # a job over pools of different chips (issue 18): hetero.py
        from .hetero import plan_hetero

        if devices is not None or hardware != "a100-80g":
            raise TrainingPlanError(
                "plan_training(pools=...) takes its chips and hardware from the pools; leave "
                "devices and hardware out"
            )
        if objectives is not None:  # not silently dropped: the front is per cluster today
            raise _pareto.ParetoError(
                f"objectives={objectives!r} with pools=...: the Pareto front is computed for "
                "one cluster only; plan each pool alone with objectives=..., or leave "
                "objectives out (the pooled plan is the fastest)"
            )
        return plan_hetero(
            cfg, pools, global_batch, seq, params=params, space=space, offload=offload
        )
    if devices is None:
        raise TrainingPlanError(
            "plan_training needs devices=<chips in the job> (or pools=[Pool(...), ...])"
        )
    t0 = time.perf_counter()
    cfg = load(cfg) if isinstance(cfg, str) else cfg
    cluster = resolve(hardware)
    seq = cfg.max_seq_len if seq is None else seq
    tparams = params or TrainingParams()
    space = space or SearchSpace()
    _check_inputs(cfg, devices, cluster, global_batch, seq, tparams, space, top_k, simulate_top)
    _check_time_limit(time_limit_s)
    if objectives is not None:
        objectives = _pareto.check_objectives(
            objectives, cluster.price_per_chip_hour, f"hardware {cluster.name!r}"
        )
    structures, why_not = search_space.structures(cfg, devices, cluster, global_batch, seq, space)
    if not structures:
        why = "; ".join(why_not[:4]) or "tp must divide the heads and the device count"
        raise TrainingPlanError(
            f"no dp x tp x pp x cp factorisation of {devices} devices is valid for {cfg.name!r} "
            f"with global batch {global_batch}: {why}. "
            f"Use a global batch divisible by the data-parallel degree (e.g. a multiple of "
            f"{devices}) or another device count"
        )
    results: list[SimResult] = []
    total = len(structures) + simulate_top
    stopped_early = None
    for done, (tp, pp, dp, cp) in enumerate(structures, 1):
        if progress is not None:
            progress(done - 1, total)
        if results and time.perf_counter() - t0 > time_limit_s:
            stopped_early = (
                f"time_limit_s={time_limit_s:g} ran out after {done - 1} of {len(structures)} "
                f"(tp, pp, dp, cp) structures; raise time_limit_s to search them all"
            )
            break
        for base in configurations(cfg, tp, pp, dp, cp, global_batch, space):
            for rec in space.recompute:
                try:
                    r = estimate(
                        cfg, base.replace(recompute=rec), cluster, global_batch, seq, tparams
                    )
                except (ParallelConfigError, SearchError):  # SearchError: no layer fits the cap
                    break
                results.append(r)
                if r.fits:
                    break  # the ladder: the cheapest recompute policy that fits
    searched = len(results)
    if not results:
        raise TrainingPlanError(
            f"no configuration in the search space is valid for {cfg.name!r} on {devices} "
            f"devices with global batch {global_batch}; widen the SearchSpace"
        )
    fitting = sorted((r for r in results if r.fits), key=_rank)
    if not fitting and stopped_early:
        raise TrainingPlanError(
            f"none of the {len(results)} configurations of {cfg.name!r} estimated before "
            f"{stopped_early.replace('; raise', ' fits in memory; raise')}"
        )
    if not fitting:
        from .offload_plan import offload_fallback  # host offload, issue 18

        plan = offload_fallback(cfg, results, cluster, devices, global_batch, seq, tparams, t0)
        if plan is not None and offload:
            return plan
        cps = space.cp or cp_terms.needs_cp(seq, space.cp_min_positions)
        err = _no_fit(cfg, devices, cluster, global_batch, seq, tparams, results, cps)
        if plan is not None:
            err = TrainingPlanError(
                f"{err}. With host offload ({plan.offload.kind} in host memory) {plan.config} "
                f"fits, step {plan.sim.step_time_s:.3g} s: pass offload=True"
            )
        raise err
    # Simulate the best few event by event, re-rank.
    exact = []
    for i, r in enumerate(fitting[:simulate_top]):
        if progress is not None:
            progress(len(structures) + i, total)
        s = simulate(cfg, r.config, cluster, global_batch, seq, tparams)
        exact.append(s)
    if progress is not None:
        progress(total, total)
    ok = sorted((s for s in exact if s.fits), key=_rank)
    if not ok:  # the exact split needed more memory than the estimate's; fall back
        ok = sorted(exact, key=lambda s: s.over_memory_bytes)
    best = _normalize(ok[0])
    seen = {best.config}
    alts = []
    for r in ok[1:] + fitting[simulate_top:]:
        r = _normalize(r)
        if r.config in seen:
            continue
        seen.add(r.config)
        alts.append(_candidate(r, best, r.timeline is not None))
        if len(alts) >= top_k:
            break
    over = sorted(
        (r for r in results if not r.fits and r.step_time_s < best.step_time_s),
        key=lambda r: r.step_time_s,
    )[: min(top_k, 3)]
    pareto = None
    if objectives is not None:
        pareto = _pareto.pareto_front(
            (_normalize(r) for r in fitting), objectives, chosen=best.config,
            price_per_hour=_pareto.job_price_per_hour(cluster.price_per_chip_hour, devices),
            simulated=[_normalize(s) for s in exact],  # the numbers the ranking used
        )  # fmt: skip
    return TrainingPlan(
        model=cfg.name, hardware=cluster.name, devices=devices, global_batch=global_batch,
        seq=seq, config=best.config, sim=best,
        alternatives=tuple(alts), over_memory=tuple(_candidate(r, best, False) for r in over),
        searched=searched, search_time_s=time.perf_counter() - t0, model_config=cfg,
        stopped_early=stopped_early, pareto=pareto,
    )  # fmt: skip


def _check_time_limit(time_limit_s: object) -> None:
    if (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, int | float)
            or not math.isfinite(time_limit_s) or time_limit_s <= 0):  # fmt: skip
        raise TrainingPlanError(
            f"time_limit_s={time_limit_s!r}: expected a finite number of seconds > 0 "
            f"(default {DEFAULT_TIME_LIMIT_S:g})"
        )


def _check_inputs(
    cfg: ModelConfig, devices: int, cluster: Cluster, gb: int, seq: int,
    tparams: TrainingParams, space: SearchSpace, top_k: int, simulate_top: int,
) -> None:  # fmt: skip
    for name, v in (("top_k", top_k), ("simulate_top", simulate_top)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TrainingPlanError(
                f"{name}={v!r}; expected an int >= 1 (the plan keeps at least the best one)"
            )
    if not isinstance(space, SearchSpace):
        raise TrainingPlanError(f"space={space!r}; expected a SearchSpace or None")
    if not isinstance(tparams, TrainingParams):
        raise TrainingPlanError(f"params={tparams!r}; expected a TrainingParams or None")
    try:
        check_seq(seq)
    except ParallelConfigError as e:
        raise TrainingPlanError(str(e)) from None
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise TrainingPlanError(f"devices={devices!r}; expected an int >= 1")
    if devices > cluster.capacity:
        raise TrainingPlanError(
            f"devices={devices} exceeds the {cluster.capacity} chips of {cluster.name} "
            f"({cluster.max_nodes} nodes x {cluster.chips_per_node}); use at most "
            f"{cluster.capacity} or a larger cluster profile"
        )
    if isinstance(gb, bool) or not isinstance(gb, int) or gb < 1:
        raise TrainingPlanError(f"global_batch={gb!r}; expected an int >= 1")
    if cfg.arch == "mlp":
        raise TrainingPlanError(
            f"model {cfg.name!r} is an MLP; plan_training models transformer training"
        )


def _min_memory(
    cfg, devices, cluster, seq, tparams, cps=(1,)
) -> tuple[float, ParallelConfig | None]:
    """The least memory per device of any configuration on ``devices`` (batch ignored:
    one microbatch of one sequence per pipeline stage), and that configuration."""
    best: tuple[float, ParallelConfig | None] = (math.inf, None)
    tps = [t for t in divisors(cfg.num_heads) if t <= cluster.chips_per_node and devices % t == 0]
    for tp, cp in itertools.product(tps, cps):
        if devices % (tp * cp):
            continue
        for pp in divisors(devices // (tp * cp)):
            if pp > cfg.num_layers:
                continue
            dp = devices // (tp * pp * cp)
            par = ParallelConfig(
                dp=dp, tp=tp, pp=pp, sp=tp > 1, microbatch_size=1,
                zero=3 if dp * cp > 1 else 0, recompute="full", cp=cp,
            )  # fmt: skip
            r = estimate(cfg, par, cluster, dp * pp, seq, tparams)
            if r.memory.total < best[0]:
                best = (r.memory.total, r.config)
    return best


def _no_fit(cfg, devices, cluster, gb, seq, tparams, results, cps=(1,)) -> TrainingPlanError:
    least, least_cfg = _min_memory(cfg, devices, cluster, seq, tparams, cps)
    cap = results[0].memory_cap_bytes
    if least <= cap:
        # a configuration outside the search space fits: the space is what is too narrow
        best = min(results, key=lambda r: r.memory.total)
        return TrainingPlanError(
            f"{cfg.name!r} fits no configuration of the search space on {devices} x "
            f"{cluster.name}: the least memory per device among the {len(results)} searched is "
            f"{best.memory.total / _GIB:.1f} GiB ({best.config}), above the {cap / _GIB:.0f} GiB "
            f"available; {least_cfg} would need {least / _GIB:.1f} GiB: widen the SearchSpace "
            "(more tp/pp, ZeRO-3, full recomputation, microbatch 1)"
        )
    need = None
    n = devices * 2
    while n <= cluster.capacity:
        if _min_memory(cfg, n, cluster, seq, tparams, cps)[0] <= cap:
            need = n
            break
        n *= 2
    where = (
        f"the smallest device count that would fit is {need}"
        if need
        else f"not even the whole {cluster.name} ({cluster.capacity} devices) would fit"
    )
    return TrainingPlanError(
        f"{cfg.name!r} fits no configuration on {devices} x {cluster.name}: the minimum "
        f"memory per device any configuration needs is {least / _GIB:.1f} GiB ({least_cfg}), "
        f"above the {cap / _GIB:.0f} GiB available; {where} (doubling the devices)"
    )
