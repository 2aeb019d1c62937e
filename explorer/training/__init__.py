"""Training-step planning: parallel configs, memory per device, pipeline schedules, the step
model, simulate(), plan_training(), scaling curves and the published runs they are checked on.

The rooms, lowest first: ``errors``, ``memory``, ``params`` (`TrainingParams`), ``config``,
``stacks`` (training frameworks' presets of `TrainingParams`), ``pipeline/``,
``step_model/`` (one configuration, costed; ``terms/`` per parallelism),
``simulate``, ``offload``, ``planning/`` (the one-cluster search and its results),
``hetero/`` (pools of different chips), ``plan`` (`plan_training`: the dispatch),
``replanning/``, ``calibration/``, ``datacenters``, ``local_sgd``. Floor: above
``explorer.models``, ``explorer.search``, ``explorer.hardware`` and ``explorer.ir`` (and the
shared ``checks`` and ``memo``); below ``explorer.export``, the CLI and the ``explorer``
front door. Import from here (or from ``explorer.training.pipeline``); the module paths
below are private.

>>> import explorer as ex
>>> sim = ex.simulate("gpt3-1.3b", ex.ParallelConfig(dp=8), hardware="a100-80g",
...                   global_batch=64, seq=2048)
>>> sim.fits
True
"""

from . import stacks
from .calibration.efficiency import EfficiencyRow, KernelEfficiency, kernel_efficiency
from .calibration.fit import Calibration, CalibrationRow, calibrate
from .calibration.knobs import float_fields
from .calibration.measured import MeasuredRun
from .calibration.published import (
    compare_megatron,
    load_published,
    megatron_flops_per_iteration,
    megatron_table1_runs,
    published_runs,
)
from .config import ZERO_STAGES, ParallelConfig
from .errors import (
    CalibrationError,
    ContextParallelError,
    MigrationError,
    OffloadError,
    ParallelConfigError,
    ParetoError,
    PartitionError,
    PoolError,
    ReplanError,
    TrainingError,
    TrainingParamsError,
    TrainingPlanError,
)
from .hetero.plan import HeteroComparison, HeteroPlan, PoolAssignment, compare_hetero, plan_hetero
from .hetero.pools import CrossPoolLink, Pool
from .local_sgd import LocalSGD, local_sgd
from .memory import (
    ActivationTerms,
    MemoryAllowances,
    MemoryBreakdown,
    StateBytes,
    activation_bytes_per_layer,
)
from .params import CALIBRATED_COST, TrainingParams
from .pipeline import (
    EVENT_KINDS,
    BubbleBreakdown,
    Schedule,
    StagePartition,
    Step,
    Timeline,
    TimelineEvent,
    bubble_breakdown,
    bubble_fraction,
    build_schedule,
    microbatch_size_for,
    partition_layers,
    peak_in_flight,
    simulate_schedule,
    uniform_partition,
)
from .plan import plan_training
from .planning.pareto import OBJECTIVE_LABELS, OBJECTIVES, ParetoFront, ParetoPoint
from .planning.result import Candidate, TrainingPlan
from .planning.scaling import ScalingCurve, ScalingPoint, scaling_curve
from .planning.space import SearchSpace
from .replanning.migration import Migration
from .replanning.replan import (
    MemoryCap,
    NewGlobalBatch,
    NodeLoss,
    ReplanOption,
    ReplanResult,
    Straggler,
    replan,
)
from .simulate import PartitionChoice, SimResult, estimate, simulate
from .stacks import Stack
from .step_model.terms.zero import model_state_bytes

__all__ = [
    # plan and simulate: the entry points and what they take
    "plan_training", "simulate", "estimate", "scaling_curve", "ParallelConfig", "ZERO_STAGES",
    "TrainingParams", "CALIBRATED_COST", "SearchSpace", "StateBytes", "ActivationTerms",
    "MemoryAllowances", "stacks", "Stack",
    # results and errors
    "SimResult", "PartitionChoice", "MemoryBreakdown", "TrainingPlan", "Candidate",
    "ScalingCurve", "ScalingPoint", "OBJECTIVES", "OBJECTIVE_LABELS", "ParetoFront",
    "ParetoPoint", "activation_bytes_per_layer", "model_state_bytes",
    "TrainingError", "TrainingParamsError", "ParallelConfigError", "ContextParallelError",
    "PartitionError", "TrainingPlanError", "ParetoError", "ReplanError", "OffloadError",
    "PoolError", "MigrationError", "CalibrationError",
    # pipeline teaching: stages, schedules as data, the simulated timeline, the bubble
    "StagePartition", "partition_layers", "uniform_partition", "Schedule", "Step",
    "build_schedule", "bubble_fraction", "peak_in_flight", "Timeline", "TimelineEvent",
    "EVENT_KINDS", "simulate_schedule", "BubbleBreakdown", "bubble_breakdown",
    "microbatch_size_for",
    # published runs and calibration
    "load_published", "megatron_flops_per_iteration", "compare_megatron", "MeasuredRun",
    "published_runs", "megatron_table1_runs", "calibrate", "Calibration", "CalibrationRow",
    "float_fields", "kernel_efficiency", "KernelEfficiency", "EfficiencyRow",
    # pools of different chips, replanning, training across datacenters
    "Pool", "CrossPoolLink", "PoolAssignment", "HeteroPlan", "HeteroComparison",
    "plan_hetero", "compare_hetero", "replan", "NodeLoss", "Straggler", "MemoryCap",
    "NewGlobalBatch", "ReplanResult", "ReplanOption", "Migration", "LocalSGD", "local_sgd",
]  # fmt: skip
