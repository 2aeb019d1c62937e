"""Ops of the tensor framework (``explorer.compiler``): constants, comparisons, ``where``,
math, movement by index, backward ops, fused kernels and the control-flow nodes.

The planner's ops live in ``ops.py`` and are left as they are; this module only adds.
``cond`` and ``loop`` hold their bodies as ``Subgraph`` attributes (an ``explorer.ir.Graph``
with a short printed form); ``run_graph`` is the reference interpreter they use.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from . import signature as sigmod
from .activations import GELU_C, GELU_K, gelu_grad
from .dtype import DType
from .errors import IRError
from .graph import Graph
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__ = [
    "Const", "Subgraph", "run_graph", "index_tuple", "GELU_C", "GELU_K", "dtype_of_array",
]  # fmt: skip

_LETTERS = string.ascii_lowercase


def dtype_of_array(a: np.ndarray) -> DType:
    """The IR dtype of a numpy array (float64 is executed as fp32)."""
    kind = a.dtype
    if kind == np.bool_:
        return DType.BOOL
    if kind == np.int32:
        return DType.INT32
    if np.issubdtype(kind, np.integer):
        return DType.INT64
    return DType.FP32


@dataclass(frozen=True, eq=False)
class Const:
    """A constant value held in a node attribute; compares and hashes by content."""

    array: np.ndarray

    def _key(self):
        return (self.array.dtype.str, self.array.shape, self.array.tobytes())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: Const) -> bool:  # sortable so attrs stay deterministic
        return self._key() < other._key()

    def __str__(self) -> str:
        if self.array.ndim == 0:
            return (
                f"{self.array.item():g}" if self.array.dtype.kind == "f" else str(self.array.item())
            )
        return f"<{dtype_of_array(self.array).value}{list(self.array.shape)}>"

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class Subgraph:
    """A body graph held in a node attribute (``cond`` branches, ``loop`` cond and body)."""

    graph: Graph

    def __str__(self) -> str:
        return f"<graph {self.graph.name}: {len(self.graph.ops)} ops>"

    __repr__ = __str__

    def __lt__(self, other: Subgraph) -> bool:
        return id(self) < id(other)


def run_graph(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Reference interpreter: execute every node with its numpy impl (no buffers, no fusion)."""
    out = graph.run(feeds)
    return [out[o] for o in graph.outputs]


# --- constants ----------------------------------------------------------------------------


def _const_impl(value):
    return value.array


register(OpDef("constant", OpGroup.SOURCE, "->", 0, 0, _const_impl, attrs={"value": REQUIRED},
               shape_rule=lambda i, a: a["value"].array.shape,
               dtype_rule=lambda i, a: dtype_of_array(a["value"].array),
               doc="a value frozen into the graph"))  # fmt: skip

# --- elementwise --------------------------------------------------------------------------


def _bool(in_types, attrs) -> DType:
    return DType.BOOL


def _first_float(in_types, attrs) -> DType:
    for t in in_types:
        if t.dtype.is_float:
            return t.dtype
    return in_types[0].dtype


_UNARY = {"neg": np.negative, "log": np.log, "sqrt": np.sqrt, "abs": np.abs,
          "logical_not": np.logical_not}  # fmt: skip
for _name, _fn in _UNARY.items():
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...->...", 1, 1, _fn, doc=f"elementwise {_name}"))

_BINARY = {"pow": np.power, "maximum": np.maximum, "minimum": np.minimum}
for _name, _fn in _BINARY.items():
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...,...->...", 2, 1, _fn,
                   dtype_rule=_first_float, doc=f"broadcasting {_name}"))  # fmt: skip

COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}  # fmt: skip
for _name, _fn in COMPARE.items():
    register(OpDef(_name, OpGroup.ELEMENTWISE, "...,...->...", 2, 1, _fn, dtype_rule=_bool,
                   doc=f"broadcasting comparison {_name} (bool result)"))  # fmt: skip


def _where(c, a, b):
    return np.where(c, a, b)


register(OpDef("where", OpGroup.ELEMENTWISE, "...,...,...->...", 3, 1, _where,
               dtype_rule=lambda i, a: _first_float(i[1:], a),
               doc="select a where the condition holds, else b"))  # fmt: skip


def _silu_grad(x, g):
    s = 1.0 / (1.0 + np.exp(-x))
    return (g * (s * (1 + x * (1 - s)))).astype(x.dtype)


