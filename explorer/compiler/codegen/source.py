"""Python source of generated kernels, compiled by numba (``build``): one module per kernel
that a person can read, with the decorator, the signature and the loops spelled out.

Three kinds of region get a kernel:

- ``fused`` elementwise chains: the numexpr expression becomes straight-line scalar code
  (one SSA line per distinct subexpression) inside a loop nest over the output viewed as
  ``(rows, cols)``; each input is read as a full ``(rows, cols)`` array, a row vector
  ``(1, cols)``, a column ``(rows, 1)`` or a scalar ``(1, 1)`` (``broadcast_split``).
- softmax, optionally scaled and causally masked (``masked_softmax``): one row per
  iteration, max, exp and sum in one buffer.
- layer norm and RMS norm over the last dim.

Each row is computed into a row buffer the kernel allocated and then stored: the memory
plan may make ``out`` one of the inputs (in place), and LLVM's vectorizer, unable to rule
out that overlap, would otherwise run the scalar loop (8x slower measured for GELU in
place). A serial kernel allocates that buffer once per call, a parallel one once per row
(its threads each need one): one allocation per row cost 53 ns, a third of a 64-wide causal
softmax row (256 rows: 31 -> 28 us; layer norm 64x128: 11 -> 9 us).
``error_model="numpy"``: a division by zero gives inf or NaN as numpy does (numba's default
raises, and its check keeps LLVM from vectorizing the loop: 10x slower measured). Row sums
accumulate in float64 (numpy's fp32 pairwise sums are at least as far from the
exact value as that), every other value stays fp32: constants are spelled
``np.float32(...)`` so that no operation promotes to float64.

>>> src = elementwise_source("k", "(in0 + in1) * k0", ("float32", "float32"), (2.0,),
...                          ("full", "row"), "float32", parallel=False)
>>> print(src.splitlines()[-3])
            row[j] = t1
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

__all__ = ["elementwise_source", "softmax_source", "norm_source", "attention_source",
           "broadcast_split", "UnsupportedRegion", "NUMBA_TYPES"]  # fmt: skip

NUMBA_TYPES = {"float32": "float32", "bool": "boolean"}
_BINOP = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_CALL = {"exp": "exp32", "log": "np.log", "sqrt": "np.sqrt", "abs": "abs", "tanh": "tanh32"}
_NP = {"float32": "float32", "bool": "bool_"}
# how an input of each broadcast kind is read inside the loop nest
_READ = {"full": "{a}[i, j]", "row": "{a}[0, j]", "col": "{a}[i, 0]", "scalar": "{a}[0, 0]"}


class UnsupportedRegion(ValueError):
    """A region this generator does not translate (the numpy path runs it)."""


def broadcast_split(out_shape: tuple[int, ...], in_shapes: Sequence[tuple[int, ...]]
                    ) -> tuple[int, tuple[str, ...]] | None:  # fmt: skip
    """A split ``p`` of the output's dims into rows ``shape[:p]`` and columns ``shape[p:]``
    under which every input is full, a row, a column or a scalar; with the kinds. Prefers
    the split with the most rows that keeps the columns contiguous. None when no split
    works (a broadcast along a middle dim, say ``(a, 1, c)`` into ``(a, b, c)``).

    >>> broadcast_split((4, 8), [(4, 8), (8,), (4, 1), ()])
    (1, ('full', 'row', 'col', 'scalar'))
    """
    nd = len(out_shape)
    candidates = [p for p in range(nd - 1, 0, -1)] + [0, nd] if nd else [0]
    for p in candidates:
        kinds = []
        for s in in_shapes:
            padded = (1,) * (nd - len(s)) + tuple(s)
            lead = padded[:p] == out_shape[:p]
            lead1 = all(d == 1 for d in padded[:p])
            tail = padded[p:] == out_shape[p:]
            tail1 = all(d == 1 for d in padded[p:])
            if lead and tail:
                kinds.append("full")
            elif lead1 and tail:
                kinds.append("row")
            elif lead and tail1:
                kinds.append("col")
            elif lead1 and tail1:
                kinds.append("scalar")
            else:
                break
        else:
            return p, tuple(kinds)
    return None


class _Lines:
    """SSA lines of the loop body; repeated subexpressions computed once."""

    def __init__(self, n_inputs: int, consts: Sequence[float], kinds: Sequence[str]) -> None:
        self.n_inputs, self.n_consts, self.kinds = n_inputs, len(consts), kinds
        self.body: list[str] = []
        self.memo: dict[str, str] = {}
        self.used: set[int] = set()

    def value(self, e: ast.expr) -> str:
        key = ast.dump(e)
        v = self.memo.get(key)
        if v is None:
            v = self._value(e)
            self.memo[key] = v
        return v

    def emit(self, text: str) -> str:
        name = f"t{len(self.body)}"
        self.body.append(f"{name} = {text}")
        return name

    def _value(self, e: ast.expr) -> str:
        if isinstance(e, ast.Name) and e.id[:2] == "in" and e.id[2:].isdigit():
            i = int(e.id[2:])
            if i >= self.n_inputs:
                raise UnsupportedRegion(f"input {e.id} of {self.n_inputs}")
            self.used.add(i)
            return f"x{i}"
        if isinstance(e, ast.Name) and e.id[:1] == "k" and e.id[1:].isdigit():
            if int(e.id[1:]) >= self.n_consts:
                raise UnsupportedRegion(f"constant {e.id} of {self.n_consts}")
            return e.id
        if isinstance(e, ast.Constant) and type(e.value) in (int, float):
            return f"np.float32({float(e.value)!r})"
        if isinstance(e, ast.BinOp) and type(e.op) in _BINOP:
            a, b = self.value(e.left), self.value(e.right)
            return self.emit(f"{a} {_BINOP[type(e.op)]} {b}")
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return self.emit(f"-{self.value(e.operand)}")
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Invert):
            return self.emit(f"not {self.value(e.operand)}")
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _CMP:
            a, b = self.value(e.left), self.value(e.comparators[0])
            return self.emit(f"{a} {_CMP[type(e.ops[0])]} {b}")
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and not e.keywords:
            if e.func.id in _CALL and len(e.args) == 1:
                return self.emit(f"{_CALL[e.func.id]}({self.value(e.args[0])})")
            if e.func.id == "where" and len(e.args) == 3:
                c, a, b = (self.value(x) for x in e.args)
                return self.emit(f"{a} if {c} else {b}")
        raise UnsupportedRegion(ast.unparse(e))


# exp in fp32 that LLVM vectorizes (numba's np.exp calls libm's scalar expf: 8x slower
# than numpy's SIMD exp here). Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, and
# Cephes' degree-6 polynomial of exp(r); 2^n built from exponent bits as two factors so
# that results below the normal range stay right. Measured against float64 exp over
# [-104, 88.7]: relative error 8e-8 on normal results (numpy's fp32 exp: 2e-7); inf above
# ln(FLT_MAX), 0 below, NaN kept. No signature: it is compiled only inlined into a kernel
# that calls it (with one, every module compiled it on import, used or not: the small GPT's
# three kernels took 12.6 s to compile cold with it, 8.5 s without, on a loaded machine).
_EXP32 = """\
@njit(inline="always", cache=True, error_model="numpy")
def exp32(x):
    c = min(max(x, np.float32(-104.0)), np.float32(88.72283))
    n = np.floor(c * np.float32(1.442695) + np.float32(0.5))
    r = c - n * np.float32(0.693359375)
    r = r - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * r * r + r + np.float32(1.0)
    k = np.int32(n)
    h = k // 2
    e = y * np.int32((h + 127) << 23).view(np.float32)
    e = e * np.int32((k - h + 127) << 23).view(np.float32)
    e = np.float32(np.inf) if x > np.float32(88.72283) else e
    return x if x != x else e
