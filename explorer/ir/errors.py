"""Errors raised by the IR."""

__all__ = ["IRError"]


class IRError(ValueError):
    """A graph, node or op is malformed; the message names the node and the fix."""
