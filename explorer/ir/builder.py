"""``GraphBuilder``: the convenient way to write a Graph op by op, with scopes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from . import opdef
from .dtype import DType
from .errors import IRError
from .graph import Graph
from .node import Node, freeze_attrs
from .tensor_type import TensorType

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """Append nodes one by one; each call returns the new value's name.

    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", (8, 16))
    >>> with b.scope("fc1"):
    ...     y = b.op("relu", b.op("matmul", x, b.param("w", (16, 32))))
    >>> g = b.build([y]); [n.name for n in g]
    ['x', 'fc1.w', 'fc1.matmul', 'fc1.relu']
    """

    def __init__(self, name: str = "graph", dtype: DType | str = DType.FP32) -> None:
        self.name = name
        self.dtype = DType.parse(dtype)
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}
        self._scope: list[str] = []
        self._counts: dict[str, int] = {}

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nest a scope (joined with dots: ``layers.3.attn``)."""
        self._scope.append(str(name))
        try:
            yield
        finally:
            self._scope.pop()

    @property
    def current_scope(self) -> str:
        return ".".join(self._scope)

    def type_of(self, value: str) -> TensorType:
        return self._types[value]

    def shape(self, value: str) -> tuple[int, ...]:
        return self._types[value].shape

    def _name(self, base: str, explicit: str | None) -> str:
        scope = self.current_scope
        name = explicit if explicit is not None else base
        full = f"{scope}.{name}" if scope else name
        if full in self._types:
            if explicit is not None:
                raise IRError(f"value %{full} is defined twice in graph {self.name!r}")
            k = self._counts.get(full, 1)
            while f"{full}_{k}" in self._types:
                k += 1
            self._counts[full] = k + 1
            full = f"{full}_{k}"
        return full

    def _add(self, node: Node) -> str:
        self._nodes.append(node)
        self._types[node.name] = node.type
        return node.name

    def input(self, name: str, shape: Sequence[int], dtype: DType | str | None = None) -> str:
        t = TensorType(tuple(shape), DType.parse(dtype) if dtype else self.dtype)
        return self._add(Node(self._name(name, name), "input", (), t, (), self.current_scope))

    def param(self, name: str, shape: Sequence[int], dtype: DType | str | None = None) -> str:
        t = TensorType(tuple(shape), DType.parse(dtype) if dtype else self.dtype)
        return self._add(Node(self._name(name, name), "param", (), t, (), self.current_scope))

    def op(self, op: str, *inputs: str, name: str | None = None, **attrs: Any) -> str:
        """Apply a registered op; the output type comes from the op's shape rule."""
        d = opdef.get(op)
        for a in inputs:
            if a not in self._types:
                raise IRError(f"{op}: input %{a} is not a value of graph {self.name!r}")
        full = self._name(op, name)
        in_types = tuple(self._types[a] for a in inputs)
        try:
            _, out = d.infer(in_types, d.full_attrs(attrs))
        except (IRError, ValueError, KeyError, TypeError) as e:
            ins = ", ".join(f"%{a}: {t}" for a, t in zip(inputs, in_types, strict=True))
            raise IRError(f"node %{full} = {op}({ins}): {e}") from None
        return self._add(
            Node(full, op, tuple(inputs), out, freeze_attrs(attrs), self.current_scope)
        )

    def build(self, outputs: Sequence[str]) -> Graph:
        return Graph(tuple(self._nodes), tuple(outputs), self.name)
