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

and a ``while`` on a tensor a ``loop`` node. Under ``ex.grad`` the gradient of such an ``if``
is a ``cond`` too (only the taken branch runs, ``control``) and that of a ``while`` one
``while_vjp`` node (3n body runs for n trips, ``loop_grad``). A return/break/continue under
a tensor test is a ``JitSyntaxError`` naming it, its line and the rewrite. Symbolic dims
(``dynamic=``) and their shape guards: ``symbolic``, ``rebind``, ``variants``.

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
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np

from ... import trace as _trace
from ...checks import is_int, positive_int
from ...ir import Graph, TensorType
from ...memo import Memo
from ..errors import (
    CompilerArgumentError,
    CompilerError,
    GraphBreak,
    JitSyntaxError,
    ShapeError,
)
from ..nn import Cell
from ..passes import Level, RewriteStep, optimize
from ..passes.driver import BACKENDS, Backend
from ..tensor import Tensor, tensor
from ..trace_stack import capturing, tracing
from . import runtime, transform
from .cache import CacheEntry
from .capture import SymTensor, Tracer
from .guards import stale, tensor_guards
from .split import Split, plan_split
from .symbolic import MODULUS_BASE, SymContext, SymInt, evaluate, sentinel
from .variants import _full_key, _least_divisor, _respecialise, bucket_of

__all__ = ["jit", "JitFunction", "capture", "CacheEntry"]

Syntax = Literal["strict", "lax"]
Capture = Literal["ast", "trace"]
Dynamic = Mapping[str, Mapping[int, str]]
Bucket = Literal["none", "pow2"]
# compilations one jit function keeps (the least recently used go first): without dynamic=,
# each new input shape compiles once, and 1,500 shapes kept 1,500 entries (+48 MB)
DEFAULT_CACHE_SIZE = 64
MAX_RECAPTURES = 4  # compilations one call may trigger before its sizes are fixed


def _flatten(out: Any) -> tuple[list[Tensor], Any]:
    if isinstance(out, Tensor):
        return [out], "T"
    if isinstance(out, SymInt):  # a size: evaluated for each call's sizes
        return [], ("S", out.expr)
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


@functools.lru_cache(maxsize=1024)
def _out_type(shape: tuple[int, ...], dtype: np.dtype) -> TensorType:
    return Tensor.wrap(np.empty((0,), dtype)).type.with_shape(shape)


def _wrap_out(a: Any) -> Tensor:
    """A program's output as a Tensor: its type made once per shape and dtype (checking and
    building a TensorType at every call was a tenth of a small program's call)."""
    if type(a) is not np.ndarray or (a.dtype.kind == "f" and a.dtype != np.float32):
        return Tensor.wrap(a)  # converted (float64) or refused like any array
    return Tensor(a, _out_type(a.shape, a.dtype))


def _unflatten(tree: Any, it, sizes: dict[int, int]) -> Any:
    if tree == "T":
        return _wrap_out(next(it))
    kind, sub = tree
    if kind == "V":
        return sub
    if kind == "S":
        return evaluate(sub, sizes)
    if kind is dict:
        return {k: _unflatten(t, it, sizes) for k, t in sub}
    return kind(_unflatten(t, it, sizes) for t in sub)


def _check_dynamic(dynamic: dict, sig: inspect.Signature, fn: Callable) -> None:
    """``dynamic`` names parameters of ``fn``, each with ``{axis: symbol}`` (an int axis, a
    str symbol); a name ``fn`` does not take was silently ignored before."""
    params = sig.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    name_of = getattr(fn, "__name__", repr(fn))
    for name, axes in dynamic.items():
        if name not in params and not var_kw:
            raise CompilerArgumentError(
                f"dynamic names {name!r}, which {name_of}() does not take; its parameters are "
                f"{', '.join(params) or 'none'}"
            )
        if not isinstance(axes, Mapping) or not axes:
            raise CompilerArgumentError(
                f"dynamic[{name!r}]={axes!r}; expected {{axis: symbol}}, e.g. {{0: 'B'}}"
            )
        for axis, sym in axes.items():
            if not is_int(axis, numpy=True) or not isinstance(sym, str) or not sym.isidentifier():
                raise CompilerArgumentError(
                    f"dynamic[{name!r}] has {axis!r}: {sym!r}; expected an int axis and a "
                    "symbol name such as 'B'"
                )


