"""SPMD kernels: how one op runs on every device's local blocks (the hand rules' halves
that execute). Ops without an entry run their numpy impl on each device's blocks.

A kernel takes a `KernelContext` and the per-device input blocks and returns the
per-device output blocks; collectives inside an op go through ``ctx.all_reduce`` so that
they are performed literally and logged against the strategy's predicted collectives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..hardware import Mesh
from ..ir import DType, Node, TensorType, get
from ..ir.ops import check_ids, dropout_mask
from .collective import Collective
from .comm import all_reduce
from .errors import ShardingError
from .slices import shard_slices
from .strategy import Strategy

__all__ = ["KernelContext", "KERNELS", "REFERENCE_KERNELS", "run_kernel"]

Blocks = list[list[np.ndarray]]  # [input][device]


@dataclass
class KernelContext:
    node: Node
    strategy: Strategy
    mesh: Mesh
    in_types: tuple[TensorType, ...]
    log: list[tuple[Collective, float]] = field(default_factory=list)
    _next: int = 0

    def slices(self, k: int) -> dict[int, tuple[slice, ...]]:
        """The global slice of input ``k`` on each device."""
        return shard_slices(self.in_types[k].shape, self.strategy.in_layouts[k], self.mesh)

    def split_axes(self, k: int, dim: int) -> tuple[str, ...]:
        return self.strategy.in_layouts[k].dims[dim]

    def all_reduce(self, arrays: list[np.ndarray], axes: tuple[str, ...], op: str = "sum"):
        """Perform the strategy's next internal collective and log (predicted, measured)."""
        try:
            predicted = self.strategy.collectives[self._next]
        except IndexError:
            raise ShardingError(
                f"node %{self.node.name}: its kernel issues more collectives than strategy "
                f"{self.strategy.name!r} predicts"
            ) from None
        self._next += 1
        out, sent = all_reduce(arrays, axes, self.mesh, self.in_types[0].dtype.itemsize, op)
        self.log.append((predicted, sent))
        return out


def _per_device(fn: Callable[..., np.ndarray], ins: Blocks) -> list[np.ndarray]:
    return [fn(*(blocks[d] for blocks in ins)) for d in range(len(ins[0]))]


