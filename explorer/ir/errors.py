"""Errors raised by the IR."""

from ..errors import ExplorerError

__all__ = ["IRError"]


class IRError(ExplorerError, ValueError):
    """A graph, node or op is malformed; the message names the node and the fix."""
