"""Our runs of a compiled PyTorch callable against torch's own, on one input: the largest
absolute difference of each run, and whether every tensor output is within the tolerance
(``|ours - torch| <= atol + rtol * |torch|``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .torch_io import as_array

__all__ = ["Verification", "verify_runs"]


@dataclass(frozen=True)
class Verification:
    """Largest absolute differences of our outputs from torch's on one call, and whether
    each run is within ``rtol``/``atol`` (``|ours - torch| <= atol + rtol * |torch|``)."""

    static_max_abs: float
    eager_max_abs: float
    rtol: float
    atol: float
    static_ok: bool
    eager_ok: bool

    @property
    def ok(self) -> bool:
        return self.static_ok and self.eager_ok


def verify_runs(module: Any, defaults: Mapping[str, Any], tolerance: tuple[float, float],
                static: Callable, eager: Callable, args: tuple, kwargs: dict) -> Verification:  # fmt: skip
    """Run ``module(*args, **defaults, **kwargs)`` in torch, then ``static`` and ``eager`` on
    the same call; compare every tensor output with torch's at ``tolerance`` (rtol, atol)."""
    import torch
    from torch.utils._pytree import tree_flatten

    def to_torch(x: Any) -> Any:
        return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x

    targs = tuple(to_torch(a) for a in args)
    tkw = {k: to_torch(v) for k, v in kwargs.items()}
    with torch.no_grad():
        want = module(*targs, **{**defaults, **tkw})
    rtol, atol = tolerance
    results = []
    for run in (static, eager):
        got = run(*targs, **tkw)
        worst, ok = 0.0, True
        for g, w in zip(tree_flatten(got)[0], tree_flatten(want)[0], strict=True):
            if isinstance(w, torch.Tensor):
                gn, wn = as_array(g).astype(np.float64), as_array(w).astype(np.float64)
                worst = max(worst, float(np.abs(gn - wn).max(initial=0.0)))
                ok = ok and bool(np.allclose(gn, wn, rtol=rtol, atol=atol))
        results.append((worst, ok))
    (s, s_ok), (e, e_ok) = results
    return Verification(s, e, rtol, atol, s_ok, e_ok)
