"""Sliding-window attention masks: ``window_mask`` and its gradient.

``window_mask(x, window, offset=0)`` keeps the scores of the keys a query may see under
sliding-window causal attention (Mistral-style windows, Gemma 2 and Gemma 3's local
layers) and puts ``-inf`` elsewhere. Over the last two dims (query ``i``, key ``j``) key
``j`` is kept when ``i + offset - window < j <= i + offset``: the query itself and the
``window - 1`` keys before it. With ``window`` at least the key count it is
``causal_mask``. Transformers builds this mask from positions (``masking_utils``'
``sliding_window_overlay`` and the causal mask); the importer recognises the added
constant and emits this op (`explorer.models.torch_import.constants.sliding_window`).

It is its own op rather than a ``causal_mask`` attribute so that the consumers that know
``causal_mask`` only (the compiler's softmax fusion and generated kernels, the JAX and
MindSpore exports) refuse it instead of dropping the window silently.

Cost and sharding are those of ``causal_mask``: one FLOP per element, signature
``...->...`` (every dim may be split); the SPMD kernel gives each block its global
offset (`explorer.sharding.kernels`), so a shard's mask is the slice of the global one.
``window_mask_grad`` zeroes the gradient where the forward masked.

>>> import numpy as np
>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("demo")
>>> x = b.input("x", (4, 4))
>>> g = b.build([b.op("window_mask", x, window=2)])
>>> g.signature(g.outputs[0]), g.node_flops(g.outputs[0])
('...->...', 16)
>>> g.run({"x": np.zeros((4, 4), np.float32)})[g.outputs[0]]
array([[  0., -inf, -inf, -inf],
       [  0.,   0., -inf, -inf],
       [-inf,   0.,   0., -inf],
       [-inf, -inf,   0.,   0.]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ..checks import is_int
from .errors import IRError
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__ = ["window_keep"]


def window_keep(shape: tuple[int, ...], window: int, offset: int = 0) -> np.ndarray:
    """The ``[query, key]`` bool mask of the kept scores for a block of ``shape``."""
    if not is_int(window, minimum=1, numpy=True):
        raise IRError(
            f"window_mask window={window!r}: expected an int >= 1 (the query itself and the "
            "window - 1 keys before it)"
        )
    s, t = shape[-2], shape[-1]
    delta = np.arange(s)[:, None] + offset - np.arange(t)[None, :]  # query - key
    return (delta >= 0) & (delta < window)


def _check_rank(in_types, attrs):
    if in_types[0].rank < 2:
        raise IRError(f"window_mask takes [..., query, key] scores (rank >= 2); got {in_types[0]}")
    window_keep((1, 1), attrs["window"])  # checks the window
    return in_types[0].shape


def _window_mask(x, window, offset=0):
    return np.where(window_keep(x.shape, window, offset), x, -np.inf).astype(x.dtype)


def _window_mask_grad(g, window, offset=0):
    return np.where(window_keep(g.shape, window, offset), g, 0).astype(g.dtype)


register(OpDef("window_mask", OpGroup.ELEMENTWISE, "...->...", 1, 1, _window_mask,
               attrs={"window": REQUIRED, "offset": 0}, shape_rule=_check_rank,
               doc="-inf outside the sliding causal window of the last two dims: key j kept "
                   "when i + offset - window < j <= i + offset"))  # fmt: skip
register(OpDef("window_mask_grad", OpGroup.ELEMENTWISE, "...->...", 1, 1, _window_mask_grad,
               attrs={"window": REQUIRED, "offset": 0}, shape_rule=_check_rank,
               doc="zero the gradient outside the sliding causal window"))  # fmt: skip
