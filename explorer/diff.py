"""``ex.diff(a, b)``: two plans side by side, the difference ``b - a`` split into its terms.

Sharding plans (`explorer.search.diff`): per op the two strategies, their collectives,
cost terms and memory. Training plans, simulated steps or configurations
(`explorer.training.planning.diff`): layout, stages, collectives and memory rows, the step
time split into event kinds. Both give ``.rows``, ``.terms`` (largest first, summing to
``.total``), ``.total``, ``.text()`` and ``as_dict()``.
"""

from __future__ import annotations

from typing import Any

from .errors import ExplorerError
from .search.diff import PlanDiff, diff_plans
from .search.plan import ShardingPlan
from .training import TrainingPlan
from .training.config import ParallelConfig
from .training.planning.diff import TrainingDiff, diff_training
from .training.simulate import SimResult

__all__ = ["diff", "DiffError", "PlanDiff", "TrainingDiff"]


class DiffError(ExplorerError, ValueError):
    """Two things that cannot be diffed (a sharding plan against a training plan, ...)."""


_TRAINING = (TrainingPlan, SimResult, ParallelConfig, dict, str)


def diff(a: object, b: object, **context: Any) -> PlanDiff | TrainingDiff:
    """``b - a``: two ShardingPlans of one graph and mesh, or two training plans
    (TrainingPlan, SimResult, or a configuration as ParallelConfig, dict or text such as
    ``"dp16 tp8"``, simulated in the other side's context or the ``model=, hardware=,
    global_batch=, seq=, params=`` given).

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    >>> d = ex.diff(plan, "dp4 tp2")
    >>> d.total > 0
    True
    """
    if isinstance(a, ShardingPlan) or isinstance(b, ShardingPlan):
        if not (isinstance(a, ShardingPlan) and isinstance(b, ShardingPlan)):
            other = b if isinstance(a, ShardingPlan) else a
            raise DiffError(
                f"diff: a ShardingPlan against a {type(other).__name__}; diff two ShardingPlans "
                "(ex.search) or two training plans (ex.plan_training, ex.simulate)"
            )
        if context:
            raise DiffError(
                f"diff: {', '.join(sorted(context))} apply to training plans; two sharding "
                "plans carry their graph, mesh and params"
            )
        return diff_plans(a, b)
    if isinstance(a, _TRAINING) and isinstance(b, _TRAINING):
        return diff_training(a, b, **context)
    bad = a if not isinstance(a, _TRAINING) else b
    raise DiffError(
        f"diff: cannot diff a {type(bad).__name__} ({bad!r:.60}); pass two ShardingPlans, or "
        "two of TrainingPlan, SimResult, ParallelConfig, dict or text such as 'dp16 tp8'"
    )
