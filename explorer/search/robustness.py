"""How robust a sharding plan's choice is: how far each `CostParams` weight and efficiency
can move before another of the top ``k`` plans costs less.

The plans compared are the ones the search kept (``ex.search(..., top_k=k)`` with
``method='ilp'`` or ``'exhaustive'``); each is re-costed under the changed knob on the
plan's own cost tables (`breakdown.plan_breakdown`, the solver's formula), so a scan needs
no search. A plan that kept no rivals (the other methods) is searched again, with its method
and constraints, at every factor tried (what the CostTuner's sliders do): the first plan
that differs is the rival, and the scan costs one search per factor (~40-70). One knob at a time, the factor goes from 1 towards 0.5 and towards 2 (an
efficiency stops at 1), and where the cheapest plan changes it is bisected. Jointly, the
compute knobs and the communication knobs move to the corners of `SPAN` together.

The verdict is ``fragile`` when a knob flips the choice within `SPAN` or a corner does,
else ``robust``. A plan outside the top ``k`` may win earlier than the flip found: the
factor is exact among the ``k`` plans compared (with ``k`` at least every assignment, as
exhaustive search can keep on a small graph, it is exact for the graph).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from ..checks import is_int
from .breakdown import plan_breakdown
from .errors import SearchError
from .params import CostParams
from .plan import ShardingPlan
from .planner import search

__all__ = [
    "SearchRobustness", "SearchFlip", "search_robustness", "SEARCH_KNOBS", "SPAN", "quiet_lines",
]  # fmt: skip

#: A knob that flips the choice within x0.8 .. x1.25 makes it fragile (the cost model has
#: no prediction band of its own; the "20% lower bandwidth" the planner is asked about).
SPAN = (0.8, 1.25)
GRID_DOWN = (0.9, 0.8, 0.67, 0.5)
GRID_UP = (1.1, 1.25, 1.5, 2.0)
BISECT_STEPS = 8

#: knob -> (group for the joint corners, stops at 1)
SEARCH_KNOBS: dict[str, tuple[str, bool]] = {
    "alpha_compute": ("compute", False),
    "compute_efficiency": ("compute", True),
    "beta_communication": ("communication", False),
    "gamma_param_comm": ("communication", False),
    "bandwidth_efficiency": ("communication", True),
    "grad_comm_overlap": ("communication", True),
    "memory_weight_per_byte": ("memory", False),
}


@dataclass(frozen=True)
class SearchFlip:
    """``knob`` moved ``direction``: the factor at which plan ``rival`` (its index among
    the plans compared, 0 the chosen) costs less; None: none within ``limit``."""

    knob: str
    direction: Literal["down", "up"]
    factor: float | None
    rival: int | None
    limit: float
    changed_ops: int = 0

    def __str__(self) -> str:
        if self.factor is None:
            return f"{self.knob} {self.direction}: no flip within x{self.limit:.2f}"
        return (f"{self.knob} x{self.factor:.3g}: plan #{self.rival} wins "
                f"({self.changed_ops} ops change strategy)")  # fmt: skip


@dataclass(frozen=True)
class SearchRobustness:
    """The robustness scan of a sharding plan (see the module docstring).

    Attributes:
        plans: the plans compared, the chosen first.
        flips: one per knob and direction scanned.
        corners: ``(compute factor, communication factor, winning plan index)``.
        verdict: ``robust`` or ``fragile``; ``nearest``: the flip closest to x1.
    """

    plans: tuple[ShardingPlan, ...]
    flips: tuple[SearchFlip, ...]
    corners: tuple[tuple[float, float, int], ...]
    span: tuple[float, float]
    verdict: Literal["robust", "fragile"]
    nearest: SearchFlip | None

    @property
    def label(self) -> str:
        """``fragile (flips to plan #2 if beta_communication x0.83)``: shown by the views."""
        if self.nearest is None:
            return f"{self.verdict} (no knob flips it from x0.5 to x2, fractions up to 1)"
        f = self.nearest
        return (f"{self.verdict} (flips to plan #{f.rival}, {f.changed_ops} ops changed, if "
                f"{f.knob} x{f.factor:.2f})")  # fmt: skip

    def as_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict, "label": self.label, "span": list(self.span),
            "plans": [p.cost.total for p in self.plans],
            "flips": [dataclasses.asdict(f) for f in self.flips],
            "corners": [list(c) for c in self.corners],
        }  # fmt: skip

    def text(self) -> str:
        lines = [f"robustness: {self.label}",
                 f"  against the {len(self.plans) - 1} next plans; fragile if a knob flips it "
                 f"within x{self.span[0]:.2f}-x{self.span[1]:.2f}"]  # fmt: skip
        lines += [f"  {f}" for f in self.flips if f.factor is not None]
        lines += quiet_lines(self.flips)
        for fc, fm, w in self.corners:
            lines.append(f"  compute knobs x{fc:.2f}, communication knobs x{fm:.2f}: "
                         f"plan #{w} cheapest" + (" (flips)" if w else ""))  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def scaled(params: CostParams, changes: tuple[tuple[str, float], ...]) -> CostParams:
    """``params`` with each named knob multiplied by its factor."""
    return params.replace(**{k: getattr(params, k) * f for k, f in changes})


