"""Operator-sharding search: cost parameters, cost tables, solvers and sharding plans.

>>> import explorer as ex
>>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
>>> plan = ex.search(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"), method="ilp")
>>> plan.status, ex.sharding.verify(g, plan, plan.mesh).ok
('optimal', True)

The package is callable: ``ex.search(graph, mesh, ...)`` runs :func:`explorer.search.search`,
while ``explorer.search.plan`` and the other modules stay importable as usual.
"""

import inspect
import sys
import types

from .breakdown import CostBreakdown
from .costmodel import CostModel
from .errors import SearchError
from .params import CostParams
from .plan import Alternative, Explanation, ShardingPlan
from .planner import METHODS, Method, Planner, search
from .solvers.exhaustive import EXHAUSTIVE_LIMIT

__all__ = [
    "CostParams", "CostBreakdown", "CostModel", "ShardingPlan", "Explanation", "Alternative",
    "Planner", "search", "SearchError", "METHODS", "Method", "EXHAUSTIVE_LIMIT",
]  # fmt: skip


class _CallableModule(types.ModuleType):
    """``explorer.search`` itself: calling it runs the search function."""

    def __call__(self, *args, **kwargs):
        return search(*args, **kwargs)


__signature__ = inspect.signature(search)
sys.modules[__name__].__class__ = _CallableModule
