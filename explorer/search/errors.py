"""``SearchError``: the strategy search cannot run or has no solution."""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["SearchError"]


class SearchError(ExplorerError, ValueError):
    """A search cannot run or has no solution; the message says why and what to do."""
