"""The error of the sharding layer."""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["ShardingError"]


class ShardingError(ExplorerError, ValueError):
    """A layout, strategy, assignment or SPMD input is impossible; the message says which
    tensor or node, why, and how to fix it."""
