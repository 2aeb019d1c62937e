"""``TrainingError``: the base of the training area's own errors.

``ParallelConfigError``, ``TrainingParamsError``, ``TrainingPlanError`` and the others of the
area keep their modules; this one is raised where no narrower one fits (a schedule that
cannot run, a scaling sweep's arguments, a missing published table).
"""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["TrainingError", "TrainingPlanError"]


class TrainingError(ExplorerError, ValueError):
    """The training simulator got input it cannot use; the message names value and fix."""


class TrainingPlanError(TrainingError):
    """No configuration can train the model as asked; the message says what would."""
