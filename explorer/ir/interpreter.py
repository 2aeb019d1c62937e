"""One interpreter over the IR, in the style of ``torch.fx.Interpreter``.

``run`` walks the graph once in its (topological, deterministic) node order and calls
``run_node`` for each node; ``run_node`` reads a source from the inputs (``placeholder``)
or gathers the node's arguments and calls the per-op hook ``call_op``, which looks the op
up in a kernel table and falls back to the op's numpy ``impl`` from the registry. Every
step is a method, so a subclass changes one of them and keeps the walk: the sharding
layer's SPMD executor overrides ``run_node``/``call_op`` to run each op on every virtual
device and to perform the redistributions between them.

It is the walker that *evaluates* a graph: ``Graph.run`` (the reference run) and the
sharding layer's reference and SPMD executors. A compiled program does not run on it:
``explorer.compiler.executor.Program`` fixes its kernels, fused groups and buffers at compile
time and runs them as generated straight-line Python, without this per-node dispatch.

The walk is a loop over ``graph.nodes`` (no recursion, so depth is not limited by Python's
stack). With ``free_dead=True`` a value is dropped from ``env`` right after its last user
ran (graph outputs are kept), so peak memory follows the live values, not the whole graph.

>>> import numpy as np
>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("demo")
>>> x = b.input("x", (2, 3))
>>> g = b.build([b.op("relu", b.op("neg", x, name="n"), name="y")])
>>> Interpreter(g).run({"x": np.arange(6.0).reshape(2, 3) - 2})["y"]
array([[2., 1., 0.],
       [0., 0., 0.]])

A subclass may replace one op by putting a kernel ``(node, args) -> value`` in the table:

>>> class Doubling(Interpreter):
...     kernels = {"relu": lambda node, args: 2 * args[0]}
>>> Doubling(g).run({"x": np.ones((2, 3))})["y"]
array([[-2., -2., -2.],
       [-2., -2., -2.]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import numpy as np

from . import opdef
from .errors import IRError
from .node import Node

__all__ = ["Interpreter", "Kernel", "Walkable"]


class Walkable(Protocol):
    """What the walk reads of a graph: its name, its nodes in topological order and its
    outputs. ``Graph`` is one, and stands above this module (``Graph.run`` walks itself)."""

    @property
    def name(self) -> str: ...

    @property
    def nodes(self) -> tuple[Node, ...]: ...

    @property
    def outputs(self) -> tuple[str, ...]: ...


Kernel = Callable[[Node, list[Any]], Any]
"""An op kernel: ``kernel(node, args) -> value`` (``args`` in the node's input order)."""

# builtin errors a kernel raises on bad values; re-raised as IRError naming the node
_KERNEL_ERRORS = (ValueError, TypeError, IndexError, KeyError)


class Interpreter:
    """Run a ``Graph`` node by node: ``run`` -> ``run_node`` -> ``call_op``.

    Args:
        graph: the graph to run (a ``Graph``; the walk reads only ``Walkable``'s fields).
        kernels: op name -> ``kernel(node, args)``, consulted before the class table
            ``Interpreter.kernels`` and before the op's registry ``impl``.
        free_dead: drop each value from ``env`` after its last use (outputs are kept).

    After ``run``, ``env`` maps node name -> value for every value still live (every node
    when ``free_dead`` is False).
    """

    kernels: ClassVar[Mapping[str, Kernel]] = {}

    def __init__(
        self, graph: Walkable, kernels: Mapping[str, Kernel] | None = None, free_dead: bool = False
    ) -> None:
        self.graph = graph
        self.table: dict[str, Kernel] = {**type(self).kernels, **(kernels or {})}
        self.free_dead = free_dead
        self.env: dict[str, Any] = {}
        self.inputs: Mapping[str, Any] = {}
        self._dead_after: tuple[tuple[str, ...], ...] = _dead_after(graph) if free_dead else ()

    # --- the walk -------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run every node; return graph output name -> value.

        ``inputs`` holds a value for every ``input`` and ``param`` node (extra names that
        are not sources of the graph raise ``IRError``).
        """
        self._check_inputs(inputs)
        self.inputs = inputs
        self.env = env = {}
        for i, node in enumerate(self.graph.nodes):
            env[node.name] = self.run_node(node, env)
            if self.free_dead:
                for name in self._dead_after[i]:
                    del env[name]
        return {o: env[o] for o in self.graph.outputs}

    def run_node(self, node: Node, env: Mapping[str, Any]) -> Any:
        """The value of one node from the values computed so far."""
        if node.is_source:
            return self.placeholder(node)
        return self.call_op(node, [env[a] for a in node.inputs])

    def placeholder(self, node: Node) -> Any:
        """The value of an ``input`` or ``param`` node (from ``run``'s inputs)."""
        return self.inputs[node.name]

    def call_op(self, node: Node, args: list[Any]) -> Any:
        """The per-op hook: the table's kernel for ``node.op``, else ``default_kernel``."""
        kernel = self.table.get(node.op, self.default_kernel)
        try:
            return kernel(node, args)
        except _KERNEL_ERRORS as e:
            if isinstance(e, IRError):
                raise
            shapes = ", ".join(
                f"%{a}: {np.shape(v)}" for a, v in zip(node.inputs, args, strict=False)
            )
            raise IRError(
                f"node %{node.name} = {node.op}({shapes}) failed in graph "
                f"{self.graph.name!r}: {type(e).__name__}: {e}; check the input values' "
                "shapes and dtypes against the graph's declared types"
            ) from e

    @staticmethod
    def default_kernel(node: Node, args: list[Any]) -> Any:
        """The op's numpy ``impl`` from the registry, with default attributes filled in."""
        op = opdef.get(node.op)
        return np.asarray(op.impl(*args, **op.full_attrs(dict(node.attrs))))

    # --- helpers --------------------------------------------------------------------------
    def _check_inputs(self, inputs: Mapping[str, Any]) -> None:
        sources = {n.name for n in self.graph.nodes if n.is_source}
        missing = [n.name for n in self.graph.nodes if n.is_source and n.name not in inputs]
        if missing:
            raise IRError(
                f"graph {self.graph.name!r} needs a value for %{missing[0]}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + "; pass one array per input and param node"
            )
        extra = [k for k in inputs if k not in sources]
        if extra:
            raise IRError(
                f"value given for {extra[0]!r}, which is not an input or param node of graph "
                f"{self.graph.name!r}; its sources are "
                + (", ".join("%" + s for s in sorted(sources)) or "none")
            )


def _dead_after(graph: Walkable) -> tuple[tuple[str, ...], ...]:
    """For each node position, the values whose last use is that node (never outputs)."""
    last: dict[str, int] = {}
    for i, n in enumerate(graph.nodes):
        last[n.name] = i  # a value nobody reads dies right after it is made
        for a in n.inputs:
            last[a] = i
    keep = set(graph.outputs)
    dead: list[list[str]] = [[] for _ in graph.nodes]
    for name, i in last.items():
        if name not in keep:
            dead[i].append(name)
    return tuple(tuple(d) for d in dead)
