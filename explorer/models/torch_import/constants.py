"""Values that depend on shapes only, computed while tracing.

Hugging Face models build their attention masks and position ids from ``arange``,
``full``, comparisons, ``cumsum`` and fancy indexing of those: ops whose inputs are
constants of the traced program (the shapes are fixed). The importer runs each such
traced op once on the CPU (`Constants.fold`), so a consumer on the data path can see the
value: an added causal mask becomes one ``causal_mask`` op, a sliding-window one
(Gemma 2, Gemma 3) one ``window_mask`` op, an added all-zero mask nothing, a constant
index a slice, or a ``constant`` op holding it (T5's relative-position buckets feeding
the bias ``embedding``: `constant_node`). What no
consumer reads any more is dropped (`prune`), so those ops neither cost nor clutter the
graph. Buffers on the meta device (rotary frequencies) have no values: what they feed is
kept as traced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...ir import TensorType
from ...ir.node import Node
from ...ir.ops_tensor import Const
from .report import TorchImportError

__all__ = [
    "Constants",
    "MAX_CONSTANT_BYTES",
    "MAX_GRAPH_CONSTANT_BYTES",
    "constant_node",
    "prune",
    "causal_kind",
    "sliding_window",
    "list_picks_as_slices",
]

#: The largest tensor folded at trace time (a bool causal mask of batch 2 at 8k tokens is
#: 128 MiB); a bigger one is kept as traced ops.
MAX_CONSTANT_BYTES = 256 * 2**20

#: The largest folded value held in the graph as a ``constant`` op (`constant_node`: T5's
#: int64 bucket table is 32 MiB at 2048 tokens); a bigger one is kept as traced ops, so the
#: graph stays small to keep, copy and hash.
MAX_GRAPH_CONSTANT_BYTES = 32 * 2**20

# Ops whose result is not a function of their inputs (uninitialised memory, randomness).
_NOT_PURE = ("empty", "rand", "normal", "bernoulli", "uniform", "dropout", "multinomial")


class Constants:
    """fx node name -> its value (a CPU tensor, or a tuple of them) when computable."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = MAX_CONSTANT_BYTES if max_bytes is None else max_bytes
        self.values: dict[str, Any] = {}

    def bind(self, name: str, value: Any) -> None:
        """A placeholder with a known value (a lifted constant tensor not on meta)."""
        if _is_tensor(value) and value.device.type != "meta" and self._small(value):
            self.values[name] = value.detach().cpu()

    def fold(self, node: Any) -> Any:
        """The value of ``node`` when every tensor it reads is known (else None)."""
        import operator

        import torch

        target = node.target
        if node.op != "call_function":
            return None
        name = str(target)
        if any(w in name for w in _NOT_PURE):
            return None
        ok = True

        def value(x):
            nonlocal ok
            if hasattr(x, "op") and hasattr(x, "meta"):
                if x.name not in self.values:
                    ok = False
                    return None
                return self.values[x.name]
            if isinstance(x, list | tuple):
                return type(x)(value(v) for v in x)
            if isinstance(x, torch.device):
                return torch.device("cpu")
            return x

        if not _all_small(node.meta.get("val"), self):  # decided before computing anything
            return None
        args = value(node.args)
        kwargs = {k: value(v) for k, v in node.kwargs.items()}
        if not ok:
            return None
        if "device" in kwargs:
            kwargs["device"] = torch.device("cpu")
        if _in_place(target):  # a stored value is read by other ops too: never mutate it
            args = _cloned(args)
        try:
            with torch.no_grad():
                out = operator.getitem(*args) if target is operator.getitem else target(
                    *args, **kwargs)  # fmt: skip
        except Exception:  # an op torch cannot run on the CPU stays traced
            return None
        if not _all_small(out, self):
            return None
        self.values[node.name] = out
        return out

    def _small(self, t: Any) -> bool:
        return t.numel() * t.element_size() <= self.max_bytes