def _causal_keep(shape, offset):
    s, t = shape[-2], shape[-1]
    return np.arange(t)[None, :] <= (np.arange(s)[:, None] + offset)


def _causal_mask_grad(g, offset=0):
    return np.where(_causal_keep(g.shape, offset), g, 0).astype(g.dtype)


register(OpDef("gelu_grad", OpGroup.ELEMENTWISE, "...,...->...", 2, 14, gelu_grad,
               doc="d gelu(x) * g"))  # fmt: skip
register(OpDef("silu_grad", OpGroup.ELEMENTWISE, "...,...->...", 2, 6, _silu_grad,
               doc="d silu(x) * g"))  # fmt: skip
register(OpDef("causal_mask_grad", OpGroup.ELEMENTWISE, "...->...", 1, 1, _causal_mask_grad,
               attrs={"offset": 0}, doc="zero the gradient above the diagonal"))  # fmt: skip


def _fused_sig(in_types, attrs):
    return sigmod.expand(",".join(["..."] * len(in_types)) + "->...", in_types)


def _fused_impl(*arrays, expr, consts, **_):
    import numexpr

    local = {f"in{i}": a for i, a in enumerate(arrays)}
    local.update({f"k{i}": np.asarray(c, np.float32) for i, c in enumerate(consts)})
    return numexpr.evaluate(expr, local_dict=local)


register(OpDef("fused", OpGroup.ELEMENTWISE, None, None, 1, _fused_impl,
               attrs={"expr": REQUIRED, "consts": (), "ops": (), "members": (),
                      "dtype": "fp32", "flops": 0},
               signature_rule=_fused_sig, dtype_rule=lambda i, a: DType.parse(a["dtype"]),
               flops_rule=lambda i, o, a: a["flops"],
               doc="one-pass kernel (numexpr) for a chain of elementwise ops"))  # fmt: skip

# --- reductions and their backward ops -----------------------------------------------------


def _norm_axes(axes, rank):
    if axes is None:
        return tuple(range(rank))
    axes = axes if isinstance(axes, tuple | list) else (axes,)
    out = tuple(sorted(a % rank for a in axes)) if rank else ()
    if len(set(out)) != len(out):
        raise IRError(f"reduction axes {axes} repeat a dim for rank {rank}")
    return out


def _reduce_sig(in_types, attrs):
    rank = in_types[0].rank
    axes = _norm_axes(attrs["axes"], rank)
    spec = _LETTERS[:rank]
    return f"{spec}->" + "".join(c for i, c in enumerate(spec) if i not in axes)


register(OpDef("max", OpGroup.REDUCE, None, 1, 1,
               lambda x, axes=None: np.max(x, axis=None if axes is None else tuple(axes)),
               attrs={"axes": None}, signature_rule=_reduce_sig,
               doc="max over the given axes (all when None)"))  # fmt: skip


def _softmax_grad(y, g):
    return (y * (g - np.sum(g * y, axis=-1, keepdims=True))).astype(y.dtype)


