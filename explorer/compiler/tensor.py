"""``Tensor``: a numpy array (eager) or a value of a graph being captured (under ``@jit``).

This module is the bottom of the framework: it imports nothing above it. Ops reach a
trace through ``trace_stack.apply`` (eager runs them at once, a capture records them);
the operators and methods that apply ops (``+``, ``@``, ``reshape``, ``sum``...) are
installed on ``Tensor`` by ``functional``, as JAX installs its array methods.

>>> import explorer as ex, numpy as np
>>> x = ex.tensor(np.arange(6.0).reshape(2, 3))
>>> (x * 2.0 + 1.0).sum(axis=1).numpy()
array([ 9., 27.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import DType, TensorType
from ..ir.ops_tensor import dtype_of_array
from .errors import CompilerArgumentError, GraphBreak, ShapeError, user_location

__all__ = ["Tensor", "Parameter", "tensor", "spec", "check_array_dtype"]


def check_array_dtype(data: Any) -> np.ndarray:
    """``data`` as a numpy array if its dtype is one the IR has (bool, integer, float), else
    a ShapeError naming the dtype: complex, string and object arrays are not called fp32."""
    try:
        a = np.asarray(data)
    except ValueError as e:  # ragged nested lists
        raise ShapeError(
            f"cannot make a tensor from {type(data).__name__} {data!r:.80}: {e}", user_location()
        ) from e
    if a.dtype.kind not in "biuf":
        raise ShapeError(
            f"arrays of numpy dtype {a.dtype} are not supported (the IR has bool, int32, "
            "int64 and floats); convert the data first, e.g. np.asarray(x, np.float32)",
            user_location(),
        )
    return a


def _as_array(data: Any, dtype: DType | str | None = None) -> np.ndarray:
    a = check_array_dtype(data)
    if dtype is not None:
        return a.astype(DType.parse(dtype).numpy, copy=False)
    if a.dtype == np.float64 or a.dtype == np.float16:
        return a.astype(np.float32)
    if a.dtype.kind in "iu" and a.dtype not in (np.int32, np.int64):
        return a.astype(np.int64)
    return a


class Tensor:
    """A tensor value. ``data`` is its array (None while abstract), ``type`` its TensorType.

    Operators (installed by ``functional``): ``+ - * / ** @``, comparisons, unary ``-``,
    indexing with ints and slices; methods ``reshape``, ``transpose``/``T``,
    ``sum``/``mean``/``max``, ``astype``. Here: ``numpy()``, ``item()``. ``tracer`` is the
    capture the tensor belongs to (None for a concrete tensor).
    """

    __slots__ = ("data", "type", "tracer", "value", "__weakref__")
    __array_priority__ = 100  # numpy defers ``ndarray + Tensor`` to Tensor.__radd__

    def __init__(self, data: np.ndarray | None, type: TensorType, tracer: Any = None,
                 value: str = "") -> None:  # fmt: skip
        self.data = data
        self.type = type
        self.tracer = tracer
        self.value = value

    @classmethod
    def wrap(cls, array: np.ndarray) -> Tensor:
        check_array_dtype(array)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        return cls(array, TensorType(array.shape, dtype_of_array(array)))

    # --- facts ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def size(self) -> int:
        return self.type.numel

    @property
    def is_symbolic(self) -> bool:
        """True for a value of a graph being captured (its data is not known)."""
        return self.tracer is not None

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        if self.data is not None and self.tracer is None:
            return f"Tensor({np.array2string(self.data, threshold=20)}, {self.type})"
        where = f" %{self.value}" if self.value else ""
        return f"Tensor(<{'traced' if self.data is not None else 'abstract'}>{where}, {self.type})"

    # --- leaving the framework ------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a numpy array. Inside ``@jit`` this is a graph break (strict: error)."""
        if self.tracer is not None:
            return self.tracer.concrete_value(self, ".numpy()")
        return self.data

    def item(self) -> Any:
        return self.numpy().item()

    def __bool__(self) -> bool:
        if self.tracer is not None:
            return bool(self.tracer.concrete_value(self, "bool() of a tensor"))
        return bool(self.data)

    def __float__(self) -> float:
        return float(self.numpy())

    def __int__(self) -> int:
        return int(self.numpy())

    def __index__(self) -> int:
        if self.tracer is not None:
            raise GraphBreak(
                "a tensor used as a Python int (range(), an index)",
                "use a Python int for loop bounds; a tensor-valued bound needs a while loop",
            )
        return int(self.data)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    __hash__ = object.__hash__


class Parameter(Tensor):
    """A trained weight: a concrete tensor with a dotted ``name`` given by its cell.

    Captured graphs take parameters as ``param`` nodes and read their current values at
    every call, so updating a parameter does not need a recompilation.
    """

    __slots__ = ("name",)

    def __init__(self, data: np.ndarray, name: str = "") -> None:
        data = _as_array(data)
        super().__init__(data, TensorType(data.shape, dtype_of_array(data)))
        self.name = name

    def assign(self, value: np.ndarray | Tensor) -> None:
        """Replace the value in place (same shape); compiled functions see it next call."""
        value = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        if value.shape != self.shape:
            raise CompilerArgumentError(
                f"parameter {self.name!r} is {self.shape}, got {value.shape}; assign an array "
                f"of shape {self.shape}"
            )
        self.data = value.astype(self.data.dtype)


def tensor(data: Any, dtype: DType | str | None = None) -> Tensor:
    """A concrete tensor from an array-like (float64 becomes fp32: the IR has no fp64).

    >>> tensor([1.0, 2.0]).type
    TensorType(shape=(2,), dtype=<DType.FP32: 'fp32'>)
    """
    if isinstance(data, Tensor):
        return data
    return Tensor.wrap(_as_array(data, dtype))


def spec(shape: Sequence[int], dtype: DType | str = DType.FP32) -> Tensor:
    """An abstract tensor (shape and dtype only, no data): input for ``capture``.

    >>> spec((8, 1024), "int32")
    Tensor(<abstract>, int32[8, 1024])
    """
    return Tensor(None, TensorType(tuple(shape), DType.parse(dtype)))
