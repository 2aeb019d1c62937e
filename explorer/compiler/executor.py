"""The executor of compiled graphs: a flat list of (kernel, input slots, output slot) run
over one reused slot list, with the memory plan's buffers allocated once.

>>> import explorer as ex, numpy as np
>>> b = ex.GraphBuilder("g"); x = b.input("x", (2, 3))
>>> g = b.build([b.op("relu", b.op("scale", x, factor=2.0))])
>>> float(Program(g).run([np.ones((2, 3), np.float32)])[0].sum())
12.0
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .. import trace as _trace
from ..ir import Graph
from ..ir.ops_tensor import Subgraph
from .kernels import make_kernel
from .passes.memory_plan import MemoryPlan, plan_memory

__all__ = ["Program"]


class Program:
    """A graph made ready to run: kernels chosen, buffers allocated, slots numbered.

    ``run(feeds)`` takes the arrays of the graph's inputs then parameters, in graph order.
    """

    def __init__(self, graph: Graph, plan: MemoryPlan | None = None) -> None:
        self.graph = graph
        self.plan = plan
        slot = {n.name: i for i, n in enumerate(graph.nodes)}
        self.env: list[np.ndarray | None] = [None] * len(graph.nodes)
        self.feed_slots = [slot[n.name] for n in graph.nodes if n.op in ("input", "param")]
        self.feed_names = [n.name for n in graph.nodes if n.op in ("input", "param")]
        self.buffers = [np.empty(b, np.uint8) for b in plan.buffer_bytes] if plan else []
        views = {}
        if plan is not None:
            for name, b in plan.buffer_of:
                t = graph.node(name).type
                views[name] = self.buffers[b][: t.nbytes].view(t.dtype.numpy).reshape(t.shape)
        self.steps: list[tuple] = []
        self.meta: list[tuple] = []  # (name, op, shapes, flops, bytes, replaced) per step
        done_groups: set[str] = set()
        for n in graph.nodes:
            s = slot[n.name]
            if n.op == "constant":
                self.env[s] = n.attr("value").array
                continue
            if n.op in ("input", "param"):
                continue
            in_types = graph.input_types(n.name)
            ins = tuple(slot[a] for a in n.inputs)
            if n.op in ("cond", "loop"):
                group = n.attr("group")
                if group in done_groups:
                    continue
                done_groups.add(group)
                members = [(m.attr("index"), slot[m.name]) for m in graph.nodes
                           if m.op == n.op and m.attr("group") == group]  # fmt: skip
                fn = _control_kernel(n, members, self.env)
            else:
                k = make_kernel(n, in_types)
                out = views.get(n.name)
                fn = k if out is None else _bind_out(k, out)
            self.steps.append((fn, ins, s))
            replaced = n.attr("ops", ()) if n.op in ("fused", "masked_softmax") else ()
            nbytes = 0 if n.name in views else n.type.nbytes
            self.meta.append((n.name, n.op, tuple(t.shape for t in in_types) + (n.type.shape,),
                              graph.node_flops(n.name), nbytes, tuple(replaced)))  # fmt: skip
        self.out_slots = [slot[o] for o in graph.outputs]
        self.persistent_bytes = sum(b.nbytes for b in self.buffers)
        self._clear = [i for i, n in enumerate(graph.nodes) if n.op != "constant"]

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        env = self.env
        for s, a in zip(self.feed_slots, feeds, strict=True):
            env[s] = a
        rec = _trace.active()
        if rec is None:
            for fn, ins, o in self.steps:
                env[o] = fn(*[env[i] for i in ins])
        else:
            self._run_traced(rec)
        outs = [env[s] for s in self.out_slots]
        for s in self._clear:  # drop references so the caller's arrays can be freed
            env[s] = None
        return outs

    def _run_traced(self, rec) -> None:
        env = self.env
        live = self.persistent_bytes
        for (fn, ins, o), (name, op, shapes, flops, nbytes, replaced) in zip(
            self.steps, self.meta, strict=True
        ):
            t0 = time.perf_counter()
            env[o] = fn(*[env[i] for i in ins])
            t1 = time.perf_counter()
            live += nbytes
            rec.add(_trace.TraceEvent(op, "kernel", (t0 - rec.t0) * 1e6, (t1 - t0) * 1e6,
                                      shapes, nbytes, flops, live, replaced, name))  # fmt: skip


def _bind_out(k, out: np.ndarray):
    def run(*xs):
        return k(*xs, out=out)

    return run


def _sub_program(sub: Subgraph) -> Program:
    return Program(sub.graph, plan_memory(sub.graph))


def _control_kernel(node, members: list[tuple[int, int]], env: list):
    """One step for all outputs of a cond/loop group: runs the body once per call and
    writes every member's slot."""
    attrs = dict(node.attrs)
    if node.op == "cond":
        progs = (_sub_program(attrs["then_"]), _sub_program(attrs["else_"]))
        picks = (attrs["then_args"], attrs["else_args"])

        def k_cond(pred, *args):
            which = 0 if bool(np.asarray(pred)) else 1
            outs = progs[which].run([args[i] for i in picks[which]])
            for idx, s in members:
                env[s] = outs[idx]
            return outs[attrs["index"]]

        return k_cond
    cond_p, body_p = _sub_program(attrs["cond"]), _sub_program(attrs["body"])
    n, ca, ba, max_iter = (
        attrs["n_state"],
        attrs["cond_args"],
        attrs["body_args"],
        attrs.get("max_iter", 1_000_000),
    )

    def k_loop(*args):
        state = list(args[:n])
        rest = list(args[n:])
        for _ in range(max_iter):
            full = state + rest
            if not bool(np.asarray(cond_p.run([full[i] for i in ca])[0])):
                break
            state = [np.array(v, copy=True) for v in body_p.run([full[i] for i in ba])]
        else:
            raise RuntimeError(f"loop %{node.name} ran past max_iter={max_iter}")
        for idx, s in members:
            env[s] = state[idx]
        return state[attrs["index"]]

    return k_loop
