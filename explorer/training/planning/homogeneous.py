"""The one-cluster search behind `plan_training`: the fastest ParallelConfig that fits, and
why the others lost.

The space: every factorisation of the device count into dp x tp x pp x cp (tp among the
divisors of the head count up to a node's chips, every stage with a layer), microbatch
sizes, schedules (GPipe, 1F1B, interleaved with v chunks), ZeRO stages 0-3, sequence
parallelism, expert parallelism (MoE), context parallelism with its key/value exchange
(all-gather, ring) and recomputation. Each configuration is ranked by
`estimate`; the best few are then simulated event by event (`simulate`) and re-ranked.

Two rules keep the space small without losing the optimum of this cost model:

- recomputation: time grows none < selective < per-layer < full while memory shrinks
  (`space.RECOMPUTE_LADDER`), so per structure and ZeRO stage we take ``none`` if it fits,
  else ``per_layer`` with the fewest fully recomputed layers that fit (0 layers is
  ``selective``, all is ``full``; `space.cheapest_recompute` walks the ladder);
- context parallelism is searched only for long sequences: cp = 2, 4, 8, ... while each
  device keeps at least ``SearchSpace.cp_min_positions`` positions (default 8192, the
  sequence Llama 3 pretrained at without CP) and ``2 cp`` divides the sequence; below
  ``2 x 8192`` only cp = 1 (`step_model.terms.cp.needs_cp`). Shorter chunks leave small attention
  matmuls against a key/value exchange per layer, and the space would grow ~5x for
  nothing at the usual 2-8K sequences;
- sequence parallelism costs no time here (its collectives are found by the operator
  search either way) and saves memory, so it is on whenever tp > 1 unless the space
  says otherwise;
- dominated options are skipped when the space also holds what dominates them: GPipe has
  1F1B's bubble but keeps all m microbatches in flight (1F1B: at most p), and ZeRO-0's
  all-reduce moves the bytes of ZeRO-1's reduce-scatter + all-gather while ZeRO-1 keeps
  1/dp of the optimizer states and updates 1/dp of the weights.

Branch and bound (`planning.bounded`, `planning.bound`) then estimates the configurations
lowest step-time floor first (a floor raised by the recomputation a configuration's memory
needs, asked before its estimate) and skips those whose floor is above the step times the
plan keeps (``TrainingPlan.pruned`` counts them); the plan is the one the exhaustive search gives
(``objectives=`` estimates every configuration, as the Pareto front needs them all).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence

from ...checks import is_int, is_number
from ...hardware import Cluster, HardwareError, resolve
from ...models import ModelConfig, load
from .. import stacks
from ..config import ParallelConfig
from ..errors import ParallelConfigError, TrainingPlanError
from ..params import TrainingParams
from ..simulate import check_seq, estimate, simulate
from ..step_model.terms import cp as cp_terms
from . import pareto as _pareto
from . import space as search_space
from .bounded import BoundedSearch
from .constraints import memory_conflict, narrow
from .offload import offload_fallback
from .ranking import candidate, normalize, rank
from .result import TrainingPlan
from .space import SearchSpace, configurations, divisors, tp_candidates

__all__ = ["plan_homogeneous", "ProgressFn", "DEFAULT_TIME_LIMIT_S"]

# ``progress(done, total)``: called as the work advances (views draw a progress bar).
ProgressFn = Callable[[int, int], None]

_GIB = 2**30


#: plan_training's default time limit (seconds); the largest searches here take ~10 s.
DEFAULT_TIME_LIMIT_S = 300.0


def plan_homogeneous(
    cfg: ModelConfig | str, devices: int | None = None, hardware: str | Cluster = "a100-80g",
    global_batch: int = 1, seq: int | None = None, params: TrainingParams | None = None,
    space: SearchSpace | None = None, top_k: int = 5, simulate_top: int = 3,
    progress: ProgressFn | None = None, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    objectives: tuple[str, ...] | None = None, offload: bool = False,
    constraints: Sequence | None = None, chosen_only: bool = False,
    warm_start: ParallelConfig | None = None,
) -> TrainingPlan:  # fmt: skip
    """`plan_training` on one cluster: the search of ``dp x tp x pp x cp`` structures, the
    ladder of recomputation, the simulation of the best few, and (``offload``) the host
    offload fallback (`explorer.training.planning.offload`). The arguments are
    `plan_training`'s; ``constraints`` (`planning.constraints`) narrow the space and the
    enumeration before any estimate. ``chosen_only=True``: the chosen configuration and
    its step alone: no alternatives and no over-memory list (``top_k`` unused), so the
    search keeps only the ``simulate_top`` best step times and prunes above them, and the
    simulations keep no timeline (``plan.sim.timeline`` is None; the same step time): a
    scaling curve's points keep five numbers of each plan (`planning.scaling`).
    ``warm_start``: a configuration estimated first when it is among the searched (a
    scaling curve's previous point, scaled; `BoundedSearch.run`'s ``first``): the same
    plan, found with fewer memory questions."""
    if devices is None:
        raise TrainingPlanError(
            "plan_training needs devices=<chips in the job> (or pools=[Pool(...), ...])"
        )
    t0 = time.perf_counter()
    cfg = load(cfg) if isinstance(cfg, str) else cfg
    cluster = resolve(hardware)
    seq = cfg.max_seq_len if seq is None else seq
    tparams = stacks.resolve(params, None, "plan_training")
    space = space or SearchSpace()
    cluster = _check_inputs(
        cfg, devices, cluster, global_batch, seq, tparams, space, top_k, simulate_top
    )
    _check_time_limit(time_limit_s)
    if warm_start is not None and not isinstance(warm_start, ParallelConfig):
        raise TrainingPlanError(
            f"warm_start={warm_start!r}: expected a ParallelConfig (a configuration to "
            "estimate first) or None"
        )
    if objectives is not None:
        objectives = _pareto.check_objectives(
            objectives, cluster.price_per_chip_hour, f"hardware {cluster.name!r}"
        )
    narrowed = narrow(constraints, cfg, devices, cluster, global_batch, seq, space)
    if narrowed is not None:
        space = narrowed.space
        structures, why_not = narrowed.structures()
    else:
        structures, why_not = search_space.structures(
            cfg, devices, cluster, global_batch, seq, space
        )
    if not structures:
        why = "; ".join(why_not[:4]) or "tp must divide the heads and the device count"
        raise TrainingPlanError(
            f"no dp x tp x pp x cp factorisation of {devices} devices is valid for {cfg.name!r} "
            f"with global batch {global_batch}: {why}. "
            f"Use a global batch divisible by the data-parallel degree (e.g. a multiple of "
            f"{devices}) or another device count"
        )
    prune = objectives is None  # the Pareto front needs every fitting configuration
    n_alts = 0 if chosen_only else top_k  # alternatives kept
    search = BoundedSearch(cfg, cluster, global_batch, seq, tparams, space, simulate_top + n_alts)
    for tp, pp, dp, cp in structures:
        bases = (
            narrowed.configurations(tp, pp, dp, cp)
            if narrowed is not None
            else configurations(cfg, tp, pp, dp, cp, global_batch, space)
        )
        search.add(bases, prune)
    total = len(structures) + simulate_top
    stopped_early = search.run(t0, time_limit_s, progress, len(structures), total, warm_start)
    results, cap_errors = search.results(), search.cap_errors()
    if not results and cap_errors:
        raise TrainingPlanError(
            f"no configuration of {cfg.name!r} on {devices} devices with global batch "
            f"{global_batch} fits the memory a device may use: in all {len(cap_errors)} "
            f"tried, no layout of a layer fits ({cap_errors[0]}); add devices, raise the "
            "memory cap, or use chips with more memory"
        )
    if not results:
        raise TrainingPlanError(
            f"no configuration in the search space is valid for {cfg.name!r} on {devices} "
            f"devices with global batch {global_batch}; widen the SearchSpace"
        )
    fitting = sorted((r for r in results if r.fits), key=rank)
    if not fitting and stopped_early:
        raise TrainingPlanError(
            f"none of the {len(results)} configurations of {cfg.name!r} estimated before "
            f"{stopped_early.replace('; raise', ' fits in memory; raise')}"
        )
    if not fitting:
        plan = offload_fallback(cfg, results, cluster, devices, global_batch, seq, tparams, t0)
        if plan is not None and offload:
            return plan
        if narrowed is not None:  # the constraints keep every fitting configuration out?
            memory_conflict(narrowed, tparams)
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
        s = simulate(cfg, r.config, cluster, global_batch, seq, tparams, timeline=not chosen_only)
        exact.append(s)
    if progress is not None:
        progress(total, total)
    ok = sorted((s for s in exact if s.fits), key=rank)
    if not ok:  # the exact split needed more memory than the estimate's; fall back
        ok = sorted(exact, key=lambda s: s.over_memory_bytes)
    best = normalize(ok[0])
    seen = {best.config}
    alts = []
    for r in ok[1:] + fitting[simulate_top:]:
        if len(alts) >= n_alts:
            break
        r = normalize(r)
        if r.config in seen:
            continue
        seen.add(r.config)
        alts.append(candidate(r, best, r.timeline is not None))
    over_count = min(n_alts, 3)  # the over-memory list's length
    if search.pruned and over_count:  # the skipped ones the over-memory list could name
        search.estimate_below(best.step_time_s, over_count)
        results = search.results()
    over = sorted(
        (r for r in results if not r.fits and r.step_time_s < best.step_time_s),
        key=lambda r: r.step_time_s,
    )[:over_count]
    pareto = None
    if objectives is not None:
        pareto = _pareto.pareto_front(
            (normalize(r) for r in fitting), objectives, chosen=best.config,
            price_per_hour=_pareto.job_price_per_hour(cluster.price_per_chip_hour, devices),
            simulated=[normalize(s) for s in exact],  # the numbers the ranking used
        )  # fmt: skip
    return TrainingPlan(
        model=cfg.name, hardware=cluster.name, devices=devices, global_batch=global_batch,
        seq=seq, config=best.config, sim=best,
        alternatives=tuple(alts), over_memory=tuple(candidate(r, best, False) for r in over),
        searched=search.estimated, pruned=search.pruned,
        search_time_s=time.perf_counter() - t0, model_config=cfg,
        stopped_early=stopped_early, pareto=pareto, params=tparams, cluster=cluster,
        constraints=narrowed.constraints if narrowed is not None else (),
    )  # fmt: skip


def _check_time_limit(time_limit_s: object) -> None:
    if not is_number(time_limit_s, above=0):
        raise TrainingPlanError(
            f"time_limit_s={time_limit_s!r}: expected a finite number of seconds > 0 "
            f"(default {DEFAULT_TIME_LIMIT_S:g})"
        )


def _check_inputs(
    cfg: ModelConfig, devices: int, cluster: Cluster, gb: int, seq: int,
    tparams: TrainingParams, space: SearchSpace, top_k: int, simulate_top: int,
) -> Cluster:  # fmt: skip
    """Check the arguments; return the cluster to plan on: ``cluster`` itself, or, for a job
    larger than the profile, the profile `Cluster.extended` to ``devices`` chips (its
    outermost level repeats). A profile's size is a building block, not a ceiling (Llama 3
    405B trained on 16,384 H100s, twice ``h100-sxm``): growing it is what a user who asks
    for more devices means, where an extra ``cluster_size=`` argument would only restate
    ``devices``. The extended cluster says so (`Cluster.extension`, ``str()``)."""
    for name, v in (("top_k", top_k), ("simulate_top", simulate_top)):
        if not is_int(v, minimum=1):
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
    if not is_int(devices, minimum=1):
        raise TrainingPlanError(f"devices={devices!r}; expected an int >= 1")
    try:
        cluster = cluster.extended(devices)
    except HardwareError as e:
        raise TrainingPlanError(f"devices={devices}: {e}") from None
    if not is_int(gb, minimum=1):
        raise TrainingPlanError(f"global_batch={gb!r}; expected an int >= 1")
    if cfg.arch == "mlp":
        raise TrainingPlanError(
            f"model {cfg.name!r} is an MLP; plan_training models transformer training"
        )
    return cluster


def _min_memory(
    cfg, devices, cluster, seq, tparams, cps=(1,)
) -> tuple[float, ParallelConfig | None]:
    """The least memory per device of any configuration on ``devices`` (batch ignored:
    one microbatch of one sequence per pipeline stage), and that configuration."""
    best: tuple[float, ParallelConfig | None] = (math.inf, None)
    tps = tp_candidates(cfg, cluster.chips_per_node, devices)
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
        else f"no device count up to {cluster.capacity} (all of {cluster.name}) would fit; a "
        "larger devices= extends the profile (Cluster.extended)"
    )
    return TrainingPlanError(
        f"{cfg.name!r} fits no configuration on {devices} x {cluster.name}: the minimum "
        f"memory per device any configuration needs is {least / _GIB:.1f} GiB ({least_cfg}), "
        f"above the {cap / _GIB:.0f} GiB available; {where} (doubling the devices)"
    )
