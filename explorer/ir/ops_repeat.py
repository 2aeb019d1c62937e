"""Copies of a tensor along its dims: ``repeat`` (``torch.Tensor.repeat``, numpy ``tile``)
and ``repeat_interleave`` (``torch.repeat_interleave``, numpy ``repeat``).

Traced models build position tables with them: GPT-J repeats its sin/cos table over the
batch and each frequency twice for its interleaved rotary pairs, BLOOM repeats the ALiBi
slopes over the batch, Cohere interleaves its rotary frequencies. Both ops copy: no FLOPs,
costed by the bytes they read and write (unlike ``expand``, which is a view).

Sharding, from the dim signatures:

- ``repeat``: a dim repeated once keeps its letter and may be split; a repeated dim has one
  letter in and another out, so it stays whole (the output is ``r`` copies of the whole
  input dim: a split input would give each device the wrong rows).
- ``repeat_interleave`` by ``r`` along one axis: the output block ``j`` of ``k`` even
  blocks is ``repeat_interleave`` of the input block ``j`` (row ``i`` goes to rows
  ``r*i .. r*i + r - 1``), so the axis may be split when ``k`` divides its input size. The
  signature keeps different letters for the two sizes (one letter, one size) and
  `explorer.sharding.rules.rewrite_signature` gives the strategies one letter.

>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("demo")
>>> x = b.input("x", (4, 3))
>>> y = b.op("repeat", x, repeats=(2, 1))
>>> z = b.op("repeat_interleave", x, repeats=2, axis=1)
>>> g = b.build([y, z]); g.signature(y), g.node(y).type.shape, g.signature(z)
('ab->cb', (8, 3), 'ab->ac')
>>> g.node_flops(z), g.node_bytes(z)
(0, (48, 96))
"""

from __future__ import annotations

import string

import numpy as np

from ..checks import is_int
from .errors import IRError
from .opdef import REQUIRED, OpDef, OpGroup, register

__all__: list[str] = []

_LETTERS = string.ascii_letters


def _count(op: str, name: str, value) -> int:
    if not is_int(value, minimum=1, numpy=True):
        raise IRError(
            f"{op} {name}={value!r} is not an int >= 1; pass how many copies of each element "
            "to make, e.g. 2 (zero copies would make an empty tensor)"
        )
    return int(value)


def _repeat_check(in_types, attrs) -> tuple[int, ...]:
    shape, reps = in_types[0].shape, attrs["repeats"]
    if not isinstance(reps, tuple | list) or len(reps) != len(shape):
        raise IRError(
            f"repeat repeats={reps!r} for input {in_types[0]}: give one count per dim "
            f"({len(shape)}); reshape first to add leading dims"
        )
    return tuple(_count("repeat", "repeats", r) for r in reps)


def _repeat_sig(in_types, attrs) -> str:
    reps = _repeat_check(in_types, attrs)
    rank = len(reps)
    spec = _LETTERS[:rank]
    fresh = iter(_LETTERS[rank:])
    out = "".join(c if r == 1 else next(fresh) for c, r in zip(spec, reps, strict=True))
    return f"{spec}->{out}"


def _repeat_shape(in_types, attrs) -> tuple[int, ...]:
    reps = _repeat_check(in_types, attrs)
    return tuple(d * r for d, r in zip(in_types[0].shape, reps, strict=True))


def _repeat_impl(x, repeats):
    # repeated dims are never split, so the local block holds the whole dim
    return np.tile(x, tuple(repeats))


register(OpDef("repeat", OpGroup.MOVEMENT, None, 1, 0, _repeat_impl,
               attrs={"repeats": REQUIRED}, signature_rule=_repeat_sig,
               shape_rule=_repeat_shape,
               doc="whole copies along each dim (torch repeat, numpy tile); dims repeated "
                   "once may be split, repeated dims stay whole"))  # fmt: skip


def _interleave_check(in_types, attrs) -> tuple[int, int]:
    rank, axis = in_types[0].rank, attrs["axis"]
    if not is_int(axis, minimum=0, maximum=rank - 1, numpy=True):
        raise IRError(
            f"repeat_interleave axis={axis!r} is out of range for {in_types[0]}; expected "
            f"0..{rank - 1}"
        )
    return _count("repeat_interleave", "repeats", attrs["repeats"]), int(axis)


def _interleave_sig(in_types, attrs) -> str:
    r, axis = _interleave_check(in_types, attrs)
    rank = in_types[0].rank
    spec = _LETTERS[:rank]
    if r == 1:
        return f"{spec}->{spec}"
    return f"{spec}->{spec[:axis]}{_LETTERS[rank]}{spec[axis + 1 :]}"


def _interleave_shape(in_types, attrs) -> tuple[int, ...]:
    r, axis = _interleave_check(in_types, attrs)
    shape = list(in_types[0].shape)
    shape[axis] *= r
    return tuple(shape)


register(OpDef("repeat_interleave", OpGroup.MOVEMENT, None, 1, 0,
               lambda x, repeats, axis: np.repeat(x, repeats, axis=axis),
               attrs={"repeats": REQUIRED, "axis": REQUIRED}, signature_rule=_interleave_sig,
               shape_rule=_interleave_shape,
               doc="each element `repeats` times in a row along one axis (torch "
                   "repeat_interleave); that axis may be split in even blocks"))  # fmt: skip
