"""``ex.robustness(plan, k=5)``: how far each knob of the cost model can move before one of
the plan's top ``k`` rivals wins, and the verdict ``robust`` or ``fragile``.

Training plans: `explorer.training.planning.robustness` (efficiency, bandwidth and overlap
knobs, one at a time and jointly within the prediction band). Sharding plans:
`explorer.search.robustness` (the CostParams weights and efficiencies).
"""

from __future__ import annotations

from .errors import ExplorerError
from .search.plan import ShardingPlan
from .search.robustness import SearchRobustness, search_robustness
from .training import TrainingPlan
from .training.planning.robustness import Robustness

__all__ = ["robustness"]


def robustness(plan: object, k: int = 5, **kwargs) -> Robustness | SearchRobustness:
    """The robustness scan of ``plan`` (a TrainingPlan or a ShardingPlan).

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> plan = ex.search(g, ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g"), "ilp", top_k=3)
    >>> ex.robustness(plan, k=3).verdict in ("robust", "fragile")
    True
    """
    if isinstance(plan, TrainingPlan):
        return plan.robustness(k, **kwargs)
    if isinstance(plan, ShardingPlan):
        return search_robustness(plan, k, **kwargs)
    raise ExplorerError(
        f"robustness: {plan!r:.60} is a {type(plan).__name__}; pass a TrainingPlan "
        "(ex.plan_training) or a ShardingPlan (ex.search)"
    )
