"""The static type of a tensor: its shape and element type."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .dtype import DType

__all__ = ["TensorType"]


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
        shape = tuple(self.shape)
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, int | _np_int()) or d < 0:
                raise ValueError(
                    f"tensor shape {shape!r} has dim {d!r}; every dim must be an int >= 0"
                )
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
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


def _np_int():
    import numpy as np

    return np.integer