def _limit(params: CostParams, knob: str, factor: float) -> float:
    if SEARCH_KNOBS[knob][1] and factor > 1:
        return min(factor, 1.0 / getattr(params, knob))
    return factor


class _Research:
    """The winner at a factor: the plan's method run again (0: the same assignment)."""

    def __init__(self, plan: ShardingPlan, planner=None) -> None:
        self.plans = [plan]
        self.planner = planner
        self._seen: dict[tuple, int] = {}

    def winner(self, params: CostParams, changes: tuple[tuple[str, float], ...]) -> int:
        if changes not in self._seen:
            first, p = self.plans[0], scaled(params, changes)
            cons = first.constraints or None
            if self.planner is not None:
                q = self.planner.search(first.method, p, constraints=cons)
            else:
                q = search(first.graph, first.mesh, first.method, params=p, constraints=cons)
            names = [s.name for s in q.assignment.values()]
            same = [i for i, p in enumerate(self.plans)
                    if [s.name for s in p.assignment.values()] == names]  # fmt: skip
            if not same and not _cheaper(q, first, p):
                same = [0]  # another plan of the same cost (a tie) is not a flip
            if not same:
                self.plans.append(q)
                same = [len(self.plans) - 1]
            self._seen[changes] = same[0]
        return self._seen[changes]


def _cheaper(q: ShardingPlan, first: ShardingPlan, params: CostParams) -> bool:
    """``q`` costs less than ``first`` under ``params`` (beyond rounding: 1e-9 relative)."""
    a = plan_breakdown(first._model, params, list(first._choice)).total
    b = plan_breakdown(q._model, params, list(q._choice)).total
    return b < a * (1 - 1e-9)


class _Costs:
    def __init__(self, plans: tuple[ShardingPlan, ...]) -> None:
        self.plans = plans
        self._seen: dict[tuple, int] = {}

    def winner(self, params: CostParams, changes: tuple[tuple[str, float], ...]) -> int:
        if changes not in self._seen:
            p = scaled(params, changes)
            totals = [plan_breakdown(q._model, p, list(q._choice)).total for q in self.plans]
            # ties keep the earlier (better-ranked) plan, as the search's order does
            self._seen[changes] = min(range(len(totals)), key=lambda i: (totals[i], i))
        return self._seen[changes]


def _flip(costs: _Costs, params: CostParams, knob: str, direction) -> SearchFlip:
    grid = GRID_DOWN if direction == "down" else GRID_UP
    limit = _limit(params, knob, grid[-1])
    last = 1.0
    for g in grid:
        f = _limit(params, knob, g)
        if f == last:
            break
        if costs.winner(params, ((knob, f),)) != 0:
            lo, hi = last, f
            for _ in range(BISECT_STEPS):
                mid = math.sqrt(lo * hi)
                if costs.winner(params, ((knob, mid),)) == 0:
                    lo = mid
                else:
                    hi = mid
            w = costs.winner(params, ((knob, hi),))
            n = len(costs.plans[w].changed(costs.plans[0]))
            return SearchFlip(knob, direction, hi, w, limit, n)
        last = f
    return SearchFlip(knob, direction, None, None, limit)


