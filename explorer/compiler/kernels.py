"""Kernels of the executor: for each op, a function chosen once at compile time that may
write into a preallocated ``out`` buffer. Ops without such a kernel call their registry impl;
``generated`` nodes (the ``codegen`` pass) run their numba kernel (``codegen.build``).

``WRITES_OUT`` (ops whose kernel fills ``out``), ``IN_PLACE`` (kernels correct when ``out``
is one of their inputs) and ``ALIASES`` (ops whose result may be a view of an input) are
what memory planning asks.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import numpy as np

from ..ir import Node, TensorType, opdef
from ..ir.activations import GELU_C, GELU_K, gelu
from ..ir.contraction import einsum_as_matmul
from ..ir.node import freeze_attrs
from ..ir.ops_tensor import index_tuple
from .codegen.build import (
    compile_mode,
    elementwise_kernel,
    load,
    load_async,
    loaded,
    rows_kernel,
)
from .errors import ShapeError
from .kernels_imported import (
    ALIASES_IMPORTED,
    IMPORTED_BUILDERS,
    IN_PLACE_IMPORTED,
    WRITES_OUT_IMPORTED,
)
from .ufunc_program import UnsupportedExpr, compile_expr

__all__ = ["make_kernel", "BUILDERS", "WRITES_OUT", "IN_PLACE", "ALIASES", "causal_blocks"]

Kernel = Callable[..., np.ndarray]

_UFUNC = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative, "exp": np.exp,
    "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "abs": np.abs, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "logical_not": np.logical_not,
}  # fmt: skip

IN_PLACE = frozenset(_UFUNC) | IN_PLACE_IMPORTED | {
    "fused", "scale", "relu", "softmax", "causal_mask", "masked_softmax", "generated"}  # fmt: skip
WRITES_OUT = IN_PLACE | WRITES_OUT_IMPORTED | {
    "gelu", "silu", "matmul", "bmm", "einsum", "layernorm", "rmsnorm", "sum", "mean", "max",
    "embedding", "where", "gelu_grad", "causal_attention"}  # fmt: skip
ALIASES = ALIASES_IMPORTED | {"reshape", "transpose", "broadcast_to", "getitem", "dropout"}
# A fused kernel up to this many elements runs as numpy ufunc calls (``ufunc_program``):
# numexpr's per-call cost (tens of us) and scalar exp lose to numpy on small arrays.
UFUNC_MAX_NUMEL = 1 << 17
# A larger fused kernel runs the same ufunc calls over blocks of this many elements (a few
# 64 KiB fp32 temporaries stay in L2): 29 ms vs numexpr's 77 ms for bench/jit.py's 4M-element
# block on this machine (blocks of 8K..128K elements measured 43, 29, 31, 35, 36 ms).
BLOCK_NUMEL = 1 << 14


def _alloc(t: TensorType):
    shape, dt = t.shape, t.dtype.numpy

    def alloc() -> np.ndarray:
        return np.empty(shape, dt)

    return alloc


# --- kernel builders: (node, input types, full attrs) -> kernel(*arrays, out=None) --------

Builder = Callable[[Node, tuple[TensorType, ...], dict], Kernel]


def _ufunc(uf) -> Builder:
    def build(node, in_types, attrs) -> Kernel:
        def k_ufunc(*xs, out=None):
            return uf(*xs, out=out) if out is not None else uf(*xs)

        return k_ufunc

    return build


def _scale(node, in_types, attrs) -> Kernel:
    f = np.float32(attrs["factor"]) if node.type.dtype.is_float else attrs["factor"]
    return lambda x, out=None: np.multiply(x, f, out=out) if out is not None else x * f


def _relu(node, in_types, attrs) -> Kernel:
    return lambda x, out=None: np.maximum(x, 0, out=out) if out is not None else np.maximum(x, 0)


def _where(node, in_types, attrs) -> Kernel:
    dt = node.type.dtype.numpy

    def k_where(c, a, b, out=None):
        if out is None:
            return np.where(c, a, b).astype(dt, copy=False)
        np.copyto(out, b)
        np.copyto(out, a, where=c)
        return out

    return k_where


def _gelu(node, in_types, attrs) -> Kernel:
    return gelu  # explorer.ir's one GELU: the kernel eager runs too


def _gelu_grad(node, in_types, attrs) -> Kernel:
    """``g * gelu'(x)`` with two temporaries (the registry impl holds about six):
    ``gelu'(x) = (1 + t) (0.5 + a (1 - t))``, ``t = tanh(c (x + k x^3))``,
    ``a = 0.5 c x (1 + 3 k x^2)``. ``out`` is never an input (not in ``IN_PLACE``): it
    serves as the third scratch array."""
    shape, dt = node.type.shape, node.type.dtype.numpy.type
    if any(t.shape != shape for t in in_types) or not node.type.dtype.is_float:
        return _generic(node, in_types, attrs)  # broadcasting operands: the registry impl
    c, k, half, one = dt(GELU_C), dt(GELU_K), dt(0.5), dt(1.0)

    def k_gelu_grad(x, g, out=None):
        o = np.empty(shape, dt) if out is None else out
        a = np.multiply(x, x)  # x^2
        t = np.multiply(a, k)
        t += one
        t *= x
        t *= c
        np.tanh(t, out=t)  # t
        a *= dt(3.0) * k
        a += one
        a *= x
        a *= half * c  # a
        np.subtract(one, t, out=o)
        a *= o
        a += half
        t += one
        np.multiply(a, t, out=o)
        o *= g
        return o

    return k_gelu_grad


def _silu(node, in_types, attrs) -> Kernel:
    alloc = _alloc(node.type)

    def k_silu(x, out=None):
        o = alloc() if out is None else out
        np.negative(x, out=o)
        np.exp(o, out=o)
        o += np.float32(1.0)
        np.divide(x, o, out=o)
        return o

    return k_silu


def _matmul(node, in_types, attrs) -> Kernel:
    return lambda a, b, out=None: np.matmul(a, b, out=out) if out is not None else a @ b


def _einsum(node, in_types, attrs) -> Kernel:
    """The matmul plan eager's einsum uses too (``explorer.ir.contraction``); more operands
    get numpy's path, computed once here instead of at every call."""
    eq = attrs["eq"]
    if len(in_types) == 2:
        fast = _matmul_2d(eq, in_types[0].shape, in_types[1].shape, node.type.shape)
        if fast is not None:
            return fast
        fast = einsum_as_matmul(eq, in_types[0].shape, in_types[1].shape)
        if fast is not None:
            return fast
    dummies = [np.empty(s.shape, np.float32) for s in in_types]
    path = np.einsum_path(eq, *dummies, optimize="greedy")[0]
    return lambda *xs, out=None: np.einsum(eq, *xs, optimize=path, out=out)


