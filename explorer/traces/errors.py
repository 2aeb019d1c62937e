"""Errors of `explorer.traces`: ``TracesError``, ``TraceFormatError``, ``RowError`` and
``NoLaunchError``."""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["TracesError", "TraceFormatError", "RowError", "NoLaunchError"]


class TracesError(ExplorerError, ValueError):
    """A profiler-trace computation got input it cannot use (an unknown option, no ranks)."""


class TraceFormatError(TracesError):
    """A file is not a readable PyTorch profiler (Kineto) trace: malformed or truncated
    JSON, a foreign format, an event missing a field. The message names the file and, where
    there is one, the event (its index in ``traceEvents`` and its name)."""


class RowError(TracesError, IndexError):
    """A row index outside an `explorer.traces.table.ActivityTable` (an ``IndexError`` too,
    as the sequence protocol expects)."""


class NoLaunchError(TracesError, KeyError):
    """A correlation id no kernel of the trace was launched with (a ``KeyError`` too, as the
    mapping protocol expects)."""
