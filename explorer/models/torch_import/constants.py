"""Values that depend on shapes only, computed while tracing.

Hugging Face models build their attention masks and position ids from ``arange``,
``full``, comparisons, ``cumsum`` and fancy indexing of those: ops whose inputs are
constants of the traced program (the shapes are fixed). The importer runs each such
traced op once on the CPU (`Constants.fold`), so a consumer on the data path can see the
value: an added causal mask becomes one ``causal_mask`` op, an added all-zero mask
nothing, a constant index an ``embedding`` of a constant table or a slice. What no
consumer reads any more is dropped (`prune`), so those ops neither cost nor clutter the
graph. Buffers on the meta device (rotary frequencies) have no values: what they feed is
kept as traced.
"""

from __future__ import annotations

from typing import Any

from ...ir.node import Node

__all__ = ["Constants", "MAX_CONSTANT_BYTES", "prune", "causal_kind"]

#: The largest tensor folded at trace time (a bool causal mask of batch 2 at 8k tokens is
#: 128 MiB); a bigger one is kept as traced ops.
MAX_CONSTANT_BYTES = 256 * 2**20

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

    if not _is_tensor(mask) or not mask.dtype.is_floating_point or len(shape) < 2:
        return None
    try:
        if tuple(torch.broadcast_shapes(tuple(mask.shape), shape)) != tuple(shape):
            return None
    except RuntimeError:
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