def _matmul_2d(eq: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
               out_shape: tuple[int, ...]) -> Kernel | None:  # fmt: skip
    """A two-operand einsum without batch letters whose output is (left free letters, right
    free letters) in order, as one 2-D BLAS matmul of views (``x @ W.T`` of a Linear layer:
    ``"ca,ba->cb"``); None for any other form. The general plan (`einsum_as_matmul`) runs
    a batched 3-D matmul with a batch of one, and transposes and reshapes every operand at
    every call: 3.8 us against 3.15 us for a (1, 128) x (128, 128) Linear layer (measured)."""
    lhs, res = eq.replace(" ", "").split("->")
    sa, sb = lhs.split(",")
    if ("." in eq or len(set(sa)) != len(sa) or len(set(sb)) != len(sb)
            or len(sa) != len(a_shape) or len(sb) != len(b_shape)):  # fmt: skip
        return None
    contr = [c for c in sa if c in sb and c not in res]
    lfree = [c for c in sa if c not in sb]
    rfree = [c for c in sb if c not in sa]
    if [c for c in sa if c in sb and c in res] or "".join(lfree + rfree) != res:
        return None
    size = dict(zip(sa, a_shape, strict=True)) | dict(zip(sb, b_shape, strict=True))
    pa = tuple(sa.index(c) for c in lfree + contr)
    pb = tuple(sb.index(c) for c in contr + rfree)
    L, K, R = (math.prod(size[c] for c in g) for g in (lfree, contr, rfree))
    ta, tb = pa != tuple(range(len(sa))), pb != tuple(range(len(sb)))
    # a reshape only where an operand or the output has more than one letter per group
    ra, rb = (len(lfree), len(contr)) != (1, 1), (len(contr), len(rfree)) != (1, 1)
    ro = (len(lfree), len(rfree)) != (1, 1)
    shape = tuple(out_shape)

    def k_matmul_2d(a, b, out=None):
        if ta:
            a = a.transpose(pa)
        if tb:
            b = b.transpose(pb)
        if ra:
            a = a.reshape(L, K)
        if rb:
            b = b.reshape(K, R)
        if out is None:
            r = np.matmul(a, b)
            return r.reshape(shape) if ro else r
        np.matmul(a, b, out=out.reshape(L, R) if ro else out)
        return out

    return k_matmul_2d


