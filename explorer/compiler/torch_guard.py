"""The call of a compiled PyTorch program: one generated function that checks the call
against one precomputed guard and runs the bound plan.

The guard is the traced call itself: as many positional arguments as traced tensors, no
keyword, each a CPU tensor or numpy array of the traced shape and numpy dtype. The
generated function checks it with one ``type(x) is`` test, one tuple comparison of the
shape and one dtype comparison per input (straight-line code: no loop, no dict or list
built per call), then calls the plan whose weights are baked in (`Program.bound_plan`:
only the call's inputs are passed). Anything else (keywords, numpy arrays of another
dtype (a dtype is compared by identity: an equal dtype object that is not numpy's own
takes the slow path too), tensors needing grad or on another device, a recording
``ex.trace.record`` block) goes to ``slow``, the general path, which converts, checks with the named errors
and records.

>>> import numpy as np
>>> call = make_call(0, [((2,), np.dtype("float32"))], lambda x: [x + 1],
...                  lambda a, k: "slow", None, None)
>>> call(np.zeros(2, np.float32)).tolist(), call(np.zeros(3, np.float32))
([1.0, 1.0], 'slow')
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import trace as _trace
from .codegen.build import has_queued, start_queued

__all__ = ["make_call"]


def make_call(single: int | None, types: Sequence[tuple[tuple[int, ...], np.dtype]],
              entry: Callable[..., list[np.ndarray]], slow: Callable[[tuple, dict], Any],
              out_dtype: Any, structure: Callable[[list, bool], Any] | None,
              lock: threading.Lock | None = None) -> Callable[..., Any]:  # fmt: skip
    """The call function of a program with ``len(types)`` inputs of these (shape, numpy
    dtype): ``entry(*arrays)`` runs the plan; ``slow(args, kwargs)`` serves every call the
    guard refuses; the result is ``outs[single]`` (a torch tensor of ``out_dtype`` when an
    input was one) or, when ``single`` is None, ``structure(outs, as_torch)``."""
    tensor: Any = type(None)
    from_numpy = None
    try:
        import torch

        tensor, from_numpy = torch.Tensor, torch.from_numpy
    except ImportError:
        pass
    n = len(types)
    ns: dict[str, Any] = {
        "entry": entry, "slow": slow, "ndarray": np.ndarray, "Tensor": tensor,
        "active": _trace.active, "has_queued": has_queued, "start_queued": start_queued,
        "lock": lock or threading.Lock(), "structure": structure, "from_numpy": from_numpy,
        "out_dtype": out_dtype, "retype": _retype,
    }  # fmt: skip
    xs = [f"x{i}" for i in range(n)]
    lines = ["def call(*args, **kwargs):",
             f"    if kwargs or len(args) != {n} or active() is not None:",
             "        return slow(args, kwargs)"]  # fmt: skip
    if n:
        lines.append(f"    {', '.join(xs)}{',' if n == 1 else ''} = args")
    lines += ["    as_torch = False", "    try:"]
    for i, (shape, dtype) in enumerate(types):
        ns[f"s{i}"], ns[f"d{i}"] = tuple(shape), np.dtype(dtype)
        lines += [  # x.numpy() raises for a tensor needing grad, off the CPU or in bf16
            f"        if type(x{i}) is not ndarray:",
            f"            if type(x{i}) is not Tensor:",
            "                return slow(args, kwargs)",
            f"            x{i} = x{i}.numpy()",
            "            as_torch = True",
            f"        if x{i}.dtype is not d{i} or x{i}.shape != s{i}:",
            "            return slow(args, kwargs)",
        ]  # fmt: skip
    if not types:
        lines.append("        pass")
    lines += ["    except Exception:", "        return slow(args, kwargs)"]
    lines += ["    with lock:", f"        outs = entry({', '.join(xs)})",
              "    if has_queued():", "        start_queued()"]  # fmt: skip
    if single is None:
        lines.append("    return structure(outs, as_torch)")
    else:
        lines += [f"    a = outs[{single}]",
                  "    return retype(a, out_dtype, from_numpy) if as_torch else a"]  # fmt: skip
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<guarded call>", "exec"), ns)  # noqa: S102
    fn = ns["call"]
    fn.source = source  # type: ignore[attr-defined]
    return fn


def _retype(a: np.ndarray, dtype: Any, from_numpy: Any) -> Any:
    if not a.flags.writeable:  # a constant or a weight: the caller may write its result
        a = a.copy()
    t = from_numpy(a)
    return t if t.dtype == dtype else t.to(dtype)
