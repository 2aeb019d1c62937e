"""``plan.why_not(config)``: "why not dp16 x tp8?" for a training plan, as ``explain(node)``
answers it for an op.

The configuration the user names (a ParallelConfig, a dict of its fields, or text such as
``"dp16 tp8"``) changes the chosen one in the fields it names (`diff.complete`: the
microbatch count derived again, dp or pp filled so every device is used). The answer is
one of:

- ``invalid``: the rule it breaks (tp does not divide the heads, ...), from the simulator;
- ``over memory``: the memory row that makes it not fit (with the recompute policies tried
  when the text named none);
- ``slower``: the step-time difference against the chosen plan, term by term (`diff`);
- ``faster``: it would win; it lies outside the plan's search space or its ranking (the
  search simulates only the best few of its estimates);
- ``chosen``: it is the chosen configuration;
- ``forbidden``: it breaks one of the plan's constraints (``plan_training(...,
  constraints=...)``), named, with what it would cost without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import ParallelConfig
from ..errors import TrainingError
from ..simulate import SimResult
from .constraints import forbidden_by
from .diff import TrainingDiff, complete, context_of, diff_training, is_plan, parse_config

__all__ = ["WhyNot", "why_not", "Verdict"]

Verdict = Literal["chosen", "slower", "faster", "over memory", "invalid", "forbidden"]
_GIB = 2**30
# The recompute policies tried, cheapest first, when the asked configuration names none
# and does not fit with the chosen one's.
_LADDER = ("none", "selective", "full")


@dataclass(frozen=True)
class WhyNot:
    """The answer to "why not ``asked``?".

    Attributes:
        asked: what the user asked, as given (text) or printed.
        config: the configuration simulated (None when it is invalid).
        verdict: chosen, slower, faster, over memory, invalid or forbidden.
        reason: one sentence.
        diff: the chosen plan against it (None when invalid).
        memory_row: ``(row, bytes)`` of the largest memory row when it does not fit.
    """

    asked: str
    config: ParallelConfig | None
    verdict: Verdict
    reason: str
    diff: TrainingDiff | None = None
    memory_row: tuple[str, float] | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "asked": self.asked, "config": None if self.config is None else str(self.config),
            "verdict": self.verdict, "reason": self.reason,
            "diff": None if self.diff is None else self.diff.as_dict(),
            "memory_row": None if self.memory_row is None else list(self.memory_row),
        }  # fmt: skip

    def __str__(self) -> str:
        head = f"why not {self.asked}? {self.verdict}: {self.reason}"
        if self.diff is None or self.verdict in ("chosen", "invalid"):
            return head
        return head + "\n" + self.diff.text()


def why_not(plan, config: object) -> WhyNot:
    """Why the plan did not choose ``config``; see the module docstring.

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    >>> plan.why_not("dp4 tp2").verdict
    'slower'
    """
    if not is_plan(plan):
        raise TrainingError(f"why_not: {plan!r:.60} is not a TrainingPlan (ex.plan_training)")
    asked = config if isinstance(config, str) else str(config)
    fields = parse_config(config)
    ctx = context_of(plan)
    chosen = plan.sim.config
    try:
        cand = complete(fields, chosen, chosen.devices)
        sim = ctx.simulate(cand)
    except TrainingError as e:
        return WhyNot(asked, None, "invalid", str(e))
    tried = [cand.recompute]
    if not sim.fits and "recompute" not in fields:
        for rec in (
            _LADDER[_LADDER.index(cand.recompute) + 1 :] if cand.recompute in _LADDER else ()
        ):
            other = complete({**fields, "recompute": rec}, chosen, chosen.devices)
            s = ctx.simulate(other)
            tried.append(rec)
            if s.fits:
                cand, sim = other, s
                break
    d = diff_training(plan.sim, sim)
    rule = forbidden_by(tuple(getattr(plan, "constraints", None) or ()), sim.config,
                        getattr(plan, "cluster", None))  # fmt: skip
    if rule and not _same(sim.config, plan.sim.config):
        fits = "fits" if sim.fits else "does not fit"
        way = "slower" if d.total > 0 else "faster"
        return WhyNot(asked, sim.config, "forbidden",
                      f"{sim.config} breaks {rule}, one of the plan's constraints; without it, "
                      f"it {fits} and is {way} by {abs(d.total):.3g} s", d)  # fmt: skip
    if not sim.fits:
        return _over_memory(asked, cand, sim, d, tried)
    if _same(sim.config, plan.sim.config):
        return WhyNot(asked, sim.config, "chosen", "it is the chosen configuration", d)
    if d.total > 0:
        top = ", ".join(f"{k} {v:+.3g} s" for k, v in d.terms[:3] if v)
        rec = f" (with recompute {cand.recompute}: {', '.join(tried[:-1])} did not fit)" if (
            len(tried) > 1) else ""  # fmt: skip
        return WhyNot(asked, sim.config, "slower",
                      f"{sim.config} is slower by {d.total:.3g} s "
                      f"({d.total / plan.sim.step_time_s:.1%}){rec}: {top}", d)  # fmt: skip
    return WhyNot(
        asked, sim.config, "faster",
        f"{sim.config} is faster by {-d.total:.3g} s, but the search did not choose it: it "
        "lies outside the SearchSpace, or it was not among the estimates simulated "
        "(plan_training(..., simulate_top=...) simulates more)", d,
    )  # fmt: skip


def _same(a: ParallelConfig, b: ParallelConfig) -> bool:
    return a.replace(recompute_num_layers=None) == b.replace(recompute_num_layers=None)


def _over_memory(asked, cand, sim: SimResult, d: TrainingDiff, tried) -> WhyNot:
    rows = sim.memory.rows()
    row, value = max(rows, key=lambda kv: kv[1])
    grew, a, b = d.largest_memory_row
    more = f"; {grew} grows most against the chosen plan ({a / _GIB:.1f} -> {b / _GIB:.1f} GiB)"
    policies = (f" (nor does it fit with recompute {' or '.join(tried[1:])})"
                if len(tried) > 1 else "")  # fmt: skip
    return WhyNot(
        asked, cand, "over memory",
        f"{cand} needs {sim.memory.total / _GIB:.1f} GiB per device on stage "
        f"{sim.memory.stage}, over the {sim.memory_cap_bytes / _GIB:.0f} GiB a device may use"
        f"{policies}: the largest row is {row} ({value / _GIB:.1f} GiB){more}",
        d, (row, value),
    )  # fmt: skip
