"""``Tracer``: records ops applied to symbolic tensors into an ``explorer.ir.Graph``.

A ``Tracer`` is a trace of the trace stack (``trace_stack``): ``tracing(tracer)`` pushes
it, and every op applied meanwhile becomes one of its nodes. A tracer is "abstract" (shape-only, used by the AST path and ``capture``) or "concrete"
(``capture="trace"``: values computed alongside, so ``bool()`` of a tensor takes the branch
of this run's data). Sub-tracers build the bodies of ``cond`` and ``loop`` nodes; a tensor
of an enclosing graph used inside a body becomes an extra input of the body (a capture).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np

from ... import trace as _trace
from ...ir import Graph, Node, TensorType, opdef
from ...ir.errors import IRError
from ...ir.node import freeze_attrs
from ...ir.ops_tensor import Const, dtype_of_array
from ..errors import GraphBreak, ShapeError, user_location
from ..tensor import Parameter, Tensor
from ..trace_stack import tracing
from .symbolic import SymContext, SymInt, show

__all__ = ["Tracer", "tracing", "SymTensor"]

CaptureMode = Literal["ast", "trace"]


class SymTensor(Tensor):
    """A traced tensor of a capture with symbolic dims: ``shape`` gives ``SymInt`` values
    for the dims that depend on them (``symbolic``), so sizes computed in Python follow."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tracer.root.sym.dims(self.type.shape)

    def __iter__(self) -> Iterator[Tensor]:
        if self.ndim and isinstance(self.shape[0], SymInt):
            name = show(self.shape[0].expr, self.tracer.root.sym.names)
            raise GraphBreak(
                f"iterating over a tensor whose first dim is symbolic ({name}): a Python loop "
                "over it would be unrolled once per size",
                "drop that dim from dynamic= (each size then compiles), or loop with a `while` "
                "on a tensor counter up to x.shape[0]",
                user_location(2),
            )
        return (self[i] for i in range(int(self.type.shape[0]) if self.ndim else 0))

    def __getitem__(self, index: Any) -> Tensor:
        """Negative and omitted bounds on a symbolic dim become sizes computed from it
        (``x[:-1]`` stops at ``B - 1``), so re-specialising follows them."""
        entries = index if isinstance(index, tuple) else (index,)
        if any(e is Ellipsis for e in entries) or len(entries) > self.ndim:
            return super().__getitem__(index)
        out = []
        for e, d in zip(entries, self.shape, strict=False):
            if isinstance(d, SymInt) and isinstance(e, slice) and e.step in (None, 1):
                out.append(slice(_bound(e.start, d, 0), _bound(e.stop, d, d), None))
            elif isinstance(d, SymInt) and isinstance(e, int) and not isinstance(e, bool) and e < 0:
                out.append(d + e)
            else:
                out.append(e)
        return super().__getitem__(tuple(out))


def _bound(b: Any, d: SymInt, default: int) -> Any:
    if b is None:
        return default
    if isinstance(b, int) and not isinstance(b, bool) and b < 0:
        return d + b
    return b


