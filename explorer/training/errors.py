"""Every error of the training area, under one base: ``TrainingError``.

``TrainingError`` is an `ExplorerError` and a ``ValueError`` (so older ``except ValueError``
clauses keep working); it is raised where no narrower class fits (a schedule that cannot
run, a scaling sweep's arguments, a missing published table). The narrower ones say which
input was wrong; each message names the value, the reason and the fix.
"""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = [
    "TrainingError", "TrainingParamsError", "ParallelConfigError", "ContextParallelError",
    "PartitionError", "TrainingPlanError", "ParetoError", "ReplanError", "OffloadError",
    "PoolError", "MigrationError", "CalibrationError",
]  # fmt: skip


class TrainingError(ExplorerError, ValueError):
    """The training simulator got input it cannot use; the message names value and fix."""


class TrainingParamsError(TrainingError):
    """A training-model knob (`TrainingParams`, `StateBytes`, `ActivationTerms`,
    `MemoryAllowances`) is not a finite number in its range; the message names it."""


class ParallelConfigError(TrainingError):
    """A parallel configuration is malformed or does not fit the model, batch or devices;
    the message names the value, the reason and the fix."""


class ContextParallelError(ParallelConfigError):
    """A context-parallel degree does not fit the sequence or the devices; the message
    names the value, the reason and the fix."""


class PartitionError(TrainingError):
    """No split of the parts into stages satisfies the memory caps."""


class TrainingPlanError(TrainingError):
    """No configuration can train the model as asked; the message says what would."""


class ParetoError(TrainingPlanError):
    """Objectives that cannot be computed (unknown name, a cost without a price)."""


class ReplanError(TrainingPlanError):
    """An event that does not apply to the plan (a node it does not have, a speed <= 0)."""


class OffloadError(TrainingError):
    """Offload cannot be priced as asked (unknown host link, bad kind); names the fix."""


class PoolError(TrainingError):
    """A pool or a list of pools cannot be used; the message names the value and the fix."""


class MigrationError(TrainingError):
    """A migration was asked between jobs that cannot be compared (other model, bad ids)."""


class CalibrationError(TrainingError):
    """A measured run or a calibration request is malformed (a non-positive or non-finite
    time, an unknown parameter name, bounds that exclude the start); the message names
    the value, the reason and the fix."""
