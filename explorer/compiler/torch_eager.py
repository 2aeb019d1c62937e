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
from ..ir import Graph, Node
from ..ir.interpreter import Interpreter

__all__ = ["TimedInterpreter"]


class TimedInterpreter(Interpreter):
    """Run ``graph`` node by node, recording one ``op`` event per node into ``recorder``.

    Float results the numpy impls computed in float64 are cast back to the node's type
    (as the framework's eager ops do), so the eager run computes in the model's precision.
    """

    def __init__(self, graph: Graph, recorder: _trace.Recorder) -> None:
        super().__init__(graph, free_dead=True)
        self.recorder = recorder
        self.live = 0
        self._sizes: dict[str, int] = {}

    def run(self, inputs):
        """Interpreter.run, keeping the bytes of the values alive (inputs included)."""
        self._check_inputs(inputs)
        self.inputs = inputs
        self.env = env = {}
        self.live = sum(np.asarray(v).nbytes for v in inputs.values())
        for i, node in enumerate(self.graph.nodes):
            env[node.name] = self.run_node(node, env)
            for name in self._dead_after[i]:
                self.live -= self._sizes.pop(name, 0)
                del env[name]
        return {o: env[o] for o in self.graph.outputs}

    def call_op(self, node: Node, args: list[Any]) -> Any:
        rec = self.recorder
        t0 = time.perf_counter()
        out = super().call_op(node, args)
        if isinstance(out, np.ndarray) and out.dtype != (want := node.type.dtype.numpy):
            out = out.astype(want)
        t1 = time.perf_counter()
        nbytes = out.nbytes if isinstance(out, np.ndarray) and out.base is None else 0
        self.live += nbytes
        self._sizes[node.name] = nbytes
        rec.add(_trace.TraceEvent(
            node.op, "op", (t0 - rec.t0) * 1e6, (t1 - t0) * 1e6,
            tuple(np.shape(a) for a in args) + (node.type.shape,), nbytes,
            int(self.graph.node_flops(node.name)), self.live, (),
            f"%{node.name}" + (f" in {node.scope}" if node.scope else ""),
        ))  # fmt: skip
        return out