"""


# tanh in fp32 that LLVM vectorizes, as exp32 (numba's np.tanh calls libm's scalar tanhf:
# a bias + tanh-GELU over GPT-2 small's (512, 3072) MLP took 8.0 ms in numba against 3.6 ms
# for numpy's blocked SIMD ufuncs, measured under load). Cephes' tanhf: an odd polynomial
# below |x| = 0.625 (no cancellation near 0; written x (1 + s p) so -0.0 stays -0.0), 1 - 2 / (exp(2|x|) + 1) with the
# sign above (1 at inf, NaN kept); both computed and one selected, so the loop stays
# branch-free.
_TANH32 = """\
@njit(inline="always", cache=True, error_model="numpy")
def tanh32(x):
    z = abs(x)
    big = np.float32(1.0) - np.float32(2.0) / (exp32(np.float32(2.0) * z) + np.float32(1.0))
    big = -big if x < np.float32(0.0) else big
    s = x * x
    p = np.float32(-5.70498872745e-3) * s + np.float32(2.06390887954e-2)
    p = p * s - np.float32(5.37397155531e-2)
    p = p * s + np.float32(1.33314422036e-1)
    p = p * s - np.float32(3.33332819422e-1)
    small = x * (np.float32(1.0) + p * s)  # x * (...) keeps -0.0
    return big if z > np.float32(0.625) else small
