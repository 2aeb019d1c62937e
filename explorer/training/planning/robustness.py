"""How robust a training plan's choice is: how far each efficiency, bandwidth and overlap
knob can move before one of its rivals (the plan's next best configurations) is faster.

One knob at a time: the knob is multiplied by factors from 1 towards ``0.5`` and towards
``2`` (a fraction stops at 1), every configuration is simulated again (`simulate`, as the
plan's ranking did), and where the fastest fitting configuration changes the factor is
bisected (to ``BISECT_STEPS`` halvings of its log interval). Jointly: the compute knobs
and the bandwidth knobs move together to the corners of the plan's prediction band
(`SimResult.band`: a measured step is expected within ``x low .. x high`` of the
prediction, so each group of knobs may be off by the inverse of that).

The verdict is ``fragile`` when a knob flips the choice within the band's span (without a
band, `DEFAULT_SPAN`) or a corner of the band does; else ``robust``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ...checks import is_int
from ...hardware import Cluster
from ...search.robustness import quiet_lines
from ..config import ParallelConfig
from ..errors import TrainingError
from ..params import TrainingParams
from ..simulate import SimResult, simulate
from .diff import Context, context_of, is_plan

__all__ = ["Knob", "Flip", "Corner", "Robustness", "robustness", "KNOBS", "knobs_for",
           "DEFAULT_SPAN"]  # fmt: skip

#: Without a prediction band: a knob that flips the choice within x0.8 .. x1.25 makes it
#: fragile (the "20% lower bandwidth" the planner is asked about).
DEFAULT_SPAN = (0.8, 1.25)
# Each factor simulates every configuration again (~20-60 ms each on a 96-layer model), so
# the grid is coarse and the bisection short: 5 halvings of log(1.25) place a flip within
# 0.7% (a step time moves smoothly with a knob; a flip that flips back between two grid
# points would be missed).
GRID_DOWN = (0.8, 0.5)
GRID_UP = (1.25, 2.0)
BISECT_STEPS = 5

Setter = Callable[[TrainingParams, Cluster, float], tuple[TrainingParams, Cluster]]


@dataclass(frozen=True)
class Knob:
    """A knob the scan moves: ``group`` is ``compute`` or ``communication`` (for the
    joint corners); ``fraction`` knobs stop at 1."""

    name: str
    group: Literal["compute", "communication"]
    fraction: bool
    get: Callable[[TrainingParams, Cluster], float]
    set: Setter


def _param(name: str, group, fraction=True) -> Knob:
    def get(p, c):
        return float(getattr(p.resolved(c.chip), name))

    def put(p, c, v):
        return p.replace(**{name: v}), c

    return Knob(name, group, fraction, get, put)


def _bandwidth(level: str) -> Knob:
    """The bandwidth of one link level of the cluster (``Cluster.levels``): a level of its
    ``link_levels``, or the intra-/inter-node figure of the two-level default."""
    fields = {"intra-node": "intra_node_bandwidth_bytes_per_s",
              "inter-node": "inter_node_bandwidth_bytes_per_s"}  # fmt: skip

    def get(p, c):
        if c.link_levels:
            return float(next(lv.bandwidth_bytes_per_s for lv in c.link_levels
                              if lv.name == level))  # fmt: skip
        return float(getattr(c, fields[level]))

    def put(p, c, v):
        if c.link_levels:
            levels = tuple(dataclasses.replace(lv, bandwidth_bytes_per_s=v)
                           if lv.name == level else lv for lv in c.link_levels)  # fmt: skip
            # the intra/inter fields mirror the node's level and the one above it
            node = next(i for i, lv in enumerate(levels) if lv.group_size == c.chips_per_node)
            mirror = {node: "intra-node", node + 1: "inter-node"}
            i = next(i for i, lv in enumerate(levels) if lv.name == level)
            extra = {fields[mirror[i]]: v} if i in mirror else {}
            return p, dataclasses.replace(c, link_levels=levels, **extra)
        return p, dataclasses.replace(c, **{fields[level]: v})

    return Knob(f"bandwidth {level}", "communication", False, get, put)


#: The knobs of the step model every cluster has; `knobs_for` adds one bandwidth knob per
#: link level of the plan's cluster.
KNOBS: tuple[Knob, ...] = (
    _param("matmul_efficiency_cap", "compute"),
    _param("flash_attention_efficiency", "compute"),
    _param("hbm_efficiency", "compute"),
    _param("grad_overlap_fraction", "communication"),
    _param("tp_comm_overlap_fraction", "communication"),
)


def knobs_for(cluster: Cluster) -> dict[str, Knob]:
    """The knobs a scan of a plan on ``cluster`` moves, by name: `KNOBS` and the bandwidth
    of each of its link levels (``bandwidth intra-node``, ``bandwidth nvlink``, ...)."""
    names = [lv.name for lv in (cluster.link_levels or ())] or ["intra-node", "inter-node"]
    return {k.name: k for k in (*KNOBS[:3], *(_bandwidth(n) for n in names), *KNOBS[3:])}


@dataclass(frozen=True)
class Flip:
    """One knob moved one way: the factor at which ``rival`` becomes faster than the
    chosen configuration (None: no flip within the range scanned, ``limit``)."""

    knob: str
    direction: Literal["down", "up"]
    factor: float | None
    rival: str | None
    limit: float

    def __str__(self) -> str:
        if self.factor is None:
            return f"{self.knob} {self.direction}: no flip down to x{self.limit:.2f}" if (
                self.direction == "down") else f"{self.knob} up: no flip up to x{self.limit:.2f}"  # fmt: skip
        return f"{self.knob} x{self.factor:.3g}: {self.rival} wins"


@dataclass(frozen=True)
class Corner:
    """The compute knobs x ``compute`` and the bandwidth knobs x ``communication``
    together; ``winner`` the fastest fitting configuration there."""

    compute: float
    communication: float
    winner: str
    flips: bool


@dataclass(frozen=True)
class Robustness:
    """The robustness scan of a plan (see the module docstring).

    Attributes:
        chosen, rivals: the configurations compared (the rivals the plan's alternatives
            that re-simulate slower than the chosen one).
        flips: one per knob and direction scanned.
        corners: the joint corners of the prediction band.
        span: the factors within which a flip makes the choice fragile.
        verdict: ``robust`` or ``fragile``; ``nearest``: the flip closest to x1.
    """

    chosen: str
    rivals: tuple[str, ...]
    flips: tuple[Flip, ...]
    corners: tuple[Corner, ...]
    span: tuple[float, float]
    span_basis: str
    verdict: Literal["robust", "fragile"]
    nearest: Flip | None

    @property
    def label(self) -> str:
        """``robust (flips to X if knob Y x0.8)``: what the views show next to the plan."""
        if self.nearest is None:
            return f"{self.verdict} (no knob flips it from x0.5 to x2, fractions up to 1)"
        f = self.nearest
        rival = f.rival.split(", mb")[0] if f.rival else f.rival  # the layout is enough here
        return f"{self.verdict} (flips to {rival} if {f.knob} x{f.factor:.2f})"

    def as_dict(self) -> dict[str, object]:
        return {
            "chosen": self.chosen, "rivals": list(self.rivals), "verdict": self.verdict,
            "label": self.label, "span": list(self.span), "span_basis": self.span_basis,
            "flips": [dataclasses.asdict(f) for f in self.flips],
            "corners": [dataclasses.asdict(c) for c in self.corners],
        }  # fmt: skip

    def text(self) -> str:
        lines = [f"robustness: {self.label}",
                 f"  against {len(self.rivals)} rivals; fragile if a knob flips it within "
                 f"x{self.span[0]:.2f}-x{self.span[1]:.2f} ({self.span_basis})"]  # fmt: skip
        lines += [f"  {f}" for f in self.flips if f.factor is not None]
        lines += quiet_lines(self.flips)
        for c in self.corners:
            lines.append(f"  band corner: compute knobs x{c.compute:.2f}, bandwidth knobs "
                         f"x{c.communication:.2f}: {c.winner} fastest"
                         + (" (flips)" if c.flips else ""))  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


class _Scan:
    """Simulations of the candidates under changed knobs, remembered per change."""

    def __init__(self, ctx: Context, configs: list[ParallelConfig]) -> None:
        self.ctx, self.configs = ctx, configs
        self.knobs = knobs_for(ctx.cluster)
        self._seen: dict[tuple, list[SimResult]] = {}

    def sims(self, changes: tuple[tuple[str, float], ...]) -> list[SimResult]:
        if changes not in self._seen:
            p, c = self.ctx.params, self.ctx.cluster
            for name, f in changes:
                k = self.knobs[name]
                p, c = k.set(p, c, k.get(self.ctx.params, self.ctx.cluster) * f)
            self._seen[changes] = [simulate(self.ctx.model, cfg, c, self.ctx.global_batch,
                                            self.ctx.seq, p) for cfg in self.configs]  # fmt: skip
        return self._seen[changes]

    def winner(self, changes) -> int:
        sims = self.sims(changes)
        fitting = [i for i, s in enumerate(sims) if s.fits] or list(range(len(sims)))
        return min(fitting, key=lambda i: rank(sims[i]))


def rank(r: SimResult) -> tuple[float, float]:
    """`ranking.rank`'s order (faster first, ties to the nanosecond by memory); here
    because `ranking` stands above `result`, which offers ``plan.robustness``."""
    return (round(r.step_time_s / 1e-9) * 1e-9, r.memory.total)


def _limit(knob: Knob, base: float, factor: float) -> float:
    return min(factor, 1.0 / base) if knob.fraction and factor > 1 else factor


def _flip(scan: _Scan, knob: Knob, base: float, direction) -> Flip:
    grid = GRID_DOWN if direction == "down" else GRID_UP
    last = 1.0
    limit = _limit(knob, base, grid[-1])
    for g in grid:
        f = _limit(knob, base, g)
        if f == last:
            break
        w = scan.winner(((knob.name, f),))
        if w != 0:
            lo, hi = last, f  # chosen wins at lo, rival at hi
            for _ in range(BISECT_STEPS):
                mid = math.sqrt(lo * hi)
                if scan.winner(((knob.name, mid),)) == 0:
                    lo = mid
                else:
                    hi = mid
            w = scan.winner(((knob.name, hi),))
            return Flip(knob.name, direction, hi, str(scan.configs[w]), limit)
        last = f
    return Flip(knob.name, direction, None, None, limit)


# The last scans, by plan identity (the report and the views ask for the same plan's).
_LAST: dict[tuple[int, int, tuple | None], tuple[object, Robustness]] = {}


def scanned(plan) -> Robustness | None:
    """The default scan (every knob, ``k=5``) of ``plan`` if it was run already, else None
    (the report shows a scan without paying for one)."""
    seen = _LAST.get((id(plan), 5, None))
    return seen[1] if seen is not None and seen[0] is plan else None


def robustness(plan, k: int = 5, knobs: tuple[str, ...] | None = None) -> Robustness:
    """Scan how far each knob can move before another of the plan's top ``k`` rivals
    wins, and the joint corners of its prediction band.

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    >>> plan.robustness(k=2).verdict in ("robust", "fragile")
    True
    """
    if not is_plan(plan):
        raise TrainingError(f"robustness: {plan!r:.60} is not a TrainingPlan (ex.plan_training)")
    if not is_int(k, minimum=1):
        raise TrainingError(f"robustness(k={k!r}): expected an int >= 1 (rivals to compare)")
    known = knobs_for(context_of(plan).cluster)
    names = tuple(knobs) if knobs is not None else tuple(known)
    bad = [n for n in names if n not in known]
    if bad:
        raise TrainingError(
            f"robustness: unknown knob {', '.join(map(repr, bad))}; the knobs of this plan "
            f"are {', '.join(map(repr, known))}"
        )
    key = (id(plan), k, names if knobs is not None else None)
    seen = _LAST.get(key)
    if seen is not None and seen[0] is plan:
        return seen[1]
    result = _scan(plan, k, names)
    _LAST[key] = (plan, result)
    if len(_LAST) > 8:
        _LAST.pop(next(iter(_LAST)))
    return result


def _scan(plan, k: int, names: tuple[str, ...]) -> Robustness:
    ctx = context_of(plan)
    configs = [plan.sim.config, *(a.config for a in plan.alternatives[:k])]
    scan = _Scan(ctx, configs)
    base = scan.sims(())
    keep = [0] + [i for i in range(1, len(configs))
                  if not base[i].fits or rank(base[i]) > rank(base[0])]  # fmt: skip
    scan = _Scan(ctx, [configs[i] for i in keep])
    scan._seen[()] = [base[i] for i in keep]
    flips = []
    for n in names:
        knob = scan.knobs[n]
        value = knob.get(ctx.params, ctx.cluster)
        if value <= 0:
            continue  # a knob at 0 (an overlap switched off) has no factor to move
        for direction in ("down", "up"):
            if direction == "up" and _limit(knob, value, 2.0) <= 1.0:
                continue
            flips.append(_flip(scan, knob, value, direction))
    b = plan.sim.band
    if b is not None:
        span, basis = (1.0 / b.high, 1.0 / b.low), f"the prediction band {b}"
    else:
        span, basis = DEFAULT_SPAN, "no prediction band: x0.8-x1.25"
    corners = _corners(scan, names, span, ctx)
    found = [f for f in flips if f.factor is not None]
    nearest = min(found, key=lambda f: abs(math.log(f.factor)), default=None)
    inside = any(span[0] <= f.factor <= span[1] for f in found)
    verdict = "fragile" if inside or any(c.flips for c in corners) else "robust"
    return Robustness(
        chosen=str(configs[0]), rivals=tuple(str(c) for c in scan.configs[1:]),
        flips=tuple(flips), corners=corners, span=span, span_basis=basis, verdict=verdict,
        nearest=nearest,
    )  # fmt: skip


def _corners(scan: _Scan, names, span, ctx: Context) -> tuple[Corner, ...]:
    out = []
    for fc in span:
        for fm in span:
            changes = []
            for n in names:
                knob = scan.knobs[n]
                value = knob.get(ctx.params, ctx.cluster)
                f = fc if knob.group == "compute" else fm
                if value > 0:
                    changes.append((n, _limit(knob, value, f)))
            w = scan.winner(tuple(changes))
            out.append(Corner(fc, fm, str(scan.configs[w]), w != 0))
    return tuple(out)
