"""``Tensor``: a numpy array (eager) or a value of a graph being captured (under ``@jit``).

Every op goes through ``apply``: with no capture active it runs at once (``eager.run``);
inside a capture it appends a node to the active ``Tracer``. An active gradient tape
records the op either way, so ``grad`` works in both modes.

>>> import explorer as ex, numpy as np
>>> x = ex.tensor(np.arange(6.0).reshape(2, 3))
>>> (x * 2.0 + 1.0).sum(axis=1).numpy()
array([ 9., 27.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir import DType, TensorType
from ..ir.ops_tensor import dtype_of_array
from .errors import GraphBreak

if TYPE_CHECKING:
    from .autodiff import Tape
    from .jit.capture import Tracer

__all__ = ["Tensor", "Parameter", "tensor", "spec", "apply", "STATE"]


class _State:
    """What is active: the innermost capture (``tracer``) and gradient tapes."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.tapes: list[Tape] = []


STATE = _State()


def _as_array(data: Any, dtype: DType | str | None = None) -> np.ndarray:
    a = np.asarray(data)
    if dtype is not None:
        return a.astype(DType.parse(dtype).numpy, copy=False)
    if a.dtype == np.float64 or a.dtype == np.float16:
        return a.astype(np.float32)
    if a.dtype.kind in "iu" and a.dtype not in (np.int32, np.int64):
        return a.astype(np.int64)
    return a


class Tensor:
    """A tensor value. ``data`` is its array (None while abstract), ``type`` its TensorType.

    Operators: ``+ - * / ** @``, comparisons, unary ``-``, indexing with ints and slices.
    Methods: ``reshape``, ``transpose``/``T``, ``sum``/``mean``/``max``, ``astype``,
    ``numpy()``, ``item()``.
    """

    __slots__ = ("data", "type", "tracer", "value", "__weakref__")
    __array_priority__ = 100  # numpy defers ``ndarray + Tensor`` to Tensor.__radd__

    def __init__(self, data: np.ndarray | None, type: TensorType, tracer: Tracer | None = None,
                 value: str = "") -> None:  # fmt: skip
        self.data = data
        self.type = type
        self.tracer = tracer
        self.value = value

    @classmethod
    def wrap(cls, array: np.ndarray) -> Tensor:
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

    # --- operators ------------------------------------------------------------------------
    def __add__(self, o):
        return _F.add(self, o)

    def __radd__(self, o):
        return _F.add(o, self)

    def __sub__(self, o):
        return _F.sub(self, o)

    def __rsub__(self, o):
        return _F.sub(o, self)

    def __mul__(self, o):
        return _F.mul(self, o)

    def __rmul__(self, o):
        return _F.mul(o, self)

    def __truediv__(self, o):
        return _F.div(self, o)

    def __rtruediv__(self, o):
        return _F.div(o, self)

    def __pow__(self, o):
        return _F.pow(self, o)

    def __matmul__(self, o):
        return _F.matmul(self, o)

    def __neg__(self):
        return _F.neg(self)

    def __lt__(self, o):
        return _F.compare("lt", self, o)

    def __le__(self, o):
        return _F.compare("le", self, o)

    def __gt__(self, o):
        return _F.compare("gt", self, o)

    def __ge__(self, o):
        return _F.compare("ge", self, o)

    def __eq__(self, o):  # type: ignore[override]
        return _F.compare("eq", self, o)

    def __ne__(self, o):  # type: ignore[override]
        return _F.compare("ne", self, o)

    def __getitem__(self, index):
        return _F.getitem(self, index)

    # --- methods --------------------------------------------------------------------------
    def reshape(self, *shape) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return _F.reshape(self, shape)

    def transpose(self, *perm) -> Tensor:
        if len(perm) == 1 and isinstance(perm[0], tuple | list):
            perm = tuple(perm[0])
        return _F.transpose(self, perm or None)

    @property
    def T(self) -> Tensor:
        return _F.transpose(self, None)

    def sum(self, axis=None, keepdims: bool = False) -> Tensor:
        return _F.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> Tensor:
        return _F.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims: bool = False) -> Tensor:
        return _F.max(self, axis, keepdims)

    def astype(self, dtype: DType | str) -> Tensor:
        return _F.cast(self, dtype)


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
            raise ValueError(f"parameter {self.name!r} is {self.shape}, got {value.shape}")
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


def apply(op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor:
    """Run (eager) or record (capture) one op, and push it on every active tape."""
    tracer = STATE.tracer
    if tracer is not None:
        out = tracer.record(op, inputs, attrs)
    else:
        out = _eager_run(op, inputs, attrs)
    if STATE.tapes:
        for tape in STATE.tapes:
            tape.push(op, inputs, attrs, out)
    return out


from . import functional as _F  # noqa: E402  (operators delegate to ex.F)
from .eager import run as _eager_run  # noqa: E402