def causal_blocks(rows: int, keys: int, offset: int, block: int) -> list[tuple[int, int, int]]:
    """``(first row, end row, keys seen)`` per block of query rows: row ``r`` sees keys
    ``0 .. r + offset`` (causal)."""
    return [(r0, min(rows, r0 + block), min(keys, min(rows, r0 + block) + offset))
            for r0 in range(0, rows, block)]  # fmt: skip


def _causal_attention(node, in_types, attrs) -> Kernel:
    """Causal attention by blocks of query rows (``passes/causal_attention.py``): per
    block, the scores against the keys it sees into one scratch buffer, masked, softmaxed in
    place, then multiplied by those keys' values into the block's rows. The scale multiplies
    the block's queries (rows x head dim, a small scratch) rather than its scores, and the
    mask is written only over the keys some row of the block may not see (the diagonal
    tile), and the softmax's division by the row sums divides the block's output rows (head
    dim wide) after the second matmul instead of its scores (keys wide): three passes over
    the scores fewer."""
    bsz, heads, rows, d = in_types[0].shape
    keys = in_types[1].shape[3]
    dt = node.type.dtype.numpy.type
    alloc = _alloc(node.type)
    scale, offset, block = dt(attrs["scale"]), attrs["offset"], attrs["block"]
    scratch = np.empty((bsz, heads, block, keys), dt)
    peak = np.empty((bsz, heads, block, 1), dt)
    qs = np.empty((bsz, heads, block, d), dt)
    plan = []
    for r0, r1, seen in causal_blocks(rows, keys, offset, block):
        s = scratch[:, :, : r1 - r0, :seen]
        first = max(0, min(seen, r0 + offset + 1))  # keys 0 .. first - 1: every row sees them
        drop = np.arange(first, seen)[None, :] > (np.arange(r0, r1)[:, None] + offset)
        tile = (s[..., first:], drop) if drop.any() else None
        plan.append((r0, r1, seen, s, peak[:, :, : r1 - r0], qs[:, :, : r1 - r0], tile))
    ninf = dt(-np.inf)

    def k_causal_attention(q, kt, v, out=None):
        o = alloc() if out is None else out
        for r0, r1, seen, s, m, qb, tile in plan:
            np.multiply(q[:, :, r0:r1], scale, out=qb)
            np.matmul(qb, kt[..., :seen], out=s)
            if tile is not None:
                np.copyto(tile[0], ninf, where=tile[1])
            np.maximum.reduce(s, axis=-1, keepdims=True, out=m)
            s -= m
            np.exp(s, out=s)
            np.sum(s, axis=-1, keepdims=True, out=m)
            ob = o[:, :, r0:r1]
            np.matmul(s, v[:, :, :seen], out=ob)
            ob /= m
        return o

    return k_causal_attention


