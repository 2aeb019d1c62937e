"""Constraints on `plan_training`: bounds and fixed values of the knobs, "tp within a node",
a per-stage layer split.

- ``Bound(knob, min=None, max=None)`` and ``Fix(knob, value)`` for a knob among ``KNOBS``
  (``dp``, ``tp``, ``pp``, ``cp``, ``ep``, ``etp``, ``microbatch``, ``schedule``, ``zero``,
  ``recompute``, ``virtual_stages``);
- ``Within(knob, level="node")``: the ``tp`` (or ``tp x cp``, for ``cp``) group fits in one
  node, or in one group of a named link level of the cluster (``"intra-node"``,
  ``"nvlink"``, ...);
- ``StageLayers((l0, l1, ...))``: pipeline stages holding these many layers (``pp`` is its
  length, no interleaving; the layers must add up to the model's).

They narrow the `SearchSpace` and the enumeration of configurations before anything is
estimated, so the best configuration under the constraints is the best of those the
search estimates: nothing is filtered after ranking. A set that leaves no configuration
raises `PlanConstraintError` (a `ConstraintError` and a `TrainingPlanError`) naming the
smallest conflicting subset and why.

>>> import explorer as ex
>>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
...                         constraints=[ex.Fix("pp", 1), ex.Bound("tp", max=2)])
>>> plan.config.pp, plan.config.tp <= 2
(1, True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...checks import is_int
from ...hardware import Cluster
from ...models import ModelConfig
from ...search.constraints import ConstraintError, conflict_message, deletion_filter
from ...search.errors import SearchError
from ..config import RECOMPUTE_POLICIES, SCHEDULES, ZERO_STAGES, ParallelConfig
from ..errors import ParallelConfigError, TrainingPlanError
from ..params import TrainingParams
from ..simulate import SimResult, estimate
from .space import SearchSpace, cheapest_recompute, configurations, divisors, structures

__all__ = [
    "KNOBS", "Bound", "Fix", "Within", "StageLayers", "PlanConstraintError", "Narrowed",
    "narrow", "check_constraints", "forbidden_by", "memory_conflict",
]  # fmt: skip

KNOBS: tuple[str, ...] = (
    "dp", "tp", "pp", "cp", "ep", "etp", "microbatch", "schedule", "zero", "recompute",
    "virtual_stages",
)  # fmt: skip
_CHOICES = {"schedule": SCHEDULES, "recompute": RECOMPUTE_POLICIES}
_WITHIN = ("tp", "cp")


class PlanConstraintError(ConstraintError, TrainingPlanError):
    """`ConstraintError` raised by `plan_training`: caught as either (``conflict``: the
    smallest conflicting subset; ``reason``: why)."""


def _check_knob(knob: object, what: str) -> None:
    if knob not in KNOBS:
        raise PlanConstraintError(
            f"{what}: unknown knob {knob!r}; expected one of {', '.join(KNOBS)}"
        )


@dataclass(frozen=True)
class Bound:
    """``min <= knob <= max`` (either may be None) for a numeric knob.

    >>> str(Bound("tp", max=4))
    "Bound('tp', max=4)"
    """

    knob: str
    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        _check_knob(self.knob, f"Bound({self.knob!r})")
        if self.knob in _CHOICES:
            raise PlanConstraintError(
                f"Bound({self.knob!r}): {self.knob} is a choice among "
                f"{', '.join(_CHOICES[self.knob])}, not a number; use Fix({self.knob!r}, ...)"
            )
        for name in ("min", "max"):
            v = getattr(self, name)
            if v is not None and not is_int(v, minimum=0):
                raise PlanConstraintError(
                    f"Bound({self.knob!r}, {name}={v!r}): expected an int >= 0"
                )
        if self.min is None and self.max is None:
            raise PlanConstraintError(f"Bound({self.knob!r}) bounds nothing; pass min= and/or max=")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise PlanConstraintError(
                f"Bound({self.knob!r}, min={self.min}, max={self.max}): min is above max"
            )

    def allows(self, value: int) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def asks(self, ctx: _Context) -> str:
        lo = "" if self.min is None else f"{self.min} <= "
        hi = "" if self.max is None else f" <= {self.max}"
        return f"{lo}{self.knob}{hi}"

    def __str__(self) -> str:
        parts = [repr(self.knob)]
        parts += [f"{k}={getattr(self, k)}" for k in ("min", "max") if getattr(self, k) is not None]
        return f"Bound({', '.join(parts)})"


@dataclass(frozen=True)
class Fix:
    """``knob == value``.

    >>> str(Fix("schedule", "1f1b"))
    "Fix('schedule', '1f1b')"
    """

    knob: str
    value: int | str

    def __post_init__(self) -> None:
        _check_knob(self.knob, f"Fix({self.knob!r}, {self.value!r})")
        if self.knob in _CHOICES:
            if self.value not in _CHOICES[self.knob]:
                raise PlanConstraintError(
                    f"Fix({self.knob!r}, {self.value!r}): expected one of "
                    f"{', '.join(repr(c) for c in _CHOICES[self.knob])}"
                )
        elif self.knob == "zero":
            if isinstance(self.value, bool) or self.value not in ZERO_STAGES:
                raise PlanConstraintError(
                    f"Fix('zero', {self.value!r}): expected a ZeRO stage among 0, 1, 2, 3"
                )
        elif not is_int(self.value, minimum=1):
            raise PlanConstraintError(f"Fix({self.knob!r}, {self.value!r}): expected an int >= 1")

    def allows(self, value: object) -> bool:
        return value == self.value

    def asks(self, ctx: _Context) -> str:
        return f"{self.knob} = {self.value}"

    def __str__(self) -> str:
        return f"Fix({self.knob!r}, {self.value!r})"


@dataclass(frozen=True)
class Within:
    """The ``knob`` group (``tp``; ``cp``: the ``tp x cp`` group) fits in one ``level``:
    ``"node"`` (the cluster's chips per node) or the name of one of its link levels.

    >>> str(Within("tp", "node"))
    "Within('tp', 'node')"
    """

    knob: str
    level: str = "node"

    def __post_init__(self) -> None:
        if self.knob not in _WITHIN:
            raise PlanConstraintError(
                f"Within({self.knob!r}, {self.level!r}): expected the knob 'tp' (the tensor-"
                "parallel group) or 'cp' (the tp x cp group)"
            )
        if not isinstance(self.level, str) or not self.level:
            raise PlanConstraintError(
                f"Within({self.knob!r}, {self.level!r}): expected 'node' or a link level's name"
            )

    def size(self, cluster: Cluster) -> int:
        """Chips in one ``level`` of ``cluster``."""
        if self.level == "node":
            return cluster.chips_per_node
        for lv in cluster.levels:
            if lv.name == self.level:
                return lv.group_size
        names = ", ".join(["'node'"] + [repr(lv.name) for lv in cluster.levels])
        raise PlanConstraintError(
            f"{self}: {cluster.name} has no level {self.level!r}; expected one of {names}",
            (self,),
        )

    def allows_group(self, group: int, cluster: Cluster) -> bool:
        n = self.size(cluster)
        return group <= n and n % group == 0

    def asks(self, ctx: _Context) -> str:
        where = "a node" if self.level == "node" else f"a {self.level} group"
        group = "tp" if self.knob == "tp" else "tp x cp"
        return (f"{group} within {where}: {where} of {ctx.cluster.name} has "
                f"{self.size(ctx.cluster)} chips")  # fmt: skip

    def __str__(self) -> str:
        return f"Within({self.knob!r}, {self.level!r})"


@dataclass(frozen=True)
class StageLayers:
    """Pipeline stages of ``layers[i]`` layers each (``pp = len(layers)``, one chunk per
    device): every configuration searched carries the split (``ParallelConfig.stage_layers``),
    which `simulate` and `estimate` then use instead of choosing their own.

    >>> str(StageLayers((6, 6)))
    'StageLayers((6, 6))'
    """

    layers: tuple[int, ...]

    def __post_init__(self) -> None:
        layers = self.layers
        if isinstance(layers, list):
            layers = tuple(layers)
            object.__setattr__(self, "layers", layers)
        if (
            not isinstance(layers, tuple)
            or not all(is_int(x, minimum=0) for x in layers)
            or sum(layers) < 1
        ):
            raise PlanConstraintError(
                f"StageLayers({self.layers!r}): expected a tuple of layer counts >= 0, one per "
                "pipeline stage, e.g. (24, 24, 24, 24)"
            )

    def asks(self, ctx: _Context) -> str:
        return f"pp = {len(self.layers)} stages of {'/'.join(map(str, self.layers))} layers"

    def __str__(self) -> str:
        return f"StageLayers({self.layers!r})"


Constraint = Bound | Fix | Within | StageLayers


@dataclass(frozen=True)
class _Context:
    cfg: ModelConfig
    devices: int
    cluster: Cluster
    global_batch: int
    seq: int


def _value(c: ParallelConfig, knob: str) -> object:
    if knob == "microbatch":
        return c.microbatch_size
    if knob == "etp":
        return c.etp if c.etp is not None else c.tp
    return getattr(c, knob)


@dataclass(frozen=True)
class Narrowed:
    """The space and the per-configuration test a set of constraints leaves."""

    constraints: tuple[Constraint, ...]
    space: SearchSpace
    ctx: _Context
    base: SearchSpace | None = None  # the space before any constraint

    def subset(self, constraints: tuple) -> Narrowed:
        """The same search under other constraints (from the same unconstrained space)."""
        base = self.base or self.space
        return Narrowed(constraints, _space(constraints, self.ctx, base), self.ctx, base)

    def structure_ok(self, tp: int, pp: int, dp: int, cp: int) -> bool:
        knobs = {"tp": tp, "pp": pp, "dp": dp, "cp": cp}
        for c in self.constraints:
            if isinstance(c, (Bound, Fix)) and c.knob in knobs and not c.allows(knobs[c.knob]):
                return False
            if isinstance(c, Within):
                group = tp if c.knob == "tp" else tp * cp
                if not c.allows_group(group, self.ctx.cluster):
                    return False
            if isinstance(c, StageLayers) and pp != len(c.layers):
                return False
        return True

    def config_ok(self, config: ParallelConfig) -> bool:
        if not self.structure_ok(config.tp, config.pp, config.dp, config.cp):
            return False
        for c in self.constraints:
            # recompute is the ladder's (plan_training walks space.recompute, narrowed)
            if (isinstance(c, (Bound, Fix)) and c.knob != "recompute"
                    and not c.allows(_value(config, c.knob))):  # fmt: skip
                return False
            if isinstance(c, StageLayers) and config.virtual_stages != 1:
                return False
        return True

    def structures(self, space: SearchSpace | None = None):
        """`space.structures` narrowed (and why the others fail)."""
        ctx = self.ctx
        found, why = structures(ctx.cfg, ctx.devices, ctx.cluster, ctx.global_batch, ctx.seq,
                                space or self.space)  # fmt: skip
        return [s for s in found if self.structure_ok(*s)], why

    def configurations(self, tp: int, pp: int, dp: int, cp: int):
        """`space.configurations` of one structure, narrowed (with `StageLayers`, each
        configuration carries the split: ``ParallelConfig.stage_layers``)."""
        split = next((c.layers for c in self.constraints if isinstance(c, StageLayers)), None)
        for c in configurations(self.ctx.cfg, tp, pp, dp, cp, self.ctx.global_batch, self.space):
            if self.config_ok(c):
                yield c if split is None else c.replace(stage_layers=split)

    def empty(self) -> bool:
        """No configuration left to estimate (before any estimate: cheap)."""
        found, _ = self.structures()
        return not any(next(self.configurations(*s), None) is not None for s in found)


def forbidden_by(constraints: tuple, config: ParallelConfig, cluster: Cluster) -> str:
    """The first of ``constraints`` that ``config`` breaks, printed (``""``: none): what
    ``plan.why_not`` and the views say of a configuration outside a constrained search.

    >>> forbidden_by((Bound("tp", max=4),), ParallelConfig(dp=1, tp=8), None)
    "Bound('tp', max=4)"
    """
    for c in constraints:
        if isinstance(c, (Bound, Fix)) and not c.allows(_value(config, c.knob)):
            return str(c)
        if isinstance(c, Within):
            group = config.tp if c.knob == "tp" else config.tp * config.cp
            if not c.allows_group(group, cluster):
                return str(c)
        if isinstance(c, StageLayers) and (
            config.pp != len(c.layers) or config.virtual_stages != 1
            or config.stage_layers not in (None, c.layers)
        ):  # fmt: skip
            return str(c)
    return ""


def _narrow_values(values: tuple, constraints, knob: str) -> tuple:
    return tuple(v for v in values if all(c.allows(v) for c in constraints
                                          if isinstance(c, (Bound, Fix)) and c.knob == knob))  # fmt: skip


def _space(cons: tuple, ctx: _Context, space: SearchSpace) -> SearchSpace:
    """``space`` with every per-knob value list narrowed (the structures and
    configurations then enumerate fewer candidates; `Narrowed.config_ok` stays exact)."""
    fixed = {c.knob: c.value for c in cons if isinstance(c, Fix)}
    changes: dict[str, object] = {}
    cfg = ctx.cfg
    if space.tp is None and any(c.knob == "tp" for c in cons if isinstance(c, (Bound, Fix))):
        # tp_candidates stops at a node; a fix or a lower bound past it lifts that cap
        cpn = ctx.cluster.chips_per_node
        past = any(
            (isinstance(c, Fix) and c.value > cpn) or (isinstance(c, Bound) and (c.min or 0) > cpn)
            for c in cons if getattr(c, "knob", None) == "tp"
        )  # fmt: skip
        tps = [t for t in divisors(cfg.num_heads) if ctx.devices % t == 0 and (past or t <= cpn)]
        changes["tp"] = _narrow_values(tuple(tps), cons, "tp")
    stage = [c for c in cons if isinstance(c, StageLayers)]
    if stage and space.pp is None:
        changes["pp"] = (len(stage[0].layers),)
    elif "pp" in fixed and space.pp is None:
        changes["pp"] = (fixed["pp"],)
    if "cp" in fixed and space.cp is None:
        changes["cp"] = (fixed["cp"],)
    if "ep" in fixed and space.ep is None and cfg.is_moe:
        changes["ep"] = (fixed["ep"],)
    if "etp" in fixed and space.etp is None:
        changes["etp"] = (fixed["etp"],)
    for knob, field_ in (("microbatch", "microbatch_sizes"), ("zero", "zero")):
        values = getattr(space, field_)
        if knob in fixed and knob == "microbatch" and fixed[knob] not in values:
            values = (fixed[knob],)  # a fixed microbatch size outside the default list
        changes[field_] = _narrow_values(values, cons, knob)
    changes["schedules"] = _narrow_values(space.schedules, cons, "schedule")
    changes["recompute"] = _narrow_values(space.recompute, cons, "recompute")
    if "recompute" in fixed and fixed["recompute"] not in space.recompute:
        changes["recompute"] = (fixed["recompute"],)
    vs = _narrow_values(space.virtual_stages, cons, "virtual_stages")
    if "virtual_stages" in fixed and fixed["virtual_stages"] >= 2 and not vs:
        vs = (fixed["virtual_stages"],)
    if stage or not vs:
        vs = space.virtual_stages  # interleaving is then ruled out by config_ok
    changes["virtual_stages"] = vs
    empty = [k for k, v in changes.items() if isinstance(v, tuple) and not v]
    if empty:
        return dataclasses.replace(space, **{k: v for k, v in changes.items() if k not in empty})
    return dataclasses.replace(space, **changes)


def check_constraints(constraints: object) -> tuple[Constraint, ...]:
    """The constraints as a tuple, each of a training kind (else a named error)."""
    if constraints is None:
        return ()
    if isinstance(constraints, (Bound, Fix, Within, StageLayers)):
        constraints = [constraints]
    if not isinstance(constraints, (list, tuple)):
        raise PlanConstraintError(
            f"constraints={constraints!r}; expected a list of ex.Bound / ex.Fix / ex.Within / "
            "ex.StageLayers"
        )
    for i, c in enumerate(constraints):
        if not isinstance(c, (Bound, Fix, Within, StageLayers)):
            raise PlanConstraintError(
                f"constraints[{i}]={c!r} is not a training-plan constraint; use ex.Bound(knob, "
                "min, max), ex.Fix(knob, value), ex.Within('tp', 'node') or ex.StageLayers("
                "(...)) (ex.Pin and ex.Forbid steer the operator-sharding search)",
                (c,),
            )
    return tuple(constraints)


def narrow(
    constraints: object, cfg: ModelConfig, devices: int, cluster: Cluster, global_batch: int,
    seq: int, space: SearchSpace,
) -> Narrowed | None:  # fmt: skip
    """The narrowed search, or None without constraints. Raises `PlanConstraintError` for a
    malformed constraint (a split whose layers do not add up to the model's, a level the
    cluster lacks) or for a set that leaves no configuration (its smallest conflicting
    subset named)."""
    cons = check_constraints(constraints)
    if not cons:
        return None
    ctx = _Context(cfg, devices, cluster, global_batch, seq)
    for c in cons:
        if isinstance(c, StageLayers) and sum(c.layers) != cfg.num_layers:
            raise PlanConstraintError(
                f"{c}: the stages hold {sum(c.layers)} layers, {cfg.name!r} has "
                f"{cfg.num_layers}; give one count per stage adding up to {cfg.num_layers}",
                (c,),
            )
        if isinstance(c, Within):
            c.size(cluster)  # raises for an unknown level
        if isinstance(c, Fix) and c.knob in ("ep", "etp") and not cfg.is_moe and c.value != 1:
            raise PlanConstraintError(
                f"{c}: {cfg.name!r} is a dense model (no experts), so {c.knob} is 1; drop it",
                (c,),
            )

    def build(subset: tuple) -> Narrowed:
        return Narrowed(subset, _space(subset, ctx, space), ctx, space)

    narrowed = build(cons)
    if narrowed.empty():
        if build(()).empty():
            return narrowed  # nothing is valid even without constraints: plan_training says why

        def satisfiable(subset: tuple) -> str | None:
            return None if not build(subset).empty() else _reason(subset, ctx)

        conflict, reason = deletion_filter(cons, satisfiable)
        raise PlanConstraintError(
            conflict_message(conflict, reason, f"configuration of {cfg.name!r} on {devices} devices"),
            conflict, reason,
        )  # fmt: skip
    return narrowed


def _least_fit(narrowed: Narrowed, tparams: TrainingParams) -> SimResult | None:
    """None when a configuration the constraints leave fits in memory (the walk stops at
    the first); else the estimate that needs the least memory. The same enumeration and
    recompute ladder as `plan_training`, so exact for its search."""
    ctx, least = narrowed.ctx, None
    for s in narrowed.structures()[0]:
        for base in narrowed.configurations(*s):
            tried = cheapest_recompute(
                narrowed.space.recompute,
                lambda rec, base=base: estimate(ctx.cfg, base.replace(recompute=rec),
                                                ctx.cluster, ctx.global_batch, ctx.seq, tparams),
                fits=lambda r: r.fits, stop_on=(ParallelConfigError, SearchError),
            )  # fmt: skip
            for _, r in tried:
                if r.fits:
                    return None
                if least is None or r.memory.total < least.memory.total:
                    least = r
    return least


def memory_conflict(narrowed: Narrowed, tparams: TrainingParams) -> None:
    """When no configuration the constraints leave fits in memory but one fits without
    them, raise `PlanConstraintError` with the smallest subset that keeps every fitting
    configuration out (deletion filter; each test stops at its first fitting
    configuration) and the least memory that subset leaves; else return (the constraints
    are not why nothing fits)."""
    if _least_fit(narrowed.subset(()), tparams) is not None:
        return  # nothing fits without them either: plan_training's own error says why
    gib = 2**30

    def satisfiable(subset: tuple) -> str | None:
        sub = narrowed.subset(subset)
        if sub.empty():
            return _reason(subset, narrowed.ctx)
        least = _least_fit(sub, tparams)
        if least is None:
            return None
        return (f"no configuration they leave fits in memory: the least any needs is "
                f"{least.memory.total / gib:.1f} GiB ({least.config}), above the "
                f"{least.memory_cap_bytes / gib:.0f} GiB a device may use")  # fmt: skip

    conflict, reason = deletion_filter(narrowed.constraints, satisfiable)
    ctx = narrowed.ctx
    raise PlanConstraintError(
        conflict_message(conflict, reason, f"configuration of {ctx.cfg.name!r} on {ctx.devices} "
                                           "devices that fits in memory"),
        conflict, reason,
    )  # fmt: skip


def _reason(subset: tuple, ctx: _Context) -> str:
    asks = [f"{c} asks {c.asks(ctx)}" for c in subset]
    if len(subset) == 1:
        c = subset[0]
        return f"{asks[0]}, which no valid configuration has ({_valid_hint(c, ctx)})"
    return "; ".join(asks) + ": no configuration has all of these"


def _valid_hint(c: Constraint, ctx: _Context) -> str:
    cfg = ctx.cfg
    if getattr(c, "knob", None) == "tp":
        return f"tp must divide the {cfg.num_heads} heads and the {ctx.devices} devices"
    if isinstance(c, StageLayers) or getattr(c, "knob", None) == "pp":
        return f"pp must divide the devices and not exceed the {cfg.num_layers} layers"
    if getattr(c, "knob", None) == "dp":
        return f"dp = devices / (tp pp cp) must divide the global batch {ctx.global_batch}"
    return "see SearchSpace for the values searched"
