"""One node of the IR: a single-output op applied to named values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .tensor_type import TensorType

__all__ = ["Node"]


@dataclass(frozen=True)
class Node:
    """An SSA value: ``%name : type = op(%inputs..., attrs)``.

    Args:
        name: unique value name (printed as ``%name``).
        op: registry name of the op (``input`` and ``param`` for graph sources).
        inputs: names of the input values, in order.
        type: the output TensorType.
        attrs: sorted ``(key, value)`` pairs (immutable; read with ``attr``).
        scope: dotted location in the model, e.g. ``layers.3.attn``.
    """

    name: str
    op: str
    inputs: tuple[str, ...]
    type: TensorType
    attrs: tuple[tuple[str, Any], ...] = ()
    scope: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    @property
    def is_source(self) -> bool:
        return self.op in ("input", "param")

    def __str__(self) -> str:
        return f"%{self.name} : {self.type} = {self.op}(...)"


def freeze_attrs(attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Attributes as sorted pairs with lists turned into tuples (hashable, deterministic)."""

    def freeze(v):
        if isinstance(v, list | tuple):
            return tuple(freeze(x) for x in v)
        return v

    return tuple(sorted((k, freeze(v)) for k, v in attrs.items()))
