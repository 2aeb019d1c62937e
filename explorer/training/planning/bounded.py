"""The one-cluster search's estimates in branch-and-bound order (`plan_homogeneous`).

Each configuration (a structure's base before the recompute ladder) gets a floor under its
estimated step time (`bound.step_time_floor`: its compute, pipeline fill and the least
exposed communication, no split or recompute policy does better). The configurations that
differ only in their ZeRO stage first share one floor without the ZeRO terms; a group is
split into its configurations' own floors when it is the lowest left. The configurations
are estimated lowest floor first, each walking the recompute ladder; once ``keep``
fitting configurations are known (the simulated few plus the alternatives kept), a
configuration whose floor is above the ``keep``-th step time cannot enter the plan, nor can
any after it: they are skipped (``pruned``).

Before its estimate, a configuration's memory is asked as its ladder will ask it
(`simulate.ladder_fits`, ~0.1 ms against ~0.6 ms for the two rungs' estimates): when
``none`` does not fit, only a ``per_layer`` rung can enter the plan, and the ladder's
bisection over the fully recomputed layer counts gives the fewest it can take; the floor
rises by that recomputation (`bound.step_time_floor`'s ``recomputed``) and the
configuration goes back among the others. At real sizes most low floors belong to
configurations that need recomputation (GPT-3 175B on 256 A100s: ~400 floors below the
kept step times, ~350 of them over memory without recomputation), so most are skipped
after a question or a few instead of estimated. The step models asked are kept for the
estimate. A configuration whose model states alone exceed the cap
(`simulate.states_over_cap`) is asked nothing more; once a step time is kept, the
bisection stops as soon as the fewest count it can still find has a floor above it (the
configuration is skipped whatever count it would end on).

After the chosen plan is simulated, the skipped configurations whose floor is below its
step time are estimated after all, lowest floor first, until no floor left is below the
over-memory list's last entry (it names the fastest configurations that do not fit).

Results keep the order of the enumeration, whatever order they were estimated in, so the
stable sorts of the plan (ties in step time and memory) pick as the exhaustive search did:
the chosen configuration, the alternatives and the over-memory lists are the same.

>>> import explorer as ex
>>> plan = ex.plan_training("gpt2", devices=8, hardware="a100-80g", global_batch=64, seq=512)
>>> plan.pruned > plan.searched  # most configurations never estimated
True
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import fields

from ...errors import ExplorerError
from ...hardware import Cluster
from ...models import ModelConfig
from ...search.errors import SearchError
from ..config import ParallelConfig
from ..errors import ParallelConfigError
from ..params import TrainingParams
from ..simulate import (
    SimResult,
    estimate_step,
    fewest_fitting,
    ladder_fits,
    recompute_counts,
    states_over_cap,
)
from ..step_model.model import StepModel
from .bound import FLOOR_SLACK, step_time_floor
from .ranking import rank
from .space import RECOMPUTE_LADDER, SearchSpace, cheapest_recompute

__all__ = ["BoundedSearch"]

# A floor must clear the kept step time by this much (seconds) to skip a configuration:
# `rank` rounds step times to the nanosecond, and a tie would be broken by memory.
_CLEAR_S = 2e-9

# heap entries: (floor, index, group >= 0) a group not split yet; (floor, index, _ASK) a
# configuration whose memory is asked before its estimate; (floor, index, _READY) one to
# estimate
_ASK, _READY = -1, -2

#: the search calls its progress callback at least once per this many heap entries taken
#: (~1 ms of work at real sizes), so that a caller can stop it from there
_HEARTBEAT = 16


# the fields a warm start's configuration may differ in from the one it names
_LADDER_FIELDS = ("recompute", "recompute_num_layers", "num_microbatches")


def _fields_but(par: ParallelConfig, left_out: tuple[str, ...]) -> tuple:
    """``par``'s field values but those named in ``left_out``: a group's key (all but the
    ZeRO stage), a warm start's (all but the ladder's fields)."""
    return tuple(getattr(par, f.name) for f in fields(par) if f.name not in left_out)


class BoundedSearch:
    """The configurations of one search, estimated lowest floor first (module docstring).

    ``keep``: how many fitting configurations the plan reads in rank order (simulated +
    alternatives); ``add(bases, prune)`` queues configurations (``prune`` False: floor
    -inf, estimated in the order given, as the Pareto front needs every one)."""

    def __init__(
        self, cfg: ModelConfig, cluster: Cluster, gb: int, seq: int, tparams: TrainingParams,
        space: SearchSpace, keep: int,
    ) -> None:  # fmt: skip
        self._cfg, self._cluster, self._gb, self._seq = cfg, cluster, gb, seq
        self._tparams, self._space, self._keep = tparams, space, keep
        self._bases: list[ParallelConfig] = []
        self._floors: list[float] = []
        self._tried: dict[int, list[SimResult]] = {}
        self._errors: dict[int, list[SearchError]] = {}
        self._skipped: list[int] = []  # pruned, lowest floor first
        # configurations that differ only in their ZeRO stage (indices), in order
        self._groups: list[list[int]] = []
        self._group_of: dict[tuple, list[int]] = {}
        self._steps: dict[int, StepModel] = {}  # a group's step model until it is split
        # per group, one step model of each kind made (the floor's, each rung's): another
        # ZeRO stage of the group starts from it (`StepModel.with_zero`)
        self._group_id: list[int] = []
        self._twins: dict[int, dict[str, StepModel]] = {}
        # the ladder's rungs (cheapest first); per configuration whose memory was asked
        # before its estimate, the step model of each rung asked (the estimate reuses them)
        self._rungs = sorted(space.recompute, key=RECOMPUTE_LADDER.index)
        self._kept_steps: dict[int, dict[str, StepModel]] = {}
        self._pruning = True
        self.estimated = 0  # SimResults made (a configuration makes one per rung walked)

    @property
    def pruned(self) -> int:
        """Configurations not estimated: their floor was above every kept step time."""
        return len(self._skipped)

    def add(self, bases: Iterable[ParallelConfig], prune: bool) -> None:
        for base in bases:
            i = len(self._bases)
            self._bases.append(base)
            self._floors.append(-math.inf)
            self._pruning = prune
            if not prune:
                self._group_id.append(len(self._groups))
                self._groups.append([i])  # each alone, in the order given
                continue
            key = _fields_but(base, ("zero",))
            members = self._group_of.get(key)
            if members is None:
                self._group_of[key] = members = []
                self._group_id.append(len(self._groups))
                self._groups.append(members)
                self._floors[i] = self._floor(i, zero_terms=False)
            else:
                self._group_id.append(self._group_id[members[0]])
                self._floors[i] = self._floors[members[0]]
            members.append(i)

    def _ask(self, i: int, over: float) -> float | None:
        """Configuration ``i``'s memory, asked before its estimate as its recompute ladder
        will ask it (`simulate.ladder_fits`; the step models are kept for the estimate):
        None when its cheapest rung fits (or the ladder is not ``none`` then ``per_layer``,
        or a question fails: its estimate decides), +inf when no rung fits (only the
        over-memory list can name it), else the floor of the ``per_layer`` rung with the
        fewest fully recomputed layers the ladder's own bisection finds fitting
        (`simulate.fewest_fitting`; `bound.step_time_floor`'s ``recomputed``: the ladder
        never takes fewer). The bisection stops once the fewest it can still find has a
        floor above ``over`` (the step time the plan keeps, +inf before one is kept): the
        configuration is skipped whatever count it ends on."""
        rungs = self._rungs
        if rungs[0] != "none" or rungs[1:2] not in ([], ["per_layer"]):
            return None
        try:
            steps = self._kept_steps.setdefault(i, {})
            if "none" not in steps:
                steps["none"] = self._step(i, "none")
            if states_over_cap(steps["none"]):  # no rung fits (model states alone)
                return math.inf
            if ladder_fits(steps["none"], None):
                return None
            if len(rungs) == 1:
                return math.inf
            step = steps["per_layer"] = self._step(i, "per_layer")
            counts = recompute_counts(step)
            floors: dict[int, float] = {}

            def floor(k: int) -> float:
                if k not in floors:
                    floors[k] = step_time_floor(step, recomputed=counts[k]) * (1.0 - FLOOR_SLACK)
                return floors[k]

            lo = fewest_fitting(
                len(counts), lambda k: ladder_fits(step, counts[k]),
                None if over == math.inf else (lambda k: floor(k) > over),
            )  # fmt: skip
            return math.inf if lo is None else floor(lo)
        except ExplorerError:
            return None

    def _step(self, i: int, policy: str) -> StepModel:
        """Configuration ``i``'s step model with the recompute ``policy``."""
        return self._model(i, policy, recompute=policy)

    def _model(self, i: int, kind: str, **changes) -> StepModel:
        """The step model of configuration ``i`` with ``changes`` (of ``kind``: the floor's
        or a rung's): another ZeRO stage's of its group at its own stage when one was made
        (the same numbers: `StepModel.with_zero` shares only what no ZeRO stage changes)."""
        twins = self._twins.setdefault(self._group_id[i], {})
        other = twins.get(kind)
        if other is None:
            par = self._bases[i].replace(**changes)
            twins[kind] = step = StepModel(
                self._cfg, par, self._cluster, self._gb, self._seq, self._tparams
            )  # fmt: skip
            return step
        return other.with_zero(self._bases[i].zero)

    def _floor(self, i: int, zero_terms: bool = True) -> float:
        """Configuration ``i``'s floor (``zero_terms=False``: its group's, kept with the
        step model it was worked out on, which the configuration's own floor reuses)."""
        try:
            step = self._steps.pop(i, None)
            if step is None:
                step = self._model(i, "floor", recompute="none", recompute_num_layers=None)
            if not zero_terms:
                self._steps[i] = step
            elif self._bases[i].recompute_num_layers is None:  # the "none" rung's, for _ask
                self._kept_steps[i] = {"none": step}
            return step_time_floor(step, zero_terms) * (1.0 - FLOOR_SLACK)
        except ExplorerError:  # the estimate says why (or skips the configuration)
            return -math.inf

    def run(
        self, t0: float, time_limit_s: float, progress: Callable[[int, int], None] | None,
        steps: int, total: int, first: ParallelConfig | None = None,
    ) -> str | None:  # fmt: skip
        """Estimate lowest floor first until the floors pass the kept step times; return
        why the time limit stopped the search, or None. ``progress(done, total)`` moves
        over ``steps`` of ``total`` as the configurations are estimated, and is called
        again every `_HEARTBEAT` configurations taken from the heap whatever was estimated
        (a caller stops a computation from its progress callback: with most configurations
        skipped, estimates alone came ~10 times a plan, and a view's stopped planning-ahead
        thread held the interpreter for ~250 ms before it noticed).

        ``first``: a configuration estimated before the others when it is among them (all
        its fields but the recompute ladder's and the microbatch count equal): a warm
        start (a scaling curve's previous point). Its step time bounds the search from
        the start, so the memory questions stop early (`_ask`); what is chosen is the same
        with or without it (at most one more configuration estimated)."""
        n = len(self._bases)
        # (floor, first index, group) for a group not split yet; (floor, index, -1) for
        # one configuration with its own floor. The least entry is a floor under all left.
        heap = [(self._floors[g[0]], g[0], k) for k, g in enumerate(self._groups)]
        heapq.heapify(heap)
        kept: list[float] = []  # the keep smallest fitting step times (rank's), ascending
        shown = done = popped = 0
        if progress is not None:
            progress(0, total)
        warm = self._index_of(first) if first is not None and self._pruning else None
        if warm is not None:
            for r in self._estimate(warm):
                if r.fits:
                    bisect.insort(kept, rank(r)[0])
                    del kept[self._keep :]
            done += 1
        while heap:
            floor, i, group = heap[0]
            if len(kept) >= self._keep and floor > kept[self._keep - 1] + _CLEAR_S:
                self._skipped = sorted(
                    (
                        j
                        for _, i, g in heap
                        for j in (self._groups[g] if g >= 0 else (i,))
                        if j != warm
                    ),
                    key=lambda j: (self._floors[j], j),
                )  # every floor left is as high
                return None
            heapq.heappop(heap)
            popped += 1
            if progress is not None and popped % _HEARTBEAT == 0:
                progress(shown, total)
            if group >= 0:  # split the group: each configuration's own floor
                for j in self._groups[group]:
                    if self._pruning:
                        self._floors[j] = self._floor(j)
                    heapq.heappush(heap, (self._floors[j], j, _ASK if self._pruning else _READY))
                continue
            if group < 0 and i == warm:  # estimated first
                continue
            if group == _ASK:  # its memory first: a rung that cannot fit raises the floor
                over = kept[self._keep - 1] + _CLEAR_S if len(kept) >= self._keep else math.inf
                raised = self._ask(i, over)
                heapq.heappush(heap, (floor if raised is None else raised, i, _READY))
                continue
            if self.estimated and time.perf_counter() - t0 > time_limit_s:
                return (
                    f"time_limit_s={time_limit_s:g} ran out after {done} of {n} configurations "
                    "(estimated lowest step-time floor first); raise time_limit_s to search "
                    "them all"
                )
            for r in self._estimate(i):
                if r.fits:
                    bisect.insort(kept, rank(r)[0])
                    del kept[self._keep :]
            done += 1
            if progress is not None and steps * done // n != shown:
                shown = steps * done // n
                progress(shown, total)
        return None

    def _index_of(self, par: ParallelConfig) -> int | None:
        """The index of the configuration ``par`` names (recompute ladder and microbatch
        count aside), or None."""
        key = _fields_but(par, _LADDER_FIELDS)
        return next(
            (i for i, b in enumerate(self._bases) if _fields_but(b, _LADDER_FIELDS) == key), None
        )

    def estimate_below(self, step_time_s: float, over: int) -> None:
        """Estimate the skipped configurations the over-memory list (the ``over`` fastest
        results that do not fit, faster than ``step_time_s``) could name: lowest floor
        first, while the floor is below ``step_time_s`` and below the ``over``-th fastest
        such result known (a result is never below its floor, so none after can enter)."""
        late = 0
        found = sorted(
            r.step_time_s for rs in self._tried.values() for r in rs
            if not r.fits and r.step_time_s < step_time_s
        )  # fmt: skip
        for i in self._skipped:
            limit = found[over - 1] if len(found) >= over else step_time_s
            if self._floors[i] >= limit:
                break
            for r in self._estimate(i):
                if not r.fits and r.step_time_s < step_time_s:
                    bisect.insort(found, r.step_time_s)
            late += 1
        self._skipped = self._skipped[late:]

    def _estimate(self, i: int) -> list[SimResult]:
        errors = self._errors.setdefault(i, [])
        steps = self._kept_steps.pop(i, {})

        def one(rec):
            try:
                step = steps.get(rec) or self._step(i, rec)
                return estimate_step(step)
            except SearchError as e:  # no layout of a layer fits the memory cap
                errors.append(e)
                raise

        tried = cheapest_recompute(  # the ladder: the cheapest policy that fits
            self._space.recompute, one, fits=lambda r: r.fits,
            stop_on=(ParallelConfigError, SearchError),
        )  # fmt: skip
        self._tried[i] = [r for _, r in tried]
        self.estimated += len(tried)
        return self._tried[i]

    def results(self) -> list[SimResult]:
        """Every estimate made, in the order of the enumeration."""
        return [r for i in sorted(self._tried) for r in self._tried[i]]

    def cap_errors(self) -> list[SearchError]:
        """The operator search's "no layout fits the memory cap" errors, in the order of
        the enumeration."""
        return [e for i in sorted(self._errors) for e in self._errors[i]]
