"""``@jit``: source transformation, capture, cache (see ``api``)."""

from .api import CacheEntry, JitFunction, capture, jit
from .capture import Tracer
from .transform import check

__all__ = ["jit", "JitFunction", "capture", "CacheEntry", "Tracer", "check"]
