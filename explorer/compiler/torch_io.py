"""The boundary between a PyTorch callable and a compiled IR program: flat tensor inputs
and outputs, and the module's weights as numpy arrays.

`flat_module` dresses a module so that torch.export sees a forward of tensors only (one
named argument per tensor leaf of the example ``(args, kwargs)``, Python values frozen),
returning the tensor leaves of the module's output; the output's pytree structure (a
transformers ``ModelOutput`` included) is recorded while it traces, so a compiled call
returns what the module returns. The dressed module shares the module's attributes
(parameters, buffers, submodules, config): parameter names and module paths stay the
module's own. `weights` gives every parameter and buffer the traced graph reads as a
numpy array (fused projection blocks ``W[start:stop]`` cut from their weight).
"""

from __future__ import annotations

import inspect
import keyword
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import TorchCompileError

__all__ = ["FlatSignature", "flat_module", "weights", "module_state", "as_array", "PYTHON_LEAVES"]

#: Non-tensor values a traced forward may take or return (frozen at trace time).
PYTHON_LEAVES = (type(None), bool, int, float, str)
_BLOCK = re.compile(r"^(?P<name>.+)\[(?P<start>\d+):(?P<stop>\d+)\]$")


@dataclass
class FlatSignature:
    """How a call's ``(args, kwargs)`` maps to the flat tensors of the traced forward, and
    how its flat tensor outputs map back to the module's output structure.

    ``in_spec``: the pytree spec of the example ``(args, kwargs)``; ``in_leaves``: its
    leaves, None where a tensor goes (``tensor_at`` lists those positions);
    ``names``: the traced argument name of each tensor; ``positional``: every positional
    argument is a tensor and no keyword argument is (a call then needs no flattening);
    ``keywords``: the traced keyword names; ``out_spec`` / ``out_leaves`` /
    ``out_tensor_at`` / ``out_dtypes``: the same for the output (filled while tracing).
    """

    in_spec: Any
    in_leaves: list[Any]
    tensor_at: list[int]
    names: list[str]
    positional: bool = False
    keywords: tuple[str, ...] = ()
    out_spec: Any = None
    out_leaves: list[Any] | None = None
    out_tensor_at: list[int] | None = None
    out_dtypes: list[Any] | None = None


def flat_module(module: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, FlatSignature]:
    """(the dressed module, its flat example tensors, the signature) for ``module(*args,
    **kwargs)``. Raises `TorchCompileError` for an argument that is neither a tensor nor a
    Python constant."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path, tree_leaves

    with_path, in_spec = tree_flatten_with_path((tuple(args), dict(kwargs)))
    leaves: list[Any] = []
    tensor_at: list[int] = []
    names: list[str] = []
    params = _positional_names(module)
    for i, (path, leaf) in enumerate(with_path):
        if isinstance(leaf, torch.Tensor):
            tensor_at.append(i)
            names.append(_leaf_name(path, params, names))
            leaves.append(None)
        elif isinstance(leaf, PYTHON_LEAVES):
            leaves.append(leaf)
        else:
            raise TorchCompileError(
                f"{type(module).__name__}: argument {_path_str(path)} is a "
                f"{type(leaf).__name__}; ex.compile takes tensors, numpy arrays and Python "
                "constants (None, bool, int, float, str): pass the tensors it holds instead"
            )
    positional = all(isinstance(a, torch.Tensor) for a in args) and not any(
        isinstance(v, torch.Tensor) for v in tree_leaves(dict(kwargs))
    )
    sig = FlatSignature(in_spec, leaves, tensor_at, names, positional, tuple(kwargs))
    flat = tuple(leaf for _, leaf in with_path if isinstance(leaf, torch.Tensor))
    return _dressed(module, sig), flat, sig


def _positional_names(module: Any) -> list[str]:
    try:
        ps = inspect.signature(type(module).forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]


def _leaf_name(path: tuple, params: list[str], taken: list[str]) -> str:
    parts = []
    for k, key in enumerate(path):
        v = getattr(key, "idx", getattr(key, "key", getattr(key, "name", key)))
        if k == 0:
            continue  # 0: the positional args, 1: the keyword args
        if k == 1 and path[0].idx == 0:
            parts.append(params[v] if isinstance(v, int) and v < len(params) else f"arg{v}")
        else:
            parts.append(str(v))
    name = re.sub(r"\W", "_", "_".join(parts)) or "x"
    if name[0].isdigit() or keyword.iskeyword(name) or name in ("self", "_run"):
        name = f"x_{name}"
    base, n = name, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _path_str(path: tuple) -> str:
    from torch.utils._pytree import keystr

    return ("args" if path[0].idx == 0 else "kwargs") + keystr(path[1:])


def _dressed(module: Any, sig: FlatSignature) -> Any:
    """A module of a subclass of ``type(module)`` sharing its ``__dict__``, whose forward
    takes the flat tensors by name and returns the output's tensor leaves."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    cls = type(module)
    base_forward = cls.forward

    def _run(self, tensors):
        leaves = list(sig.in_leaves)
        for pos, t in zip(sig.tensor_at, tensors, strict=True):
            leaves[pos] = t
        a, kw = tree_unflatten(leaves, sig.in_spec)
        out = base_forward(self, *a, **kw)
        flat, spec = tree_flatten(out)
        sig.out_spec = spec
        sig.out_tensor_at = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        sig.out_dtypes = [v.dtype for v in flat if isinstance(v, torch.Tensor)]
        sig.out_leaves = [None if isinstance(v, torch.Tensor) else v for v in flat]
        return tuple(v for v in flat if isinstance(v, torch.Tensor))

    names = ", ".join(sig.names)
    src = f"def forward(self, {names}):\n    return _run(self, ({names}{',' if names else ''}))\n"
    ns: dict[str, Any] = {"_run": _run}
    exec(compile(src, f"<flat forward of {cls.__name__}>", "exec"), ns)  # noqa: S102
    flat_cls = type(cls.__name__, (cls,), {"forward": ns["forward"], "__module__": cls.__module__})
    dressed = object.__new__(flat_cls)
    dressed.__dict__ = module.__dict__  # the same parameters, buffers, children and config
    return dressed


