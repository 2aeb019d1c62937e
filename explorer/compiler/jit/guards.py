"""Guards on module-scope tensors: a compiled function that reads a tensor (or numpy array)
from a global or a closure variable bakes that tensor's value into its graph; a guard
remembers which object each such name held at compile time, so that rebinding the name
(``W = ex.tensor(...)``) makes the next call recompile, as eager would see the new value.

What is guarded: the global and closure names read by the compiled function and by every
user function it called while being captured (``capture="ast"``; with ``capture="trace"``
only the compiled function's own names) whose value is a ``Tensor`` or an ``ndarray``.
Not guarded (documented footguns): Python scalars and other objects (frozen at compile
time) and in-place changes to the guarded tensor's array (``W.data[:] = ...``).

>>> import numpy as np
>>> W = np.ones(2)
>>> def f(x):
...     return x + W
>>> g = tensor_guards([f])
>>> [(x.where, x.name) for x in g], stale(g)
([('global', 'W')], None)
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..tensor import Tensor

__all__ = ["Guard", "tensor_guards", "stale"]


@dataclass(frozen=True)
class Guard:
    """``name`` (a global of ``namespace`` or the closure ``cell``) held ``ref()`` when the
    function was compiled."""

    function: str
    where: Literal["global", "closure"]
    name: str
    ref: weakref.ref
    namespace: dict | None = None
    cell: Any = None

    def holds(self) -> bool:
        """True while the name still holds the same object."""
        if self.where == "global":
            now = self.namespace.get(self.name, _MISSING)
        else:
            try:
                now = self.cell.cell_contents
            except ValueError:  # the cell was emptied
                return False
        return now is self.ref()

    def __str__(self) -> str:
        return f"{self.where} {self.name!r} of {self.function}()"


_MISSING = object()


def _names(code: types.CodeType) -> Iterator[str]:
    """Every global name the code (and code nested in it: lambdas, comprehensions) reads."""
    stack = [code]
    while stack:
        c = stack.pop()
        yield from c.co_names
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor | np.ndarray)


def tensor_guards(functions: Iterable[Any]) -> tuple[Guard, ...]:
    """Guards for the tensors the ``functions`` read from module scope or closures."""
    out: dict[tuple, Guard] = {}
    for fn in functions:
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if code is None:
            continue
        qual = getattr(fn, "__qualname__", "?")
        glb = fn.__globals__
        for name in _names(code):
            v = glb.get(name, _MISSING)
            if _is_tensor(v) and ("g", id(glb), name) not in out:
                out["g", id(glb), name] = Guard(qual, "global", name, weakref.ref(v), glb)
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if _is_tensor(v) and ("c", id(cell)) not in out:
                out["c", id(cell)] = Guard(qual, "closure", name, weakref.ref(v), cell=cell)
    return tuple(out.values())


def stale(guards: tuple[Guard, ...]) -> Guard | None:
    """The first guard whose name now holds another object, or None."""
    for g in guards:
        if not g.holds():
            return g
    return None