def constant_node(b: Any, value: Any, t: TensorType, scope: str) -> str:
    """Add to the graph builder ``b`` one ``constant`` op in ``scope`` holding ``value`` (a
    CPU tensor folded at trace time) as an array of type ``t``; returns its name.

    >>> import torch
    >>> from explorer.ir import DType, GraphBuilder
    >>> b = GraphBuilder("demo")
    >>> name = constant_node(b, torch.arange(4), TensorType((4,), DType.INT64), "attn")
    >>> g = b.build([name]); name, g.node(name).type, g.run({})[name]
    ('attn.constant', TensorType(shape=(4,), dtype=<DType.INT64: 'int64'>), array([0, 1, 2, 3]))
    """
    import numpy as np

    array = np.ascontiguousarray(value.detach().cpu().numpy().astype(t.dtype.numpy))
    if tuple(array.shape) != tuple(t.shape):
        raise TorchImportError(
            f"a constant of shape {tuple(array.shape)} stands for a value of type {t}: the "
            "folded value must have the traced shape (an importer bug; please report it)"
        )
    b._scope = [scope] if scope else []
    name = b._name("constant", None)
    return b._add(Node(name, "constant", (), t, (("value", Const(array)),), b.current_scope))


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "device")


def _in_place(target: Any) -> bool:
    """``aten.index_put_``, ``aten.masked_fill_`` and the like (their name ends in _)."""
    packet = getattr(target, "overloadpacket", None)
    return packet is not None and str(packet).endswith("_")


def _cloned(x: Any) -> Any:
    if _is_tensor(x):
        return x.clone()
    if isinstance(x, list | tuple):
        return type(x)(_cloned(v) for v in x)
    return x


def _all_small(out: Any, c: Constants) -> bool:
    if _is_tensor(out):
        return c._small(out)
    if isinstance(out, list | tuple):
        return all(_all_small(o, c) for o in out)
    return isinstance(out, bool | int | float) or out is None


def causal_kind(mask: Any, shape: tuple[int, ...]) -> str | None:
    """What adding the constant ``mask`` to a tensor of ``shape`` does to attention
    scores: ``"zero"`` (nothing: every entry 0), ``"causal"`` (0 where key <= query and
    a value at or below half the dtype's most negative elsewhere, equal over the batch
    and head dims) or None (anything else, kept as traced).

    >>> import torch
    >>> m = torch.full((3, 3), torch.finfo(torch.float32).min).triu(1)
    >>> causal_kind(m, (2, 4, 3, 3)), causal_kind(torch.zeros(1, 3), (2, 3, 3))
    ('causal', 'zero')
    """
    import torch

    if not _float_mask_of(mask, shape):
        return None
    if bool((mask == 0).all()):
        return "zero"
    s, t = shape[-2], shape[-1]
    if s != t or mask.ndim < 2 or tuple(mask.shape[-2:]) != (s, t):
        return None
    keep = torch.ones((s, t), dtype=torch.bool).tril()
    low = mask <= torch.finfo(mask.dtype).min / 2
    if bool(((mask == 0) == keep).all()) and bool((low == ~keep).all()):
        return "causal"
    return None


def _float_mask_of(mask: Any, shape: tuple[int, ...]) -> bool:
    """``mask`` is a floating tensor that broadcasts to the scores' ``shape`` (2-D or more)
    without growing it."""
    import torch

    if not _is_tensor(mask) or not mask.dtype.is_floating_point or len(shape) < 2:
        return False
    try:
        return tuple(torch.broadcast_shapes(tuple(mask.shape), shape)) == tuple(shape)
    except RuntimeError:
        return False


