"""Errors raised by `explorer.hardware`; both are `ValueError`s so callers may catch either."""

from __future__ import annotations

__all__ = ["HardwareError", "MeshError"]


class HardwareError(ValueError):
    """A hardware profile is unknown, malformed, or lacks what a query asks of it."""


class MeshError(ValueError):
    """A device mesh is ill-formed or does not fit the hardware it is placed on."""
