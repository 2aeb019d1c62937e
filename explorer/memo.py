"""One bounded, thread-safe memo for the whole core.

Every module-level cache of the core's derived tables is a :class:`Memo` (two small pure
lookups on hot paths, a TensorType per shape and a default link stack, keep
``functools.lru_cache``): a size bound (least recently used entries go
first), ``clear()``, a lock so that threads can share it, and a key built from every input of
the computation. ``clear_all()`` empties every memo at once (benchmarks call it between
cold runs).

>>> from explorer.memo import memoize
>>> @memoize(maxsize=2)
... def square(x: int) -> int:
...     return x * x
>>> square(3), square(3), square.memo.stats()
(9, 9, (1, 1))
>>> square.memo.clear(); len(square.memo)
0
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from .checks import positive_int
from .errors import ExplorerError

__all__ = ["Memo", "memoize", "clear_all", "all_memos"]

V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: weakref.WeakSet[Memo] = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()
_MISSING = object()


class Memo(Generic[V]):
    """A bounded least-recently-used map from a hashable key to a computed value.

    Args:
        name: shown in ``repr`` and in :func:`all_memos` (e.g. ``"sharding.strategies"``).
        maxsize: the most entries kept; the least recently used go first.

    The value is computed outside the lock (two threads may compute the same key once each;
    both get an equal value and the first one stored wins), so a slow computation never
    blocks the other threads' lookups.
    """

    def __init__(self, name: str, maxsize: int) -> None:
        positive_int(maxsize, f"Memo {name!r}: maxsize", error=ExplorerError)
        self.name = name
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._evicted = 0
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value stored under ``key``, computed by ``compute()`` on a miss."""
        # keys are tuples of frozen dataclasses (meshes, layouts) whose hash is recomputed on
        # every dict operation, so a hit and a miss each touch the dict twice, not more
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is not _MISSING:
                self._data.move_to_end(key)
                self._hits += 1
                return value
            self._misses += 1
        value = compute()
        with self._lock:
            first = self._data.setdefault(key, value)
            if first is not value:  # another thread stored it meanwhile: keep the first
                return first
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
                self._evicted += 1
        return value

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (marked recently used), or ``default``; counts nothing."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> list[tuple[Hashable, V]]:
        """Store ``value`` under ``key``; return the entries evicted to make room (least
        recently used first), so that a caller can drop what refers to them."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            out = []
            while len(self._data) > self.maxsize:
                out.append(self._data.popitem(last=False))
                self._evicted += 1
            return out

    def values(self) -> list[V]:
        with self._lock:
            return list(self._data.values())

    @property
    def evicted(self) -> int:
        """Entries dropped to keep within ``maxsize`` since the last ``clear()``."""
        return self._evicted

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._hits = self._misses = self._evicted = 0

    def stats(self) -> tuple[int, int]:
        """``(hits, misses)`` since the last ``clear()``."""
        return self._hits, self._misses

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def __repr__(self) -> str:
        return (f"Memo({self.name!r}, maxsize={self.maxsize}, size={len(self)}, "
                f"evicted={self._evicted})")  # fmt: skip


def memoize(maxsize: int, name: str | None = None) -> Callable[[F], F]:
    """Decorator: memoize a function on ALL its arguments (positional and keyword).

    The wrapped function exposes its :class:`Memo` as ``.memo``. Arguments must be hashable.
    """

    def wrap(fn: F) -> F:
        memo: Memo[Any] = Memo(name or f"{fn.__module__}.{fn.__qualname__}", maxsize)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            return memo.get(key, lambda: fn(*args, **kwargs))

        wrapper.memo = memo  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return wrap


def all_memos() -> list[Memo]:
    """Every live memo, by name."""
    with _REGISTRY_LOCK:
        return sorted(_REGISTRY, key=lambda m: m.name)


def clear_all() -> None:
    """Empty every memo of the project (cold-start benchmarks, tests of cache keys)."""
    for memo in all_memos():
        memo.clear()
