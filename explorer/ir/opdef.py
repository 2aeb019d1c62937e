"""The op registry: one ``OpDef`` per op, from which shapes, costs and execution derive."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from ..memo import Memo
from . import signature as sigmod
from .dtype import DType
from .errors import IRError
from .tensor_type import TensorType

__all__ = ["OpGroup", "OpDef", "register", "get", "names", "REGISTRY", "ELEMENTWISE"]

# (id of the op, input types, typed attributes) -> (the op, signature, output type)
_INFERRED: Memo[tuple[Any, str, TensorType]] = Memo("ir.inferred", maxsize=65536)


def _typed(v: Any) -> Any:
    """An attribute value with its type (and its items' types), for a memo key."""
    if isinstance(v, tuple | list):
        return type(v), tuple(_typed(x) for x in v)
    return type(v), v


class OpGroup(Enum):
    """What an op does to its data; passes and planners ask by group, never by op name."""

    SOURCE = "source"
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"
    CONTRACTION = "contraction"
    MOVEMENT = "movement"


Attrs = Mapping[str, Any]
InTypes = tuple[TensorType, ...]


@dataclass(frozen=True)
class OpDef:
    """One registry entry.

    Args:
        name: op name as printed in the text IR.
        group: the op group.
        template: einsum-style dim signature with optional ``...`` (``"...k,kn->...n"``);
            ``None`` when ``signature_rule`` builds it from the attributes.
        num_inputs: exact input count (``None`` means any count).
        flops_per_point: FLOPs per point of the iteration space (all signature letters);
            e.g. 2 for a multiply-add contraction, 1 for an add.
        impl: numpy implementation ``impl(*arrays, **attrs) -> ndarray``.
        attrs: attribute names with defaults (``REQUIRED`` marks a required one).
        signature_rule: ``(in_types, attrs) -> signature`` for ops whose letters depend on
            attributes (transpose, reshape, reductions over given axes).
        shape_rule: ``(in_types, attrs) -> TensorType`` overriding the signature's shape.
        flops_rule: ``(in_types, out_type, attrs) -> int`` overriding ``flops_per_point``.
        dtype_rule: output dtype given the inputs (default: first input's dtype).
        doc: one line shown in the registry listing.
        view: the op only changes strides (transpose, expand, as in PyTorch): it reads and
            writes nothing and holds no memory of its own. ``reshape`` is not one: it
            copies when its input is not contiguous (after a transpose or an expand), and
            the cost model does not track strides, so it is costed by its bytes.
    """

    name: str
    group: OpGroup
    template: str | None
    num_inputs: int | None
    flops_per_point: float
    impl: Callable[..., np.ndarray]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    signature_rule: Callable[[InTypes, Attrs], str] | None = None
    shape_rule: Callable[[InTypes, Attrs], tuple[int, ...]] | None = None
    flops_rule: Callable[[InTypes, TensorType, Attrs], int] | None = None
    dtype_rule: Callable[[InTypes, Attrs], DType] | None = None
    doc: str = ""
    view: bool = False

    def full_attrs(self, attrs: Attrs) -> dict[str, Any]:
        """Attributes with defaults filled in; unknown or missing ones raise."""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise IRError(
                f"op {self.name!r} has no attribute {unknown[0]!r}; "
                f"its attributes are {sorted(self.attrs) or 'none'}"
            )
        out = dict(self.attrs)
        out.update(attrs)
        missing = [k for k, v in out.items() if v is REQUIRED]
        if missing:
            raise IRError(f"op {self.name!r} needs attribute {missing[0]!r}")
        return out

    def signature(self, in_types: InTypes, attrs: Attrs) -> str:
        """The concrete dim signature for these inputs, e.g. ``"abk,kn->abn"``."""
        if self.num_inputs is not None and len(in_types) != self.num_inputs:
            raise IRError(f"op {self.name!r} takes {self.num_inputs} inputs, got {len(in_types)}")
        if self.signature_rule is not None:
            return self.signature_rule(in_types, attrs)
        return sigmod.expand(self.template, in_types)

    def infer(self, in_types: InTypes, attrs: Attrs) -> tuple[str, TensorType]:
        """Check the inputs and return (signature, output type).

        Remembered per op, input types and attributes (their types too: ``2`` and ``2.0``
        are other keys), as the layers of a model repeat the same ops on the same types and
        a graph infers each node twice (builder, then ``Graph``); errors are not remembered.
        """
        try:
            key = (id(self), in_types, tuple((k, _typed(v)) for k, v in sorted(attrs.items())))
            hash(key)
        except TypeError:  # an unhashable attribute (an array): inferred every time
            return self._infer(in_types, attrs)
        op, sig, out = _INFERRED.get(key, lambda: (self, *self._infer(in_types, attrs)))
        if op is not self:  # the id of an op since freed (re-registered): not this op's entry
            return self._infer(in_types, attrs)
        return sig, out

    def _infer(self, in_types: InTypes, attrs: Attrs) -> tuple[str, TensorType]:
        sig = self.signature(in_types, attrs)
        sizes = sigmod.letter_sizes(sig, in_types)
        if self.shape_rule is not None:
            shape = tuple(self.shape_rule(in_types, attrs))
        else:
            _, out = sigmod.parse(sig)
            shape = tuple(sizes[c] for c in out)
        dtype = self.dtype_rule(in_types, attrs) if self.dtype_rule else in_types[0].dtype
        return sig, TensorType(shape, dtype)

    def flops(self, sig: str, in_types: InTypes, out_type: TensorType, attrs: Attrs) -> int:
        """FLOPs of one execution: ``flops_per_point`` x the iteration space."""
        if self.flops_rule is not None:
            return int(self.flops_rule(in_types, out_type, attrs))
        if self.flops_per_point == 0:
            return 0
        sizes = sigmod.letter_sizes(sig, in_types)
        _, out = sigmod.parse(sig)
        for c, d in zip(out, out_type.shape, strict=True):
            sizes.setdefault(c, d)
        return int(self.flops_per_point * math.prod(sizes.values()))

    def bytes(self, in_types: InTypes, out_type: TensorType) -> tuple[int, int]:
        """(bytes read, bytes written) assuming every input is read once (none for a view)."""
        if self.view:
            return 0, 0
        return sum(t.nbytes for t in in_types), out_type.nbytes


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

REGISTRY: dict[str, OpDef] = {}
ELEMENTWISE: frozenset[str] = frozenset()


def register(op: OpDef) -> OpDef:
    """Add an op to the registry (names are unique)."""
    global ELEMENTWISE
    if op.name in REGISTRY:
        raise IRError(f"op {op.name!r} is already registered")
    REGISTRY[op.name] = op
    if op.group is OpGroup.ELEMENTWISE:
        ELEMENTWISE = ELEMENTWISE | {op.name}
    return op


def get(name: str) -> OpDef:
    """Look an op up by name; an unknown name lists the close matches."""
    try:
        return REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, REGISTRY, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise IRError(
            f"unknown op {name!r}.{hint} Registered ops: {', '.join(sorted(REGISTRY))}"
        ) from None


def names() -> tuple[str, ...]:
    return tuple(sorted(REGISTRY))
