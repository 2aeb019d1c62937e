"""``rank_map_figure``: the node x GPU grid of a rank map, each GPU labelled with its global
rank and its group on one axis (the label carries the group; the colour repeats it), the
groups of one rank outlined.

>>> from explorer.teach import RankLayout, rank_map
>>> fig = rank_map_figure(rank_map(RankLayout(dp=2, tp=4)), "tp")
>>> fig.data[0].text[:2]
('r0<br>tp 0', 'r1<br>tp 0')
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.teach import RankMap

from ..colors import PALETTE
from .style import base_layout

__all__ = ["rank_map_figure", "rank_map_caption", "MAX_NODES"]

MAX_NODES = 16  # rows drawn; a larger machine shows its first nodes and says so
_CELL_PX = 54  # one GPU's square


def _shown_nodes(m: RankMap, max_nodes: int) -> int:
    return min(m.nodes, max_nodes)


def _group_index(m: RankMap, axis: str, limit: int) -> dict[int, int]:
    """rank -> index of its ``axis`` group, for the ranks below ``limit`` (one pass)."""
    out = {}
    for k, g in enumerate(m.groups[axis]):
        for r in g:
            if r < limit:
                out[r] = k
    return out


def _short(ranks: tuple[int, ...]) -> str:
    if len(ranks) <= 12:
        return str(list(ranks))
    return "[" + ", ".join(map(str, ranks[:8])) + f", ..., {ranks[-1]}]"


def rank_map_caption(m: RankMap, axis: str, rank: int | None = None) -> str:
    """The figure's text, for screen readers and the title: what the groups are, how many,
    where they sit, and the highlighted rank's group."""
    groups = m.groups[axis]
    spans = m.nodes_spanned(axis)
    widest = max(len(s) for s in spans)
    where = "each inside one node" if widest == 1 else f"spanning up to {widest} nodes each"
    text = (f"{axis} groups, order {m.order}: {len(groups)} of {len(groups[0])} ranks, "
            f"{where}")  # fmt: skip
    if rank is not None:
        text += f"; rank {rank}'s {axis} group: {list(m.group_of(rank, axis))}"
    return text


def rank_map_figure(
    m: RankMap, axis: str = "tp", rank: int | None = None, *, max_nodes: int = MAX_NODES
) -> go.Figure:
    """The grid of nodes (rows) by GPUs (columns); each square shows ``r<rank>`` and
    ``<axis> <group index>``; ``rank``'s group is outlined in black."""
    groups = m.groups[axis]
    mine = set(m.group_of(rank, axis)) if rank is not None else set()
    shown = _shown_nodes(m, max_nodes)
    ranks = [r for r in range(m.world_size) if m.node_of(r) < shown]
    limit = len(ranks)  # ranks are numbered node by node: the drawn ones are 0..limit-1
    index = _group_index(m, axis, limit)
    other = {a: _group_index(m, a, limit) for a in ("tp", "cp", "ep", "dp", "pp") if a != axis}
    x = [r % m.gpus_per_node for r in ranks]
    y = [m.node_of(r) for r in ranks]
    text = [f"r{r}<br>{axis} {index[r]}" for r in ranks]
    hover = [
        f"rank {r}: node {m.node_of(r)}, GPU {r % m.gpus_per_node}<br>{axis} group {index[r]}: "
        f"{_short(groups[index[r]])}" + "".join(f"<br>{a} group {idx[r]}"
                                                 for a, idx in other.items())
        for r in ranks
    ]  # fmt: skip
    colors = [PALETTE[index[r] % len(PALETTE)] for r in ranks]
    outline = [3 if r in mine else 0.5 for r in ranks]
    trace = go.Scatter(
        x=x, y=y, mode="markers+text", text=text, hovertext=hover, hoverinfo="text",
        textfont={"size": 11, "color": "#111111"}, textposition="middle center",
        marker={"symbol": "square", "size": _CELL_PX - 8, "color": colors, "opacity": 0.55,
                "line": {"width": outline, "color": "#111111"}},
        name=f"{axis} groups", showlegend=False,
    )  # fmt: skip
    title = f"Rank map {m.layout}: " + rank_map_caption(m, axis)
    if rank is not None:
        title += f"; rank {rank}'s group outlined"
    if shown < m.nodes:
        title += f" (first {shown} of {m.nodes} nodes drawn)"
    fig = go.Figure([trace])
    fig.update_layout(
        **base_layout(title, height=140 + _CELL_PX * shown, legend=False),
        xaxis={"tickmode": "array", "tickvals": list(range(m.gpus_per_node)),
               "ticktext": [f"GPU {g}" for g in range(m.gpus_per_node)], "showgrid": False,
               "zeroline": False, "range": [-0.6, m.gpus_per_node - 0.4]},
        yaxis={"tickmode": "array", "tickvals": list(range(shown)),
               "ticktext": [f"node {n}" for n in range(shown)],
               "showgrid": False, "zeroline": False, "range": [shown - 0.5, -0.5]},
    )  # fmt: skip
    return fig