def sliding_window(mask: Any, shape: tuple[int, ...]) -> int | None:
    """The window ``w`` when adding the constant ``mask`` to attention scores of ``shape``
    is sliding-window causal attention (transformers' ``sliding_window_overlay`` with the
    causal mask: 0 where ``query - w < key <= query``, a value at or below half the dtype's
    most negative elsewhere, equal over the batch and head dims), else None. A window that
    covers every key is plain causal (`causal_kind`), not a window.

    >>> import torch
    >>> keep = torch.ones(4, 4, dtype=torch.bool).tril() & ~torch.ones(4, 4).tril(-2).bool()
    >>> m = torch.zeros(4, 4).masked_fill(~keep, torch.finfo(torch.float32).min)
    >>> sliding_window(m, (2, 1, 4, 4)), sliding_window(torch.zeros(4, 4), (4, 4))
    (2, None)
    """
    import torch

    if not _float_mask_of(mask, shape):
        return None
    s, t = shape[-2], shape[-1]
    if s != t or mask.ndim < 2 or tuple(mask.shape[-2:]) != (s, t):
        return None
    zero = mask == 0
    low = mask <= torch.finfo(mask.dtype).min / 2
    if not bool((zero | low).all()):
        return None
    w = int(zero.reshape(-1, s, t)[0, -1].sum())  # the keys the last query sees
    if w >= s:
        return None
    delta = torch.arange(s)[:, None] - torch.arange(t)[None, :]
    want = (delta >= 0) & (delta < w)
    return w if w >= 1 and bool((zero == want).all()) else None


@contextlib.contextmanager
def list_picks_as_slices() -> Iterator[None]:
    """While tracing, ``x[..., [k], ...]`` with a Python list of ints that steps evenly
    (Falcon's key and value heads: ``qkv[..., [-2], :]``) is traced as the equal slice
    ``x[..., k:k + 1, ...]``. Torch turns such a list into an index tensor on ``x``'s
    device: on the meta device its values are gone, so the pick could not be mapped.
    Lists that are not a strided range, or that sit beside another tensor or list index
    (advanced indices broadcast together), are traced as written. The slice is a view
    where torch's pick copies: a forward writing into the pick in place would write into
    ``x``; of the 31 tiny architectures in tests/models only Falcon's four picks are
    rewritten, and its traced graph equals torch. A torch function mode: it applies to
    the calling thread only."""
    from torch.overrides import TorchFunctionMode

    getitem = _getitem()  # every torch call of the trace passes here: looked up once

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is getitem and len(args) == 2:
                index = _as_slices(args[0], args[1])
                if index is not None:
                    args = (args[0], index)
            return func(*args, **(kwargs or {}))

    with _Mode():
        yield


def _getitem() -> Any:
    import torch

    return torch.Tensor.__getitem__


def _as_slices(x: Any, index: Any) -> tuple | None:
    """``index`` with its one list of ints made a slice, or None when it has no such list
    or the list is not an increasing strided range of in-bounds indices."""
    items = index if isinstance(index, tuple) else (index,)
    lists = [k for k, i in enumerate(items) if isinstance(i, list)]
    others = [i for i in items if not isinstance(i, list | slice | int | type(None))
              and i is not Ellipsis]  # fmt: skip
    if len(lists) != 1 or others or any(isinstance(i, bool) for i in items):
        return None
    k = lists[0]
    vals = items[k]
    if not vals or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return None
    consumes = [i is not None and i is not Ellipsis for i in items]
    if Ellipsis in items[:k]:  # the dims after the list are counted from the end
        dim = x.dim() - sum(consumes[k:])
    else:
        dim = sum(consumes[:k])
    if items.count(Ellipsis) > 1 or not 0 <= dim < x.dim():
        return None
    size = int(x.shape[dim])
    if any(not -size <= v < size for v in vals):
        return None
    vals = [v % size for v in vals]
    step = vals[1] - vals[0] if len(vals) > 1 else 1
    if step <= 0 or vals != list(range(vals[0], vals[0] + step * len(vals), step)):
        return None
    return items[:k] + (slice(vals[0], vals[-1] + 1, step),) + items[k + 1 :]


def prune(nodes: list[Node], outputs: list[str]) -> tuple[list[Node], int]:
    """``nodes`` without the ops no output reads (sources stay: parameters are counted
    and inputs fed even when unused); returns them and how many were dropped."""
    by_name = {n.name: n for n in nodes}
    live: set[str] = set()
    stack = list(outputs)
    while stack:  # iterative: a deep graph must not hit the recursion limit
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        stack.extend(by_name[name].inputs)
    kept = [n for n in nodes if n.name in live or n.op in ("param", "input")]
    return kept, len(nodes) - len(kept)
