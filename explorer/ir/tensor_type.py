"""The static type of a tensor: its shape and element type."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checks import is_int
from .dtype import DType
from .errors import IRError

__all__ = ["MAX_NUMEL", "TensorType"]

#: Most elements a tensor type may describe: sizes beyond int64 cannot be counted by numpy.
MAX_NUMEL = 2**63 - 1


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of one tensor value.

    >>> t = TensorType((8, 1024), DType.BF16)
    >>> str(t), t.nbytes
    ('bf16[8, 1024]', 16384)
    """

    shape: tuple[int, ...]
    dtype: DType = DType.FP32

    def __post_init__(self) -> None:
        if isinstance(self.shape, str) or not isinstance(self.shape, tuple | list):
            raise IRError(f"tensor shape {self.shape!r} is not a tuple of ints; e.g. (8, 1024)")
        shape = tuple(self.shape)
        for d in shape:
            if not is_int(d, minimum=0, numpy=True):
                raise IRError(
                    f"tensor shape {shape!r} has dim {d!r}; every dim must be an int >= 0"
                )
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) > MAX_NUMEL:
            raise IRError(
                f"tensor shape {shape!r} has {math.prod(shape):.3g} elements, more than "
                f"MAX_NUMEL=2**63-1 that numpy's int64 sizes and offsets can count; "
                "use smaller dims"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", DType.parse(self.dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(str(d) for d in self.shape)}]"