def _layernorm_grad(x, gamma, gy, wrt=0, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * inv
    lead = tuple(range(x.ndim - 1))
    if wrt == 1:
        return np.sum(gy * xhat, axis=lead).astype(x.dtype)
    if wrt == 2:
        return np.sum(gy, axis=lead).astype(x.dtype)
    d = gy * gamma
    dx = inv * (d - d.mean(-1, keepdims=True) - xhat * (d * xhat).mean(-1, keepdims=True))
    return dx.astype(x.dtype)


def _rmsnorm_grad(x, gamma, gy, wrt=0, eps=1e-6):
    r = 1.0 / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    if wrt == 1:
        return np.sum(gy * x * r, axis=tuple(range(x.ndim - 1))).astype(x.dtype)
    d = gy * gamma
    return (r * (d - x * r * r * (d * x).mean(-1, keepdims=True))).astype(x.dtype)


def _norm_grad_shape(in_types, attrs):
    return in_types[1].shape if attrs["wrt"] else in_types[0].shape


def _cross_entropy_grad(logits, labels, g):
    m = logits.max(axis=-1, keepdims=True)
    e = np.exp(logits - m)
    p = e / e.sum(axis=-1, keepdims=True)
    np.put_along_axis(
        p,
        labels[..., None].astype(np.int64),
        np.take_along_axis(p, labels[..., None].astype(np.int64), -1) - 1,
        -1,
    )
    return (p * g[..., None]).astype(logits.dtype)


def _embedding_grad(ids, g, vocab):
    out = np.zeros((vocab, g.shape[-1]), dtype=g.dtype)
    np.add.at(out, ids.reshape(-1), g.reshape(-1, g.shape[-1]))
    return out


register(OpDef("softmax_grad", OpGroup.REDUCE, "...d,...d->...d", 2, 4, _softmax_grad,
               doc="backward of softmax over the last dim, from its output"))  # fmt: skip
register(OpDef("layernorm_grad", OpGroup.REDUCE, "...d,d,...d->...d", 3, 12, _layernorm_grad,
               attrs={"wrt": 0, "eps": 1e-5}, shape_rule=_norm_grad_shape,
               flops_rule=lambda i, o, a: 12 * i[0].numel,
               doc="backward of layernorm for input wrt (0 x, 1 gain, 2 bias)"))  # fmt: skip
register(OpDef("rmsnorm_grad", OpGroup.REDUCE, "...d,d,...d->...d", 3, 8, _rmsnorm_grad,
               attrs={"wrt": 0, "eps": 1e-6}, shape_rule=_norm_grad_shape,
               flops_rule=lambda i, o, a: 8 * i[0].numel,
               doc="backward of rmsnorm for input wrt (0 x, 1 gain)"))  # fmt: skip
register(OpDef("cross_entropy_grad", OpGroup.REDUCE, "...v,...,...->...v", 3, 5,
               _cross_entropy_grad, dtype_rule=lambda i, a: i[0].dtype,
               doc="softmax(logits) - onehot(labels), times the incoming gradient"))  # fmt: skip
register(OpDef("embedding_grad", OpGroup.MOVEMENT, "...,...h->vh", 2, 0, _embedding_grad,
               attrs={"vocab": REQUIRED}, dtype_rule=lambda i, a: i[1].dtype,
               shape_rule=lambda i, a: (a["vocab"], i[1].shape[-1]),
               doc="scatter-add of row gradients into a [vocab, hidden] table"))  # fmt: skip

# --- movement -----------------------------------------------------------------------------


def _broadcast_sig(in_types, attrs):
    src, dst = in_types[0].shape, tuple(attrs["shape"])
    if len(src) > len(dst):
        raise IRError(f"cannot broadcast {src} to the lower-rank {dst}")
    pool = iter(string.ascii_letters)
    out = [next(pool) for _ in dst]
    lhs = []
    for k, d in enumerate(src):
        j = len(dst) - len(src) + k
        if d == dst[j]:
            lhs.append(out[j])
        elif d == 1:
            lhs.append(next(pool))
        else:
            raise IRError(f"cannot broadcast {src} to {dst}: dim {k} is {d}")
    return "".join(lhs) + "->" + "".join(out)


register(OpDef("broadcast_to", OpGroup.MOVEMENT, None, 1, 0,
               lambda x, shape: np.broadcast_to(x, shape), attrs={"shape": REQUIRED},
               signature_rule=_broadcast_sig, shape_rule=lambda i, a: tuple(a["shape"]),
               doc="repeat size-1 (or missing) leading dims"))  # fmt: skip


def index_tuple(index) -> tuple:
    """The numpy index of a ``getitem`` attribute: ints and (start, stop, step) slices."""
    return tuple(e if isinstance(e, int) else slice(*e) for e in index)


def _getitem_shape(in_types, attrs):
    return np.empty(in_types[0].shape, dtype=np.bool_)[index_tuple(attrs["index"])].shape


def _getitem_sig(in_types, attrs):
    rank = in_types[0].rank
    spec = _LETTERS[:rank]
    index = tuple(attrs["index"]) + ((0, None, 1),) * (rank - len(attrs["index"]))
    shape = _getitem_shape(in_types, attrs)
    out, j = "", 0
    for k, e in enumerate(index):
        if isinstance(e, int):
            continue
        out += spec[k] if shape[j] == in_types[0].shape[k] else _LETTERS[rank + j]
        j += 1
    return f"{spec}->{out}"


def _getitem_grad(g, shape, index):
    out = np.zeros(shape, dtype=g.dtype)
    out[index_tuple(index)] = g
    return out


register(OpDef("getitem", OpGroup.MOVEMENT, None, 1, 0,
               lambda x, index: x[index_tuple(index)], attrs={"index": REQUIRED},
               signature_rule=_getitem_sig, shape_rule=_getitem_shape,
               doc="basic indexing by ints and slices"))  # fmt: skip
register(OpDef("getitem_grad", OpGroup.MOVEMENT, None, 1, 0, _getitem_grad,
               attrs={"shape": REQUIRED, "index": REQUIRED},
               signature_rule=lambda i, a: _LETTERS[: i[0].rank] + "->" + string.ascii_uppercase[
                   : len(a["shape"])],
               shape_rule=lambda i, a: tuple(a["shape"]),
               doc="scatter a slice's gradient into zeros of the source shape"))  # fmt: skip

# --- control flow -------------------------------------------------------------------------


def _by_size_sig(in_types, out_shape) -> str:
    """A signature whose letters stand for dim sizes (one letter per distinct size)."""
    letters: dict[int, str] = {}
    pool = iter(string.ascii_letters)

    def spec(shape):
        s = ""
        for d in shape:
            if d not in letters:
                letters[d] = next(pool)
            s += letters[d]
        return s

    return ",".join(spec(t.shape) for t in in_types) + "->" + spec(out_shape)


def _cond_out(attrs):
    g = attrs["then_"].graph
    return g.node(g.outputs[attrs["index"]]).type


def _cond_impl(pred, *args, then_, else_, then_args, else_args, index, group):
    if bool(np.asarray(pred)):
        body, picks = then_.graph, then_args
    else:
        body, picks = else_.graph, else_args
    feeds = {n.name: args[k] for n, k in zip(body.inputs, picks, strict=True)}
    return run_graph(body, feeds)[index]


register(OpDef("cond", OpGroup.MOVEMENT, None, None, 0, _cond_impl,
               attrs={"then_": REQUIRED, "else_": REQUIRED, "then_args": REQUIRED,
                      "else_args": REQUIRED, "index": 0, "group": ""},
               signature_rule=lambda i, a: _by_size_sig(i, _cond_out(a).shape),
               shape_rule=lambda i, a: _cond_out(a).shape,
               dtype_rule=lambda i, a: _cond_out(a).dtype,
               flops_rule=lambda i, o, a: max(a["then_"].graph.flops(), a["else_"].graph.flops()),
               doc="if on a tensor: run one of two subgraphs; output `index` of the taken one"))  # fmt: skip


def _loop_out(attrs, in_types):
    return in_types[attrs["index"]]


def loop_run(args, cond, body, n_state, cond_args, body_args, max_iter):
    """Run a ``loop`` node: returns the final state (all loop-carried values)."""
    state = list(args[:n_state])
    cg, bg = cond.graph, body.graph
    for _ in range(max_iter):
        full = state + list(args[n_state:])
        feeds = {n.name: full[k] for n, k in zip(cg.inputs, cond_args, strict=True)}
        if not bool(np.asarray(run_graph(cg, feeds)[0])):
            return state
        feeds = {n.name: full[k] for n, k in zip(bg.inputs, body_args, strict=True)}
        state = run_graph(bg, feeds)
    raise IRError(f"loop ran past max_iter={max_iter}; raise max_iter or check the condition")


def _loop_impl(*args, cond, body, n_state, cond_args, body_args, index, group, max_iter):
    return loop_run(args, cond, body, n_state, cond_args, body_args, max_iter)[index]


register(OpDef("loop", OpGroup.MOVEMENT, None, None, 0, _loop_impl,
               attrs={"cond": REQUIRED, "body": REQUIRED, "n_state": REQUIRED,
                      "cond_args": REQUIRED, "body_args": REQUIRED, "index": 0, "group": "",
                      "max_iter": 1_000_000},
               signature_rule=lambda i, a: _by_size_sig(i, i[a["index"]].shape),
               shape_rule=lambda i, a: i[a["index"]].shape,
               dtype_rule=lambda i, a: i[a["index"]].dtype,
               flops_rule=lambda i, o, a: a["body"].graph.flops() + a["cond"].graph.flops(),
               doc="while on a tensor: state -> body(state) while cond(state); FLOPs per "
                   "iteration"))  # fmt: skip