def _generic(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    op = get(ctx.node.op)
    impl, attrs = op.impl, op.full_attrs(ctx.node.attr_dict)  # defaults too, as unsharded
    return _per_device(lambda *xs: impl(*xs, **attrs), ins)


def _cast(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    dt = DType.parse(ctx.node.attr("dtype"))
    target = np.float64 if dt.is_float else dt.numpy  # the simulation runs floats in fp64
    return [x.astype(target) for x in ins[0]]


def _reshape(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    local = ctx.strategy.out_layout.local_shape(ctx.node.type.shape, ctx.mesh)
    return [np.reshape(x, local) for x in ins[0]]


def _mean(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    axes = ctx.node.attr("axes")
    rank = ctx.in_types[0].rank
    reduced = range(rank) if axes is None else [a % rank for a in np.atleast_1d(axes)]
    # local mean * local/global count: the addends of the global mean
    factor = 1 / math.prod(ctx.strategy.in_layouts[0].shards(a, ctx.mesh) for a in reduced)
    return [x * factor for x in _generic(ctx, ins)]


def _causal(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    # keep key j where k0 + j <= q0 + i + offset: the local mask with a shifted offset
    impl, sl, offset = get(ctx.node.op).impl, ctx.slices(0), ctx.node.attr("offset", 0)
    return [impl(x, offset=offset + sl[d][-2].start - sl[d][-1].start)
            for d, x in enumerate(ins[0])]  # fmt: skip


def _window(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    # ``window_mask``: the causal rule's shifted offset, the same window
    impl, sl, offset = get(ctx.node.op).impl, ctx.slices(0), ctx.node.attr("offset", 0)
    window = ctx.node.attr("window")
    return [impl(x, window=window, offset=offset + sl[d][-2].start - sl[d][-1].start)
            for d, x in enumerate(ins[0])]  # fmt: skip


def _dropout(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    p, seed = ctx.node.attr("p", 0.1), ctx.node.attr("seed", 0)
    if p == 0:
        return list(ins[0])
    mask, sl = dropout_mask(ctx.in_types[0].shape, p, seed), ctx.slices(0)
    return [np.where(mask[sl[d]], x / (1.0 - p), 0.0) for d, x in enumerate(ins[0])]


def _embedding(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    vocab = ctx.in_types[1].shape[0]
    for ids in ins[0]:
        check_ids(ids, vocab, f"embedding %{ctx.node.name}")
    if not ctx.split_axes(1, 0):
        return _generic(ctx, ins)
    sl = ctx.slices(1)
    out = []
    for d, (ids, table) in enumerate(zip(ins[0], ins[1], strict=True)):
        lo = sl[d][0].start
        mine = (ids >= lo) & (ids < lo + table.shape[0])  # masked lookup: partial output
        rows = table[np.where(mine, ids - lo, 0)]
        out.append(np.where(mine[..., None], rows, 0.0))
    return out


def _softmax(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    axes = ctx.split_axes(0, -1)
    if not axes:
        return _generic(ctx, ins)
    m = ctx.all_reduce([x.max(axis=-1, keepdims=True) for x in ins[0]], axes, "max")
    e = [np.exp(x - mi) for x, mi in zip(ins[0], m, strict=True)]
    s = ctx.all_reduce([ei.sum(axis=-1, keepdims=True) for ei in e], axes)
    return [ei / si for ei, si in zip(e, s, strict=True)]


def _norm(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    axes = ctx.split_axes(0, -1)
    if not axes:
        return _generic(ctx, ins)
    n = ctx.in_types[0].shape[-1]
    eps = ctx.node.attr("eps", 1e-5 if ctx.node.op == "layernorm" else 1e-6)
    xs = ins[0]
    if ctx.node.op == "rmsnorm":
        ss = ctx.all_reduce([(x**2).sum(axis=-1, keepdims=True) for x in xs], axes)
        return [x / np.sqrt(s / n + eps) * g for x, s, g in zip(xs, ss, ins[1], strict=True)]
    stats = ctx.all_reduce([np.stack([x.sum(axis=-1), (x**2).sum(axis=-1)]) for x in xs], axes)
    out = []
    for x, st, g, b in zip(xs, stats, ins[1], ins[2], strict=True):
        mu = st[0][..., None] / n
        var = st[1][..., None] / n - mu**2
        out.append((x - mu) / np.sqrt(var + eps) * g + b)
    return out


def _cross_entropy(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    vocab = ctx.in_types[0].shape[-1]
    for labels in ins[1]:
        check_ids(labels, vocab, f"cross_entropy %{ctx.node.name} labels")
    axes = ctx.split_axes(0, -1)
    if not axes:
        return _generic(ctx, ins)
    sl = ctx.slices(0)
    m = ctx.all_reduce([x.max(axis=-1) for x in ins[0]], axes, "max")
    parts = []
    for d, (x, labels) in enumerate(zip(ins[0], ins[1], strict=True)):
        lo = sl[d][-1].start
        mine = (labels >= lo) & (labels < lo + x.shape[-1])
        idx = np.where(mine, labels - lo, 0).astype(np.int64)[..., None]
        picked = np.where(mine, np.take_along_axis(x, idx, axis=-1)[..., 0], 0.0)
        parts.append(np.stack([np.exp(x - m[d][..., None]).sum(axis=-1), picked]))
    tot = ctx.all_reduce(parts, axes)
    return [np.log(t[0]) + mi - t[1] for t, mi in zip(tot, m, strict=True)]


def _made(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    """An op without inputs (``fill``): the global value, sliced to each device's block."""
    op = get(ctx.node.op)
    val = op.impl(**op.full_attrs(ctx.node.attr_dict))
    if val.dtype.kind == "f":
        val = val.astype(np.float64)
    sl = shard_slices(ctx.node.type.shape, ctx.strategy.out_layout, ctx.mesh)
    return [val[sl[d]] for d in range(ctx.mesh.size)]


KERNELS: dict[str, Callable[[KernelContext, Blocks], list[np.ndarray]]] = {
    "fill": _made,
    "cast": _cast, "reshape": _reshape, "mean": _mean, "causal_mask": _causal,
    "causal_mask_grad": _causal,
    "window_mask": _window, "window_mask_grad": _window,
    "dropout": _dropout, "embedding": _embedding, "softmax": _softmax, "layernorm": _norm,
    "rmsnorm": _norm, "cross_entropy": _cross_entropy,
}  # fmt: skip


def run_kernel(ctx: KernelContext, ins: Blocks) -> list[np.ndarray]:
    out = KERNELS.get(ctx.node.op, _generic)(ctx, ins)
    if ctx._next != len(ctx.strategy.collectives):
        raise ShardingError(
            f"node %{ctx.node.name}: strategy {ctx.strategy.name!r} predicts "
            f"{len(ctx.strategy.collectives)} collectives but its kernel issued {ctx._next}"
        )
    return out


def _reference_cast(node: Node, args: list[np.ndarray]) -> np.ndarray:
    dt = DType.parse(node.attr("dtype"))
    return args[0].astype(np.float64 if dt.is_float else dt.numpy)  # floats stay fp64


def _reference_made(node: Node, args: list[np.ndarray]) -> np.ndarray:
    # as `_made`: a float made from nothing (an arange of rotary frequencies) is computed
    # in float64, so the sharded and unsharded runs start from the same values
    op = get(node.op)
    val = np.asarray(op.impl(*args, **op.full_attrs(node.attr_dict)))
    return val.astype(np.float64) if val.dtype.kind == "f" else val


REFERENCE_KERNELS: dict[str, Callable[[Node, list[np.ndarray]], np.ndarray]] = {
    "cast": _reference_cast, "fill": _reference_made,
}  # fmt: skip
"""The unsharded float64 run's kernels (`executor.ReferenceInterpreter`); other ops run
their registry impl."""
