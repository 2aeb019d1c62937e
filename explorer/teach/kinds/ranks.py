"""Exercises on rank maps: how many nodes one parallel group spans under a launcher's order."""

from __future__ import annotations

from ..errors import TeachError
from ..exercises import Exercise, Mistake
from ..ranks import LAUNCHERS, RankLayout, rank_map
from .common import _elide

__all__ = ["rank_nodes"]


def rank_nodes(layout: RankLayout, axis: str, order: str = "megatron", gpus_per_node: int = 8,
               *, key: str = "") -> Exercise:  # fmt: skip
    """How many nodes one ``axis`` group spans (the widest group) under a launcher's rank
    order: `explorer.teach.rank_map`."""
    m = rank_map(layout, order, gpus_per_node)
    spans = m.nodes_spanned(axis)
    truth = float(max(len(s) for s in spans))
    size = len(m.groups[axis][0])
    others = [o for o in LAUNCHERS if LAUNCHERS[o] != m.order]
    mistakes = [
        Mistake("assumed the group sits inside one node", 1.0,
                f"ranks of one {axis} group are {_stride(m, axis)} apart in order {m.order}; "
                f"with {gpus_per_node} GPUs per node they land on different nodes."),
        Mistake("counted the ranks, not the nodes", float(size),
                f"the group has {size} ranks, but several of them can share a node."),
    ]  # fmt: skip
    for o in others:
        try:
            alt = rank_map(layout, o, gpus_per_node)
        except TeachError:
            continue
        mistakes.append(Mistake(
            f"used the order {alt.order}", float(max(len(s) for s in alt.nodes_spanned(axis))),
            f"order {m.order} puts the {axis} rank at stride {_stride(m, axis)}, not "
            f"{_stride(alt, axis)}."))  # fmt: skip
    return Exercise(
        key=key or f"rank-nodes-{axis}", kind="rank_nodes",
        question=(f"Layout {layout}, launched with rank order {m.order} ({m.launcher}) on nodes "
                  f"of {gpus_per_node} GPUs: how many nodes does one {axis} group span (the "
                  "widest one)?"),
        given=(("layout", str(layout)), ("rank order (fastest first)", m.order),
               ("GPUs per node", str(gpus_per_node))),
        unit="nodes", truth=truth, mistakes=tuple(mistakes), digits=4,
        hint=(f"rank = tp_rank + tp x (cp_rank + cp x (dp_rank + dp x pp_rank)) for "
              f"tp-cp-ep-dp-pp; find the stride of {axis}, then which ranks share a node "
              f"(node = rank // {gpus_per_node})."),
        worked=(f"{axis} group 0 is {_elide(m.groups[axis][0])}: nodes {_elide(spans[0])}; "
                f"the widest group spans {truth:.0f} node(s)."),
    )  # fmt: skip


def _stride(m, axis: str) -> int:
    g = m.groups[axis][0]
    return g[1] - g[0] if len(g) > 1 else 0