def _decode_attention(node, in_types, attrs) -> Kernel:
    """One query row per head against a cache (``passes/decode_attention.py``): the scores
    into a scratch row per head, scaled and masked in place, softmaxed without its division,
    multiplied by the values into ``out``, then ``out`` divided by the row sums (a row of
    the head dim instead of the keys)."""
    bsz, heads, _, _ = in_types[0].shape
    keys = in_types[1].shape[2]
    dt = node.type.dtype.numpy.type
    alloc = _alloc(node.type)
    scale = dt(attrs["scale"])
    s = np.empty((bsz, heads, 1, keys), dt)
    m = np.empty((bsz, heads, 1, 1), dt)

    def k_decode_attention(q, k, v, mask, out=None):
        o = alloc() if out is None else out
        np.matmul(q, k.swapaxes(-1, -2), out=s)
        np.multiply(s, scale, out=s)
        np.add(s, mask, out=s)
        np.maximum.reduce(s, axis=-1, keepdims=True, out=m)
        np.subtract(s, m, out=s)
        np.exp(s, out=s)
        np.sum(s, axis=-1, keepdims=True, out=m)
        np.matmul(s, v, out=o)
        o /= m
        return o

    return k_decode_attention


def _attention_numba(fn, shape: tuple[int, ...], scale: np.float32) -> Kernel:
    """The generated attention kernel (``codegen.source.attention_source``) on 3-D views:
    the query row's axis dropped, the mask as ``(b or 1, h or 1, keys)``."""
    b, h, _, e = shape
    contiguous = np.ascontiguousarray

    def k_attention(q, k, v, mask, out=None):
        o = np.empty(shape, np.float32) if out is None else out
        ms = mask.shape
        fn(contiguous(q.reshape(b, h, q.shape[-1])), contiguous(k), contiguous(v),
           contiguous(mask.reshape(ms[0], ms[1], ms[3])), o.reshape(b, h, e), scale)  # fmt: skip
        return o

    return k_attention


def _softmax(node, in_types, attrs) -> Kernel:
    return _softmax_kernel(node.type, attrs)


def _causal_mask(node, in_types, attrs) -> Kernel:
    t = node.type
    alloc = _alloc(t)
    drop = ~_causal_keep(t.shape, attrs["offset"])
    ninf = np.asarray(-np.inf, t.dtype.numpy)

    def k_mask(x, out=None):
        o = alloc() if out is None else out
        np.copyto(o, x)
        np.copyto(o, ninf, where=drop)
        return o

    return k_mask


def _norm(node, in_types, attrs) -> Kernel:
    return _norm_kernel(node.op, node.type, attrs)


def _reduce(fn) -> Builder:
    def build(node, in_types, attrs) -> Kernel:
        axes = None if attrs["axes"] is None else tuple(attrs["axes"])

        def k_reduce(x, out=None):
            return np.asarray(fn(x, axis=axes, out=out))

        return k_reduce

    return build


def _embedding(node, in_types, attrs) -> Kernel:
    def k(ids, table, out=None):
        # a compiled graph sees new ids at every call: -1 must not wrap to the last row
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            bad = ids[(ids < 0) | (ids >= table.shape[0])]
            raise ShapeError(
                f"embedding: id {int(bad.flat[0])} is outside [0, {table.shape[0]}) "
                f"({bad.size} bad ids); clip or remap the ids before the lookup",
                None,
            )
        # mode="raise" writes a temporary of the output's size then copies it into out
        # (1.5 MB of GPT-2 small's 512-token prefill); the ids are checked above
        return np.take(table, ids, axis=0, out=out, mode="clip")

    return k


def _getitem(node, in_types, attrs) -> Kernel:
    idx = index_tuple(attrs["index"])
    return lambda x, out=None: x[idx]


