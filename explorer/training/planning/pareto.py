"""Multi-objective plans: the Pareto front of the configurations that fit.

``plan_training(..., objectives=("step_time", "memory", "communication"))`` keeps its
fastest plan as ``plan.config`` and adds ``plan.pareto``, a `ParetoFront` over every
fitting configuration it estimated (the same search space, the same recompute ladder):

==================  ==========================================================  =======
objective           what                                                        unit
==================  ==========================================================  =======
``step_time``       time of one training step                                   s
``memory``          peak memory of the device that needs the most               bytes
``communication``   bytes one device sends per step (tp + pp + dp + zero + ...)  bytes
``cost``            price of one step: job price per hour x step time           USD
==================  ==========================================================  =======

Every objective is minimised. Point ``a`` dominates ``b`` when it is no worse in every
objective and strictly better in at least one, compared exactly (floats as computed, no
tolerance). Two points with identical values dominate neither each other: both stay on the
front and are listed together in ``ParetoFront.ties``.

Which numbers are estimates: the same ones plan_training ranks with. Every configuration
is estimated in closed form (`estimate`); the few best that plan_training then simulates
event by event (``simulate_top``) carry their simulated numbers instead, and say so
(``ParetoPoint.simulated``). So the plan's ``config``, the simulated fastest, is the
fastest point of the front, as in the plan's ranking. Simulating every front point would
blow the time budget (gpt3-175b on 1024 A100s: the 25 front points not yet simulated took
20 s, 0.8 s each, on a loaded 2-core machine, against ~6 s for the whole plan), so it is
left to the views, which simulate the point a person picks. On one homogeneous cluster cost per step is the step
time times a constant (every configuration uses all the devices), so adding ``cost`` to
``step_time`` changes no domination; it matters when the price differs between plans
(pools of different chips).

>>> import explorer as ex
>>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
...                         objectives=("step_time", "memory"))
>>> front = plan.pareto
>>> front.fastest.config == plan.config or front.chosen is None
True
>>> all(not d.on_front for d in front.dominated)
True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from ...checks import is_int, is_number
from ..config import ParallelConfig
from ..errors import ParetoError
from ..simulate import SimResult

__all__ = [
    "Objective", "OBJECTIVES", "DEFAULT_OBJECTIVES", "OBJECTIVE_UNITS", "OBJECTIVE_LABELS",
    "ParetoError", "ParetoPoint", "ParetoFront", "check_objectives", "pareto_front",
    "dominates", "job_price_per_hour", "pareto_split",
]  # fmt: skip

Objective = Literal["step_time", "memory", "communication", "cost"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)
DEFAULT_OBJECTIVES: tuple[str, ...] = ("step_time", "memory", "communication")
OBJECTIVE_UNITS = {"step_time": "s", "memory": "bytes", "communication": "bytes", "cost": "USD"}
OBJECTIVE_LABELS = {
    "step_time": "step time", "memory": "peak memory per device",
    "communication": "bytes sent per device per step", "cost": "cost per step",
}  # fmt: skip
_SECONDS_PER_HOUR = 3600.0
_GIB = 2**30


@dataclass(frozen=True)
class ParetoPoint:
    """One fitting configuration and its objective values (all `estimate`'s).

    Attributes:
        config: the ParallelConfig.
        step_time_s, memory_bytes, comm_bytes: seconds per step, peak bytes per device,
            bytes one device sends per step (all kinds summed; ``comm_by_kind`` splits it).
        cost_usd: US dollars per step (None when the hardware has no price).
        dominated_by: for a dominated point, the indices in ``ParetoFront.front`` of every
            front point that dominates it; ``()`` for a front point.
        dominates: for a front point, how many fitting configurations it dominates.
        simulated: True when the numbers are an event-by-event simulation (`simulate`),
            False when they are the closed-form `estimate`.
    """

    config: ParallelConfig
    step_time_s: float
    memory_bytes: float
    comm_bytes: float
    cost_usd: float | None
    comm_by_kind: tuple[tuple[str, float], ...] = ()
    dominated_by: tuple[int, ...] = ()
    dominates: int = 0
    simulated: bool = False

    @property
    def on_front(self) -> bool:
        return not self.dominated_by

    def value(self, objective: str) -> float:
        """The value of one objective (its unit: `OBJECTIVE_UNITS`)."""
        if objective == "step_time":
            return self.step_time_s
        if objective == "memory":
            return self.memory_bytes
        if objective == "communication":
            return self.comm_bytes
        if objective == "cost":
            if self.cost_usd is None:
                raise ParetoError(
                    f"{self.config}: no cost (the hardware has no price_per_chip_hour); "
                    "choose objectives without 'cost' or give the chip a price"
                )
            return self.cost_usd
        raise ParetoError(_unknown(objective))

    def values(self, objectives: Sequence[str]) -> tuple[float, ...]:
        return tuple(self.value(o) for o in objectives)

    def summary(self) -> str:
        """One line: the config and every value with its unit."""
        parts = [
            f"step {self.step_time_s:.4g} s", f"memory {self.memory_bytes / _GIB:.2f} GiB",
            f"sends {self.comm_bytes / 1e9:.4g} GB",
        ]  # fmt: skip
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:.4g} per step")
        parts.append("simulated" if self.simulated else "estimated")
        return f"{self.config}: " + ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "config": self.config.as_dict(), "config_text": str(self.config),
            "step_time_s": self.step_time_s, "memory_bytes": self.memory_bytes,
            "comm_bytes": self.comm_bytes, "comm_by_kind": dict(self.comm_by_kind),
            "cost_usd": self.cost_usd, "dominated_by": list(self.dominated_by),
            "dominates": self.dominates, "simulated": self.simulated,
        }  # fmt: skip


@dataclass(frozen=True)
class ParetoFront:
    """The non-dominated fitting configurations, and the dominated ones with their dominators.

    Attributes:
        objectives: the objectives compared (all minimised), in the order given.
        front: the non-dominated points, sorted by the objectives in order (the first
            objective ascending, ties broken by the next).
        dominated: every other fitting configuration, in the same order, each with
            ``dominated_by`` (indices into ``front``).
        ties: groups of front indices whose objective values are identical (neither
            dominates the other; both are kept).
        duplicates: configurations given twice (the same config after the recompute
            ladder's normalisation), counted once.
        chosen: the index in ``front`` of the plan's ``config`` (the simulated fastest), or
            None when the estimates put it off the front (``locate`` then finds it).
        price_per_hour: US dollars per hour of the whole job (None: no price).
        source: where the objective values come from.
    """

    objectives: tuple[str, ...]
    front: tuple[ParetoPoint, ...]
    dominated: tuple[ParetoPoint, ...]
    ties: tuple[tuple[int, ...], ...] = ()
    duplicates: int = 0
    chosen: int | None = None
    price_per_hour: float | None = None
    source: str = "closed-form estimates; points marked simulated: event-by-event simulation"
    compute_time_s: float = field(compare=False, default=0.0)

    @property
    def n_dominated(self) -> int:
        return len(self.dominated)

    @property
    def points(self) -> tuple[ParetoPoint, ...]:
        """Front then dominated: every fitting configuration once."""
        return self.front + self.dominated

    @property
    def fastest(self) -> ParetoPoint:
        """The plan's config when it is on the front (``chosen``), else the fitting point
        with the least step time (the least values of the other objectives among equal
        times). They differ only where plan_training's ranking treats step times within
        1e-9 of each other as equal and takes less memory first."""
        if self.chosen is not None:
            return self.front[self.chosen]
        return min(self.points, key=lambda p: (p.step_time_s, p.values(self.objectives)))

    def locate(self, config: ParallelConfig) -> ParetoPoint | None:
        """The point of ``config`` (front or dominated), or None if it is not a fitting
        configuration of this search."""
        return next((p for p in self.points if p.config == config), None)

    def dominated_by(self, index: int) -> tuple[ParetoPoint, ...]:
        """The dominated points that front point ``index`` dominates."""
        return tuple(p for p in self.dominated if index in p.dominated_by)

    def table(self) -> str:
        """The front as text, one line per point, with its dominated count."""
        lines = [
            f"Pareto front over {', '.join(self.objectives)}: {len(self.front)} of "
            f"{len(self.points)} fitting configurations ({self.n_dominated} dominated; "
            f"values: {self.source})"
        ]
        for i, p in enumerate(self.front):
            mark = " <- plan" if i == self.chosen else ""
            lines.append(f"  [{i}] {p.summary()}; dominates {p.dominates}{mark}")
        for group in self.ties:
            lines.append(f"  tie (identical values, both kept): {', '.join(map(str, group))}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {
            "objectives": list(self.objectives), "front": [p.as_dict() for p in self.front],
            "dominated": [p.as_dict() for p in self.dominated],
            "ties": [list(t) for t in self.ties], "duplicates": self.duplicates,
            "chosen": self.chosen, "price_per_hour": self.price_per_hour, "source": self.source,
        }  # fmt: skip

    def __str__(self) -> str:
        return (
            f"ParetoFront({', '.join(self.objectives)}: {len(self.front)} on the front, "
            f"{self.n_dominated} dominated)"
        )


def _unknown(name: object) -> str:
    return (
        f"unknown objective {name!r}; expected among {', '.join(map(repr, OBJECTIVES))} "
        f"(e.g. objectives={DEFAULT_OBJECTIVES!r})"
    )


def check_objectives(
    objectives: object, price: float | None, where: str = "the hardware"
) -> tuple[str, ...]:
    """The objectives as a tuple, checked: known names, no repeats, ``cost`` only with a price.

    ``price``: the chip's (or job's) price, None when there is none; ``where``: what has the
    price, for the message.

    >>> check_objectives(["step_time", "memory"], None)
    ('step_time', 'memory')
    """
    if isinstance(objectives, str) or not isinstance(objectives, Iterable):
        raise ParetoError(
            f"objectives={objectives!r}; expected a tuple of objective names such as "
            f"{DEFAULT_OBJECTIVES!r}"
        )
    out = tuple(objectives)
    if not out:
        raise ParetoError(
            f"objectives=(); expected at least one of {', '.join(map(repr, OBJECTIVES))}"
        )
    for o in out:
        if o not in OBJECTIVES:
            raise ParetoError(_unknown(o))
    repeated = sorted({o for o in out if out.count(o) > 1})
    if repeated:
        raise ParetoError(f"objectives={out!r} names {repeated[0]!r} twice; list each once")
    if "cost" in out and price is None:
        raise ParetoError(
            f"objective 'cost' needs a chip price, and {where} has none; add "
            "'price_usd_per_chip_hour' and 'price_source' to the chip of its "
            "datasets/hardware profile (a100-80g and h100-sxm have one), or pass a Cluster "
            "whose Chip has price_per_chip_hour, or drop 'cost' from the objectives"
        )
    return out


def job_price_per_hour(price_per_chip_hour: float | None, devices: int) -> float | None:
    """US dollars per hour of ``devices`` chips at one price (None when unpriced)."""
    if price_per_chip_hour is not None and not is_number(price_per_chip_hour, minimum=0,
                                                         numpy=True):  # fmt: skip
        raise ParetoError(
            f"price_per_chip_hour={price_per_chip_hour!r}; expected a finite price >= 0 or None"
        )
    if not is_int(devices, minimum=1, numpy=True):
        raise ParetoError(f"devices={devices!r}; expected an int >= 1")
    return None if price_per_chip_hour is None else float(price_per_chip_hour) * int(devices)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` no worse than ``b`` everywhere and strictly better somewhere (minimising; exact).

    >>> dominates((1, 2), (1, 3)), dominates((1, 2), (1, 2)), dominates((1, 3), (2, 2))
    (True, False, False)
    """
    va, vb = _vector(a, "a"), _vector(b, "b")
    if len(va) != len(vb):
        raise ParetoError(
            f"dominates: a has {len(va)} objective values and b {len(vb)}; compare points of "
            "the same objectives"
        )
    return all(x <= y for x, y in zip(va, vb, strict=True)) and any(
        x < y for x, y in zip(va, vb, strict=True)
    )


def _vector(v: object, name: str) -> tuple[float, ...]:
    """``v`` as a tuple of numbers (not NaN: it cannot be ranked)."""
    if not isinstance(v, Sequence | np.ndarray) or isinstance(v, str) or not all(
        is_number(x, numpy=True) for x in v
    ):  # fmt: skip
        raise ParetoError(f"{name}={v!r}; expected a sequence of finite objective values")
    return tuple(float(x) for x in v)


def _point(r: SimResult, price_per_hour: float | None, simulated: bool) -> ParetoPoint:
    comm = tuple((k, float(v)) for k, v in r.comm_bytes)
    cost = None if price_per_hour is None else price_per_hour * r.step_time_s / _SECONDS_PER_HOUR
    return ParetoPoint(
        config=r.config, step_time_s=r.step_time_s, memory_bytes=float(r.memory.total),
        comm_bytes=math.fsum(v for _, v in comm), cost_usd=cost, comm_by_kind=comm,
        simulated=simulated,
    )  # fmt: skip


def pareto_front(
    results: Iterable[SimResult], objectives: Sequence[str] = DEFAULT_OBJECTIVES, *,
    price_per_hour: float | None = None, chosen: ParallelConfig | None = None,
    simulated: Iterable[SimResult] = (),
) -> ParetoFront:  # fmt: skip
    """The Pareto front of the fitting ``results`` (estimates or simulations of one job).

    Args:
        results: SimResults; those over memory are left out, a config seen twice counts once.
        objectives: names among `OBJECTIVES` (checked; ``cost`` needs ``price_per_hour``).
        price_per_hour: US dollars per hour of the whole job (cost per step = this x step
            time / 3600).
        chosen: the plan's config, marked in ``ParetoFront.chosen``.
        simulated: event-by-event simulations that replace the result of the same config
            (one over memory removes it); points built from them are marked ``simulated``.

    >>> from explorer.training import estimate, ParallelConfig
    >>> rs = [estimate("gpt2", ParallelConfig(dp=8 // t, tp=t), "a100-80g", 64, 512)
    ...       for t in (1, 2, 4)]
    >>> f = pareto_front(rs, ("step_time", "memory"))
    >>> len(f.front) + f.n_dominated
    3
    """
    import time

    t0 = time.perf_counter()
    objectives = check_objectives(objectives, price_per_hour, "pareto_front(price_per_hour=None)")
    results, simulated = _results(results, "results"), _results(simulated, "simulated")
    exact = {s.config: s for s in simulated}
    points: list[ParetoPoint] = []
    seen: set[ParallelConfig] = set()
    duplicates = 0
    for r in itertools.chain(results, exact.values()):
        if r.config in seen:
            duplicates += r.config not in exact or r is not exact[r.config]
            continue
        seen.add(r.config)
        r = exact.get(r.config, r)
        if r.fits:
            points.append(_point(r, price_per_hour, r.timeline is not None))
    if not points:
        return ParetoFront(objectives, (), (), duplicates=duplicates,
                           price_per_hour=price_per_hour)  # fmt: skip
    values = np.array([p.values(objectives) for p in points], dtype=np.float64)
    front_idx, dom_idx, by = pareto_split(values)
    fv = values[front_idx]
    counts = by.sum(axis=0)
    front = [_replace(points[i], dominates=int(c)) for i, c in zip(front_idx, counts, strict=True)]
    dominated = tuple(
        _replace(points[i], dominated_by=tuple(int(j) for j in np.flatnonzero(by[d])))
        for d, i in enumerate(dom_idx)
    )
    ties = _ties(fv)
    pick = None
    if chosen is not None:
        pick = next((j for j, p in enumerate(front) if p.config == chosen), None)
    return ParetoFront(
        objectives=objectives, front=tuple(front), dominated=dominated, ties=ties,
        duplicates=duplicates, chosen=pick, price_per_hour=price_per_hour,
        compute_time_s=time.perf_counter() - t0,
    )  # fmt: skip


def _results(rs: object, name: str) -> list[SimResult]:
    if isinstance(rs, str | bytes) or not isinstance(rs, Iterable):
        raise ParetoError(f"{name}={rs!r}; expected an iterable of SimResult (estimate/simulate)")
    out = list(rs)
    bad = [r for r in out if not isinstance(r, SimResult)]
    if bad:
        raise ParetoError(
            f"{name} holds {bad[0]!r} ({type(bad[0]).__name__}); expected SimResult values "
            "(estimate or simulate)"
        )
    return out


def pareto_split(values: np.ndarray) -> tuple[list[int], list[int], np.ndarray]:
    """Split the rows of ``values`` (points x objectives, all minimised) exactly.

    Returns ``(front, dominated, by)``: the row indices of the non-dominated points and of
    the others, each in lexicographic order of their values, and ``by[d, f]``: front point
    ``front[f]`` dominates ``dominated[d]``. Every dominated row has at least one True
    (domination is transitive and the set finite).

    >>> f, d, by = pareto_split(np.array([[1.0, 3.0], [2.0, 2.0], [2.0, 3.0], [1.0, 3.0]]))
    >>> f, d, by.tolist()
    ([0, 3, 1], [2], [[True, True, True]])
    """
    try:
        values = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ParetoError(
            f"pareto_split: expected a (points x objectives) array of numbers ({e})"
        ) from None
    if values.ndim != 2 or not np.all(np.isfinite(values)):
        raise ParetoError(
            f"pareto_split: expected a finite (points x objectives) array, got shape "
            f"{values.shape} (NaN or infinity cannot be ranked)"
        )
    # Lexicographic order: a dominator is lexicographically smaller than what it dominates,
    # so one pass against the front found so far decides each point.
    order = np.lexsort(values.T[::-1]) if len(values) else np.zeros(0, dtype=int)
    front: list[int] = []
    for i in order:
        v = values[i]
        if front:
            f = values[front]
            if np.any(np.all(f <= v, axis=1) & np.any(f < v, axis=1)):
                continue
        front.append(int(i))
    on_front = np.zeros(len(values), dtype=bool)
    on_front[front] = True
    dominated = [int(i) for i in order if not on_front[i]]
    fv, dv = values[front], values[dominated]
    le = np.all(fv[None, :, :] <= dv[:, None, :], axis=2)
    lt = np.any(fv[None, :, :] < dv[:, None, :], axis=2)
    return front, dominated, (le & lt).reshape(len(dominated), len(front))


def _replace(p: ParetoPoint, **changes: object) -> ParetoPoint:
    from dataclasses import replace

    return replace(p, **changes)


def _ties(fv: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Groups (two or more) of front rows with identical values; the rows are sorted, so
    identical rows are adjacent."""
    groups: list[tuple[int, ...]] = []
    start = 0
    for j in range(1, len(fv) + 1):
        if j == len(fv) or not np.array_equal(fv[j], fv[start]):
            if j - start > 1:
                groups.append(tuple(range(start, j)))
            start = j
    return tuple(groups)
