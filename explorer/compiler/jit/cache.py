"""One compilation of a ``JitFunction`` (``CacheEntry``) and the programs that run it.

A ``Program`` owns its slot list and its memory plan's buffers, so one program serves one
call at a time. Each entry keeps a pool of programs per symbolic-dim binding: a call takes
a free program (or builds one when every program is busy in another thread), runs it and
gives it back. Threads calling one compiled function therefore never share buffers, and a
single-threaded caller reuses one program (and its buffers) call after call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir import Graph
from ..errors import CompilerError, GraphBreak
from ..executor import Program
from ..passes import MemoryPlan, RewriteStep
from ..passes.memory_plan import plan_memory
from .guards import Guard
from .rebind import rebind
from .split import Split
from .symbolic import ShapeGuard, evaluate

__all__ = ["CacheEntry", "MAX_BOUND_SIZES"]

MAX_BOUND_SIZES = 32
"""Sizes of the symbolic dims whose programs (buffers included) one entry keeps; the least
recently used size is dropped beyond it (rebuilt, without retracing, if it comes back)."""


@dataclass
class CacheEntry:
    """One compilation: the captured graph, the optimised graph, what the passes did.

    ``guards``: the module-scope tensors baked into the graph (``guards``); ``programs``:
    the free programs per binding of the symbolic dims.
    """

    key: tuple
    captured: Graph | None
    graph: Graph | None
    steps: list[RewriteStep]
    plan: MemoryPlan | None
    params: list[tuple[str, Any]]
    out_tree: Any
    compile_ms: float
    fallback: GraphBreak | None = None
    split: Split | None = None
    symbols: dict[str, int] = field(default_factory=dict)
    guards: tuple[Guard, ...] = ()
    fixed: dict[str, int] = field(default_factory=dict)  # symbolic dims compiled at a size
    moduli: dict[str, int] = field(default_factory=dict)  # symbolic dims captured as multiples
    primes: dict[str, int] = field(default_factory=dict)  # sentinel primes chosen after a guard
    input_names: tuple[str, ...] = ()  # graph inputs fed by the tensor arguments, in order
    shape_guards: tuple[ShapeGuard, ...] = ()  # Python decisions on symbolic sizes
    table: dict[int, Any] = field(default_factory=dict)  # sentinel-level value -> expression
    scalars: tuple = ()  # (input name, expression, dtype): sizes fed as graph inputs
    # the passes, to run again on the captured graph of one size when the optimised graph
    # cannot be re-specialised (a pass folded a size into a non-uniform constant)
    reoptimize: Callable[[Graph], Graph] | None = field(default=None, repr=False)
    programs: dict[tuple, list[Program]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def mapping(self, sizes: tuple) -> dict[int, int]:
        """Sentinel -> size, for the sizes of the symbols in sorted name order."""
        return self._mapping(sizes)

    def _mapping(self, sizes: tuple) -> dict[int, int]:
        names = sorted(self.symbols)
        return {self.symbols[s]: v for s, v in zip(names, sizes, strict=True)}

    def failed_guard(self, sizes: dict[str, int]) -> ShapeGuard | None:
        """The first shape guard that these sizes (by symbol name) make false, or None."""
        if not self.shape_guards:
            return None
        mapping = {p: sizes[s] for s, p in self.symbols.items() if s in sizes}
        return next((g for g in self.shape_guards if not g.holds(mapping)), None)

    def _build(self, sizes: tuple) -> Program:
        g = self.graph
        if self.symbols:
            try:
                g = rebind(g, self._mapping(sizes), self.table)
            except CompilerError:
                if self.reoptimize is None or self.captured is None:
                    raise
                g = self.reoptimize(rebind(self.captured, self._mapping(sizes), self.table))
        return Program(g, plan_memory(g) if self.plan is not None else None)

    def program(self, sizes: tuple = ()) -> Program:
        """A program for these symbolic sizes (for inspection; ``run`` pools them)."""
        with self._lock:
            free = self.programs.get(sizes)
            if free:
                return free[-1]
        prog = self._build(sizes)
        with self._lock:
            self.programs.setdefault(sizes, []).append(prog)
        return prog

    def run(self, sizes: tuple, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the graph on ``feeds`` (arrays by input or parameter name) with a program no
        other thread is using; the symbolic scalars are computed from ``sizes``."""
        if self.scalars:
            mapping = self._mapping(sizes)
            feeds = dict(feeds)
            for name, expr, dt in self.scalars:
                feeds[name] = np.asarray(evaluate(expr, mapping), dt)
        with self._lock:
            free = self.programs.setdefault(sizes, [])
            prog = free.pop() if free else None
        if prog is None:
            prog = self._build(sizes)
        try:
            return prog.run([feeds[n] for n in prog.feed_names])
        finally:
            with self._lock:
                pool = self.programs.pop(sizes, [])  # re-inserted last: most recently used
                pool.append(prog)
                self.programs[sizes] = pool
                while len(self.programs) > MAX_BOUND_SIZES:  # the least recently used size
                    del self.programs[next(iter(self.programs))]
