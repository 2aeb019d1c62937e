"""Symbolic dims: a dim declared symbolic is captured with a sentinel prime as its size;
binding a concrete size substitutes it (and its multiples, e.g. ``B*S`` after a reshape)
in every node type and integer attribute, then re-validates the graph. One trace and one
set of passes serve every size; only shapes and buffers are re-specialised.

Limit: a size computed from the symbolic dim in Python other than by multiplication
(``x.shape[0] // 2``) cannot be substituted; the re-validation then fails with an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...ir import Graph, TensorType
from ...ir.ops_tensor import Subgraph
from ..errors import CompilerError

__all__ = ["PRIMES", "sentinel", "rebind"]

PRIMES = (7919, 7927, 7933, 7937, 7949, 7951)  # sizes no real model dim is a multiple of


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    k = 2
    while k * k <= n:
        if n % k == 0:
            return False
        k += 1
    return True


def sentinel(index: int) -> int:
    """The sentinel size of the ``index``-th symbolic dim: ``PRIMES`` first, then the next
    primes after them (any number of symbols)."""
    if index < 0:
        raise ValueError(f"sentinel index {index} is negative; symbols are numbered from 0")
    if index < len(PRIMES):
        return PRIMES[index]
    p, k = PRIMES[-1], len(PRIMES) - 1
    while k < index:
        p += 2
        if _is_prime(p):
            k += 1
    return p


def _sub(d: int, mapping: dict[int, int]) -> int:
    """``d`` with every factor ``p`` of a sentinel replaced by its size ``mapping[p]``.

    The multiplicity of each sentinel is counted in ``d`` as captured, before anything is
    substituted, so a size that is itself a multiple of a sentinel (``_sub(7919, {7919:
    7919})``) or of another sentinel is never substituted again.
    """
    if not d:
        return d
    rest, factor = d, 1
    for p, v in mapping.items():
        while rest % p == 0:
            rest //= p
            factor *= v
    return rest * factor


def _attr(v: Any, mapping: dict[int, int]) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return _sub(v, mapping)
    if isinstance(v, tuple):
        return tuple(_attr(x, mapping) for x in v)
    if isinstance(v, Subgraph):
        return Subgraph(rebind(v.graph, mapping))
    return v


def rebind(graph: Graph, mapping: dict[int, int]) -> Graph:
    """``graph`` with each sentinel prime ``p`` replaced by ``mapping[p]``."""
    nodes = []
    for n in graph.nodes:
        shape = tuple(_sub(d, mapping) for d in n.type.shape)
        attrs = tuple((k, _attr(v, mapping)) for k, v in n.attrs)
        nodes.append(dataclasses.replace(n, type=TensorType(shape, n.type.dtype), attrs=attrs))
    try:
        return Graph(tuple(nodes), graph.outputs, graph.name)
    except Exception as e:
        raise CompilerError(
            f"graph {graph.name!r} cannot be re-specialised for sizes {mapping}: {e}. A symbolic "
            "dim was used in a size computed in Python (e.g. shape[0] // 2); drop dynamic= for "
            "that argument"
        ) from None
