"""``replan``: a new plan when the job changes, what switching costs, and when it pays off.

Events: `NodeLoss` (k nodes gone), `Straggler` (a node computing at a fraction of its
speed), `MemoryCap` (less memory per device) and `NewGlobalBatch`. For each, `replan`
runs `plan_training` on the changed job, builds the migration of every parameter and
optimizer state from the old layout to the new one (`migration.plan_migration`), times the
switch over the cluster's links, and compares with keeping the old plan:

- **break-even steps** = switch time / (old step under the event - new step); ``0`` when the
  old plan cannot run any more (a node lost, the cap exceeded, a batch it cannot split)
  and ``inf`` ("never") when the new plan is not faster;
- the new plans: the largest usable whole-node count is not always the fastest after a node
  loss, nor the old tensor-parallel degree after any event: `replan_screen` estimates every
  structure of the ``candidates`` largest usable counts (the job's own count for a memory
  cap or a new batch) with one representative configuration, and only the best
  ``finalists`` are planned in full (``result.tried`` says what each count gave);
- a straggler has four options: keep the plan (the synchronous step waits for the slow
  node), rebalance (its data-parallel replica takes fewer microbatches, nothing moves),
  rebalance-layers (when its node holds some pipeline stages: fewer layers on them,
  `replan_layers`; the layers moved migrate; ``new`` stays the old plan, the option's note
  gives the split) and drop it (replan on the other nodes, migrate); the chosen one has the
  least ``switch + horizon_steps * step`` time.

A node is ``chips_per_node`` consecutive device ids; job ranks are numbered as the step
model's mesh ``(pp, dp, cp, tp)`` places them on devices ``0 .. devices-1``.

>>> import explorer as ex
>>> plan = ex.plan_training("gpt3-1.3b", devices=32, global_batch=64, seq=2048)
>>> r = ex.replan(plan, ex.NodeLoss(1))
>>> r.new.devices < plan.devices, r.break_even_text
(True, 'required (the old plan cannot run)')
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ...checks import is_int, is_number
from ...hardware import Cluster, HardwareError, resolve
from ...models import load
from ...search.errors import SearchError
from .. import stacks
from ..errors import MigrationError, ParallelConfigError, ReplanError, TrainingPlanError
from ..params import TrainingParams
from ..planning.homogeneous import plan_homogeneous
from ..planning.result import TrainingPlan
from ..planning.space import SearchSpace, structures
from ..simulate import SimResult, estimate
from ..step_model.model import StepModel
from ..step_model.placement import mesh_axes
from ..step_model.terms import pp as pp_terms
from .layers import rebalance_layers
from .migration import JobLayout, Migration, plan_migration
from .screen import final_spaces, screen, usable_counts

__all__ = [
    "NodeLoss", "Straggler", "MemoryCap", "NewGlobalBatch", "Event", "ReplanOption",
    "ReplanResult", "replan", "job_layout",
]  # fmt: skip

#: After the screen, how many of each final search's best estimates are simulated event by
#: event (plan_training's default is 3; each simulation of a deep pipeline costs ~0.2 s).
FINAL_SIMULATED = 2

#: Event kinds whose seconds scale with a device's compute speed (a straggler's).
COMPUTE_KINDS = ("compute-forward", "compute-backward", "recompute", "optimizer")


@dataclass(frozen=True)
class NodeLoss:
    """``k`` nodes of the job are gone: ``nodes`` names them (node ids), default the last k."""

    k: int = 1
    nodes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _positive_int("NodeLoss.k", self.k)
        object.__setattr__(self, "k", int(self.k))
        if self.nodes is not None:
            if not isinstance(self.nodes, tuple | list) or not all(
                is_int(n, minimum=0, numpy=True) for n in self.nodes
            ):
                raise ReplanError(
                    f"NodeLoss.nodes={self.nodes!r}; expected a tuple of node ids (ints >= 0)"
                )
            # plain ints: numpy ids compare and hash like them, and print as ids
            object.__setattr__(self, "nodes", tuple(int(n) for n in self.nodes))
            if len(self.nodes) != self.k or len(set(self.nodes)) != self.k:
                raise ReplanError(
                    f"NodeLoss(k={self.k}, nodes={self.nodes}): name k distinct node ids"
                )


@dataclass(frozen=True)
class Straggler:
    """Node ``node`` computes at ``speed`` (a fraction of the others', 0 < speed <= 1)."""

    node: int
    speed: float = 0.6

    def __post_init__(self) -> None:
        if not is_int(self.node, minimum=0, numpy=True):
            raise ReplanError(f"Straggler.node={self.node!r}; expected a node id (int >= 0)")
        if not is_number(self.speed, above=0, maximum=1, numpy=True):
            raise ReplanError(
                f"Straggler.speed={self.speed!r}; expected a fraction of full speed in (0, 1]"
            )
        object.__setattr__(self, "node", int(self.node))
        object.__setattr__(self, "speed", float(self.speed))


@dataclass(frozen=True)
class MemoryCap:
    """Each device may use at most ``bytes`` (memory pressure from another process)."""

    bytes: float

    def __post_init__(self) -> None:
        if not is_number(self.bytes, above=0, numpy=True):
            raise ReplanError(f"MemoryCap.bytes={self.bytes!r}; expected a positive number")
        object.__setattr__(self, "bytes", float(self.bytes))


@dataclass(frozen=True)
class NewGlobalBatch:
    """The global batch becomes ``n`` sequences (batch-size warm-up, a new phase)."""

    n: int

    def __post_init__(self) -> None:
        _positive_int("NewGlobalBatch.n", self.n)
        object.__setattr__(self, "n", int(self.n))


Event = NodeLoss | Straggler | MemoryCap | NewGlobalBatch


@dataclass(frozen=True)
class ReplanOption:
    """One way to react: its steady step time, the switch it needs and when it pays off."""

    name: str
    step_time_s: float
    switch_s: float
    break_even_steps: float
    plan: TrainingPlan | None = field(default=None, repr=False, compare=False)
    migration: Migration | None = field(default=None, repr=False, compare=False)
    note: str = ""
    required: bool = False  # the old plan cannot run: switching is not a choice

    @property
    def break_even_text(self) -> str:
        if self.name == "keep":
            return "baseline"
        return _break_even_text(self.break_even_steps, self.required)

    def cost_s(self, steps: int) -> float:
        return self.switch_s + steps * self.step_time_s

    def __str__(self) -> str:
        return (
            f"{self.name}: step {self.step_time_s:.3f} s, switch {self.switch_s:.2f} s, "
            f"break-even {self.break_even_text}" + (f" ({self.note})" if self.note else "")
        )


@dataclass(frozen=True)
class ReplanResult:
    """What `replan` returns.

    Attributes:
        event: the event; ``old``: the plan before it; ``new``: the chosen plan after it
            (``old`` itself when keeping or rebalancing it wins).
        keep_step_s: the old plan's step under the event (``inf`` when it cannot run).
        options: every option compared (the chosen one first); ``chosen``: its name.
        migration: the chosen option's migration (None when nothing moves).
        switch_s, break_even_steps: the chosen option's.
        replan_time_s: wall time of `replan`.
        tried: per device count screened, its structures and best estimate
            (`replan_screen.CountTried`).
    """

    event: Event
    old: TrainingPlan = field(repr=False)
    new: TrainingPlan = field(repr=False)
    keep_step_s: float
    options: tuple[ReplanOption, ...]
    migration: Migration | None = field(repr=False)
    replan_time_s: float = field(compare=False, default=0.0)
    tried: tuple[str, ...] = field(compare=False, default=())

    @property
    def chosen(self) -> str:
        return self.options[0].name

    @property
    def step_time_s(self) -> float:
        return self.options[0].step_time_s

    @property
    def switch_s(self) -> float:
        return self.options[0].switch_s

    @property
    def break_even_steps(self) -> float:
        return self.options[0].break_even_steps

    @property
    def break_even_text(self) -> str:
        return self.options[0].break_even_text

    def switch_segments(
        self, before: int = 2, after: int = 3
    ) -> tuple[tuple[str, float, float], ...]:
        """``(label, start_s, end_s)`` of a timeline around the switch: ``before`` old steps,
        the migration, ``after`` new steps (for the views; the event hits at the end of the
        last old step)."""
        out, t = [], 0.0
        old_s = self.old.sim.step_time_s
        for i in range(before):
            out.append((f"old step {i + 1}", t, t + old_s))
            t += old_s
        if self.switch_s > 0:
            out.append(("migration", t, t + self.switch_s))
            t += self.switch_s
        for i in range(after):
            out.append((f"new step {i + 1}", t, t + self.step_time_s))
            t += self.step_time_s
        return tuple(out)

    def as_dict(self) -> dict[str, object]:
        return {
            "event": repr(self.event), "chosen": self.chosen,
            "old_config": str(self.old.config), "new_config": str(self.new.config),
            "old_devices": self.old.devices, "new_devices": self.new.devices,
            "old_step_s": self.old.sim.step_time_s, "keep_step_s": self.keep_step_s,
            "step_time_s": self.step_time_s, "switch_s": self.switch_s,
            "break_even": self.break_even_text,
            "migration": None if self.migration is None else self.migration.as_dict(),
            "options": [str(o) for o in self.options], "replan_time_s": self.replan_time_s,
            "tried": list(self.tried),
        }  # fmt: skip

    def report(self) -> str:
        lines = [
            f"event: {self.event}",
            f"old: {self.old.config} on {self.old.devices} devices, step "
            f"{self.old.sim.step_time_s:.3f} s; under the event: "
            + ("cannot run" if math.isinf(self.keep_step_s) else f"{self.keep_step_s:.3f} s"),
            f"chosen: {self.chosen} -> {self.new.config} on {self.new.devices} devices",
        ]
        lines += [f"  {o}" for o in self.options]
        if self.tried:
            lines.append("  screened: " + "; ".join(self.tried))
        if self.migration is not None:
            lines.append(f"  {self.migration}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return (
            f"ReplanResult({self.chosen}: step {self.step_time_s:.3f} s, switch "
            f"{self.switch_s:.2f} s, break-even {self.break_even_text})"
        )


def replan(
    plan: TrainingPlan, event: Event, params: TrainingParams | None = None,
    space: SearchSpace | None = None, horizon_steps: int = 1000, candidates: int = 3,
    hardware: str | Cluster | None = None, finalists: int = 2,
) -> ReplanResult:  # fmt: skip
    """Re-plan ``plan`` for ``event``: the new plan, the migration, the switch time and the
    break-even number of steps.

    Args:
        params: the cost model of the new plans (as given to the old `plan_training`).
        space: the search space of the new plans (default `SearchSpace()`: every valid tp,
            pp, dp, cp is screened, the old tensor-parallel degree is not kept; pass
            ``SearchSpace(tp=(plan.config.tp,))`` to keep it).
        horizon_steps: the straggler's options are ranked by ``switch + horizon * step``.
        hardware: the plan's cluster when it is not a catalog profile (a `Cluster`).
        candidates: on fewer devices, how many of the largest usable device counts (whole
            nodes, with a valid dp x tp x pp x cp for the batch) are screened: every
            structure of each estimated with one representative configuration
            (`replan_screen`); ``result.tried`` says what each count gave.
        finalists: how many of the best screened structures are then planned in full
            (`plan_training` restricted to their tp, pp, cp per device count, its best
            `FINAL_SIMULATED` estimates simulated); the fastest plan wins. With 2 (the
            default) gpt3-175b's replan after losing 1 of 128 nodes took 0.4-0.8 s cold on
            2 shared cores (load 0.7-3.8); with 3, 1.1-1.2 s at load 3.8 (same plan).
    """
    t0 = time.perf_counter()
    if not isinstance(plan, TrainingPlan):
        raise ReplanError(f"replan: plan={plan!r}; expected a TrainingPlan (plan_training)")
    _positive_int("horizon_steps", horizon_steps)
    _positive_int("candidates", candidates)
    _positive_int("finalists", finalists)
    tparams = stacks.resolve(params, None, "replan")  # the default stack's
    cluster = _same_chip(plan, hardware)
    ctx = _Context(plan, cluster, tparams, space or SearchSpace(), finalists)
    if isinstance(event, NodeLoss):
        options, keep = _node_loss(ctx, event, candidates), math.inf
    elif isinstance(event, Straggler):
        options, keep = _straggler(ctx, event, candidates)
    elif isinstance(event, MemoryCap):
        options, keep = _memory_cap(ctx, event)
    elif isinstance(event, NewGlobalBatch):
        options, keep = _new_batch(ctx, event)
    else:
        raise ReplanError(
            f"replan: event={event!r}; expected NodeLoss, Straggler, MemoryCap or NewGlobalBatch"
        )
    options = sorted(options, key=lambda o: (o.cost_s(horizon_steps), o.name))
    best = options[0]
    return ReplanResult(
        event=event, old=plan, new=best.plan or plan, keep_step_s=keep,
        options=tuple(options), migration=best.migration,
        replan_time_s=time.perf_counter() - t0, tried=tuple(ctx.tried),
    )  # fmt: skip


def job_layout(plan: TrainingPlan, devices: tuple[int, ...] | None = None,
               params: TrainingParams | None = None,
               hardware: str | Cluster | None = None) -> JobLayout:  # fmt: skip
    """The `JobLayout` of ``plan`` on physical ``devices`` (default ``0 .. devices-1``)."""
    sim = plan.sim
    cfg = plan.model_config or load(plan.model)
    cluster = resolve(hardware or plan.hardware)
    s = StepModel(cfg, sim.config, cluster, sim.global_batch, sim.seq,
                  stacks.resolve(params, None, "replan"))  # fmt: skip
    c = s.costs
    parts = (float(c.embed.params),) + (float(c.layer.params),) * cfg.num_layers
    parts += (float(pp_terms.head_params(s)),)
    return JobLayout(
        sim.config, sim.partition,
        tuple(range(plan.devices)) if devices is None else tuple(devices), parts,
        dp_outermost=list(mesh_axes(sim.config, cluster))[0] == "dp",
    )  # fmt: skip


# --- the events --------------------------------------------------------------------------
@dataclass
class _Context:
    plan: TrainingPlan
    cluster: Cluster
    tparams: TrainingParams
    space: SearchSpace  # what the screen and the full search of the new plans consider
    finalists: int = 2
    tried: list[str] = field(default_factory=list)  # the screen's device counts

    @property
    def cfg(self):
        return self.plan.model_config or load(self.plan.model)

    def plan_on(self, devices: int, gb: int | None = None, tparams=None,
                space: SearchSpace | None = None, simulate_top: int = 3) -> TrainingPlan:  # fmt: skip
        p = self.plan
        return plan_homogeneous(
            self.cfg, devices=devices, hardware=self.cluster,
            global_batch=p.global_batch if gb is None else gb, seq=p.seq,
            params=tparams or self.tparams, space=space or self.space,
            simulate_top=simulate_top,
        )  # fmt: skip

    def option(self, name: str, new: TrainingPlan, keep_s: float, lost: tuple[int, ...] = (),
               survivors: tuple[int, ...] | None = None, note: str = "") -> ReplanOption:  # fmt: skip
        old_layout = job_layout(self.plan, params=self.tparams, hardware=self.cluster)
        devices = tuple(range(new.devices)) if survivors is None else survivors[: new.devices]
        try:
            mig = plan_migration(
                old_layout, job_layout(new, devices, self.tparams, self.cluster), self.cluster, lost,
                self.tparams.state,
            )  # fmt: skip
        except MigrationError as e:
            raise ReplanError(f"replan: {e}") from None
        step = new.sim.step_time_s
        return ReplanOption(name, step, mig.time_s, _break_even(mig.time_s, keep_s, step),
                            new, mig, note, required=math.isinf(keep_s))  # fmt: skip


def _node_ids(ctx: _Context, nodes: tuple[int, ...]) -> tuple[int, ...]:
    per = ctx.cluster.chips_per_node
    have = -(-ctx.plan.devices // per)
    bad = [n for n in nodes if not is_int(n, minimum=0, maximum=have - 1)]
    if bad:
        raise ReplanError(
            f"node {bad[0]!r} is not a node of the job: it runs on nodes 0..{have - 1} "
            f"({ctx.plan.devices} devices, {per} per node)"
        )
    return tuple(
        d for n in sorted(nodes) for d in range(n * per, min((n + 1) * per, ctx.plan.devices))
    )


def _without(ctx: _Context, nodes: tuple[int, ...], candidates: int, name: str,
             keep_s: float) -> list[ReplanOption]:  # fmt: skip
    """Options that run on the job's other nodes: the ``candidates`` largest usable whole-node
    counts are screened (`replan_screen`), the best ``finalists`` structures planned in full."""
    lost = _node_ids(ctx, nodes)
    survivors = tuple(d for d in range(ctx.plan.devices) if d not in set(lost))
    p = ctx.plan
    counts = usable_counts(ctx.cfg, len(survivors), ctx.cluster, p.global_batch, p.seq,
                           ctx.space, candidates)  # fmt: skip
    plans, errors = _search(ctx, counts)
    if not plans:
        raise ReplanError(
            f"no plan of {ctx.plan.model!r} fits on the {len(survivors)} devices left after "
            f"losing nodes {nodes}: {'; '.join(map(str, errors[:2])) or 'no valid factorisation'}"
            "; add nodes or change the global batch"
        )
    return [
        ctx.option(f"{name} ({new.devices} devices)", new, keep_s, lost, survivors,
                   f"{new.devices} of {len(survivors)} surviving devices")
        for new in plans
    ]  # fmt: skip


def _search(ctx: _Context, counts: list[int], gb: int | None = None,
            tparams: TrainingParams | None = None,
            every_old_pp: bool = False) -> tuple[list[TrainingPlan], list[Exception]]:  # fmt: skip
    """The screen over ``counts`` (`replan_screen`), then the full search of the best
    ``finalists`` structures: the plans found and the errors of the counts that found none."""
    p, space, tparams = ctx.plan, ctx.space, tparams or ctx.tparams
    gb = p.global_batch if gb is None else gb
    found, tried = screen(ctx.cfg, counts, ctx.cluster, gb, p.seq, space, tparams,
                          p.config.microbatch_size)  # fmt: skip
    ctx.tried = [str(t) for t in tried]
    # nothing fits in the screen: the full search on the largest count says why (or fits)
    finals = final_spaces(found[: ctx.finalists], space) if found else [
        (n, space) for n in counts[:1]
    ]  # fmt: skip
    plans, errors = [], []
    for n, sp in finals:
        sp = _with_old_structure(ctx, n, gb, sp, every_old_pp)
        try:
            plans.append(ctx.plan_on(n, gb, tparams, sp, simulate_top=FINAL_SIMULATED))
        except (TrainingPlanError, SearchError) as e:
            errors.append(e)
    return plans, errors


def _node_loss(ctx: _Context, ev: NodeLoss, candidates: int) -> list[ReplanOption]:
    have = -(-ctx.plan.devices // ctx.cluster.chips_per_node)
    if ev.k >= have:
        raise ReplanError(f"NodeLoss(k={ev.k}) leaves no node: the job runs on {have} node(s)")
    nodes = ev.nodes if ev.nodes is not None else tuple(range(have - ev.k, have))
    return _without(ctx, nodes, candidates, "replan", math.inf)


def _straggler(ctx: _Context, ev: Straggler, candidates: int) -> tuple[list[ReplanOption], float]:
    _node_ids(ctx, (ev.node,))
    sim = ctx.plan.sim
    keep = _slowed_step(sim, 1, 1, ev.speed)
    options = [ReplanOption("keep", keep, 0.0, math.inf, None, None,
                            f"the step waits for the node at {ev.speed:.0%} speed")]  # fmt: skip
    c = sim.config
    m = c.microbatches(sim.global_batch)
    slow = _replicas_on(ctx, ev.node)  # data-parallel replicas with a device on the node
    if c.dp > slow and m > 1:
        # the slow replicas take k microbatches each, the others share the rest (ceil)
        def fast(k: int) -> int:
            return -(-(c.dp * m - slow * k) // (c.dp - slow))

        step, neg_k = min(
            (max(_slowed_step(sim, fast(k), m, 1.0), _slowed_step(sim, k, m, ev.speed)), -k)
            for k in range(1, m + 1)
        )  # fmt: skip
        k = -neg_k
        note = (f"its {slow} replica(s) take {k} of {m} microbatches each, the others up to "
                f"{fast(k)}; nothing moves")  # fmt: skip
        options.append(ReplanOption("rebalance", step, 0.0, _break_even(0.0, keep, step),
                                    None, None, note))  # fmt: skip
    else:
        options.append(ReplanOption(
            "rebalance", keep, 0.0, math.inf, None, None,
            "every data-parallel replica has a device on the node (or one microbatch): "
            "no one to take the load, same as keep",
        ))  # fmt: skip
    options.append(_rebalance_layers(ctx, ev, keep))
    try:
        options += _without(ctx, (ev.node,), candidates, "drop", keep)
    except ReplanError as e:
        options.append(ReplanOption("drop", math.inf, 0.0, math.inf, note=str(e)))
    return options, keep


def _rebalance_layers(ctx: _Context, ev: Straggler, keep: float) -> ReplanOption:
    """Fewer layers on the pipeline stages the slow node holds (`replan_layers`); the layers
    moved migrate between the stages."""
    sim, lay = ctx.plan.sim, job_layout(ctx.plan, params=ctx.tparams, hardware=ctx.cluster)
    on = set(_node_ids(ctx, (ev.node,)))
    slow = frozenset(g for (g, _, _), d in np.ndenumerate(lay.ranks()) if d in on)
    step = StepModel(ctx.cfg, sim.config, ctx.cluster, sim.global_batch, sim.seq, ctx.tparams)
    split = rebalance_layers(step, sim.partition, slow, ev.speed)
    if isinstance(split, str) or split.new_layers == split.old_layers:
        why = split if isinstance(split, str) else "no split with fewer layers there is faster"
        return ReplanOption("rebalance-layers", keep, 0.0, math.inf, note=f"{why}; same as keep")
    new_lay = JobLayout(sim.config, split.partition, lay.devices, lay.part_params,
                        lay.dp_outermost)  # fmt: skip
    mig = plan_migration(lay, new_lay, ctx.cluster, (), ctx.tparams.state)
    compute = sum(v for k, v in sim.time_by_kind if k in COMPUTE_KINDS)
    step_s = keep - compute / ev.speed * (1 - split.ratio)
    note = (f"layers per stage {'/'.join(map(str, split.old_layers))} -> "
            f"{'/'.join(map(str, split.new_layers))} (stages {sorted(slow)} on the slow node)")  # fmt: skip
    return ReplanOption("rebalance-layers", step_s, mig.time_s,
                        _break_even(mig.time_s, keep, step_s), None, mig, note)  # fmt: skip


def _replicas_on(ctx: _Context, node: int) -> int:
    """How many data-parallel replicas have a device on ``node``."""
    lay = job_layout(ctx.plan, params=ctx.tparams, hardware=ctx.cluster)
    ranks = lay.ranks()  # [pp, dp * cp, tp] -> physical id
    on = set(_node_ids(ctx, (node,)))
    replicas = {r // lay.config.cp for (_, r, _), d in np.ndenumerate(ranks) if d in on}
    return len(replicas)


def _slowed_step(sim: SimResult, m_replica: int, m: int, speed: float) -> float:
    """A replica's step when it runs ``m_replica`` of the plan's ``m`` microbatches at
    ``speed``: the compute kinds scale with both, the rest (communication, idle) stays."""
    compute = sum(v for k, v in sim.time_by_kind if k in COMPUTE_KINDS)
    return sim.step_time_s - compute + compute * (m_replica / m) / speed


def _memory_cap(ctx: _Context, ev: MemoryCap) -> tuple[list[ReplanOption], float]:
    sim = ctx.plan.sim
    chip = ctx.cluster.chip
    if ev.bytes > chip.memory_bytes:
        raise ReplanError(
            f"MemoryCap(bytes={ev.bytes:.4g}) is above the {chip.memory_bytes / 2**30:.0f} GiB "
            f"of one {chip.name}: a memory cap lowers what a device may use, it cannot add "
            f"memory; pass at most {chip.memory_bytes} bytes"
        )
    keep = sim.step_time_s if sim.memory.total <= ev.bytes else math.inf
    tparams = ctx.tparams.replace(cost=ctx.tparams.cost.replace(device_memory_cap_bytes=ev.bytes))
    options = [ctx.option("replan", new, keep) for new in _same_devices(ctx, tparams=tparams)]
    if math.isfinite(keep):
        options.append(ReplanOption("keep", keep, 0.0, math.inf, note="the old plan fits"))
    return options, keep


def _new_batch(ctx: _Context, ev: NewGlobalBatch) -> tuple[list[ReplanOption], float]:
    p = ctx.plan
    try:
        old = estimate(ctx.cfg, p.config.replace(num_microbatches=None), ctx.cluster, ev.n,
                       p.seq, ctx.tparams)  # fmt: skip
        keep = old.step_time_s if old.fits else math.inf
    except ParallelConfigError:
        keep = math.inf
    options = [ctx.option("replan", new, keep) for new in _same_devices(ctx, gb=ev.n)]
    if math.isfinite(keep):
        options.append(ReplanOption("keep", keep, 0.0, math.inf,
                                    note=f"the old layout at batch {ev.n}"))  # fmt: skip
    return options, keep


def _with_old_structure(ctx: _Context, n: int, gb: int, sp: SearchSpace,
                        every_pp: bool = False) -> SearchSpace:  # fmt: skip
    """``sp`` widened to the old plan's tp, pp and cp when that structure is valid on ``n``
    devices: the screen's one configuration per structure can underrate it (measured on
    gpt3-125m under a memory cap: 6.6 % slower without it). ``every_pp``: the old tp with
    every valid pp (on the job's own device count: the search that kept the old tp is then
    a subset, up to simulating the best 2 estimates instead of 3). Never outside
    ``ctx.space``."""
    c = ctx.plan.config
    if every_pp:
        if sp.tp is None:  # every tp already (the fallback when nothing fit in the screen)
            return dataclasses.replace(sp, pp=ctx.space.pp, cp=ctx.space.cp)
        tps = {*sp.tp, c.tp} if ctx.space.tp is None or c.tp in ctx.space.tp else set(sp.tp)
        return dataclasses.replace(sp, tp=tuple(sorted(tps)), pp=ctx.space.pp,
                                   cp=ctx.space.cp)  # fmt: skip
    per = c.tp * c.pp * c.cp
    if sp.tp is None or sp.pp is None:  # every structure already
        return sp
    if n % per or (c.tp, c.pp, n // per, c.cp) not in structures(
        ctx.cfg, n, ctx.cluster, gb, ctx.plan.seq, ctx.space
    )[0]:  # fmt: skip
        return sp
    return dataclasses.replace(
        sp, tp=tuple(sorted({*sp.tp, c.tp})), pp=tuple(sorted({*sp.pp, c.pp})),
        cp=tuple(sorted({*(sp.cp or (1,)), c.cp})),
    )  # fmt: skip


def _same_devices(ctx: _Context, gb: int | None = None,
                  tparams: TrainingParams | None = None) -> list[TrainingPlan]:  # fmt: skip
    """The best plan on the job's own devices (screened, then searched in full)."""
    plans, errors = _search(ctx, [ctx.plan.devices], gb, tparams, every_old_pp=True)
    if not plans:
        raise errors[0] if errors else ReplanError(
            f"no dp x tp x pp x cp of {ctx.plan.devices} devices is valid for "
            f"{ctx.plan.model!r} with global batch {gb or ctx.plan.global_batch}; change the "
            "batch"
        )  # fmt: skip
    return plans[:1]


def _break_even(switch_s: float, keep_s: float, step_s: float) -> float:
    if math.isinf(keep_s):
        return 0.0
    saving = keep_s - step_s
    if saving <= 0:
        return math.inf
    return switch_s / saving


def _break_even_text(steps: float, required: bool = False) -> str:
    if required:
        return "required (the old plan cannot run)"
    if steps == 0:
        return "immediately (nothing to move)"
    if math.isinf(steps):
        return "never (not faster than keeping the plan)"
    return f"{steps:.1f} steps"


def _same_chip(plan: TrainingPlan, hardware: str | Cluster | None) -> Cluster:
    """The plan's cluster, or ``hardware`` when it has the plan's chip (a topology the catalog
    lacks); another chip is refused: a re-plan reacts to an event on the job's own chips."""
    if hardware is None:
        return resolve(plan.hardware)
    cluster = resolve(hardware)
    if isinstance(hardware, Cluster) and cluster.name == plan.hardware:
        return cluster  # the plan's own cluster, given back
    try:
        own = resolve(plan.hardware)
    except HardwareError:  # a cluster outside the catalog: ``hardware`` is that cluster
        return cluster
    if cluster.chip != own.chip:
        raise ReplanError(
            f"replan: hardware={getattr(hardware, 'name', hardware)!r} has {cluster.chip.name} "
            f"chips, the plan ran on {own.chip.name} ({plan.hardware}); a re-plan keeps the "
            "job's chips. To move the job, plan it anew: plan_training(..., hardware=...)"
        )
    return cluster


def _positive_int(name: str, v: object) -> None:
    if not is_int(v, minimum=1, numpy=True):
        raise ReplanError(f"{name}={v!r}; expected an int >= 1")
