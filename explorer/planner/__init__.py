"""Cost model, automatic strategy search and plans.

>>> import explorer as ex
>>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
>>> plan = ex.search(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"), method="ilp")
>>> plan.status, ex.sharding.verify(g, plan, plan.mesh).ok
('optimal', True)
"""

from .breakdown import CostBreakdown
from .costmodel import CostModel
from .memory import (
    ActivationTerms,
    MemoryAllowances,
    MemoryBreakdown,
    StateBytes,
    activation_bytes_per_layer,
    model_state_bytes,
)
from .parallel_config import ParallelConfig, ParallelConfigError
from .params import CostParams
from .partition import PartitionError, StagePartition, partition_layers, uniform_partition
from .plan import Alternative, Explanation, ShardingPlan
from .published import compare_megatron, load_published, megatron_flops_per_iteration
from .scaling import ScalingCurve, ScalingPoint, scaling_curve
from .schedule import Schedule, Step, bubble_fraction, build_schedule, peak_in_flight
from .search import METHODS, Method, Planner, search
from .simulate import CALIBRATED_COST, SimResult, TrainingParams, estimate, simulate
from .solvers import SearchError
from .timeline import Timeline, TimelineEvent, simulate_schedule
from .training import Candidate, SearchSpace, TrainingPlan, TrainingPlanError, plan_training

__all__ = [
    "CostParams", "CostBreakdown", "CostModel", "ShardingPlan", "Explanation", "Alternative",
    "Planner", "search", "SearchError", "METHODS", "Method",
    # training (issue 5)
    "ParallelConfig", "ParallelConfigError", "TrainingParams", "CALIBRATED_COST",
    "StateBytes", "ActivationTerms", "MemoryAllowances", "MemoryBreakdown",
    "activation_bytes_per_layer", "model_state_bytes", "StagePartition", "PartitionError",
    "partition_layers", "uniform_partition", "Schedule", "Step", "build_schedule",
    "bubble_fraction", "peak_in_flight", "Timeline", "TimelineEvent", "simulate_schedule",
    "SimResult", "simulate", "estimate", "SearchSpace", "Candidate", "TrainingPlan",
    "TrainingPlanError", "plan_training", "ScalingCurve", "ScalingPoint", "scaling_curve",
    "load_published", "megatron_flops_per_iteration", "compare_megatron",
]  # fmt: skip
