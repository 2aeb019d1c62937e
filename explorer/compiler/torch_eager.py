"""The eager run of an imported model: the IR interpreter, op by op, every op timed.

`TimedInterpreter` is ``explorer.ir.Interpreter`` with each op's call wrapped in a clock:
one ``TraceEvent`` of kind ``op`` per graph node (its op name, input and output shapes,
FLOPs, bytes it allocated, bytes alive after it), the node's module path as its detail.
Values die after their last use (``free_dead``), so the live bytes follow the run. The
ops are the registry's numpy impls, the ones ``Graph.run`` and the SPMD executor use:
what the static path adds (passes, memory plan, kernels chosen once, no per-op dispatch)
is measured against this.

>>> import numpy as np
>>> from explorer.ir import GraphBuilder
>>> from explorer import trace
>>> b = GraphBuilder("g"); x = b.input("x", (2, 3))
>>> g = b.build([b.op("relu", b.op("neg", x))])
>>> rec = trace.Recorder("eager")
>>> out = TimedInterpreter(g, rec).run({"x": -np.ones((2, 3), np.float32)})
>>> [e.name for e in rec.finish().events], float(out[g.outputs[0]].sum())
(['neg', 'relu'], 6.0)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .. import trace as _trace
from ..ir import Graph, Node, opdef
from ..ir.errors import IRError
from ..ir.interpreter import Interpreter
from .executor import fresh_bytes

__all__ = ["TimedInterpreter"]


class TimedInterpreter(Interpreter):
    """Run ``graph`` node by node, recording one ``op`` event per node into ``recorder``.

    Each node's impl, attributes (defaults filled in), shapes, FLOPs and the values dying
    after it are looked up once, when the interpreter is made: a run pays the op calls,
    the clock and the events, not the registry lookups (``Interpreter.call_op`` does them
    per node per run). Float results the numpy impls computed in float64 are cast back to
    the node's type (as the framework's eager ops do), so the eager run computes in the
    model's precision.
    """

    def __init__(self, graph: Graph, recorder: _trace.Recorder) -> None:
        super().__init__(graph, free_dead=True)
        self.recorder = recorder
        self.live = 0
        self._steps = [self._step(i, n) for i, n in enumerate(graph.nodes)]

    def _step(self, i: int, n: Node) -> tuple:
        dead = self._dead_after[i]
        if n.is_source:
            return (n.name, None, None, (), None, (), 0, "", dead)
        op = opdef.get(n.op)
        shapes = tuple(self.graph.node(a).type.shape for a in n.inputs) + (n.type.shape,)
        detail = f"%{n.name}" + (f" in {n.scope}" if n.scope else "")
        return (n.name, n.op, op.impl, n.inputs, op.full_attrs(dict(n.attrs)), shapes,
                int(self.graph.node_flops(n.name)), detail, dead, n.type.dtype.numpy)  # fmt: skip

    def run(self, inputs, recorder: _trace.Recorder | None = None):
        """Every node once, in order, its event into ``recorder`` (default: the one given
        when made); returns graph output name -> value."""
        self._check_inputs(inputs)
        rec = self.recorder if recorder is None else recorder
        t_origin, add, clock = rec.t0, rec.add, time.perf_counter
        env: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        live = 0  # what the run allocates: feeds (weights) are not counted, as in the static trace
        for step in self._steps:
            name, op, impl, ins, kw, shapes, flops, detail, dead = step[:9]
            if op is None:
                env[name] = inputs[name]
            else:
                args = [env[a] for a in ins]
                t0 = clock()
                try:
                    out = np.asarray(impl(*args, **kw))
                except _KERNEL_ERRORS as e:
                    raise self._failed(name, args, e) from e
                if out.dtype != step[9]:
                    out = out.astype(step[9])
                t1 = clock()
                nbytes = fresh_bytes(out, args)  # 0 for a view; a reshaped fresh result counts
                live += nbytes
                sizes[name] = nbytes
                env[name] = out
                add(_trace.TraceEvent(op, "op", (t0 - t_origin) * 1e6, (t1 - t0) * 1e6, shapes,
                                      nbytes, flops, live, (), detail))  # fmt: skip
            for d in dead:
                live -= sizes.pop(d, 0)
                del env[d]
        self.live = live
        return {o: env[o] for o in self.graph.outputs}

    def _failed(self, name: str, args: list, e: Exception) -> IRError:
        shapes = ", ".join(f"{np.shape(v)}" for v in args)
        return IRError(f"node %{name} ({shapes}) failed in graph {self.graph.name!r}: "
                       f"{type(e).__name__}: {e}; check the inputs' shapes and dtypes "
                       "against the traced ones")  # fmt: skip


_KERNEL_ERRORS = (ValueError, TypeError, IndexError, KeyError)