def as_array(x: Any) -> np.ndarray:
    """A torch tensor (detached, on the CPU; bfloat16 as float32) or array-like as numpy."""
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype in (torch.bfloat16, torch.float16) or str(t.dtype).startswith("torch.float8"):
            t = t.float()  # the IR computes bf16, fp16 and fp8 in float32
        return t.numpy()
    return np.asarray(x)


def module_state(module: Any, lifted: dict[str, Any] | None = None) -> dict[str, Any]:
    """The module's parameters and buffers (and the tensors torch.export lifted) by name."""
    state = dict(module.named_parameters(remove_duplicate=False))
    state.update(dict(module.named_buffers(remove_duplicate=False)))
    state.update(lifted or {})
    return state


def weights(graph: Any, module: Any, lifted: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """The value of every ``param`` node and of every ``input`` node that is a buffer (or a
    block ``W[start:stop]`` of one), by node name, each as the node's numpy dtype."""
    state = module_state(module, lifted)
    out: dict[str, np.ndarray] = {}
    for n in graph.nodes:
        if n.op not in ("param", "input"):
            continue
        value = _state_value(state, n.name, n.type.shape)
        if value is None:
            if n.op == "param":
                raise TorchCompileError(
                    f"{type(module).__name__}: the traced parameter {n.name!r} is not among "
                    "the module's parameters; compile the module that owns every weight"
                )
            continue  # a user input
        out[n.name] = value.astype(n.type.dtype.numpy, copy=False)
    copied = {k: v for k, v in out.items() if not v.flags.c_contiguous}
    return out | packed(copied)


def packed(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """C-contiguous copies of ``values`` in one buffer, in order, each at a 64-byte
    boundary: the blocks of fused projections (GPT-2's q, k, v columns of ``c_attn``) lie
    side by side, and the buffer, of numpy's allocation, is advised onto huge pages as a
    whole (a separate 2.4 MB copy holds no whole 2 MiB page: the weight streams on 4 KiB
    pages)."""
    sizes = [-(-v.nbytes // 64) * 64 for v in values.values()]
    buf = np.empty(sum(sizes) + 64, np.uint8)
    out, off = {}, -buf.ctypes.data % 64
    for (name, v), size in zip(values.items(), sizes, strict=True):
        out[name] = buf[off : off + v.nbytes].view(v.dtype).reshape(v.shape)
        out[name][...] = v
        off += size
    return out


def _state_value(state: dict, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    if name in state:
        return as_array(state[name])
    m = _BLOCK.match(name)
    if m is None or m["name"] not in state:
        return None
    whole = as_array(state[m["name"]])
    axes = [k for k, (a, b) in enumerate(zip(whole.shape, shape, strict=True)) if a != b]
    index = [slice(None)] * whole.ndim
    index[axes[0] if axes else 0] = slice(int(m["start"]), int(m["stop"]))
    return whole[tuple(index)]