def search_robustness(plan: ShardingPlan, k: int = 5, knobs: tuple[str, ...] | None = None,
                      planner=None) -> SearchRobustness:  # fmt: skip
    """Scan how far each CostParams knob can move before another of the plan's top ``k``
    plans costs less. ``planner``: the `Planner` that made a plan without rivals (its
    cost tables are reused for the searches again; default: ``ex.search``'s own).

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> plan = ex.search(g, ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g"), "ilp", top_k=3)
    >>> search_robustness(plan, k=3).verdict in ("robust", "fragile")
    True
    """
    if not isinstance(plan, ShardingPlan):
        raise SearchError(f"robustness: {plan!r:.60} is not a ShardingPlan (ex.search)")
    if not is_int(k, minimum=2):
        raise SearchError(f"robustness(k={k!r}): expected an int >= 2 (the chosen plan and "
                          "its rivals)")  # fmt: skip
    if not plan._others and plan.method == "sharding_propagation":
        raise SearchError(
            "robustness: a sharding_propagation plan follows annotations it does not keep, "
            f"so it cannot be searched again; search with method='ilp' and top_k={k} (or any "
            "other method)"
        )
    names = tuple(knobs) if knobs is not None else tuple(SEARCH_KNOBS)
    bad = [n for n in names if n not in SEARCH_KNOBS]
    if bad:
        raise SearchError(f"robustness: unknown knob {', '.join(map(repr, bad))}; the knobs "
                          f"are {', '.join(SEARCH_KNOBS)}")  # fmt: skip
    p = plan.params
    if p.unit == "bytes":  # efficiencies and overlap do not enter a byte-based cost
        names = tuple(n for n in names if not SEARCH_KNOBS[n][1])
    if planner is not None and (planner.graph is not plan.graph or planner.mesh != plan.mesh):
        raise SearchError(
            "robustness: planner= plans another graph or mesh than the plan; pass the Planner "
            "that made it, or none"
        )
    costs = (_Costs(plan.top_k(min(k, 1 + len(plan._others)))) if plan._others
             else _Research(plan, planner))  # fmt: skip
    flips = []
    for n in names:
        if getattr(p, n) <= 0:
            continue  # a knob at 0 has no factor to move
        for d in ("down", "up"):
            if d == "up" and _limit(p, n, 2.0) <= 1.0:
                continue
            flips.append(_flip(costs, p, n, d))
    corners = []
    for fc in SPAN:
        for fm in SPAN:
            ch = tuple((n, _limit(p, n, fc if SEARCH_KNOBS[n][0] == "compute" else fm))
                       for n in names if getattr(p, n) > 0
                       and SEARCH_KNOBS[n][0] in ("compute", "communication"))  # fmt: skip
            corners.append((fc, fm, costs.winner(p, ch)))
    found = [f for f in flips if f.factor is not None]
    nearest = min(found, key=lambda f: abs(math.log(f.factor)), default=None)
    inside = any(SPAN[0] <= f.factor <= SPAN[1] for f in found)
    verdict = "fragile" if inside or any(w for _, _, w in corners) else "robust"
    return SearchRobustness(tuple(costs.plans), tuple(flips), tuple(corners), SPAN, verdict,
                            nearest)  # fmt: skip


def quiet_lines(flips) -> list[str]:
    """The knobs that flipped nothing, with the range scanned (a fraction stops at 1): a
    line of a robustness text (sharding and training scans alike; each flip has ``knob``,
    ``direction``, ``factor`` and ``limit``)."""
    ranges: dict[str, list[float]] = {}
    for f in flips:
        ranges.setdefault(f.knob, [1.0, 1.0])
        if f.factor is None:
            ranges[f.knob][f.direction == "up"] = f.limit
    flipped = {f.knob for f in flips if f.factor is not None}
    quiet = [f"{k} x{lo:.2f}-x{hi:.2f}" for k, (lo, hi) in ranges.items() if k not in flipped]
    return [f"  no flip within: {', '.join(quiet)}"] if quiet else []
