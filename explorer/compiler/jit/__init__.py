"""``@jit``: source transformation, capture, cache (see ``api``)."""

from .api import JitFunction, capture, jit
from .cache import CacheEntry
from .capture import Tracer
from .transform import check

__all__ = ["jit", "JitFunction", "capture", "CacheEntry", "Tracer", "check"]