class Tracer:
    """Builds one graph. ``record`` appends a node and returns its symbolic Tensor."""

    def __init__(self, name: str, parent: Tracer | None = None, *, concrete: bool = False,
                 mode: CaptureMode = "ast", converter: Callable[[Any], Any] | None = None,
                 ) -> None:  # fmt: skip
        self.name = name
        self.parent = parent
        self.concrete = concrete
        self.mode = mode
        # what convert() does to a user function called inside the capture (the AST
        # compiler's maybe_convert, given by jit; sub-tracers inherit their parent's)
        self.converter = converter if converter is not None or parent is None else (
            parent.converter)  # fmt: skip
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        self.counts: dict[str, int] = {}
        self.scopes: list[str] = []
        self.captures: list[Tensor] = []  # outer tensors fed to this (sub)graph, in order
        self._owned: dict[int, tuple[Tensor, str]] = {}  # id(outer or concrete) -> name
        self.params: list[tuple[str, Parameter]] = []
        self.notes: list[tuple[str, str]] = []  # (kind, detail) for the trace
        self.called: list[Any] = []  # user functions converted during this capture (root)
        self.sym: SymContext | None = None  # symbolic dims of this capture (root only)

    @property
    def root(self) -> Tracer:
        t = self
        while t.parent is not None:
            t = t.parent
        return t

    def convert(self, fn: Any) -> Any:
        """``fn`` as this capture runs it: control flow converted (AST capture) or as is."""
        return fn if self.converter is None else self.converter(fn)

    # --- naming and scopes ----------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self.scopes.append(name)
        try:
            yield
        finally:
            self.scopes.pop()

    def _unique(self, base: str, scoped: bool = True) -> str:
        scope = ".".join(self.scopes) if scoped else ""
        full = f"{scope}.{base}" if scope else base
        if full in self.names:
            k = self.counts.get(full, 1)
            while f"{full}_{k}" in self.names:
                k += 1
            self.counts[full] = k + 1
            full = f"{full}_{k}"
        self.names.add(full)
        return full

    def _add(self, node: Node, data: np.ndarray | None) -> Tensor:
        self.nodes.append(node)
        cls = SymTensor if self.root.sym is not None else Tensor
        return cls(data, node.type, self, node.name)

    # --- sources --------------------------------------------------------------------------
    def input(self, name: str, type: TensorType, data: np.ndarray | None = None) -> Tensor:
        return self._add(Node(self._unique(name), "input", (), type), data)

    def constant(self, array: np.ndarray) -> Tensor:
        root = self.root
        expr = root.sym.scalar_expr(np.asarray(array)) if root.sym is not None else None
        if expr is not None:  # a size computed from symbolic dims: fed at every call
            return self._sym_scalar(root, expr, np.asarray(array).dtype)
        array = np.array(array, copy=True)  # frozen: later changes to the source do not leak in
        t = TensorType(array.shape, dtype_of_array(array))
        node = Node(self._unique("const"), "constant", (), t, (("value", Const(array)),))
        return self._add(node, array if self.concrete else None)

    def _sym_scalar(self, root: Tracer, expr: tuple, dtype: np.dtype) -> Tensor:
        name = next((n for n, e, dt in root.sym.scalars if e == expr and dt == dtype), None)
        if name is None:
            name = root._unique("__sym", scoped=False)
            root.sym.scalars.append((name, expr, dtype))
            t = TensorType((), dtype_of_array(np.empty((), dtype)))
            root.nodes.append(Node(name, "input", (), t))
        t = Tensor(None, root.nodes[[n.name for n in root.nodes].index(name)].type, root, name)
        return t if root is self else Tensor(None, t.type, self, self._capture(t))

    def own(self, t: Tensor) -> str:
        """The name of ``t`` in this graph, lifting parameters, constants and captures."""
        if t.tracer is self:
            return t.value
        hit = self._owned.get(id(t))
        if hit is not None:
            return hit[1]
        if t.tracer is None:
            if t.data is None:
                raise ShapeError(
                    f"an abstract tensor {t.type} that is not an input of this capture was "
                    "used; pass it as an argument", user_location(3),
                )  # fmt: skip
            if isinstance(t, Parameter):
                root = self.root
                if root is not self:
                    inner = root.own(t)
                    rt = Tensor(t.data if root.concrete else None, t.type, root, inner)
                    root._owned[id(t)] = (t, inner)
                    name = self._capture(rt)
                else:
                    name = self._unique(t.name or "param", scoped=False)
                    self.nodes.append(Node(name, "param", (), t.type))
                    self.params.append((name, t))
            else:
                name = self.constant(t.data).value
            self._owned[id(t)] = (t, name)
            return name
        # a tensor of an enclosing graph: becomes an input of this body
        name = self._capture(t)
        return name

    def _capture(self, t: Tensor) -> str:
        hit = self._owned.get(id(t))
        if hit is not None:
            return hit[1]
        anc = self.parent
        while anc is not None and anc is not t.tracer:
            anc = anc.parent
        if anc is None:
            raise ShapeError(
                f"tensor %{t.value} ({t.type}) belongs to another compiled function; pass it "
                "as an argument instead of keeping it from an earlier call", user_location(3),
            )  # fmt: skip
        name = self._unique(f"cap.{t.value.split('.')[-1]}")
        self.nodes.append(Node(name, "input", (), t.type))
        self.captures.append(t)
        self._owned[id(t)] = (t, name)
        return name

    # --- ops ------------------------------------------------------------------------------
    def record(self, op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor:
        names = tuple(self.own(t) for t in inputs)
        d = opdef.get(op)
        in_types = tuple(t.type for t in inputs)
        try:
            _, out_type = d.infer(in_types, d.full_attrs(attrs))
        except (IRError, ValueError, KeyError, TypeError) as e:
            ins = ", ".join(str(t) for t in in_types)
            raise ShapeError(f"{op}({ins}): {e}", user_location(2)) from None
        data = None
        if self.concrete:
            data = np.asarray(d.impl(*[t.data for t in inputs], **attrs))
            if data.dtype == np.float64:
                data = data.astype(np.float32)
        node = Node(self._unique(op), op, names, out_type, freeze_attrs(attrs),
                    ".".join(self.scopes))  # fmt: skip
        return self._add(node, data)

    def add_node(self, op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any],
                 base: str) -> Tensor:  # fmt: skip
        """Append a node whose attrs are not plain values (cond/loop bodies)."""
        names = tuple(self.own(t) for t in inputs)
        d = opdef.get(op)
        _, out_type = d.infer(tuple(t.type for t in inputs), d.full_attrs(attrs))
        node = Node(self._unique(base), op, names, out_type,
                    tuple(sorted(attrs.items(), key=lambda kv: kv[0])), ".".join(self.scopes))  # fmt: skip
        return self._add(node, None)

    def concrete_value(self, t: Tensor, what: str) -> np.ndarray:
        """``bool()``/``.numpy()`` of a traced tensor: a graph break (abstract capture) or the
        value of this run, frozen into the graph (``capture="trace"``)."""
        if self.concrete and t.data is not None:
            loc = user_location(3)
            self.notes.append(("note", f"{what} at {loc}: this run's value is baked in"))
            return t.data
        raise GraphBreak(
            f"{what} inside a compiled function",
            "keep the value as a tensor (F.where, or an `if` the compiler converts); or use "
            'syntax="lax" to run this function eagerly',
            user_location(3),
        )

    def build(self, outputs: list[Tensor], name: str | None = None) -> Graph:
        outs = [self.own(t) for t in outputs]
        return Graph(tuple(self.nodes), tuple(outs), name or self.name)


def note(kind: str, detail: str) -> None:
    rec = _trace.active()
    if rec is not None:
        rec.note(kind, detail.split(":")[0], detail)  # type: ignore[arg-type]
