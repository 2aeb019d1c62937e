"""Cost model, automatic strategy search and plans.

>>> import explorer as ex
>>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
>>> plan = ex.search(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"), method="ilp")
>>> plan.status, ex.sharding.verify(g, plan, plan.mesh).ok
('optimal', True)
"""

from .breakdown import CostBreakdown
from .costmodel import CostModel
from .params import CostParams
from .plan import Alternative, Explanation, ShardingPlan
from .search import METHODS, Method, Planner, search
from .solvers import SearchError

__all__ = [
    "CostParams", "CostBreakdown", "CostModel", "ShardingPlan", "Explanation", "Alternative",
    "Planner", "search", "SearchError", "METHODS", "Method",
]  # fmt: skip
