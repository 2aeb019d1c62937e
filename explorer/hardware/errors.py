"""Errors raised by `explorer.hardware`; both are `ValueError`s so callers may catch either."""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["HardwareError", "MeshError"]


class HardwareError(ExplorerError, ValueError):
    """A hardware profile is unknown, malformed, or lacks what a query asks of it."""


class MeshError(ExplorerError, ValueError):
    """A device mesh is ill-formed or does not fit the hardware it is placed on."""
