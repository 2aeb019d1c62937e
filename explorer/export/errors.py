"""The error every exporter raises."""

from __future__ import annotations

from ..errors import ExplorerError

__all__ = ["ExportError", "require"]


class ExportError(ExplorerError, ValueError):
    """A plan cannot be exported as asked; the message names the value, the reason and the fix."""


def require(module: str, extra: str):
    """Import an optional engine, or raise `ExportError` naming the extra that installs it.

    >>> require("numpy", "numpy").__name__
    'numpy'
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ExportError(
            f"this export needs {module!r}, which is not installed ({e}); install the optional "
            f"extra with `pip install .[{extra}]` (or `pip install 'parallel-explorer[{extra}]'`)"
        ) from None
