"""``gemm_table(trace)``: the trace's matrix multiplications by shape, with the FLOP/s each
shape reached: the data a GEMM efficiency per shape class is fitted from.

A GEMM's shape comes from the ``Input Dims`` the profiler records (``record_shapes=True``) on
the op that ran it (``aten::mm``, ``aten::addmm``, ``aten::bmm``, ``aten::linear``, ...): on a
GPU trace the op that launched the kernels (their time is the kernels'), on a CPU trace the
op itself (its time is its duration). Shapes print as ``M x K x N`` (``B x M x K x N`` for a
batched GEMM); FLOPs are ``2 M K N`` (times ``B``).

>>> import explorer as ex
>>> rows = gemm_table(ex.traces.load_kineto(ex.traces.vendored("cpu_gloo_ddp")))
>>> sorted({r.op for r in rows})
['aten::addmm', 'aten::mm']
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import TracesError
from .events import KinetoTrace, RankTrace

__all__ = ["GemmRow", "gemm_table", "gemm_dims", "gemm_calls"]

US = 1e-6
_LEAVES = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


@dataclass(frozen=True)
class GemmRow:
    """One GEMM shape of one op: how often it ran, its total time and FLOPs, over all ranks."""

    op: str
    shape: str
    count: int
    seconds: float
    flops: float

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0


def _dims(x) -> tuple[int, ...] | None:
    if isinstance(x, tuple) and x and all(isinstance(d, int) for d in x):
        return x
    return None


def gemm_dims(op: str, shapes: tuple) -> tuple[int, int, int, int] | None:
    """``(batch, M, K, N)`` of a GEMM op from its input shapes, or None when they do not say.

    >>> gemm_dims("aten::addmm", ((256,), (1024, 64), (64, 256)))
    (1, 1024, 64, 256)
    >>> gemm_dims("aten::linear", ((4, 32, 64), (256, 64), (256,)))
    (1, 128, 64, 256)
    """
    ins = [_dims(s) for s in shapes]
    if op in ("aten::mm", "aten::matmul") and len(ins) >= 2 and ins[0] and ins[1]:
        a, b = ins[0], ins[1]
        if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
            return (1, a[0], a[1], b[1])
    if op == "aten::addmm" and len(ins) >= 3 and ins[1] and ins[2]:
        a, b = ins[1], ins[2]
        if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
            return (1, a[0], a[1], b[1])
    if op in ("aten::bmm", "aten::baddbmm") and len(ins) >= 2:
        a, b = (ins[0], ins[1]) if op == "aten::bmm" else (ins[1], ins[2] if len(ins) > 2 else None)
        if a and b and len(a) == 3 and len(b) == 3 and a[2] == b[1]:
            return (a[0], a[1], a[2], b[2])
    if op == "aten::linear" and len(ins) >= 2 and ins[0] and ins[1]:
        x, w = ins[0], ins[1]
        if len(w) == 2 and x[-1] == w[1]:
            return (1, math.prod(x[:-1]), w[1], w[0])
    return None


def gemm_calls(
    trace: KinetoTrace | RankTrace, caller: str = "gemm_calls"
) -> dict[tuple[str, tuple[int, int, int, int]], list]:
    """``{(op, (batch, M, K, N)): [calls, seconds]}`` over all ranks: the GEMMs whose shapes
    the trace records (see the module doc), in the order first seen.

    Raises:
        TracesError: not a trace.
    """
    if isinstance(trace, RankTrace):
        trace = KinetoTrace((trace,))
    if not isinstance(trace, KinetoTrace):
        raise TracesError(f"{caller}({trace!r}): expected a KinetoTrace from load_kineto")
    acc: dict[tuple[str, tuple[int, int, int, int]], list] = {}
    for r in trace.ranks:
        if r.device == "gpu":  # the kernels one op launched (a GEMM and its split-K reduce)
            per_op: dict[int, list] = {}
            for k in r.kernels:
                if k.category == "matmul" and k.op and k.external_id is not None:
                    per_op.setdefault(k.external_id, [k.op, k.shapes, 0.0])[2] += k.dur
            items = [tuple(v) for v in per_op.values()]
        else:  # the GEMM ops themselves (aten::linear and aten::matmul wrap them)
            items = [(a.name, a.shapes, a.dur) for a in r.ops if a.name in _LEAVES]
        for op, shapes, dur in items:
            dims = gemm_dims(op, shapes)
            if dims is None:
                continue
            row = acc.setdefault((op, dims), [0, 0.0])
            row[0] += 1
            row[1] += dur * US
    return acc


def gemm_table(trace: KinetoTrace | RankTrace) -> tuple[GemmRow, ...]:
    """Every GEMM shape the trace records, the most time first (see the module doc).

    Raises:
        TracesError: not a trace.
    """
    acc = gemm_calls(trace, "gemm_table")
    out = []
    for (op, (b, m, k, n)), (count, secs) in acc.items():
        shape = f"{m} x {k} x {n}" if b == 1 else f"{b} x {m} x {k} x {n}"
        out.append(GemmRow(op, shape, count, secs, float(count * 2 * b * m * k * n)))
    out.sort(key=lambda r: (-r.seconds, r.op, r.shape))
    return tuple(out)