class JitFunction:
    """A compiled function. Call it like the original; inspect with ``graph(*args)``,
    ``steps(*args)``, ``cache`` and ``lower(*args)``."""

    def __init__(self, fn: Callable, *, level: Level = "O2", syntax: Syntax = "strict",
                 capture: Capture = "ast", dynamic: Dynamic | None = None,
                 backend: Backend = "numpy", bucket: Bucket = "none",
                 cache_size: int = DEFAULT_CACHE_SIZE) -> None:  # fmt: skip
        if level not in ("O0", "O1", "O2"):
            raise CompilerArgumentError(f"level={level!r}; expected 'O0', 'O1' or 'O2'")
        if backend not in BACKENDS:
            raise CompilerArgumentError(
                f"backend={backend!r}; expected one of {', '.join(BACKENDS)}"
            )
        self.backend = backend
        if syntax not in ("strict", "lax"):
            raise CompilerArgumentError(f"syntax={syntax!r}; expected 'strict' or 'lax'")
        if capture not in ("ast", "trace"):
            raise CompilerArgumentError(f"capture={capture!r}; expected 'ast' or 'trace'")
        if dynamic is not None and not isinstance(dynamic, Mapping):
            raise CompilerArgumentError(
                f"dynamic={dynamic!r}; expected {{argument: {{axis: symbol}}}}, e.g. "
                "{'x': {0: 'B'}}, or None"
            )
        if dynamic and capture == "trace":
            raise CompilerArgumentError('symbolic dims need capture="ast" (shape-only capture)')
        if bucket not in ("none", "pow2"):
            raise CompilerArgumentError(f"bucket={bucket!r}; expected 'none' or 'pow2'")
        self.bucket = bucket
        self.fn = fn
        self.level, self.syntax, self.capture, self.dynamic = (
            level,
            syntax,
            capture,
            dict(dynamic or {}),
        )
        self.sig = inspect.signature(fn)
        _check_dynamic(self.dynamic, self.sig, fn)
        positive_int(cache_size, "jit cache_size", error=CompilerArgumentError)
        params = tuple(self.sig.parameters.values())
        plain = all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params)
        self._plain = tuple(p.name for p in params) if plain else None  # fast _bind
        # compiled entries, least recently used evicted past cache_size (shown in repr)
        self.cache: Memo[CacheEntry] = Memo(f"jit.{getattr(fn, '__qualname__', fn)}",
                                            cache_size)  # fmt: skip
        # signature key -> the keys of its compiled variants (symbolic first, then the ones
        # with dims fixed after a shape guard failed); keys whose capture is per size
        self._variants: dict[tuple, list[tuple]] = {}
        self._all_fixed: dict[tuple, bool] = {}
        self._last_key: tuple | None = None
        # (signature key, entry) of the last call whose entry has no symbolic sizes, shape
        # guards or fixed dims: the next call with that key skips the variant search
        self._hot: tuple[tuple, CacheEntry] | None = None
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
                f"capture={self.capture!r}, cached={len(self.cache)}, "
                f"evicted={self.cache.evicted})")  # fmt: skip

    # --- signature ------------------------------------------------------------------------
    def _bind(self, owner: tuple, args, kwargs) -> inspect.BoundArguments:
        names = self._plain
        if names is not None and not kwargs and len(owner) + len(args) == len(names):
            # every parameter given by position, none with a default: what bind() returns
            return inspect.BoundArguments(self.sig, dict(zip(names, (*owner, *args), strict=True)))
        bound = self.sig.bind(*owner, *args, **kwargs)
        bound.apply_defaults()
        return bound

    def _key(self, bound: inspect.BoundArguments) -> tuple[tuple, dict[str, int]]:
        key: list[Any] = []
        sizes: dict[str, int] = {}
        for name, v in bound.arguments.items():
            if isinstance(v, Tensor | np.ndarray):
                t = v.type if isinstance(v, Tensor) else tensor(v).type
                dims: list[Any] = list(t.shape)
                for axis, sym in self.dynamic.get(name, {}).items():
                    d = dims[axis]
                    if sizes.setdefault(sym, d) != d:
                        raise CompilerArgumentError(
                            f"symbolic dim {sym!r} is {sizes[sym]} in one argument and {d} in "
                            f"{name!r}; arguments sharing a symbol must agree"
                        )
                    dims[axis] = sym if self.bucket == "none" else (sym, bucket_of(d))
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
        hot = self._hot
        if (hot is not None and hot[0] == key and stale(hot[1].guards) is None
                and self.cache.peek(hot[1].key) is hot[1]):  # fmt: skip
            entry = hot[1]  # what _lookup finds: no sizes to check, guards hold, still cached
        else:
            entry = self._lookup(bound, key, sizes)
            if not (entry.symbols or entry.shape_guards or entry.fixed):
                self._hot = (key, entry)
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
        feeds = dict(zip(entry.input_names, (_array(v) for v in _leaves(bound)), strict=False))
        feeds.update((name, p.data) for name, p in entry.params)
        try:
            outs = entry.run(sym, feeds)
        except CompilerError as e:  # these sizes defeat the symbolic graph: specialise
            with self._lock:
                entry = self._compile(bound, key, dict(sizes), f"re-specialising failed ({e})",
                                      all_fixed=True)  # fmt: skip
            sym = ()
            outs = entry.run(sym, feeds)
        result = _unflatten(entry.out_tree, iter(outs), entry.mapping(sym))
        if entry.split is None:
            return result
        sp, gb = entry.split, entry.fallback
        if rec is not None:
            rec.note("graph_break", gb.construct,
                     f"{gb.construct} at {gb.location}; compiled up to line {sp.line - 1}, "
                     f"eager from line {sp.line}")  # fmt: skip
        return sp.tail(*sp.tail_args(bound.arguments, result))

    def _lookup(self, bound: inspect.BoundArguments, key: tuple,
                sizes: dict[str, int] | None = None) -> CacheEntry:  # fmt: skip
        """The entry for ``key`` whose fixed sizes and shape guards accept ``sizes``: cached,
        or compiled now. A failed shape guard compiles once more with the dims it names
        fixed to this call's sizes; a module-scope tensor rebound since (``guards``)
        compiles that entry again."""
        sizes = sizes or {}
        with self._lock:
            for _ in range(MAX_RECAPTURES):
                entry = self._find(bound, key, sizes)
                if entry.failed_guard(sizes) is None and all(
                        sizes.get(s) == v for s, v in entry.fixed.items()):  # fmt: skip
                    return entry
            return self._compile(bound, key, dict(sizes), "shape guards kept failing",
                                 all_fixed=True)  # fmt: skip

    def _find(self, bound: inspect.BoundArguments, key: tuple, sizes: dict[str, int]):
        """One step of ``_lookup``: a matching entry, or the one compiled now (whose own
        guards the caller checks: a first capture can fail a guard of this very call)."""
        variants = self._variants.get(key, [])
        failed: list[tuple[CacheEntry, Any]] = []
        for k in variants:
            entry = self.cache.peek(k)
            if any(sizes.get(s) != v for s, v in entry.fixed.items()):
                continue
            g = entry.failed_guard(sizes)
            if g is not None:
                failed.append((entry, g))
                continue
            moved = stale(entry.guards)
            if moved is None:
                return entry
            return self._compile(bound, key, entry.fixed,
                                 f"{moved} was rebound since it was compiled",
                                 moduli=entry.moduli, primes=entry.primes)  # fmt: skip
        if not variants:
            return self._compile(bound, key, {})
        plans = [(g, *_respecialise(e, g, sizes)) for e, g in failed]
        plans = [p for p in plans if _full_key(key, *p[1:4]) not in self.cache]
        if not plans or self._all_fixed.get(key):
            return self._compile(bound, key, dict(sizes), "new sizes for a function "
                                 "compiled per size", all_fixed=True)  # fmt: skip
        g, fixed, moduli, primes, how = plans[0]  # from the most general variant first
        now = ", ".join(f"{n}={sizes[n]}" for n in sorted(sizes))
        rec = _trace.active()
        if rec is not None:
            rec.note("note", "guard failed", f"shape guard {g} of {self.fn.__name__}() "
                     f"fails for {now}")  # fmt: skip
        return self._compile(bound, key, fixed, f"shape guard {g} failed for {now}; {how}",
                             moduli=moduli, primes=primes)  # fmt: skip

    def _compile(self, bound: inspect.BoundArguments, key: tuple, fixed: dict[str, int],
                 reason: str | None = None, all_fixed: bool = False,
                 moduli: dict[str, int] | None = None,
                 primes: dict[str, int] | None = None) -> CacheEntry:  # fmt: skip
        t0 = time.perf_counter()
        reason = reason or _diff(self._last_key, key)
        symbols: dict[str, int] = {}
        moduli = {k: v for k, v in (moduli or {}).items() if k not in fixed and v > 1}
        primes = {k: v for k, v in (primes or {}).items() if k not in fixed}
        full = _full_key(key, fixed, moduli, primes)
        if full in self.cache and all_fixed:
            return self.cache.peek(full)
        try:
            failed: ShapeError | None = None
            try:
                captured, params, tree, called, ctx = self._capture(bound, symbols, None, fixed,
                                                                     moduli, primes)  # fmt: skip
            except ShapeError as e:  # maybe only at the sentinel sizes: retried at the real ones
                names = self._symbol_names()
                if not names or set(names) <= set(fixed):
                    raise
                failed = e
            if failed is not None:
                sizes = self._key(bound)[1]
                rec = _trace.active()
                classes = {n: math.gcd(sizes[n], MODULUS_BASE) for n in self._symbol_names()
                           if n not in fixed}  # fmt: skip
                classes = {n: m if moduli else _least_divisor(m) for n, m in classes.items()
                           if m > 1}  # fmt: skip
                # a prime sentinel may be what failed (B // 2 * 2): the smallest class first
                if classes and classes != moduli:
                    what = ", ".join(f"{n} a multiple of {m}" for n, m in classes.items())
                    if rec is not None:
                        rec.note("note", "symbolic capture failed", f"{failed}; capturing "
                                 f"{self.fn.__name__}() again with {what}")  # fmt: skip
                    return self._compile(bound, key, fixed, f"{reason}; captured with {what}",
                                         moduli=classes, primes=primes)  # fmt: skip
                if rec is not None:
                    rec.note("note", "symbolic capture failed", f"{failed}; compiling "
                             f"{self.fn.__name__}() for its sizes {sizes}")  # fmt: skip
                self._all_fixed[key] = True
                return self._compile(bound, key, dict(sizes), reason, all_fixed=True)
        except GraphBreak as gb:
            if self.syntax == "strict":
                raise JitSyntaxError(gb.construct, gb.location, gb.hint) from None
            symbols = {}
            split, head = self._split(gb, bound, symbols, fixed, moduli, primes)
            if split is None:
                entry = CacheEntry(full, None, None, [], None, [], None, 0.0, gb, fixed=fixed)
                return self._store(entry, reason, key)
            captured, params, tree, called, ctx = head
            graph, steps, plan = optimize(captured, self.level, self.backend)
            ms = (time.perf_counter() - t0) * 1e3
            entry = CacheEntry(full, captured, graph, steps, plan, params, tree, ms, gb, split,
                               symbols, tensor_guards([self.fn, *called]), fixed=fixed,
                               moduli=moduli, primes=primes, **_sym_fields(ctx, bound, self._reoptimize))  # fmt: skip
            return self._store(entry, reason, key)
        if all_fixed:
            self._all_fixed[key] = True
        graph, steps, plan = optimize(captured, self.level, self.backend)
        ms = (time.perf_counter() - t0) * 1e3
        entry = CacheEntry(full, captured, graph, steps, plan, params, tree, ms,
                           symbols=symbols, guards=tensor_guards([self.fn, *called]),
                           fixed=fixed, moduli=moduli, primes=primes, **_sym_fields(ctx, bound, self._reoptimize))  # fmt: skip
        return self._store(entry, reason, key)

    def _reoptimize(self, graph: Graph) -> Graph:
        return optimize(graph, self.level, self.backend)[0]

    def _symbol_names(self) -> list[str]:
        return sorted({s for axes in self.dynamic.values() for s in axes.values()})

    def _store(self, entry: CacheEntry, reason: str, base: tuple) -> CacheEntry:
        evicted = self.cache.put(entry.key, entry)
        variants = self._variants.setdefault(base, [])
        if entry.key not in variants:
            variants.append(entry.key)
        rec = _trace.active()
        for old, _ in evicted:  # the entries a full cache dropped: their variants go too
            for b, ks in list(self._variants.items()):
                if old in ks:
                    ks.remove(old)
                    if not ks:
                        del self._variants[b]
                        self._all_fixed.pop(b, None)
            if rec is not None:
                rec.note("note", "cache full", f"{self.fn.__name__}(): the least recently used "
                         f"of {self.cache.maxsize} compilations evicted "
                         f"({self.cache.evicted} so far); jit(cache_size=) keeps more")  # fmt: skip
        if rec is not None:
            kind = "compile" if self._last_key is None else "recompile"
            rec.note(kind, self.fn.__name__, reason, dur_us=entry.compile_ms * 1e3)
        self._last_key = entry.key
        return entry

    def _split(self, gb: GraphBreak, bound, symbols: dict[str, int], fixed: dict[str, int],
               moduli: dict[str, int], primes: dict[str, int]) -> tuple[Split | None, Any]:  # fmt: skip
        """Lax mode: where to cut the function at ``gb`` and the captured head; (None,
        None) when it cannot be cut (the whole function then runs eagerly)."""
        split = plan_split(self.fn, gb, runtime) if self.capture == "ast" else None
        if split is None:
            return None, None
        try:
            return split, self._capture(bound, symbols, split.upto, fixed, moduli, primes)
        except GraphBreak:
            return None, None

    def _capture(self, bound, symbols: dict[str, int], upto: int | None = None,
                 fixed: dict[str, int] | None = None, moduli: dict[str, int] | None = None,
                 primes: dict[str, int] | None = None):  # fmt: skip
        """Capture on abstract (or concrete) inputs: (graph, params, output tree, user
        functions called, the symbolic context or None). Symbolic dims not in ``fixed``
        get a sentinel size each (added to ``symbols``): a prime (``primes[dim]`` or the
        next of ``symbolic.sentinel``) times ``moduli[dim]``."""
        fixed, moduli, primes = fixed or {}, moduli or {}, primes or {}
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
                    if sym in fixed:
                        continue
                    p = primes.get(sym) or sentinel(len(symbols))
                    symbols.setdefault(sym, p * moduli.get(sym, 1))
                    dims[axis] = symbols[sym]
                data = t.data if self.capture == "trace" else None
                new[name] = tracer.input(name, TensorType(tuple(dims), t.dtype), data)
        if symbols:
            tracer.sym = SymContext(symbols, moduli)
            for name, v in new.items():  # the inputs were made before the context existed
                if isinstance(v, Tensor) and v.tracer is tracer:
                    new[name] = SymTensor(v.data, v.type, tracer, v.value)
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
        return graph, tracer.params, tree, tracer.called, tracer.sym

    # --- inspection -----------------------------------------------------------------------
    def _entry(self, *args: Any, **kwargs: Any) -> CacheEntry:
        bound = self._bind((), args, kwargs)
        key, sizes = self._key(bound)
        return self._lookup(bound, key, sizes)

    @property
    def shape_guards(self) -> tuple:
        """The shape guards of every compiled entry, in compile order."""
        return tuple(g for e in self.cache.values() for g in e.shape_guards)

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


