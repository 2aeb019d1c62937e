"""The pipeline bubble explained: the closed-form fraction against the simulated one.

The textbook bubble, ``(p-1)/(m+p-1)`` (``/v`` interleaved), assumes identical stages and
free transfers. A simulated step differs for three reasons, each measured here by
re-running the step's own schedule with one more effect switched on:

1. ``uniform`` (computed on request, ``check_uniform=True``): every stage gets the mean
   forward and backward time of this split, no transfers, no tail — the formula's world,
   which the simulation reproduces (a check of the two against each other);
2. ``uneven``: the split's real per-stage times (the embedding on the first stage, the
   head and loss on the last, layers that do not divide evenly): the slowest stage paces
   the pipeline and the others wait;
3. ``with_p2p``: activations and their gradients cross devices (``p2p_s`` per hop);
4. ``simulated``: the data-parallel gradient reduction and optimizer after the last
   backward (devices with less to do wait for the others) — the step as simulated.

The per-stage times are read back from the simulated timeline (every microbatch of a stage
takes the same time); with ``check_uniform`` the whole step is re-simulated from them too
and must reproduce ``sim.timeline`` (``resimulated``).

Also here: :func:`microbatch_size_for`, the microbatch size that keeps a global batch when
the microbatch count changes.

>>> import explorer as ex
>>> sim = ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4, microbatch_size=2),
...                   global_batch=32, seq=512)
>>> b = bubble_breakdown(sim, check_uniform=True)
>>> round(b.formula, 4), round(b.uniform, 4), abs(b.resimulated - b.simulated) < 1e-9
(0.2727, 0.2727, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from ...checks import is_int
from ..errors import ParallelConfigError, TrainingError
from .schedule import bubble_fraction, build_schedule
from .timeline import Timeline, simulate_schedule

__all__ = ["BubbleBreakdown", "bubble_breakdown", "microbatch_size_for", "BUBBLE_STEPS"]

_FORWARD_TAIL = ("tp-comm", "ep-comm")  # segments that follow compute-forward in a forward

# (field, what the step adds) in the order the effects are switched on, from the formula
BUBBLE_STEPS: tuple[tuple[str, str], ...] = (
    ("uneven", "this split's stage times: the slowest stage paces the others"),
    ("with_p2p", "point-to-point transfers between pipeline devices"),
    ("simulated", "gradient reduction and optimizer after the last backward"),
)


@dataclass(frozen=True)
class BubbleBreakdown:
    """Bubble fractions (idle time over devices x step time) of one simulated step.

    Attributes:
        schedule, pp, microbatches, virtual_stages: the pipeline.
        formula: the closed form ``bubble_fraction(schedule, pp, m, v)``.
        uneven, with_p2p: the step re-simulated with one more effect at a time (see the
            module docstring); ``simulated``: the step itself (``sim.timeline``).
        uniform, resimulated: with ``check_uniform``, the formula's world simulated and
            the whole step re-simulated from the extracted times (None otherwise).
        stage_forward_s, stage_backward_s: seconds of one microbatch's forward and backward
            on each stage (blocking collectives included).
        p2p_s: seconds of one point-to-point transfer.
        step_time_s: the simulated step.
    """

    schedule: str
    pp: int
    microbatches: int
    virtual_stages: int
    formula: float
    uneven: float
    with_p2p: float
    simulated: float
    stage_forward_s: tuple[float, ...]
    stage_backward_s: tuple[float, ...]
    p2p_s: float
    step_time_s: float
    uniform: float | None = None
    resimulated: float | None = None

    def steps(self) -> tuple[tuple[str, float, float, str], ...]:
        """``(field, fraction, change from the previous step, what the step adds)``."""
        out, prev = [], self.formula
        for name, text in BUBBLE_STEPS:
            value = getattr(self, name)
            out.append((name, value, value - prev, text))
            prev = value
        return tuple(out)

    @property
    def stage_imbalance(self) -> float:
        """Slowest stage's forward + backward over the mean (1 = balanced)."""
        totals = [f + b for f, b in zip(self.stage_forward_s, self.stage_backward_s, strict=True)]
        mean = sum(totals) / len(totals)
        return max(totals) / mean if mean else 1.0

    def __str__(self) -> str:
        parts = ", ".join(f"{n} {v:.1%}" for n, v, _, _ in self.steps())
        return f"bubble: formula {self.formula:.1%}, {parts}"


