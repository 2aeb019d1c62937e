"""Walk a traced torch.fx graph (from torch.export or symbolic tracing) and emit IR nodes.

Every ``call_function`` node goes through the handler table of `aten` keyed by the op's
name (``"aten.linear"``); a node without a handler, or whose handler gives another shape
than torch computed, becomes an ``opaque`` node and is listed in the report. Shapes and
dtypes come from the fake tensors torch.export records (``node.meta["val"]``), so a model
on the meta device is converted without allocating anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...ir import DType, GraphBuilder, TensorType
from ...ir.node import Node
from . import constants
from .constants import Constants, constant_node
from .report import OpaqueOp, TorchImportError

__all__ = ["Ref", "Context", "HANDLERS", "handler", "torch_dtype", "op_key"]


@dataclass(frozen=True)
class Ref:
    """An IR value standing for a traced tensor."""

    name: str


Handler = Callable[..., Any]
#: op key (``"aten.linear"``, ``"getitem"``) -> ``handler(cx, node, a)``, where ``a`` holds
#: the op's arguments by schema name (defaults filled), tensors as `Ref`.
HANDLERS: dict[str, Handler] = {}


def handler(*keys: str, raw: bool = False) -> Callable[[Handler], Handler]:
    """Register ``fn`` for aten ops by short name (``"linear"`` is ``"aten.linear"``), or
    for other keys as given (dotted names, or any name with ``raw=True``)."""

    def deco(fn: Handler) -> Handler:
        for k in keys:
            HANDLERS[k if raw or "." in k else f"aten.{k}"] = fn
        return fn

    return deco


_DTYPES = {
    "torch.float32": DType.FP32, "torch.bfloat16": DType.BF16, "torch.float16": DType.FP16,
    "torch.int64": DType.INT64, "torch.int32": DType.INT32, "torch.bool": DType.BOOL,
    "torch.float8_e4m3fn": DType.FP8, "torch.float8_e5m2": DType.FP8,
}  # fmt: skip
# Element types the IR lacks, and the one standing for each (noted in the report).
_SUBSTITUTES = {
    "torch.float64": DType.FP32, "torch.int16": DType.INT32, "torch.int8": DType.INT32,
    "torch.uint8": DType.INT32, "torch.complex64": DType.FP32,
}  # fmt: skip


def torch_dtype(dt: Any, notes: set[str] | None = None) -> DType:
    """The IR element type of a torch dtype (fp64 -> fp32 and the like, noted)."""
    key = str(dt)
    if key in _DTYPES:
        return _DTYPES[key]
    if key in _SUBSTITUTES:
        if notes is not None:
            notes.add(f"{key} tensors are modelled as {_SUBSTITUTES[key].value}")
        return _SUBSTITUTES[key]
    raise TorchImportError(f"torch dtype {key} has no IR element type; cast the model first")


def op_key(target: Any) -> str:
    """``"aten.linear"`` for ``aten.linear.default``; the name of other callables."""
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(packet)
    name = getattr(target, "__name__", None) or str(target)
    return "getitem" if name == "getitem" else name


class _Builder(GraphBuilder):
    """A GraphBuilder that numbers repeated names instead of refusing them and can add a
    source with a full dotted name (parameters keep their PyTorch names)."""

    def _name(self, base: str, explicit: str | None) -> str:
        return super()._name(explicit or base, None)

    def source(self, op: str, name: str, t: TensorType, scope: str) -> str:
        return self._add(Node(name, op, (), t, (), scope))


def _require_static_shape(node: Any) -> None:
    """Refuse a traced value whose size depends on tensor values (an unbacked SymInt)."""
    for val in _flatten(node.meta.get("val")):
        for d in getattr(val, "shape", ()):
            if isinstance(d, int):
                continue
            try:
                int(d)
            except Exception:  # torch's GuardOnDataDependentSymNode and kin
                raise TorchImportError(
                    f"{node.name} ({node.target}) has a size that depends on tensor values "
                    f"({d}): the planner needs static shapes; make the size a Python int "
                    "(e.g. pass output_size= to repeat_interleave, or give counts as ints)"
                ) from None


class Context:
    """Conversion state: the builder, the fx-name -> value map, the current scope."""

    def __init__(self, name: str, float_casts: bool = False) -> None:
        self.b = _Builder(name)
        self.float_casts = float_casts
        self.env: dict[str, Any] = {}
        self.static: set[str] = set()
        self.scope = ""
        self.opaque_nodes: dict[str, list[str]] = {}
        self.opaque_static: dict[str, bool] = {}
        self.notes: set[str] = set()
        self.leaves: list[tuple[str, str]] = []
        self.constants = Constants()
        self.known: dict[str, Any] = {}  # IR value -> its value, when shape-only (`constants`)

    # --- values ---------------------------------------------------------------------------
    def type(self, r: Ref) -> TensorType:
        return self.b.type_of(r.name)

    def shape(self, r: Ref) -> tuple[int, ...]:
        return self.b.shape(r.name)

    def value(self, r: Any) -> Any:
        """The CPU tensor a shape-only value holds (`constants`), or None."""
        return self.known.get(r.name) if isinstance(r, Ref) else None

    def dtype(self, dt: Any) -> DType:
        return torch_dtype(dt, self.notes)

    def constant(self, r: Ref) -> Ref:
        """``r`` as one ``constant`` op holding its value (`constants`) when ops compute it
        from shapes alone (T5's relative-position buckets: aranges, logs, mins...); `prune`
        then drops the ops nothing else reads. A source, a lone ``fill``, a value not known
        at trace time, one over `constants.MAX_GRAPH_CONSTANT_BYTES`, or one read from a
        graph source (a buffer with real values is unknown on the meta device: the two
        traces must give one graph) stays ``r``."""
        val = self.value(r)
        if val is None or val.numel() * val.element_size() > constants.MAX_GRAPH_CONSTANT_BYTES:
            return r
        by_name = {n.name: n for n in self.b._nodes}
        if by_name[r.name].op in ("fill", "constant"):
            return r
        stack, seen = [r.name], set()
        while stack:
            n = by_name[stack.pop()]
            if n.op in ("input", "param"):
                return r
            seen.add(n.name)
            stack.extend(i for i in n.inputs if i not in seen)
        return Ref(constant_node(self.b, val, self.type(r), self.scope))

    def source(self, op: str, name: str, t: TensorType, scope: str, static: bool) -> Ref:
        n = self.b.source(op, name, t, scope)
        if static:
            self.static.add(n)
        return Ref(n)

    def op(self, op: str, *inputs: Ref, base: str | None = None, **attrs: Any) -> Ref:
        """Emit one IR node in the current scope; static when all its inputs are."""
        self.b._scope = [self.scope] if self.scope else []
        name = self.b.op(op, *(r.name for r in inputs), name=base, **attrs)
        if all(r.name in self.static for r in inputs):
            self.static.add(name)
        return Ref(name)

    def cast(self, r: Ref, dtype: DType) -> Ref:
        """``r`` as ``dtype``; a float-to-float cast is kept only with ``float_casts``
        (kernels upcast inside norms and softmax without writing fp32 tensors)."""
        have = self.type(r).dtype
        if have == dtype or (have.is_float and dtype.is_float and not self.float_casts):
            return r
        return self.op("cast", r, dtype=dtype.value)

    def reshape(self, r: Ref, shape: tuple[int, ...]) -> Ref:
        shape = tuple(int(d) for d in shape)
        return r if self.shape(r) == shape else self.op("reshape", r, shape=shape)

    def full(self, value: float, shape: tuple[int, ...], dtype: DType) -> Ref:
        return self.op("fill", kind="full", shape=tuple(shape), dtype=dtype.value, value=value)

    # --- opaque ---------------------------------------------------------------------------
    def opaque(self, node: Any, a: Any, why: str = "", val: Any = None) -> Any:
        """Opaque nodes for every tensor ``node`` returns (or for ``val``, a part of what it
        returns), reading every tensor argument."""
        target = str(node.target)
        refs = [r for r in _flatten(a) if isinstance(r, Ref)]
        static = all(r.name in self.static for r in refs)

        def make(val):
            if _is_tensor(val):
                t = TensorType(tuple(int(d) for d in val.shape), self.dtype(val.dtype))
                r = self.op("opaque", *refs, base=_short(target), target=target,
                            shape=t.shape, dtype=t.dtype.value)  # fmt: skip
                if static:
                    self.static.add(r.name)
                self.opaque_nodes.setdefault(target, []).append(r.name)
                self.opaque_static[target] = self.opaque_static.get(target, True) and static
                return r
            if isinstance(val, list | tuple):
                return type(val)(make(v) for v in val)
            return val

        if why:
            self.notes.add(f"{target}: {why}")
        return make(node.meta.get("val") if val is None else val)

    def opaque_report(self) -> tuple[OpaqueOp, ...]:
        return tuple(
            OpaqueOp(t, tuple(ns), self.opaque_static[t])
            for t, ns in sorted(self.opaque_nodes.items())
        )

    # --- the main loop --------------------------------------------------------------------
    def run(self, gm: Any) -> list[Any]:
        """Convert the call_function nodes of ``gm`` (placeholders already in ``env``);
        returns the converted values of the output node."""
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                if node.name not in self.env:
                    raise TorchImportError(f"placeholder {node.name} was not bound")
                continue
            if node.op == "get_attr":
                self.env[node.name] = _get_attr(gm, node.target)
                continue
            if node.op == "output":
                return [self._value(a) for a in _as_list(node.args[0])]
            if node.op != "call_function":
                raise TorchImportError(
                    f"traced node {node.name} is a {node.op}; torch.export graphs call "
                    "functions only — trace with torch.export"
                )
            self.scope = _scope_of(node, self.scope)
            _require_static_shape(node)
            self.env[node.name] = out = self.call(node)
            self._remember(out, self.constants.fold(node))
        return []

    def _remember(self, out: Any, val: Any) -> None:
        if val is None:
            return
        if isinstance(out, Ref) and _is_tensor(val):
            self.known.setdefault(out.name, val)
        elif isinstance(out, list | tuple) and isinstance(val, list | tuple):
            for o, v in zip(out, val, strict=False):
                self._remember(o, v)

    def call(self, node: Any) -> Any:
        key = op_key(node.target)
        fn = HANDLERS.get(key)
        a = self.arguments(node)
        if fn is None:
            return self.opaque(node, a)
        try:
            out = fn(self, node, a)
        except NotImplementedError as e:
            return self.opaque(node, a, str(e))
        return self.check(node, a, out)

    def arguments(self, node: Any) -> dict[str, Any]:
        """The node's arguments by schema name with defaults filled in (positional names
        ``_0, _1, ...`` for ops without a schema)."""
        args = [self._value(x) for x in node.args]
        kwargs = {k: self._value(v) for k, v in node.kwargs.items()}
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            out = {f"_{i}": v for i, v in enumerate(args)}
            out.update(kwargs)
            return out
        out = {}
        for i, arg in enumerate(schema.arguments):
            if i < len(args) and not arg.kwarg_only:
                out[arg.name] = args[i]
            elif arg.name in kwargs:
                out[arg.name] = kwargs[arg.name]
            elif arg.has_default_value():
                out[arg.name] = arg.default_value
            else:
                out[arg.name] = None
        return out

    def check(self, node: Any, a: dict[str, Any], out: Any) -> Any:
        """Compare a handler's result with torch's shapes; cast dtypes to torch's; an
        unequal shape turns the node opaque (a mapping bug is never silently wrong)."""
        val = node.meta.get("val")
        if _is_tensor(val):
            if out is None and not node.users and op_key(node.target) == "getitem":
                return None  # an unused result the mapping does not compute (argmax)
            if not isinstance(out, Ref):
                return self.opaque(node, a, "the mapping gave no tensor")
            want = tuple(int(d) for d in val.shape)
            if self.shape(out) != want:
                return self.opaque(
                    node, a, f"the mapping gave shape {self.shape(out)}, torch {want}"
                )
            return self.cast(out, self.dtype(val.dtype))
        return out

    def _value(self, x: Any) -> Any:
        if hasattr(x, "op") and hasattr(x, "name") and hasattr(x, "meta"):
            return self.env[x.name]
        if isinstance(x, list | tuple):
            return type(x)(self._value(v) for v in x)
        if isinstance(x, dict):
            return {k: self._value(v) for k, v in x.items()}
        return x


def _is_tensor(val: Any) -> bool:
    return hasattr(val, "shape") and hasattr(val, "dtype") and hasattr(val, "device")


def _flatten(x: Any):
    if isinstance(x, dict):
        for v in x.values():
            yield from _flatten(v)
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _flatten(v)
    else:
        yield x


def _as_list(x: Any) -> list[Any]:
    if isinstance(x, list | tuple):
        return list(x)
    return [x]


def _short(target: str) -> str:
    parts = target.split(".")
    return parts[1] if len(parts) > 2 else parts[-1]


def _get_attr(gm: Any, target: str) -> Any:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _scope_of(node: Any, default: str) -> str:
    """The innermost module path of a node (``model.layers.0.self_attn.q_proj``)."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return default
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else default