def _sym_fields(ctx: SymContext | None, bound: inspect.BoundArguments,
               reoptimize: Callable[[Graph], Graph]) -> dict[str, Any]:  # fmt: skip
    names = [n for n, v in bound.arguments.items() if isinstance(v, Tensor | np.ndarray)]
    if ctx is None:
        return {"input_names": tuple(names)}
    return {"input_names": tuple(names), "shape_guards": tuple(ctx.guards.values()),
            "table": dict(ctx.table) | dict(ctx.floats), "scalars": tuple(ctx.scalars),
            "reoptimize": reoptimize}  # fmt: skip


def _diff(old: tuple | None, new: tuple) -> str:
    if old is None:
        return "first call"
    changes = [f"{a[0]}: {a[2:]} -> {b[2:]}" for a, b in zip(old, new, strict=False) if a != b]
    return "input signature changed: " + "; ".join(changes) if changes else "new signature"


def jit(fn: Callable | None = None, *, level: Level = "O2", syntax: Syntax = "strict",
        capture: Capture = "ast", dynamic: Dynamic | None = None,
        backend: Backend = "numpy", bucket: Bucket = "none",
        cache_size: int = DEFAULT_CACHE_SIZE):  # fmt: skip
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
            that dim (the graph is re-specialised per size without retracing; sizes computed
            in Python from it, ``x.shape[0] // 2``, slices and reshapes follow it). A Python
            decision on such a size (``if x.shape[0] > 4``) becomes a shape guard: a call
            that fails it compiles once more with that dim fixed (a ``recompile`` event
            names the guard). See ``symbolic``.
        bucket: cache policy for symbolic dims: ``"none"``, one compilation for all sizes;
            ``"pow2"``, one compilation per power-of-two bucket of each symbolic dim (sizes
            3 and 4 share one, 5..8 the next), each with its own guards and program pool.
            Inputs are never padded: every size runs at its own shape. Either way an entry
            keeps the programs of its ``cache.MAX_BOUND_SIZES`` most recent sizes.
        backend: ``"numba"`` compiles the fused regions the cost model picks to generated
            numba kernels (``explorer.compiler.codegen``; numpy when numba is missing).
            numba compiles them on a background thread once the first call has run, and
            the regions' numpy kernels serve the calls until each kernel is ready
            (``codegen.wait_compiled()`` waits for them; ``EXPLORER_NUMBA_COMPILE=sync``
            compiles them during the first call instead). ``"numpy"`` runs numpy/numexpr
            kernels only.
        cache_size: compilations kept (default 64); past it the least recently used is
            evicted (``repr`` and ``cache.evicted`` count them; a trace notes each).

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
                                     dynamic=dynamic, backend=backend, bucket=bucket,
                                     cache_size=cache_size)  # fmt: skip
    return JitFunction(fn, level=level, syntax=syntax, capture=capture, dynamic=dynamic,
                       backend=backend, bucket=bucket, cache_size=cache_size)  # fmt: skip


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
