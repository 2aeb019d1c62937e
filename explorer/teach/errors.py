"""Errors raised by `explorer.teach`."""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["TeachError"]


class TeachError(ExplorerError, ValueError):
    """An exercise or a rank map was given a value it cannot use (an answer that is not a
    number, a choice that is not offered, a layout whose sizes do not multiply out)."""
