"""Training-step planning: parallel configs, memory per device, pipeline schedules, the step
model, simulate(), plan_training(), scaling curves and the published runs they are checked on.

>>> import explorer as ex
>>> sim = ex.simulate("gpt3-1.3b", ex.ParallelConfig(dp=8), hardware="a100-80g",
...                   global_batch=64, seq=2048)
>>> sim.fits
True
"""

from .calibrate import Calibration, CalibrationRow, calibrate
from .config import ParallelConfig, ParallelConfigError
from .hetero import HeteroComparison, HeteroPlan, PoolAssignment, compare_hetero, plan_hetero
from .local_sgd import LocalSGD, local_sgd
from .measured import CalibrationError, MeasuredRun, megatron_table1_runs, published_runs
from .memory import (
    ActivationTerms,
    MemoryAllowances,
    MemoryBreakdown,
    StateBytes,
    TrainingParamsError,
    activation_bytes_per_layer,
)
from .migration import Migration, MigrationError
from .pareto import OBJECTIVES, ParetoError, ParetoFront, ParetoPoint
from .pipeline import (
    PartitionError,
    Schedule,
    StagePartition,
    Step,
    Timeline,
    TimelineEvent,
    bubble_fraction,
    build_schedule,
    partition_layers,
    peak_in_flight,
    simulate_schedule,
    uniform_partition,
)
from .plan import Candidate, SearchSpace, TrainingPlan, TrainingPlanError, plan_training
from .pools import CrossPoolLink, Pool, PoolError
from .published import compare_megatron, load_published, megatron_flops_per_iteration
from .replan import (
    MemoryCap,
    NewGlobalBatch,
    NodeLoss,
    ReplanError,
    ReplanOption,
    ReplanResult,
    Straggler,
    replan,
)  # fmt: skip
from .scaling import ScalingCurve, ScalingPoint, scaling_curve
from .simulate import (
    CALIBRATED_COST,
    PartitionChoice,
    SimResult,
    TrainingParams,
    estimate,
    simulate,
)
from .terms.zero import model_state_bytes

__all__ = [
    "ParallelConfig", "ParallelConfigError", "TrainingParams", "TrainingParamsError",
    "CALIBRATED_COST",
    "StateBytes", "ActivationTerms", "MemoryAllowances", "MemoryBreakdown",
    "activation_bytes_per_layer", "model_state_bytes", "StagePartition", "PartitionError",
    "partition_layers", "uniform_partition", "Schedule", "Step", "build_schedule",
    "bubble_fraction", "peak_in_flight", "Timeline", "TimelineEvent", "simulate_schedule",
    "SimResult", "PartitionChoice", "simulate", "estimate", "SearchSpace", "Candidate",
    "TrainingPlan", "TrainingPlanError", "plan_training", "ScalingCurve", "ScalingPoint",
    "scaling_curve",
    "load_published", "megatron_flops_per_iteration", "compare_megatron",
    "MeasuredRun", "CalibrationError", "published_runs", "megatron_table1_runs", "calibrate",
    "Calibration",
    "CalibrationRow",
    "Pool", "PoolError", "CrossPoolLink", "PoolAssignment", "HeteroPlan", "HeteroComparison",
    "plan_hetero", "compare_hetero",
    "OBJECTIVES", "ParetoFront", "ParetoPoint", "ParetoError",
    "replan", "NodeLoss", "Straggler", "MemoryCap", "NewGlobalBatch", "ReplanResult",
    "ReplanOption", "ReplanError", "Migration", "MigrationError", "LocalSGD", "local_sgd",
]  # fmt: skip