def _reshape(node, in_types, attrs) -> Kernel:
    shape = tuple(attrs["shape"])
    return lambda x, out=None: x.reshape(shape)


def _transpose(node, in_types, attrs) -> Kernel:
    perm = tuple(attrs["perm"])
    return lambda x, out=None: x.transpose(perm)


def _fused(node, in_types, attrs) -> Kernel:
    return _fused_kernel(node, in_types)


def _generated(node, in_types, attrs) -> Kernel:
    """A generated numba kernel (``explorer.compiler.codegen``): every element (row) is read
    before its output is written, so ``out`` may be an input of the output's shape.

    Not yet compiled in this process and ``compile_mode()`` is ``background``: the kernel is
    handed to the compile worker and, until it is ready, the region's own numpy kernel runs
    (its result copied into ``out``: the norms' numpy kernel is not in-place safe). A kernel
    numba cannot compile keeps the numpy kernel and warns once."""
    src, entry = attrs["source"].text, attrs["entry"]
    if compile_mode() == "sync" or loaded(src) is not None:
        return _numba_kernel(load(src, entry), node, attrs)
    future = load_async(src, entry)
    origin = dataclasses.replace(node, op=attrs["origin"],
                                 attrs=freeze_attrs(dict(attrs["origin_attrs"])))  # fmt: skip
    fallback = make_kernel(origin, in_types)
    ready: list[Kernel] = []  # the numba kernel once the worker has it
    failed: list[BaseException] = []

    def k_pending(*xs, out=None):
        if ready:
            return ready[0](*xs, out=out)
        if future.done() and not failed:
            exc = future.exception()
            if exc is None:
                ready.append(_numba_kernel(future.result(), node, attrs))
                return ready[0](*xs, out=out)
            failed.append(exc)
            warnings.warn(f"%{node.name} runs on numpy: {exc}", RuntimeWarning, stacklevel=2)
        res = fallback(*xs)
        if out is None:
            return res
        np.copyto(out, res)
        return out

    return k_pending


def _numba_kernel(fn, node, attrs) -> Kernel:
    parallel, shape = attrs["parallel"], node.type.shape
    if attrs["origin"] == "fused":
        return elementwise_kernel(fn, parallel, shape, attrs["split"], attrs["kinds"],
                                  node.type.dtype.numpy)  # fmt: skip
    full = opdef.get(attrs["origin"]).full_attrs(dict(attrs["origin_attrs"]))
    if attrs["entry"] == "attention_kernel":
        return _attention_numba(fn, shape, np.float32(full["scale"]))
    if attrs["entry"] == "softmax_kernel":  # scale, mask and eps are the kernel's arguments
        extra = (shape[-2] if len(shape) >= 2 else 1, np.float32(full.get("scale", 1.0)),
                 bool(full.get("causal", False)), int(full.get("offset", 0)))  # fmt: skip
    else:
        extra = (np.float32(full["eps"]),)
    return rows_kernel(fn, parallel, shape, extra)


def _generic(node, in_types, attrs) -> Kernel:
    """An op without a builder: its registry impl with the full attributes (defaults filled
    in: ``slice``'s ``step``), never filling ``out``. A result that may share memory with an
    input is copied: memory planning reuses an input's buffer once the input is dead, and
    only ``ALIASES`` ops are known to keep it alive."""
    impl = opdef.get(node.op).impl
    kw = dict(attrs)

    def k_generic(*xs, out=None):
        res = np.asarray(impl(*xs, **kw))
        if res.base is not None and any(np.may_share_memory(res, x) for x in xs):
            return res.copy()
        return res

    return k_generic


