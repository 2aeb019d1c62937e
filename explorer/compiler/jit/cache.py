"""One compilation of a ``JitFunction`` (``CacheEntry``) and the programs that run it.

A ``Program`` owns its slot list and its memory plan's buffers, so one program serves one
call at a time. Each entry keeps a pool of programs per symbolic-dim binding: a call takes
a free program (or builds one when every program is busy in another thread), runs it and
gives it back. Threads calling one compiled function therefore never share buffers, and a
single-threaded caller reuses one program (and its buffers) call after call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir import Graph
from ..errors import GraphBreak
from ..executor import Program
from ..passes import MemoryPlan, RewriteStep
from ..passes.memory_plan import plan_memory
from .guards import Guard
from .split import Split
from .symbolic import rebind

__all__ = ["CacheEntry"]


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
    programs: dict[tuple, list[Program]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _build(self, sizes: tuple) -> Program:
        g = self.graph
        if self.symbols:
            names = sorted(self.symbols)
            g = rebind(g, {self.symbols[s]: v for s, v in zip(names, sizes, strict=True)})
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

    def run(self, sizes: tuple, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the graph on ``feeds`` with a program no other thread is using."""
        with self._lock:
            free = self.programs.setdefault(sizes, [])
            prog = free.pop() if free else None
        if prog is None:
            prog = self._build(sizes)
        try:
            return prog.run(feeds)
        finally:
            with self._lock:
                self.programs.setdefault(sizes, []).append(prog)
