"""``plan_training``: the fastest ParallelConfig that fits, and why the others lost.

A short dispatch: one cluster (`planning.homogeneous`, with its host-offload fallback,
`planning.offload`) or pools of different chips (`hetero.plan`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..hardware import Cluster
from ..models import ModelConfig
from . import stacks
from .errors import ParetoError, TrainingPlanError
from .hetero.plan import HeteroPlan, plan_hetero
from .hetero.pools import Pool
from .params import TrainingParams
from .planning.constraints import PlanConstraintError
from .planning.homogeneous import DEFAULT_TIME_LIMIT_S, ProgressFn, plan_homogeneous
from .planning.result import TrainingPlan
from .planning.space import SearchSpace
from .stacks import Stack

__all__ = ["plan_training"]


def plan_training(
    cfg: ModelConfig | str, devices: int | None = None, hardware: str | Cluster = "a100-80g",
    global_batch: int = 1, seq: int | None = None, params: TrainingParams | None = None,
    space: SearchSpace | None = None, top_k: int = 5, simulate_top: int = 3,
    progress: ProgressFn | None = None, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    objectives: tuple[str, ...] | None = None, pools: Sequence[Pool] | None = None,
    offload: bool = False, stack: str | Stack | None = None,
    constraints: Sequence | None = None,
) -> TrainingPlan | HeteroPlan:  # fmt: skip
    """The fastest configuration of ``cfg`` on ``devices`` chips that fits in memory.

    Args:
        devices: chips in the job (all used: dp * tp * pp * cp == devices).
        global_batch, seq: sequences per step and their length.
        params: the training cost model (`TrainingParams`), used as given.
        stack: a training stack's preset instead (`explorer.training.stacks`: a name such
            as ``"torchtitan"`` or a `Stack`); neither: the default stack
            (``megatron-core``); both: an error naming the fix.
        space: restrict the search (`SearchSpace`), e.g. to a published configuration.
        top_k: alternatives kept in the plan; ``simulate_top``: how many of the best
            estimates are simulated event by event before the final ranking.
        progress: ``progress(done, total)`` as the configurations are estimated or
            skipped (``done`` moves over one step per (tp, pp, dp, cp) structure) and after
            each simulation (total = structures + simulations; the last call has
            done == total).
        time_limit_s: when the estimates run past it, the configurations not yet estimated
            are skipped and the plan is the best of those estimated (lowest step-time floor
            first, `planning.bounded`), with ``stopped_early`` saying how far the search got
            (the simulations of the best few still run).
        objectives: names among ``"step_time"``, ``"memory"``, ``"communication"``,
            ``"cost"`` (needs a chip price): ``plan.pareto`` is then the Pareto front of the
            fitting configurations estimated (`explorer.training.planning.pareto`); ``config`` stays
            the fastest.
        pools: a list of `Pool` (chips of different kinds in one job): the plan is then
            `explorer.training.hetero.plan.plan_hetero`'s `HeteroPlan` (``devices`` and
            ``hardware`` come from the pools and must be left out).
        offload: when no configuration fits on the devices alone, plan with host offload of
            the optimizer states (then of the parameters too; `planning.offload.offload_fallback`);
            the plan then has ``offload`` set (`offload.OffloadTerms`: bytes moved, time
            added). False: the no-fit error names the offload plan that would fit.
        constraints: ``ex.Bound(knob, min, max)``, ``ex.Fix(knob, value)``,
            ``ex.Within("tp", "node")``, ``ex.StageLayers((...))``
            (`planning.constraints`): they narrow the space and the enumeration before
            any estimate (the plan is the fastest that honours them; ``plan.constraints``
            keeps them). A set no configuration satisfies raises `PlanConstraintError`
            (a `ConstraintError` and a `TrainingPlanError`) naming the smallest conflicting
            subset.

    Raises `TrainingPlanError` when no configuration is valid (device count, batch) or
    none fits, naming the smallest memory any needs and the device count that would fit.

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, hardware="a100-80g", global_batch=64,
    ...                         seq=512)
    >>> plan.sim.fits, plan.config.devices
    (True, 8)
    """
    params = stacks.resolve(params, stack, "plan_training")
    if pools is not None:  # a job over pools of different chips: hetero/
        if devices is not None or hardware != "a100-80g":
            raise TrainingPlanError(
                "plan_training(pools=...) takes its chips and hardware from the pools; leave "
                "devices and hardware out"
            )
        if constraints:  # not silently dropped: pools have their own search
            raise PlanConstraintError(
                f"constraints={list(constraints)!r} with pools=...: the pooled search does not "
                "take constraints yet; plan each pool alone with constraints=..., or narrow "
                "the pooled search with space=SearchSpace(...)"
            )
        if objectives is not None:  # not silently dropped: the front is per cluster today
            raise ParetoError(
                f"objectives={objectives!r} with pools=...: the Pareto front is computed for "
                "one cluster only; plan each pool alone with objectives=..., or leave "
                "objectives out (the pooled plan is the fastest)"
            )
        return plan_hetero(
            cfg, pools, global_batch, seq, params=params, space=space, offload=offload
        )
    return plan_homogeneous(
        cfg, devices, hardware, global_batch, seq, params, space, top_k, simulate_top,
        progress, time_limit_s, objectives, offload, constraints,
    )  # fmt: skip
