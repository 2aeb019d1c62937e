"""Which layout to re-plan on after losing devices: a cheap screen of device counts and
(tp, pp, dp, cp) structures before the full search.

After a node loss the largest usable device count is not always the fastest (a batch that
does not split over it forces a deep pipeline), and the old tensor-parallel degree is not
always the best on the new count. Planning every count with every tp in full costs seconds
(each `plan_training` simulates its best few event by event). `screen` instead estimates,
for each of a few whole-node device counts, the structures valid for the batch (per tp and
cp the shallowest pipelines, until `DEEPER` of them fit) with one representative
configuration: the smallest microbatch (and the old plan's: a shallow pipeline runs large
microbatches best), 1F1B, ZeRO-1 (and the higher stages
when ZeRO-1 needs recomputation to fit), the cheapest recompute policy that fits: a few milliseconds each, no event
simulation. `replan` then runs the full `plan_training` (every microbatch size, schedule,
ZeRO stage; the best few simulated) only on the best few structures screened.

The screen is a ranking heuristic: a structure whose representative configuration
estimates slower can still win once every option is searched, so the result is not
guaranteed to equal the full search's (bench/beyond.py prints the gap).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...hardware import Cluster
from ...models import ModelConfig
from ...search.errors import SearchError
from ..config import ParallelConfig
from ..errors import ParallelConfigError
from ..params import TrainingParams
from ..planning.space import (
    RECOMPUTE_LADDER,
    SearchSpace,
    cheapest_recompute,
    configurations,
    structures,
)
from ..simulate import estimate
from ..step_model.terms.zero import stages_worth_searching

__all__ = ["Screened", "CountTried", "usable_counts", "screen", "final_spaces"]

#: Per device count, tp and cp, the screen estimates pipeline depths shallowest first and
#: stops after this many fit (a deeper pipeline has more bubble and fewer replicas).
DEEPER = 2


@dataclass(frozen=True)
class Screened:
    """One structure on one device count, with its representative configuration's estimate."""

    devices: int
    config: ParallelConfig
    step_time_s: float

    def __str__(self) -> str:
        c = self.config
        return f"dp{c.dp} x tp{c.tp} x pp{c.pp}" + (f" x cp{c.cp}" if c.cp > 1 else "")


@dataclass(frozen=True)
class CountTried:
    """What the screen found on one device count: its structures and the best estimate."""

    devices: int
    structures: int  # valid for the batch
    best: Screened | None
    estimated: int = 0  # the structures estimated (`DEEPER` skips the deepest pipelines)

    def __str__(self) -> str:
        head = f"{self.devices} devices: {self.estimated} of {self.structures} structure(s)"
        if self.best is None:
            return f"{head}, none fits"
        return f"{head}, best {self.best} ~{self.best.step_time_s:.3f} s (estimate)"


def usable_counts(cfg: ModelConfig, survivors: int, cluster: Cluster, gb: int, seq: int,
                  space: SearchSpace, count: int) -> list[int]:  # fmt: skip
    """The ``count`` largest whole-node device counts <= ``survivors`` with at least one
    valid (tp, pp, dp, cp) structure for the batch (largest first)."""
    per = cluster.chips_per_node
    out, n = [], survivors // per * per
    while n >= per and len(out) < count:
        if structures(cfg, n, cluster, gb, seq, space)[0]:
            out.append(n)
        n -= per
    return out


def screen(cfg: ModelConfig, counts: list[int], cluster: Cluster, gb: int, seq: int,
           space: SearchSpace, tparams: TrainingParams, microbatch: int | None = None,
           ) -> tuple[list[Screened], list[CountTried]]:  # fmt: skip
    """The structures of every count of ``counts`` estimated with their representative
    configuration (module docstring), per tp and cp the shallowest pipelines until `DEEPER`
    fit: the fitting ones fastest first, and per count what was tried. ``microbatch``: a
    second microbatch size tried beside the smallest (the old plan's)."""
    mbs = {min(space.microbatch_sizes)} | ({microbatch} & set(space.microbatch_sizes))
    narrow = dataclasses.replace(
        space, microbatch_sizes=tuple(sorted(mbs)),
        schedules=("1f1b",) if "1f1b" in space.schedules else space.schedules[:1],
        virtual_stages=space.virtual_stages[:1],
    )  # fmt: skip
    found, tried = [], []
    for n in counts:
        st = structures(cfg, n, cluster, gb, seq, space)[0]
        best, fitting, estimated = None, {}, 0
        for tp, pp, dp, cp in sorted(st, key=lambda x: (x[0], x[3], x[1])):
            if fitting.get((tp, cp), 0) >= DEEPER:
                continue  # deeper pipelines: more bubble, less data parallelism
            estimated += 1
            r = _representative(cfg, (tp, pp, dp, cp), cluster, gb, seq, narrow, tparams)
            if r is not None:
                fitting[tp, cp] = fitting.get((tp, cp), 0) + 1
                s = Screened(n, r.config, r.step_time_s)
                found.append(s)
                best = s if best is None or s.step_time_s < best.step_time_s else best
        tried.append(CountTried(n, len(st), best, estimated))
    found.sort(key=lambda s: (s.step_time_s, -s.devices))
    return found, tried


def final_spaces(top: list[Screened], space: SearchSpace) -> list[tuple[int, SearchSpace]]:
    """Per device count among ``top`` (in rank order), ``space`` narrowed to the tp, pp and cp
    of its screened structures: what the full search then plans."""
    out: dict[int, list[Screened]] = {}
    for s in top:
        out.setdefault(s.devices, []).append(s)
    return [
        (n, dataclasses.replace(
            space, tp=tuple(sorted({s.config.tp for s in ss})),
            pp=tuple(sorted({s.config.pp for s in ss})),
            cp=tuple(sorted({s.config.cp for s in ss})),
        ))
        for n, ss in out.items()
    ]  # fmt: skip


def _representative(cfg, structure, cluster, gb, seq, narrow, tparams):
    """The fastest fitting estimate of the structure's narrowed configurations, trying ZeRO-1
    first and the higher stages only when ZeRO-1 needs recomputation to fit (None: nothing
    fits)."""
    tp, pp, dp, cp = structure
    zeros = sorted(stages_worth_searching(narrow.zero, dp * cp), key=lambda z: (z != 1, -z))
    best, first = None, min(narrow.recompute, key=RECOMPUTE_LADDER.index)
    for zero in zeros:
        plain = False  # a configuration of this stage fits without recomputation
        for base in configurations(cfg, tp, pp, dp, cp, gb, narrow):
            if base.zero != zero:
                continue
            tried = cheapest_recompute(
                narrow.recompute,
                lambda rec, base=base: estimate(
                    cfg, base.replace(recompute=rec), cluster, gb, seq, tparams
                ),
                fits=lambda r: r.fits,
                stop_on=(ParallelConfigError, SearchError),  # SearchError: no layer fits the cap
            )
            if tried and tried[-1][1].fits:
                rec, r = tried[-1]
                best = r if best is None or r.step_time_s < best.step_time_s else best
                plain = plain or rec == first
        if plain:
            break
    return best
