"""``ViewError``: a view or a figure builder got an argument it cannot use.

It lives here, beside the figure builders, because they must not import ipywidgets (the
static HTML report draws with them alone); the views raise it too (``widgets.errors``
re-exports it). It is an ``explorer.ExplorerError``: one hierarchy for the whole project.
"""

from __future__ import annotations

from explorer.errors import ExplorerError

__all__ = ["ViewError"]


class ViewError(ExplorerError, ValueError):
    """A bad argument to a view or a figure builder; the message names value, reason, fix."""
