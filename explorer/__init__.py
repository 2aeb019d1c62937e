"""Parallel Explorer: plan how a deep-learning model is split across many chips.

>>> import explorer as ex
>>> cfg = ex.models.load("gpt2")
>>> graph = ex.models.build(cfg, batch=8, seq=1024)
>>> round(graph.num_params() / 1e6, 1)
124.4
"""

from . import (
    compiler,
    export,
    hardware,
    ir,
    models,
    search,
    sharding,
    teach,
    trace,
    traces,
    training,
)
from .compiler import F, Tensor, grad, jit, nn, tensor
from .compiler.torch_program import compile  # noqa: A004 (ex.compile, as torch.compile)
from .diff import DiffError, diff
from .errors import ExplorerError
from .hardware import Mesh
from .ir import DType, Graph, GraphBuilder, TensorType
from .robustness import robustness
from .search import CostBreakdown, CostParams, ShardingPlan
from .search.constraints import ConstraintError, Forbid, Pin
from .training import (
    Calibration,
    MeasuredRun,
    MemoryCap,
    NewGlobalBatch,
    NodeLoss,
    ParallelConfig,
    ParetoFront,
    Pool,
    SearchSpace,
    SimResult,
    Stack,
    Straggler,
    TrainingError,
    TrainingParams,
    TrainingPlan,
    calibrate,
    compare_hetero,
    estimate,
    plan_hetero,
    plan_training,
    replan,
    scaling_curve,
    simulate,
    stacks,
)
from .training.planning.constraints import Bound, Fix, PlanConstraintError, StageLayers, Within

__version__ = "0.1.0"

__all__ = [
    "ExplorerError", "ir", "models", "hardware", "sharding", "training", "Mesh", "Graph", "GraphBuilder",
    "DType", "TensorType", "search", "CostParams", "CostBreakdown", "ShardingPlan",
    "compiler", "trace", "export", "jit", "compile", "tensor", "Tensor", "grad", "F", "nn",
    "ParallelConfig", "simulate", "estimate", "SimResult", "plan_training", "TrainingPlan",
    "SearchSpace", "TrainingParams", "TrainingError", "scaling_curve", "stacks", "Stack",
    "MeasuredRun", "calibrate", "Calibration", "ParetoFront",
    "Pool", "plan_hetero", "compare_hetero",
    "replan", "NodeLoss", "Straggler", "MemoryCap", "NewGlobalBatch", "teach", "traces",
    "Pin", "Forbid", "ConstraintError", "diff", "DiffError", "robustness",
    "Bound", "Fix", "Within", "StageLayers", "PlanConstraintError",
]  # fmt: skip