def _stage_steps(timeline: Timeline, stages: int) -> tuple[list, list]:
    """Per stage, the (kind, seconds) segments of microbatch 0's forward and backward."""
    per: dict[int, list] = {g: [] for g in range(stages)}
    for e in timeline.events:
        if e.microbatch == 0 and e.stream == "compute" and e.kind != "idle" and e.stage >= 0:
            per[e.stage].append(e)
    fwd, bwd = [], []
    for g in range(stages):
        evs = sorted(per[g], key=lambda e: e.start_s)
        cut = next(i for i, e in enumerate(evs) if e.kind == "compute-forward") + 1
        while cut < len(evs) and evs[cut].kind in _FORWARD_TAIL:
            cut += 1
        fwd.append(tuple((e.kind, e.duration_s) for e in evs[:cut]))
        bwd.append(tuple((e.kind, e.duration_s) for e in evs[cut:]))
    return fwd, bwd


def _tails(timeline: Timeline) -> list[tuple[tuple[str, float], ...]]:
    out: list[list] = [[] for _ in range(timeline.devices)]
    for e in sorted(timeline.events, key=lambda e: e.start_s):
        if e.stage < 0 and e.kind != "idle" and e.stream == "compute":
            out[e.device].append((e.kind, e.duration_s))
    return [tuple(t) for t in out]


def _p2p(timeline: Timeline) -> float:
    return next((e.duration_s for e in timeline.events if e.kind == "pp-comm"), 0.0)


def bubble_breakdown(sim, check_uniform: bool = False) -> BubbleBreakdown:
    """The formula's bubble and the simulated one of ``sim`` (a ``SimResult`` with a
    timeline), with the effects that separate them measured one at a time (two re-runs of
    the schedule; ``check_uniform`` adds two more: the formula's world and the whole step).

    Raises:
        ValueError: ``sim`` has no timeline (an ``estimate``); simulate it instead.
    """
    tl = getattr(sim, "timeline", None)
    if tl is None:
        raise TrainingError(
            f"bubble_breakdown needs a simulated timeline; {type(sim).__name__} has none "
            "(an estimate): pass ex.simulate(...)'s result"
        )
    c = sim.config
    m, v = c.num_microbatches, c.virtual_stages
    schedule = build_schedule(c.schedule, c.pp, m, v)
    fwd, bwd = _stage_steps(tl, schedule.stages)
    f_s = tuple(sum(d for _, d in seg) for seg in fwd)
    b_s = tuple(sum(d for _, d in seg) for seg in bwd)
    p2p, tails = _p2p(tl), _tails(tl)
    uniform = resimulated = None
    if check_uniform:
        mean_f, mean_b = sum(f_s) / len(f_s), sum(b_s) / len(b_s)
        uniform = simulate_schedule(schedule, mean_f, mean_b).bubble_fraction()
        resimulated = simulate_schedule(schedule, fwd, bwd, p2p, tails).bubble_fraction()
    return BubbleBreakdown(
        schedule=c.schedule, pp=c.pp, microbatches=m, virtual_stages=v,
        formula=bubble_fraction(c.schedule, c.pp, m, v),
        uneven=simulate_schedule(schedule, fwd, bwd).bubble_fraction(),
        with_p2p=simulate_schedule(schedule, fwd, bwd, p2p).bubble_fraction(),
        simulated=tl.bubble_fraction(), stage_forward_s=f_s, stage_backward_s=b_s,
        p2p_s=p2p, step_time_s=tl.step_time_s, uniform=uniform, resimulated=resimulated,
    )  # fmt: skip


def microbatch_size_for(global_batch: int, dp: int, microbatches: int) -> int:
    """The microbatch size that keeps ``global_batch`` with ``microbatches`` per replica:
    ``global_batch / (dp x microbatches)``; raises when that is not a whole number.

    >>> microbatch_size_for(1536, 8, 48)
    4
    >>> microbatch_size_for(1536, 8, 5)
    Traceback (most recent call last):
    ...
    explorer.training.errors.ParallelConfigError: 5 microbatches: the global batch 1536 / (dp 8 x 5) = 38.4 sequences is not a whole microbatch; choose a count that divides 192: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 192
    """  # noqa: E501
    for name, value in (("global_batch", global_batch), ("dp", dp), ("microbatches", microbatches)):
        if not is_int(value, minimum=1):
            raise ParallelConfigError(f"{name}={value!r}; expected an int >= 1")
    per_replica, rest = divmod(global_batch, dp)
    if rest:
        raise ParallelConfigError(
            f"global batch {global_batch} is not divisible by dp={dp}; use a multiple of {dp}"
        )
    size, rest = divmod(per_replica, microbatches)
    if rest:
        ok = ", ".join(str(d) for d in range(1, per_replica + 1) if per_replica % d == 0)
        raise ParallelConfigError(
            f"{microbatches} microbatches: the global batch {global_batch} / (dp {dp} x "
            f"{microbatches}) = {per_replica / microbatches:.3g} sequences is not a whole "
            f"microbatch; choose a count that divides {per_replica}: {ok}"
        )
    return size
