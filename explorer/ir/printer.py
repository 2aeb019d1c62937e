"""The printed text form of a graph: SSA lines a person can read and diff."""

from __future__ import annotations

from typing import Protocol

from .interpreter import Walkable
from .node import Node

__all__ = ["format_graph", "format_node", "format_flops", "format_bytes", "Printable"]


class Printable(Walkable, Protocol):
    """What the text form reads of a graph: what the walk reads, and a node by name. ``Graph``
    is one, and stands above this module (``str(graph)`` prints itself)."""

    def node(self, name: str) -> Node: ...

    def node_flops(self, name: str) -> int: ...


_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si(value: float, unit: str) -> str:
    for scale, p in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {p}{unit}"
    return f"{value:.3g} {unit}"


def format_flops(flops: float) -> str:
    """``12.9 GFLOP`` style, three significant digits.

    >>> format_flops(12_884_901_888)
    '12.9 GFLOP'
    """
    return _si(flops, "FLOP")


def format_bytes(nbytes: float) -> str:
    """``1.5 GiB`` style (binary prefixes, three significant digits)."""
    for scale, p in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {p}"
    return f"{int(nbytes)} B"


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, str):
        return repr(v)
    return str(v)


def format_node(graph: Printable, name: str) -> str:
    """One line: ``%y : fp32[8, 32] = matmul(%x, %w)  # 8.19 kFLOP``."""
    n = graph.node(name)
    args = [f"%{a}" for a in n.inputs] + [f"{k}={_fmt_attr(v)}" for k, v in n.attrs]
    line = f"%{n.name} : {n.type} = {n.op}({', '.join(args)})"
    f = graph.node_flops(name)
    return line + (f"  # {format_flops(f)}" if f else "")


def format_graph(graph: Printable, limit: int | None = None) -> str:
    """The whole graph; ``limit`` keeps the first N node lines and says how many were cut."""
    lines = [f"graph {graph.name} {{"]
    nodes = graph.nodes if limit is None else graph.nodes[:limit]
    lines += ["  " + format_node(graph, n.name) for n in nodes]
    if limit is not None and len(graph.nodes) > limit:
        lines.append(f"  ... {len(graph.nodes) - limit} more nodes")
    lines.append("  return " + ", ".join(f"%{o}" for o in graph.outputs))
    lines.append("}")
    return "\n".join(lines)