"""


def _header(parallel: bool, sig: str) -> list[str]:
    return [
        "import numpy as np",
        "from numba import njit, prange",
        "",
        "",
        *_EXP32.splitlines(),
        "",
        "",
        *_TANH32.splitlines(),
        "",
        "",
        f'@njit("{sig}", parallel={parallel}, fastmath=False, error_model="numpy", cache=True,',
        "      nogil=True)",
    ]


def _sig(arg_types: Sequence[str]) -> str:
    return "void(" + ", ".join(f"{NUMBA_TYPES[t]}[:, ::1]" for t in arg_types) + ")"


def elementwise_source(name: str, expr: str, in_dtypes: Sequence[str], consts: Sequence[float],
                       kinds: Sequence[str], out_dtype: str, parallel: bool) -> str:  # fmt: skip
    """A module defining ``name(a0, .., out)`` over 2-D views (``kinds`` say how each input
    broadcasts); ``expr`` is the ``fused`` node's expression."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as e:
        raise UnsupportedRegion(expr) from e
    for t in (*in_dtypes, out_dtype):
        if t not in NUMBA_TYPES:
            raise UnsupportedRegion(f"dtype {t}")
    body = _Lines(len(in_dtypes), consts, kinds)
    root = body.value(tree)
    args = [f"a{i}" for i in range(len(in_dtypes))]
    lines = _header(parallel, _sig([*in_dtypes, out_dtype]))
    lines.append(f"def {name}({', '.join([*args, 'out'])}):")
    lines += [f"    k{i} = np.float32({float(c)!r})" for i, c in enumerate(consts)]
    lines.append("    rows, cols = out.shape")
    used = sorted(body.used)
    for i in used:  # scalars read once, columns once per row, the rest per element
        if kinds[i] == "scalar":
            lines.append(f"    x{i} = a{i}[0, 0]")
    row = f"row = np.empty(cols, np.{_NP[out_dtype]})"
    if not parallel:  # one buffer per call (a thread each needs its own: per row)
        lines.append(f"    {row}")
    lines.append(f"    for i in {'prange' if parallel else 'range'}(rows):")
    for i in used:
        if kinds[i] == "col":
            lines.append(f"        x{i} = a{i}[i, 0]")
    if parallel:
        lines.append(f"        {row}")
    lines.append("        for j in range(cols):")
    for i in used:
        if kinds[i] in ("full", "row"):
            lines.append(f"            x{i} = {_READ[kinds[i]].format(a=f'a{i}')}")
    lines += [f"            {line}" for line in body.body]
    lines.append(f"            row[j] = {root}")
    lines.append("        for j in range(cols):")
    lines.append("            out[i, j] = row[j]")
    return "\n".join(lines) + "\n"