BUILDERS: dict[str, Builder] = {
    **{op: _ufunc(uf) for op, uf in _UFUNC.items()},
    "scale": _scale, "relu": _relu, "where": _where, "fused": _fused, "gelu": _gelu,
    "silu": _silu, "matmul": _matmul, "bmm": _matmul, "einsum": _einsum,
    "softmax": _softmax, "masked_softmax": _softmax, "causal_mask": _causal_mask,
    "layernorm": _norm, "rmsnorm": _norm, "sum": _reduce(np.sum), "mean": _reduce(np.mean),
    "max": _reduce(np.max), "embedding": _embedding, "getitem": _getitem,
    "reshape": _reshape, "transpose": _transpose, "generated": _generated,
    "causal_attention": _causal_attention, "decode_attention": _decode_attention,
    "gelu_grad": _gelu_grad, **IMPORTED_BUILDERS,
}  # fmt: skip
"""op name -> kernel builder (as ``explorer.sharding.kernels.KERNELS``); any other op runs
its registry impl."""


def make_kernel(node: Node, in_types: tuple[TensorType, ...]) -> Kernel:
    """``kernel(*arrays, out=None)``: computes ``node``; fills ``out`` when given."""
    attrs = opdef.get(node.op).full_attrs(dict(node.attrs))
    return BUILDERS.get(node.op, _generic)(node, in_types, attrs)


def _fused_kernel(node: Node, in_types: tuple[TensorType, ...]) -> Kernel:
    import numexpr  # imported by the first large fused kernel only (~0.2 s to import)
    from numexpr.necompiler import getType

    attrs = dict(node.attrs)
    try:
        if node.type.numel <= UFUNC_MAX_NUMEL:
            return compile_expr(attrs["expr"], [t.dtype.numpy for t in in_types],
                                attrs.get("consts", ()), node.type.shape,
                                node.type.dtype.numpy)  # fmt: skip
        blocked = _blocked_ufuncs(node, in_types)
        if blocked is not None:
            return blocked
    except UnsupportedExpr:
        pass
    consts = [np.asarray(c, np.float32) for c in attrs.get("consts", ())]
    sig = [(f"in{i}", getType(np.empty(0, t.dtype.numpy))) for i, t in enumerate(in_types)]
    sig += [(f"k{i}", getType(c)) for i, c in enumerate(consts)]
    prog = numexpr.NumExpr(attrs["expr"], signature=sig)
    shape, dt = node.type.shape, node.type.dtype.numpy
    kw = {"order": "K", "casting": "safe", "ex_uses_vml": False}

    def k_fused(*xs, out=None):
        if out is None:
            out = np.empty(shape, dt)
        return prog(*xs, *consts, out=out, **kw)

    return k_fused


