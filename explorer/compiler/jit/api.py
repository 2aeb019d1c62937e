"""``jit``: compile a function (or a cell's method) into an ``explorer.ir.Graph``, optimise
it and run it with the executor; compiled graphs are cached per input signature.

A Python ``if`` on a tensor becomes a ``cond`` node (for functions defined in a file)::

    @ex.jit
    def f(x):
        if x.sum() > 0:
            y = x * 2.0
        else:
            y = -x
        return y

>>> import explorer as ex, numpy as np
>>> @ex.jit
... def g(x):
...     return ex.F.relu(x) * 2.0
>>> g(ex.tensor(np.array([1.0, -3.0]))).numpy()
array([2., 0.], dtype=float32)
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np

from ... import trace as _trace
from ...ir import Graph, TensorType
from ..errors import GraphBreak, JitSyntaxError
from ..nn import Cell
from ..passes import Level, RewriteStep, optimize
from ..passes.driver import BACKENDS, Backend
from ..tensor import Tensor, tensor
from ..trace_stack import capturing, tracing
from . import runtime, transform
from .cache import CacheEntry
from .capture import Tracer
from .guards import stale, tensor_guards
from .split import Split, plan_split
from .symbolic import sentinel

__all__ = ["jit", "JitFunction", "capture", "CacheEntry"]

Syntax = Literal["strict", "lax"]
Capture = Literal["ast", "trace"]
Dynamic = Mapping[str, Mapping[int, str]]


def _flatten(out: Any) -> tuple[list[Tensor], Any]:
    if isinstance(out, Tensor):
        return [out], "T"
    if isinstance(out, tuple | list):
        flat, tree = [], []
        for o in out:
            f, t = _flatten(o)
            flat += f
            tree.append(t)
        return flat, (type(out), tree)
    if isinstance(out, dict):
        flat, tree = [], []
        for k, o in out.items():
            f, t = _flatten(o)
            flat += f
            tree.append((k, t))
        return flat, (dict, tree)
    return [], ("V", out)


def _unflatten(tree: Any, it) -> Any:
    if tree == "T":
        return Tensor.wrap(next(it))
    kind, sub = tree
    if kind == "V":
        return sub
    if kind is dict:
        return {k: _unflatten(t, it) for k, t in sub}
    return kind(_unflatten(t, it) for t in sub)


class JitFunction:
    """A compiled function. Call it like the original; inspect with ``graph(*args)``,
    ``steps(*args)``, ``cache`` and ``lower(*args)``."""

    def __init__(self, fn: Callable, *, level: Level = "O2", syntax: Syntax = "strict",
                 capture: Capture = "ast", dynamic: Dynamic | None = None,
                 backend: Backend = "numpy") -> None:  # fmt: skip
        if level not in ("O0", "O1", "O2"):
            raise ValueError(f"level={level!r}; expected 'O0', 'O1' or 'O2'")
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}; expected one of {', '.join(BACKENDS)}")
        self.backend = backend
        if syntax not in ("strict", "lax"):
            raise ValueError(f"syntax={syntax!r}; expected 'strict' or 'lax'")
        if capture not in ("ast", "trace"):
            raise ValueError(f"capture={capture!r}; expected 'ast' or 'trace'")
        if dynamic and capture == "trace":
            raise ValueError('symbolic dims need capture="ast" (shape-only capture)')
        self.fn = fn
        self.level, self.syntax, self.capture, self.dynamic = (
            level,
            syntax,
            capture,
            dict(dynamic or {}),
        )
        self.sig = inspect.signature(fn)
        self.cache: dict[tuple, CacheEntry] = {}
        self._last_key: tuple | None = None
        # compiling and storing entries is one thread at a time; running is not
        self._lock = threading.RLock()
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self._call, (obj,))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call((), *args, **kwargs)

    def __repr__(self) -> str:
        return (f"jit({self.fn.__qualname__}, level={self.level!r}, syntax={self.syntax!r}, "
                f"capture={self.capture!r}, cached={len(self.cache)})")  # fmt: skip

    # --- signature ------------------------------------------------------------------------
    def _bind(self, owner: tuple, args, kwargs) -> inspect.BoundArguments:
        bound = self.sig.bind(*owner, *args, **kwargs)
        bound.apply_defaults()
        return bound

    def _key(self, bound: inspect.BoundArguments) -> tuple[tuple, dict[str, int]]:
        key: list[Any] = []
        sizes: dict[str, int] = {}
        for name, v in bound.arguments.items():
            if isinstance(v, Tensor | np.ndarray):
                t = v.type if isinstance(v, Tensor) else tensor(v).type
                dims = list(t.shape)
                for axis, sym in self.dynamic.get(name, {}).items():
                    d = dims[axis]
                    if sizes.setdefault(sym, d) != d:
                        raise ValueError(
                            f"symbolic dim {sym!r} is {sizes[sym]} in one argument and {d} in "
                            f"{name!r}; arguments sharing a symbol must agree"
                        )
                    dims[axis] = sym
                key.append((name, "T", tuple(dims), t.dtype.value))
            elif isinstance(v, Cell):
                key.append((name, "C", id(v)))
            else:
                try:
                    hash(v)
                    key.append((name, "V", type(v).__name__, v))
                except TypeError:
                    key.append((name, "O", id(v)))
        return tuple(key), sizes

    # --- call -----------------------------------------------------------------------------
    def _call(self, owner: tuple, *args: Any, **kwargs: Any) -> Any:
        if capturing() is not None:  # called from a function being compiled: inline it
            return runtime.maybe_convert(self.fn)(*owner, *args, **kwargs)
        bound = self._bind(owner, args, kwargs)
        key, sizes = self._key(bound)
        entry = self._lookup(bound, key)
        rec = _trace.active()
        if entry.fallback is not None and entry.split is None:
            if rec is not None:
                rec.note("graph_break", entry.fallback.construct,
                         f"{entry.fallback.construct} at {entry.fallback.location}; "
                         "ran eagerly")  # fmt: skip
            return self.fn(*bound.args, **bound.kwargs)
        sym = tuple(sizes[s] for s in sorted(entry.symbols))
        if sym not in entry.programs and entry.symbols and rec is not None:
            dims = dict(zip(sorted(entry.symbols), sym, strict=True))
            rec.note("bind", self.fn.__name__, f"symbolic dims {dims}: shapes re-specialised, "
                     "no retrace")  # fmt: skip
        feeds = [_array(v) for v in _leaves(bound)]
        feeds += [p.data for _, p in entry.params]
        outs = entry.run(sym, feeds)
        result = _unflatten(entry.out_tree, iter(outs))
        if entry.split is None:
            return result
        sp, gb = entry.split, entry.fallback
        if rec is not None:
            rec.note("graph_break", gb.construct,
                     f"{gb.construct} at {gb.location}; compiled up to line {sp.line - 1}, "
                     f"eager from line {sp.line}")  # fmt: skip
        return sp.tail(*sp.tail_args(bound.arguments, result))

    def _lookup(self, bound: inspect.BoundArguments, key: tuple) -> CacheEntry:
        """The entry for ``key``: cached, or compiled now (also when a module-scope tensor
        it baked in was rebound since: see ``guards``)."""
        with self._lock:
            entry = self.cache.get(key)
            if entry is None:
                return self._compile(bound, key)
            moved = stale(entry.guards)
            if moved is None:
                return entry
            return self._compile(bound, key, f"{moved} was rebound since it was compiled")

    def _compile(self, bound: inspect.BoundArguments, key: tuple,
                 reason: str | None = None) -> CacheEntry:  # fmt: skip
        t0 = time.perf_counter()
        reason = reason or _diff(self._last_key, key)
        symbols: dict[str, int] = {}
        try:
            captured, params, tree, called = self._capture(bound, symbols)
        except GraphBreak as gb:
            if self.syntax == "strict":
                raise JitSyntaxError(gb.construct, gb.location, gb.hint) from None
            symbols = {}
            split, head = self._split(gb, bound, symbols)
            if split is None:
                entry = CacheEntry(key, None, None, [], None, [], None, 0.0, gb)
                self.cache[key] = entry
                self._last_key = key
                return entry
            captured, params, tree, called = head
            graph, steps, plan = optimize(captured, self.level, self.backend)
            ms = (time.perf_counter() - t0) * 1e3
            entry = CacheEntry(key, captured, graph, steps, plan, params, tree, ms, gb, split,
                               symbols, tensor_guards([self.fn, *called]))  # fmt: skip
            return self._store(entry, reason)
        graph, steps, plan = optimize(captured, self.level, self.backend)
        ms = (time.perf_counter() - t0) * 1e3
        entry = CacheEntry(key, captured, graph, steps, plan, params, tree, ms,
                           symbols=symbols, guards=tensor_guards([self.fn, *called]))  # fmt: skip
        return self._store(entry, reason)

    def _store(self, entry: CacheEntry, reason: str) -> CacheEntry:
        self.cache[entry.key] = entry
        rec = _trace.active()
        if rec is not None:
            kind = "compile" if self._last_key is None else "recompile"
            rec.note(kind, self.fn.__name__, reason, dur_us=entry.compile_ms * 1e3)
        self._last_key = entry.key
        return entry

    def _split(self, gb: GraphBreak, bound, symbols: dict[str, int]) -> tuple[Split | None, Any]:
        """Lax mode: where to cut the function at ``gb`` and the captured head; (None,
        None) when it cannot be cut (the whole function then runs eagerly)."""
        split = plan_split(self.fn, gb, runtime) if self.capture == "ast" else None
        if split is None:
            return None, None
        try:
            return split, self._capture(bound, symbols, split.upto)
        except GraphBreak:
            return None, None

    def _capture(self, bound, symbols: dict[str, int], upto: int | None = None):
        if self.capture == "ast":
            issues = transform.check(self.fn)
            if upto is not None:  # only the head is compiled: later issues run eagerly
                first = transform._source(self.fn)[0].body[upto].lineno
                issues = [i for i in issues if i.location.lineno < first]
            if issues:
                i = issues[0]
                raise GraphBreak(i.construct, i.hint, i.location)
        tracer = Tracer(self.fn.__name__, concrete=self.capture == "trace", mode=self.capture,
                        converter=runtime.maybe_convert if self.capture == "ast" else None)  # fmt: skip
        new = bound.arguments.copy()
        for name, v in bound.arguments.items():
            if isinstance(v, Tensor | np.ndarray):
                t = tensor(v) if not isinstance(v, Tensor) else v
                dims = list(t.shape)
                for axis, sym in self.dynamic.get(name, {}).items():
                    symbols.setdefault(sym, sentinel(len(symbols)))
                    dims[axis] = symbols[sym]
                data = t.data if self.capture == "trace" else None
                new[name] = tracer.input(name, TensorType(tuple(dims), t.dtype), data)
        call = inspect.BoundArguments(self.sig, new)
        fn = self.fn
        if self.capture == "ast":
            with tracing(tracer):
                fn = (
                    runtime.maybe_convert(fn)
                    if upto is None
                    else transform.convert(fn, runtime, upto)
                )
        with tracing(tracer):
            out = fn(*call.args, **call.kwargs)
        flat, tree = _flatten(out)
        with tracing(tracer):
            flat = [t if isinstance(t, Tensor) else tensor(t) for t in flat]
        graph = tracer.build(flat)
        rec = _trace.active()
        if rec is not None:
            for kind, detail in tracer.notes:
                rec.note(kind, "capture", detail)  # type: ignore[arg-type]
        return graph, tracer.params, tree, tracer.called

    # --- inspection -----------------------------------------------------------------------
    def _entry(self, *args: Any, **kwargs: Any) -> CacheEntry:
        bound = self._bind((), args, kwargs)
        key, _ = self._key(bound)
        return self._lookup(bound, key)

    def lower(self, *args: Any, **kwargs: Any) -> Graph:
        """The optimised graph for these arguments (compiles if needed)."""
        return self._entry(*args, **kwargs).graph

    def graph(self, *args: Any, **kwargs: Any) -> Graph:
        """The captured graph, before the passes."""
        return self._entry(*args, **kwargs).captured

    def steps(self, *args: Any, **kwargs: Any) -> list[RewriteStep]:
        return self._entry(*args, **kwargs).steps


def _leaves(bound: inspect.BoundArguments):
    for v in bound.arguments.values():
        if isinstance(v, Tensor | np.ndarray):
            yield v


def _array(v: Any) -> np.ndarray:
    return v.data if isinstance(v, Tensor) else tensor(v).data


def _diff(old: tuple | None, new: tuple) -> str:
    if old is None:
        return "first call"
    changes = [f"{a[0]}: {a[2:]} -> {b[2:]}" for a, b in zip(old, new, strict=False) if a != b]
    return "input signature changed: " + "; ".join(changes) if changes else "new signature"


def jit(fn: Callable | None = None, *, level: Level = "O2", syntax: Syntax = "strict",
        capture: Capture = "ast", dynamic: Dynamic | None = None,
        backend: Backend = "numpy"):  # fmt: skip
    """Compile ``fn`` (decorator, with or without arguments).

    Args:
        level: ``"O0"`` (no passes), ``"O1"`` (fold, CSE, DCE, simplify), ``"O2"`` (O1 +
            elementwise fusion + memory planning).
        syntax: ``"strict"`` raises ``JitSyntaxError`` at an unsupported construct;
            ``"lax"`` splits the function there (a graph break, in the trace): the
            top-level statements before it are compiled, the rest runs eagerly (all of it
            when the break is in the first statement or a ``return`` precedes it).
        capture: ``"ast"`` converts the source (tensor ``if``/``while`` become cond/loop
            nodes); ``"trace"`` records one run (a tensor branch is frozen to this run's).
        dynamic: symbolic dims, ``{"x": {0: "B"}}``: one compilation serves every size of
            that dim (the graph is re-specialised per size without retracing).
        backend: ``"numba"`` compiles the fused regions the cost model picks to generated
            numba kernels (``explorer.compiler.codegen``; numpy when numba is missing);
            ``"numpy"`` runs numpy/numexpr kernels only.

    Tensors read from module scope or closures (not passed as arguments) are baked into the
    graph as constants and *guarded on identity*: rebinding such a name (``W = new``) makes
    the next call recompile (a ``recompile`` event in the trace says which name), so results
    follow eager. Changing the guarded array in place, and Python scalars read from module
    scope, stay frozen at compile time (see ``tests/compiler/test_footguns.py``).

    Thread-safe: the capture state is per thread (``trace_stack``), compilation is locked,
    and concurrent calls run on separate programs (``cache.CacheEntry.run``).
    """
    if fn is None:
        return lambda f: JitFunction(f, level=level, syntax=syntax, capture=capture,
                                     dynamic=dynamic, backend=backend)  # fmt: skip
    return JitFunction(fn, level=level, syntax=syntax, capture=capture, dynamic=dynamic,
                       backend=backend)  # fmt: skip


def capture(fn: Callable, *args: Any, level: Level = "O0", **kwargs: Any) -> Graph:
    """Capture ``fn`` (a function or a cell) on abstract tensors (``ex.compiler.spec``) into
    an ``explorer.ir.Graph`` without allocating activations.

    >>> import explorer as ex
    >>> g = capture(ex.nn.Linear(8, 4), ex.compiler.spec((2, 8)))
    >>> [n.op for n in g.ops]
    ['matmul', 'add']
    """
    if isinstance(fn, Cell):
        cell = fn
        fn = type(cell).forward
        args = (cell, *args)
    jf = JitFunction(fn, level=level)
    bound = jf._bind((), args, kwargs)
    graph = jf._capture(bound, {})[0]
    if level != "O0":
        graph = optimize(graph, level)[0]
    return graph
