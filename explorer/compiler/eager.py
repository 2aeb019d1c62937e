"""Eager (PyNative-style) execution: each op runs at once with its registry numpy impl.

``EVAL`` (an ``EvalTrace``) is the base of the trace stack (``trace_stack``): with no
capture active, every op reaches it. The registry impls are the kernels ``@jit`` runs too
(GELU from ``explorer.ir.activations``, einsum on BLAS from ``explorer.ir.contraction``),
so eager vs ``@jit`` measures what the compiler adds: fusion, memory planning and the
removal of per-op overhead.

When a ``trace.record()`` block is active every op also records a ``TraceEvent`` with its
shapes, duration, FLOPs, the bytes it allocated and the bytes of tensors alive after it.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np

from .. import trace as _trace
from ..ir import TensorType, opdef
from ..ir.errors import IRError
from ..ir.ops_tensor import dtype_of_array
from .errors import ShapeError, user_location
from .tensor import Tensor

__all__ = ["run", "EvalTrace", "EVAL"]


def _shape_error(op: str, inputs, attrs, err: Exception) -> ShapeError:
    ins = ", ".join(str(t.type) for t in inputs)
    return ShapeError(f"{op}({ins}) failed: {err}", user_location(3))


def _release(rec, nbytes: int) -> None:
    rec.live_bytes -= nbytes


def run(op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor:
    """Execute one op now and return the result as a concrete Tensor."""
    d = opdef.REGISTRY.get(op) or opdef.get(op)
    rec = _trace.active()
    try:
        if rec is None:
            out = d.impl(*[t.data for t in inputs], **attrs)
        else:
            t0 = time.perf_counter()
            out = d.impl(*[t.data for t in inputs], **attrs)
            t1 = time.perf_counter()
    except (ValueError, IndexError, TypeError, IRError) as e:
        raise _shape_error(op, inputs, attrs, e) from None
    out = np.asarray(out)
    if out.dtype == np.float64:
        out = out.astype(np.float32)
    result = Tensor(out, TensorType(out.shape, dtype_of_array(out)))
    if rec is not None:
        in_types = tuple(t.type for t in inputs)
        full = d.full_attrs(attrs)
        try:
            sig = d.signature(in_types, full)
            flops = d.flops(sig, in_types, result.type, full)
        except (IRError, ValueError, KeyError):
            flops = 0
        nbytes = out.nbytes if out.base is None else 0  # a view allocates nothing
        rec.live_bytes += nbytes
        if nbytes:
            weakref.finalize(result, _release, rec, nbytes)
        rec.add(_trace.TraceEvent(
            op, "op", (t0 - rec.t0) * 1e6, (t1 - t0) * 1e6,
            tuple(t.shape for t in inputs) + (out.shape,), nbytes, flops, rec.live_bytes,
        ))  # fmt: skip
    return result


class EvalTrace:
    """The base of the trace stack: runs each op at once (``run``)."""

    def record(self, op: str, inputs: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor:
        return run(op, inputs, attrs)

    def constant(self, array: np.ndarray) -> Tensor:
        return Tensor.wrap(array)

    def convert(self, fn: Any) -> Any:
        return fn  # eager code runs as written

    def __repr__(self) -> str:
        return "EvalTrace()"


EVAL = EvalTrace()