# Row reductions are 4 interleaved partial results (fastmath=False forbids LLVM to reorder
# a sum, so one accumulator is a serial chain of adds): deterministic, and 3-4x faster.
_LANES = 4


def _reduce(acc: str, init: str, step: str, item: str, n: str) -> list[str]:
    """Lines (indented for a row loop) setting ``acc`` to the reduction of ``item`` (a
    format string of ``{j}``) over ``j < n``; ``step`` combines ``{a}`` and ``{v}``."""
    parts = [f"{acc}{k}" for k in range(_LANES)]
    lines = [f"        {p} = {init}" for p in parts]
    lines.append(f"        for j in range(0, {n} - {_LANES - 1}, {_LANES}):")
    for k, p in enumerate(parts):
        v = item.format(j=f"j + {k}" if k else "j")
        lines.append(f"            {p} = {step.format(a=p, v=v)}")
    lines.append(f"        for j in range({n} - {n} % {_LANES}, {n}):")
    lines.append(f"            {parts[0]} = {step.format(a=parts[0], v=item.format(j='j'))}")
    lines.append(f"        {acc} = {parts[0]}")
    for p in parts[1:]:
        lines.append(f"        {acc} = {step.format(a=acc, v=p)}")
    return lines


_MAX = "{v} if ({v} > {a} or {v} != {v}) and {a} == {a} else {a}"  # NaN wins, as numpy's max
_SUM = "{a} + {v}"


def softmax_source(name: str, parallel: bool) -> str:
    """``name(x, out, seq, scale, causal, offset)``: ``softmax(causal_mask(x * scale,
    offset))`` (no mask unless ``causal``) over rows of ``x`` viewed as ``(rows, d)``; row
    ``r`` is query ``r % seq`` of its attention matrix. Scale, mask and offset are arguments,
    so one compiled kernel (and one disk-cache entry) serves every model."""
    lines = _header(
        parallel, _sig(["float32", "float32"])[:-1] + ", int64, float32, boolean, int64)"
    )
    lines += [
        f"def {name}(x, out, seq, scale, causal, offset):",
        "    rows, d = x.shape",
        *([] if parallel else ["    buf = np.empty(d, np.float32)"]),
        f"    for r in {'prange' if parallel else 'range'}(rows):",
        "        n = d  # keys after query + offset are masked: exp(-inf) = 0",
        "        if causal:",
        "            n = min(d, max(0, r % seq + offset + 1))",
    ]
    lines += _reduce("peak", "np.float32(-np.inf)", _MAX, "(x[r, {j}] * scale)", "n")
    lines += [
        "        row = np.empty(n, np.float32)" if parallel else "        row = buf",
        "        for j in range(n):",
        "            row[j] = exp32(x[r, j] * scale - peak)",
    ]
    lines += _reduce("total", "0.0", _SUM, "row[{j}]", "n")
    lines += [
        "        if n == 0:",
        "            total = np.nan  # a fully masked row is 0/0, as unfused",
        "        denom = np.float32(total)",
        "        for j in range(n):",
        "            out[r, j] = row[j] / denom",
        "        for j in range(n, d):",
        "            out[r, j] = np.float32(0.0) if n else np.float32(np.nan)",
    ]
    return "\n".join(lines) + "\n"


