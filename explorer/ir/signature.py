"""Einsum-style dim signatures: expanding templates such as ``"...k,kn->...n"``.

A signature names every iteration dim of an op with one letter. A letter shared by inputs
and output is a free (or batch) dim, a letter only on inputs is contracted. The sharding
layer derives strategies from these letters; the IR uses them to check shapes.
"""

from __future__ import annotations

import string

from .errors import IRError
from .tensor_type import TensorType

__all__ = ["expand", "parse", "letter_sizes", "Signature"]

_POOL = string.ascii_lowercase + string.ascii_uppercase

Signature = tuple[tuple[str, ...], str]
"""(input specs, output spec): one string of letters per input, one for the output."""


def parse(sig: str) -> Signature:
    """Split ``"ab,bc->ac"`` into ``(("ab", "bc"), "ac")``."""
    if "->" not in sig:
        raise IRError(f"signature {sig!r} has no '->'; expected e.g. 'ab,bc->ac'")
    lhs, out = sig.split("->")
    ins = tuple(lhs.split(",")) if lhs else ()
    return ins, out


def expand(template: str, in_types: tuple[TensorType, ...]) -> str:
    """Resolve ``...`` in a template against input ranks, right-aligned as in numpy.

    Dims of size 1 broadcast against a larger dim get a letter of their own, so that a
    signature never claims two different sizes for one letter.

    >>> from explorer.ir.dtype import DType
    >>> expand("...k,kn->...n", (TensorType((2, 3, 4)), TensorType((4, 5))))
    'abk,kn->abn'
    """
    ins, out = parse(template)
    if len(ins) != len(in_types):
        raise IRError(f"signature {template!r} takes {len(ins)} inputs, got {len(in_types)}")
    used = set(template) - set(".,->")
    pool = [c for c in _POOL if c not in used]
    ell_ranks = []
    for spec, t in zip(ins, in_types, strict=True):
        if "..." in spec:
            r = t.rank - (len(spec) - 3)
            if r < 0:
                raise IRError(f"rank {t.rank} input {t} is too small for signature {template!r}")
            ell_ranks.append(r)
        elif len(spec) != t.rank:
            raise IRError(f"input {t} has rank {t.rank}; signature {template!r} needs {len(spec)}")
    n_ell = max(ell_ranks, default=0)
    ell = "".join(pool[:n_ell])
    pool = pool[n_ell:]
    new_ins = []
    for spec, t in zip(ins, in_types, strict=True):
        if "..." in spec:
            r = t.rank - (len(spec) - 3)
            spec = spec.replace("...", ell[n_ell - r :])
        new_ins.append(spec)
    out = out.replace("...", ell)
    # size-1 dims broadcast against a bigger dim get fresh letters
    sizes: dict[str, int] = {}
    for spec, t in zip(new_ins, in_types, strict=True):
        for c, d in zip(spec, t.shape, strict=True):
            if d != 1:
                sizes.setdefault(c, d)
    fixed = []
    for spec, t in zip(new_ins, in_types, strict=True):
        chars = list(spec)
        for i, (c, d) in enumerate(zip(spec, t.shape, strict=True)):
            if d == 1 and sizes.get(c, 1) != 1:
                chars[i] = pool.pop(0)
        fixed.append("".join(chars))
    return ",".join(fixed) + "->" + out


def letter_sizes(sig: str, in_types: tuple[TensorType, ...]) -> dict[str, int]:
    """Map each letter to its size; raise if two inputs disagree on one letter."""
    ins, _ = parse(sig)
    if not ins and len(in_types) == 1 and in_types[0].rank == 0:
        ins = ("",)  # one rank-0 input prints as "->...": same text as no input at all
    sizes: dict[str, int] = {}
    for k, (spec, t) in enumerate(zip(ins, in_types, strict=True)):
        if len(spec) != t.rank:
            raise IRError(f"input {k} {t} has rank {t.rank}; signature {sig!r} needs {len(spec)}")
        for c, d in zip(spec, t.shape, strict=True):
            if sizes.setdefault(c, d) != d:
                raise IRError(
                    f"dim {c!r} of signature {sig!r} is {sizes[c]} in one input and {d} in "
                    f"input {k} {t}; the sizes must agree"
                )
    return sizes
