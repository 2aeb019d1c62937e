"""``ExplorerError``: the root of every exception the project raises on purpose.

Each area has its own subclasses (``IRError``, ``ModelConfigError``, ``HardwareError``,
``ShardingError``, ``SearchError``, ``ParallelConfigError``, ``CompilerError``, ...), so a
caller can catch one area or everything the explorer reports:

>>> import explorer as ex
>>> try:
...     ex.Mesh({"dp": 0})
... except ex.ExplorerError as e:
...     print(type(e).__name__)
MeshError
"""

from __future__ import annotations

__all__ = ["ExplorerError"]


class ExplorerError(Exception):
    """Base class of the project's errors: the message names the value, the reason, the fix."""
