"""The ``generated`` op: a region (fused elementwise chain, softmax, norm) whose kernel is
generated source compiled by numba. Its attributes keep the region's original op and
attributes, so its registry impl (the reference, and what an interpreter runs) is the
original op's impl; the executor compiles ``source`` instead."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import DType
from ...ir import signature as sigmod
from ...ir.opdef import REGISTRY, REQUIRED, OpDef, OpGroup, get, register

__all__ = ["GENERATED", "KernelSource"]


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel's module text (the ``source`` attribute): the text IR prints it
    as one short token, the compiler view shows ``text`` (also ``RewriteStep.source``)."""

    text: str

    def __str__(self) -> str:
        return f"<numba source, {len(self.text.splitlines())} lines>"


def _sig(in_types, attrs) -> str:
    if attrs.get("origin") == "decode_attention":  # not elementwise: the origin's letters
        return get("decode_attention").signature_rule(in_types, dict(attrs["origin_attrs"]))
    return sigmod.expand(",".join(["..."] * len(in_types)) + "->...", in_types)


def _impl(*arrays, origin: str, origin_attrs: tuple, **_):
    return get(origin).impl(*arrays, **dict(origin_attrs))


GENERATED = "generated"
if GENERATED not in REGISTRY:
    register(OpDef(GENERATED, OpGroup.ELEMENTWISE, None, None, 1, _impl,
                   attrs={"origin": REQUIRED, "origin_attrs": (), "source": REQUIRED,
                          "entry": REQUIRED, "parallel": False, "split": 0, "kinds": (),
                          "ops": (), "members": (), "dtype": "fp32", "flops": 0},
                   signature_rule=_sig, dtype_rule=lambda i, a: DType.parse(a["dtype"]),
                   flops_rule=lambda i, o, a: a["flops"],
                   doc="a region run by a generated numba kernel (source in attrs)"))  # fmt: skip