def norm_source(name: str, center: bool, parallel: bool) -> str:
    """``name(x, g, [b,] out, eps)``: layer norm (``center``) or RMS norm over rows of ``x``
    viewed as ``(rows, d)``, with ``g`` and ``b`` as ``(1, d)``; ``eps`` is an argument, so
    one compiled kernel serves every model."""
    args = ["x", "g", "b", "out"] if center else ["x", "g", "out"]
    lines = _header(parallel, _sig(["float32"] * len(args))[:-1] + ", float32)")
    lines += [
        f"def {name}({', '.join(args)}, eps):",
        "    rows, d = x.shape",
        *([] if parallel else ["    row = np.empty(d, np.float32)"]),
        f"    for r in {'prange' if parallel else 'range'}(rows):",
    ]
    if parallel:
        lines += ["        row = x[r].copy()"]
    else:
        lines += ["        for j in range(d):", "            row[j] = x[r, j]"]
    if center:
        lines += _reduce("acc", "0.0", _SUM, "row[{j}]", "d")
        lines.append("        mean = np.float32(acc / d)")
        lines += _reduce("acc", "0.0", _SUM, "(row[{j}] - mean) * (row[{j}] - mean)", "d")
        lines += [
            "        inv = np.float32(1.0) / np.sqrt(np.float32(acc / d) + eps)",
            "        for j in range(d):",
            "            out[r, j] = (row[j] - mean) * inv * g[0, j] + b[0, j]",
        ]
    else:
        lines += _reduce("acc", "0.0", _SUM, "row[{j}] * row[{j}]", "d")
        lines += [
            "        inv = np.float32(1.0) / np.sqrt(np.float32(acc / d) + eps)",
            "        for j in range(d):",
            "            out[r, j] = row[j] * inv * g[0, j]",
        ]
    return "\n".join(lines) + "\n"


def attention_source(name: str) -> str:
    """``name(q, k, v, mask, out, scale)``: ``softmax(q kT * scale + mask) v`` for one query
    row per head: ``q`` ``(b, h, d)``, ``k`` ``(b, h, keys, d)``, ``v`` ``(b, h, keys, e)``,
    ``mask`` ``(b or 1, h or 1, keys)``, ``out`` ``(b, h, e)``. Each cached key and value is
    read once; the softmax's division divides the output row (``e`` wide) after the
    weighted sum. The flags let LLVM reorder the dot products' and sums' additions
    (vectorized), never assume away NaN or infinity (a masked key weighs exact 0)."""
    f32 = NUMBA_TYPES["float32"]
    sig = (f"void({f32}[:, :, ::1], {f32}[:, :, :, ::1], {f32}[:, :, :, ::1], "
           f"{f32}[:, :, ::1], {f32}[:, :, ::1], float32)")  # fmt: skip
    lines = _header(False, sig)
    lines[-2] = lines[-2].replace("fastmath=False", 'fastmath={"reassoc", "contract"}')
    lines += [
        f"def {name}(q, k, v, mask, out, scale):",
        "    b, h, d = q.shape",
        "    keys, e = v.shape[2], v.shape[3]",
        "    s = np.empty(keys, np.float32)",
        "    acc = np.empty(e, np.float32)",
        "    for i in range(b):",
        "        mi = i if mask.shape[0] > 1 else 0",
        "        for j in range(h):",
        "            mj = j if mask.shape[1] > 1 else 0",
        "            peak = np.float32(-np.inf)",
        "            for t in range(keys):",
        "                dot = np.float32(0.0)",
        "                for c in range(d):",
        "                    dot += q[i, j, c] * k[i, j, t, c]",
        "                x = dot * scale + mask[mi, mj, t]",
        "                s[t] = x",
        "                if x > peak or x != x:",
        "                    peak = x",
        "            total = np.float32(0.0)",
        "            for t in range(keys):",
        "                w = exp32(s[t] - peak)",
        "                s[t] = w",
        "                total += w",
        "            for c in range(e):",
        "                acc[c] = np.float32(0.0)",
        "            for t in range(keys):",
        "                w = s[t]",
        "                for c in range(e):",
        "                    acc[c] += w * v[i, j, t, c]",
        "            for c in range(e):",
        "                out[i, j, c] = acc[c] / total",
    ]
    return "\n".join(lines) + "\n"
