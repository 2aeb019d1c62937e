"""Leaf modules: a module class whose whole forward a handler emits as IR nodes.

Tracing sees a leaf as one call of the custom op ``explorer_import::leaf`` taking the
module's tensor inputs and then its parameters (so torch.export still lifts and names
them); the converter hands that call to the class's `LeafHandler`, which emits the IR for
the whole module (e.g. a first-class MoE or MLA op) in the module's scope. Modules whose
PyTorch forward cannot be traced on the meta device (data-dependent expert loops) can be
imported this way.

>>> from explorer.models.torch_import import LeafHandler, register_leaf
>>> def emit(call):  # a module that doubles its input
...     return (call.cx.op("scale", call.inputs[0], factor=2.0),)
>>> register_leaf("Doubler", LeafHandler(emit, name="doubler"))
>>> unregister_leaf("Doubler")
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .convert import Context, Ref, handler
from .report import TorchImportError

__all__ = ["LeafHandler", "LeafCall", "LEAF_HANDLERS", "register_leaf", "unregister_leaf"]


@dataclass(frozen=True)
class LeafCall:
    """What a leaf handler gets: the conversion context (``cx.op(...)`` emits nodes in the
    module's scope), the module, its path, its tensor inputs and parameters (by the name
    inside the module, e.g. ``"gate.weight"``), as IR values."""

    cx: Context
    module: Any
    path: str
    inputs: tuple[Ref, ...]
    params: Mapping[str, Ref]


@dataclass(frozen=True)
class LeafHandler:
    """How to emit one module class.

    Args:
        emit: ``emit(call: LeafCall) -> tuple[Ref, ...]``, one IR value per output.
        outputs: ``outputs(module, inputs) -> [(shape, torch dtype), ...]`` for the fake
            tensors tracing needs; default: one output shaped like the first input.
        pack: ``pack(outputs) -> what the module's forward returns`` (default: the single
            output, or the tuple).
        name: shown in the import report.
    """

    emit: Callable[[LeafCall], tuple[Ref, ...]]
    outputs: Callable[[Any, tuple[Any, ...]], list[tuple[tuple[int, ...], Any]]] | None = None
    pack: Callable[[list[Any]], Any] | None = None
    name: str = "leaf"


#: module class name -> handler. Edit through register_leaf / unregister_leaf.
LEAF_HANDLERS: dict[str, LeafHandler] = {}
_LOCK = threading.Lock()
_ACTIVE: dict[int, tuple[Any, LeafHandler, str, int, tuple[str, ...]]] = {}
_IDS = itertools.count()


def register_leaf(class_name: str, h: LeafHandler) -> None:
    """Emit every module of class ``class_name`` (``type(m).__name__``) with ``h``."""
    if not isinstance(h, LeafHandler):
        raise TorchImportError(f"register_leaf({class_name!r}, {h!r}): expected a LeafHandler")
    with _LOCK:
        LEAF_HANDLERS[class_name] = h


def unregister_leaf(class_name: str) -> None:
    with _LOCK:
        LEAF_HANDLERS.pop(class_name, None)


_OP = None


def _leaf_op():
    """The custom op ``explorer_import::leaf(Tensor[] xs, int key) -> Tensor[]``."""
    global _OP
    with _LOCK:
        if _OP is not None:
            return _OP
        import torch

        def leaf(xs, key):
            raise TorchImportError("explorer_import::leaf only runs while tracing")

        op = torch.library.custom_op("explorer_import::leaf", leaf, mutates_args=(),
                                     schema="(Tensor[] xs, int key) -> Tensor[]")  # fmt: skip

        @op.register_fake
        def _(xs, key):
            with _LOCK:
                module, h, _path, n_in, _names = _ACTIVE[key]
            specs = h.outputs(module, tuple(xs[:n_in])) if h.outputs else None
            if specs is None:
                return [xs[0].new_empty(xs[0].shape)]
            return [xs[0].new_empty(tuple(s), dtype=dt) for s, dt in specs]

        _OP = torch.ops.explorer_import.leaf.default
        return _OP


@contextmanager
def leaves_patched(
    model: Any, handlers: Mapping[str, LeafHandler],
    builtin: Callable[[Any], LeafHandler | None] | None = None,
) -> Iterator[list[str]]:  # fmt: skip
    """Replace the forward of every module whose class has a handler (or that ``builtin``
    recognises) by one leaf call; yields the patched paths and restores them on exit."""
    import torch

    patched, keys = [], []
    try:
        for path, mod in model.named_modules():
            h = handlers.get(type(mod).__name__)
            if h is None and builtin is not None and path:
                h = builtin(mod)
            if h is None or any(path.startswith(p + ".") for p in patched):
                continue
            op = _leaf_op()
            key = next(_IDS)
            names = tuple(n for n, _ in mod.named_parameters())

            def forward(*args, _mod=mod, _h=h, _key=key, _names=names, _op=op, **kwargs):
                # tensors, and the tensors of tuple arguments (rotary (cos, sin) tables)
                flat = [t for v in list(args) + list(kwargs.values())
                        for t in (v if isinstance(v, tuple | list) else (v,))
                        if isinstance(t, torch.Tensor)]  # fmt: skip
                params = [p for _, p in _mod.named_parameters()]
                with _LOCK:
                    _ACTIVE[_key] = (_mod, _h, _ACTIVE[_key][2], len(flat), _names)
                outs = _op(flat + params, _key)
                if _h.pack is not None:
                    return _h.pack(outs)
                return outs[0] if len(outs) == 1 else tuple(outs)

            with _LOCK:
                _ACTIVE[key] = (mod, h, path, 0, names)
            keys.append(key)
            mod.forward = forward
            patched.append(path)
        yield patched
    finally:
        for path in patched:
            mod = model.get_submodule(path)
            if "forward" in mod.__dict__:
                del mod.forward
        with _LOCK:
            for k in keys:
                _ACTIVE.pop(k, None)


@handler("explorer_import.leaf")
def _leaf(cx: Context, node, a):
    key = a["key"]
    with _LOCK:
        if key not in _ACTIVE:
            raise TorchImportError(f"leaf call {key} has no active module; trace again")
        module, h, path, n_in, names = _ACTIVE[key]
    xs = a["xs"]
    cx.scope = path
    call = LeafCall(cx, module, path, tuple(xs[:n_in]), dict(zip(names, xs[n_in:], strict=True)))
    outs = tuple(h.emit(call))
    cx.leaves.append((path, h.name))
    return outs if isinstance(node.meta.get("val"), list | tuple) else outs[0]
