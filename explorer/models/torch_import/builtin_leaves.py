"""Modules recognised by their code and emitted as one registered op.

A transformers RMSNorm is traced as a cast, pow, mean, add, rsqrt and two muls; the
builders (and fused kernels) have one ``rmsnorm``. A module is recognised when its
``forward`` has the same bytecode, names and constants as the reference class's, so a
"Copied from LlamaRMSNorm" class in any model matches and a variant that computes
something else (OLMo-2 multiplies before casting back) does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .convert import Ref
from .leaves import LeafCall, LeafHandler

__all__ = ["builtin_leaf"]


def _code_key(fn: Any) -> tuple | None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    consts = tuple(c for c in code.co_consts if not hasattr(c, "co_code"))
    return (code.co_code, code.co_names, consts, code.co_argcount)


def _eps(module: Any) -> float:
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6))
    return float(eps)


def _rmsnorm(call: LeafCall) -> tuple[Ref, ...]:
    return (call.cx.op("rmsnorm", call.inputs[0], call.params["weight"], eps=_eps(call.module)),)


def _rmsnorm_offset(call: LeafCall) -> tuple[Ref, ...]:
    """Gemma's RMSNorm scales by ``1 + weight``."""
    w = call.cx.op("scalar_op", call.params["weight"], fn="add", value=1.0)
    return (call.cx.op("rmsnorm", call.inputs[0], w, eps=_eps(call.module)),)


def _gelu(call: LeafCall) -> tuple[Ref, ...]:
    """The tanh-form GELU written out in Python (GPT-2's ``gelu_new``): our ``gelu``."""
    return (call.cx.op("gelu", call.inputs[0]),)


def _conv1d(call: LeafCall) -> tuple[Ref, ...]:
    """GPT-2's ``Conv1D``: ``x @ weight + bias`` with ``weight: [in, out]`` (traced, it is a
    flatten, an addmm and an unflatten)."""
    y = call.cx.op("matmul", call.inputs[0], call.params["weight"])
    return (call.cx.op("add", y, call.params["bias"]),)


def _conv1d_outputs(module: Any, inputs: tuple[Any, ...]) -> list[tuple[tuple[int, ...], Any]]:
    x = inputs[0]
    return [(tuple(x.shape[:-1]) + (module.weight.shape[1],), x.dtype)]


_REFERENCES: list[tuple[str, str, Callable[[LeafCall], tuple[Ref, ...]]]] = [
    ("transformers.models.llama.modeling_llama", "LlamaRMSNorm", _rmsnorm),
    ("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm", _rmsnorm_offset),
    ("transformers.activations", "NewGELUActivation", _gelu),
    ("transformers.pytorch_utils", "Conv1D", _conv1d),
]
_KEYS: list[tuple[tuple, tuple | None, LeafHandler]] | None = None


def _keys() -> list[tuple[tuple, tuple | None, LeafHandler]]:
    global _KEYS
    if _KEYS is None:
        import importlib

        keys = []
        for mod_name, cls_name, emit in _REFERENCES:
            try:
                cls = getattr(importlib.import_module(mod_name), cls_name)
            except (ImportError, AttributeError):
                continue
            norm = _code_key(getattr(cls, "_norm", None))
            outputs = _conv1d_outputs if cls_name == "Conv1D" else None
            h = LeafHandler(emit, outputs=outputs, name=cls_name)
            keys.append((_code_key(cls.forward), norm, h))
        _KEYS = keys
    return _KEYS


def builtin_leaf(module: Any) -> LeafHandler | None:
    """The built-in handler for ``module`` when its code is a recognised reference's."""
    name = type(module).__name__
    if name.endswith("RMSNorm"):
        w = getattr(module, "weight", None)
        if w is None or getattr(w, "dim", lambda: 0)() != 1 or len(list(module.parameters())) != 1:
            return None
    elif name == "Conv1D":
        if [n for n, _ in module.named_parameters()] != ["weight", "bias"]:
            return None
    elif not name.endswith("GELUActivation") or list(module.parameters()):
        return None
    fwd = _code_key(type(module).forward)
    norm = _code_key(getattr(type(module), "_norm", None))
    for key, norm_key, h in _keys():
        if fwd == key and norm == norm_key:
            return h
    return None
