"""The computation graph shared by the planner and the compiler."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from . import opdef
from .errors import IRError
from .interpreter import Interpreter
from .node import Node
from .opdef import OpGroup
from .printer import format_graph
from .tensor_type import TensorType

__all__ = ["Graph"]


@dataclass(frozen=True)
class _NodeInfo:
    signature: str
    flops: int
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable DAG of ``Node`` values in topological order.

    Construction validates every node: inputs defined earlier, the op known, attributes
    complete, and the declared type equal to the op's shape rule. Errors name the node.

    >>> from explorer.ir import GraphBuilder
    >>> b = GraphBuilder("tiny")
    >>> x = b.input("x", (2, 4)); w = b.param("w", (4, 3))
    >>> g = b.build([b.op("matmul", x, w, name="y")])
    >>> g.flops(), g.num_params()
    (48, 12)
    """

    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    name: str = "graph"
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _info: dict[str, _NodeInfo] = field(default_factory=dict, repr=False, compare=False)
    _consumers: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        index: dict[str, int] = {}
        info: dict[str, _NodeInfo] = {}
        consumers: dict[str, list[str]] = {}
        for i, n in enumerate(self.nodes):
            if n.name in index:
                raise IRError(f"node %{n.name} is defined twice (positions {index[n.name]}, {i})")
            try:
                op = opdef.get(n.op)
            except IRError as e:
                raise IRError(f"node %{n.name}: {e}") from None
            for a in n.inputs:
                if a not in index:
                    where = "later" if any(m.name == a for m in self.nodes) else "nowhere"
                    raise IRError(
                        f"node %{n.name} ({n.op}) uses %{a}, which is defined {where}; "
                        "inputs must be defined before their users"
                    )
                consumers.setdefault(a, []).append(n.name)
            index[n.name] = i
            if op.group is OpGroup.SOURCE:
                if n.inputs:
                    raise IRError(f"node %{n.name} ({n.op}) is a source and takes no inputs")
                info[n.name] = _NodeInfo("->" + "abcdefghijklmnop"[: n.type.rank], 0, 0, 0)
                continue
            in_types = tuple(self.nodes[index[a]].type for a in n.inputs)
            try:
                attrs = op.full_attrs(dict(n.attrs))
                sig, out = op.infer(in_types, attrs)
            except (IRError, ValueError, KeyError, TypeError) as e:
                ins = ", ".join(f"%{a}: {t}" for a, t in zip(n.inputs, in_types, strict=True))
                raise IRError(f"node %{n.name} = {n.op}({ins}): {e}") from None
            if out != n.type:
                raise IRError(
                    f"node %{n.name} = {n.op}(...) is declared {n.type} but its inputs give "
                    f"{out}; fix the declared type or the inputs"
                )
            rd, wr = op.bytes(in_types, out)
            info[n.name] = _NodeInfo(sig, op.flops(sig, in_types, out, attrs), rd, wr)
        for o in self.outputs:
            if o not in index:
                raise IRError(f"graph output %{o} is not a node of graph {self.name!r}")
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_info", info)
        object.__setattr__(self, "_consumers", {k: tuple(v) for k, v in consumers.items()})

    # --- lookup ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def node(self, name: str) -> Node:
        try:
            return self.nodes[self._index[name]]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(name, self._index, n=3)
            hint = f" Did you mean {', '.join('%' + c for c in close)}?" if close else ""
            raise IRError(f"graph {self.name!r} has no node %{name}.{hint}") from None

    def position(self, name: str) -> int:
        return self._index[name]

    def consumers(self, name: str) -> tuple[str, ...]:
        return self._consumers.get(name, ())

    def input_types(self, name: str) -> tuple[TensorType, ...]:
        return tuple(self.node(a).type for a in self.node(name).inputs)

    @property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "input")

    @property
    def parameters(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "param")

    @property
    def ops(self) -> tuple[Node, ...]:
        """The computing nodes (everything but inputs and parameters)."""
        return tuple(n for n in self.nodes if not n.is_source)

    def edges(self) -> Iterator[tuple[str, str, int]]:
        """(producer, consumer, input position) for every use of a value."""
        for n in self.nodes:
            for k, a in enumerate(n.inputs):
                yield a, n.name, k

    # --- derived facts --------------------------------------------------------------------
    def signature(self, name: str) -> str:
        """The node's concrete einsum-style dim signature, e.g. ``"abh,hf->abf"``."""
        return self._info[name].signature

    def group(self, name: str) -> OpGroup:
        return opdef.get(self.node(name).op).group

    def node_flops(self, name: str) -> int:
        return self._info[name].flops

    def node_bytes(self, name: str) -> tuple[int, int]:
        """(bytes read, bytes written) of one node."""
        i = self._info[name]
        return i.bytes_read, i.bytes_written

    def flops(self, names: Iterable[str] | None = None) -> int:
        """Total FLOPs of the graph (or of the given nodes)."""
        names = self._info if names is None else names
        return sum(self._info[n].flops for n in names)

    def num_params(self) -> int:
        return sum(n.type.numel for n in self.parameters)

    def param_bytes(self) -> int:
        return sum(n.type.nbytes for n in self.parameters)

    def scopes(self, depth: int | None = None) -> tuple[str, ...]:
        """Distinct scopes in first-use order, optionally cut to ``depth`` components."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            if n.scope:
                s = ".".join(n.scope.split(".")[:depth]) if depth else n.scope
                seen.setdefault(s, None)
        return tuple(seen)

    def in_scope(self, prefix: str) -> tuple[Node, ...]:
        """Nodes whose scope is ``prefix`` or nested below it."""
        return tuple(n for n in self.nodes if n.scope == prefix or n.scope.startswith(prefix + "."))

    def summary(self) -> dict[str, object]:
        """Counts for a quick look: nodes, ops by group, parameters, FLOPs."""
        groups: dict[str, int] = {}
        for n in self.ops:
            g = self.group(n.name).value
            groups[g] = groups.get(g, 0) + 1
        return {
            "name": self.name,
            "nodes": len(self.nodes),
            "ops_by_group": dict(sorted(groups.items())),
            "params": self.num_params(),
            "param_bytes": self.param_bytes(),
            "flops": self.flops(),
            "inputs": [f"%{n.name}: {n.type}" for n in self.inputs],
            "outputs": [f"%{o}: {self.node(o).type}" for o in self.outputs],
        }

    # --- reference implementation -------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The reference numpy evaluation: graph output name -> value.

        Every node runs its registry ``impl`` through `explorer.ir.Interpreter` (values are
        freed after their last use). ``inputs`` holds one array per input and param node.

        >>> import numpy as np
        >>> from explorer.ir import GraphBuilder
        >>> b = GraphBuilder("tiny")
        >>> x = b.input("x", (1, 2)); w = b.param("w", (2, 1))
        >>> g = b.build([b.op("matmul", x, w, name="y")])
        >>> g.run({"x": np.array([[1.0, 2.0]]), "w": np.array([[3.0], [4.0]])})["y"]
        array([[11.]])
        """
        return Interpreter(self, free_dead=True).run(inputs)

    # --- views ----------------------------------------------------------------------------
    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return (
            f"Graph(name={self.name!r}, nodes={len(self.nodes)}, params={self.num_params()}, "
            f"outputs={self.outputs!r})"
        )

    def to_networkx(self):
        """A ``networkx.DiGraph``: node attributes op, group, type, shape, dtype, scope,
        signature, flops; edge attributes bytes (the producer's output size) and position."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for n in self.nodes:
            i = self._info[n.name]
            g.add_node(
                n.name, op=n.op, group=opdef.get(n.op).group.value, type=str(n.type),
                shape=n.type.shape, dtype=n.type.dtype.value, scope=n.scope,
                signature=i.signature, flops=i.flops,
            )  # fmt: skip
        for a, b, k in self.edges():
            g.add_edge(a, b, bytes=self.nodes[self._index[a]].type.nbytes, position=k)
        return g