def _blocked_ufuncs(node: Node, in_types: tuple[TensorType, ...]) -> Kernel | None:
    """A large fused kernel as the ufunc program run over blocks of about ``BLOCK_NUMEL``
    elements, cut along the output's first dim that is not 1 (a batch-1 ``(1, 512, 768)``
    is cut along its 512 rows): each block's intermediates stay in cache, where the unfused
    ops (eager) stream every intermediate through memory. None when that dim is too short
    to block (numexpr then runs it)."""
    shape, dt = node.type.shape, node.type.dtype.numpy
    attrs = dict(node.attrs)
    axis = next((i for i, n in enumerate(shape) if n != 1), None)
    if axis is None:
        return None
    row = math.prod(shape[axis + 1 :])
    rows = max(1, BLOCK_NUMEL // max(row, 1))
    if shape[axis] < 2 * rows:
        return None
    dtypes, consts = [t.dtype.numpy for t in in_types], attrs.get("consts", ())
    lead = shape[:axis]
    full = compile_expr(attrs["expr"], dtypes, consts, (*lead, rows, *shape[axis + 1 :]), dt,
                        False)  # fmt: skip
    rest = shape[axis] % rows
    last = (compile_expr(attrs["expr"], dtypes, consts, (*lead, rest, *shape[axis + 1 :]), dt)
            if rest else None)  # fmt: skip
    # inputs spanning the output's blocked dim are cut into blocks (along their own axis,
    # shapes aligned on the right); the others broadcast
    cuts = []
    for t in in_types:
        j = axis - (len(shape) - t.rank)
        cuts.append(j if j >= 0 and t.shape[j] == shape[axis] else None)
    n_full = shape[axis] // rows * rows

    def part(x, j, r0, r1):
        return x if j is None else x[(slice(None),) * j + (slice(r0, r1),)]

    def k_blocked(*xs, out=None):
        if out is None:
            out = np.empty(shape, dt)
        # the block temporaries live for this call only: no memory held between calls
        tmp = [np.empty(s, d) for s, d in full.scratch]
        for r0 in range(0, n_full, rows):
            full(*[part(x, j, r0, r0 + rows) for x, j in zip(xs, cuts, strict=True)],
                 out=part(out, axis, r0, r0 + rows), scratch=tmp)  # fmt: skip
        if last is not None:
            last(*[part(x, j, n_full, None) for x, j in zip(xs, cuts, strict=True)],
                 out=part(out, axis, n_full, None))  # fmt: skip
        return out

    return k_blocked


def _causal_keep(shape: tuple[int, ...], offset: int) -> np.ndarray:
    s, t = shape[-2], shape[-1]
    return np.arange(t)[None, :] <= (np.arange(s)[:, None] + offset)


def _softmax_kernel(t: TensorType, attrs: dict) -> Kernel:
    """Softmax over the last dim, optionally after a scale and a causal mask (the fused
    ``masked_softmax``); the row maxima and sums go to scratch buffers allocated once."""
    alloc = _alloc(t)
    dt = t.dtype.numpy.type
    rows = t.shape[:-1] + (1,)
    peak, total = np.empty(rows, dt), np.empty(rows, dt)
    d, total_flat = t.shape[-1], total.reshape(-1)
    ones = np.ones(d, dt)  # row sums as one BLAS matrix-vector product
    scale = attrs.get("scale", 1.0)
    factor = None if scale == 1.0 else dt(scale)
    drop = ~_causal_keep(t.shape, attrs["offset"]) if attrs.get("causal") else None
    ninf = dt(-np.inf)

    def k_softmax(x, out=None):
        o = alloc() if out is None else out
        if factor is not None:
            np.multiply(x, factor, out=o)
        elif o is not x:
            np.copyto(o, x)
        if drop is not None:
            np.copyto(o, ninf, where=drop)
        np.maximum.reduce(o, axis=-1, keepdims=True, out=peak)
        o -= peak
        np.exp(o, out=o)
        np.matmul(o.reshape(-1, d), ones, out=total_flat)
        o /= total
        return o

    return k_softmax


def _norm_kernel(op: str, t: TensorType, attrs: dict) -> Kernel:
    """Layer norm or RMS norm over the last dim, with row statistics in scratch buffers."""
    alloc = _alloc(t)
    dt = t.dtype.numpy.type
    rows = t.shape[:-1] + (1,)
    mean, var = np.empty(rows, dt), np.empty(rows, dt)
    d = t.shape[-1]
    mean_flat, var_flat = mean.reshape(-1), var.reshape(-1)
    inv_d, eps = dt(1.0 / d), dt(attrs["eps"])
    averager = np.full(d, inv_d, dt)  # row means as one BLAS matrix-vector product
    center = op == "layernorm"

    def k_norm(x, g, b=None, out=None):
        o = alloc() if out is None else out
        if center:
            np.matmul(x.reshape(-1, d), averager, out=mean_flat)
            np.subtract(x, mean, out=o)
        elif o is not x:
            np.copyto(o, x)
        o2 = o.reshape(-1, d)
        np.einsum("ij,ij->i", o2, o2, out=var_flat)  # row sums of squares, no temporary
        np.multiply(var, inv_d, out=var)
        np.add(var, eps, out=var)
        np.sqrt(var, out=var)
        o /= var
        o *= g
        if b is not None:
            o += b
        return o

    return k_norm
