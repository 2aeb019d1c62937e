"""Element types of tensors in the IR, with their sizes in bytes."""

from __future__ import annotations

import difflib
from enum import Enum

import numpy as np

from .errors import IRError

__all__ = ["DType"]


class DType(Enum):
    """An element type; ``itemsize`` is its storage size in bytes.

    >>> DType.parse("bf16").itemsize
    2
    """

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.FP32, DType.BF16, DType.FP16, DType.FP8)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype used to execute this type (low-precision floats run in fp32)."""
        return np.dtype(_NUMPY[self])

    @classmethod
    def parse(cls, value: str | DType) -> DType:
        """Read a dtype from its short name, e.g. ``"bf16"``; unknown names list close ones."""
        if isinstance(value, DType):
            return value
        names = [d.value for d in cls]
        if not isinstance(value, str):
            raise IRError(
                f"dtype {value!r} is not a dtype name; expected one of {', '.join(names)}"
            )
        try:
            return cls(value.lower())
        except ValueError:
            close = difflib.get_close_matches(value, names, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise IRError(
                f"unknown dtype {value!r}; expected one of {', '.join(names)}.{hint}"
            ) from None

    def __str__(self) -> str:
        return self.value


_ITEMSIZE = {
    DType.FP32: 4,
    DType.BF16: 2,
    DType.FP16: 2,
    DType.FP8: 1,
    DType.INT32: 4,
    DType.INT64: 8,
    DType.BOOL: 1,
}
_NUMPY = {
    DType.FP32: "float32",
    DType.BF16: "float32",
    DType.FP16: "float32",
    DType.FP8: "float32",
    DType.INT32: "int32",
    DType.INT64: "int64",
    DType.BOOL: "bool",
}
