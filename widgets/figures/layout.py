"""Nested layered layout of a graph's group tree (model > layer > block > op).

Pure geometry (numpy only): the figure builder and the view share it, tests check it without
plotly. Every open group is laid out on its own, left to right in columns by dependency
rank, and drawn as a frame holding its children; a closed group is one box. A group's
inner layout depends only on its structure, so repeated layers look identical. Weights and
inputs sit under the op that first reads them. The model's top level wraps into rows so a
126-layer model opens as a readable grid of labelled layer boxes.

Edges between neighbouring columns are drawn straight; an edge that would pass over other
units (a residual connection, a wrap to the next row) is routed through the free band above
them (or between rows), so no edge is drawn through a node.

Coordinates: data units, ``y`` up (plotly's convention); an op cell is ``OP_W`` wide.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from explorer.ir import ROOT, Graph, Hierarchy, hierarchy
from explorer.memo import Memo

__all__ = [
    "GraphLayout", "graph_layout", "layer_scopes", "box_id", "LARGE_GRAPH", "BOX_PREFIX",
    "Frame", "OP_W", "BOX_W", "BOX_H", "ROW_W",
]  # fmt: skip

LARGE_GRAPH = 2000  # nodes: from here on draw with WebGL and start collapsed
BOX_PREFIX = "scope:"
OP_W, OP_H = 1.6, 1.0  # an op's cell
SAT_DY = 0.55  # a weight or input under the op that reads it
BOX_W, BOX_H = 4.0, 1.6  # a closed group
GAP_X, GAP_Y = 1.0, 0.5
PAD, PAD_TOP = 0.35, 1.0  # a frame around an open group's children; its label band on top
ROW_W = 64.0  # the model's top level wraps into rows this wide
ROW_GAP = 1.6
LANE = 0.35  # a routed edge runs this far above the units it passes


def box_id(scope: str) -> str:
    """The unit id of a closed group (never a node name: node names have no colon)."""
    return BOX_PREFIX + scope


def layer_scopes(graph: Graph) -> tuple[str, ...]:
    """The repeated layer groups (``layers.0`` ... ``layers.47``), in graph order."""
    return hierarchy(graph).layers()


@dataclass(frozen=True)
class Frame:
    """An open group drawn as a frame: its path, label and rectangle (x0 < x1, y0 < y1)."""

    path: str
    label: str
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class GraphLayout:
    """Drawn units (nodes and closed-group boxes) with positions, edges and frames.

    Attributes:
        units: unit ids in graph order; a closed group's id is ``box_id(path)``.
        members: unit -> the node names it stands for (one for a plain node).
        x, y: unit centres.
        edges: (i, j) unit index pairs, producer to consumer, deduplicated.
        is_box: per unit, True for a closed group.
        kind: per unit, ``op``, ``sat`` (a weight or input drawn under its op) or ``box``.
        w, h: per unit, the drawn size (a box's rectangle; an op's cell).
        frames: the open groups (the model excluded), outermost first.
        edge_x, edge_y: every edge as a polyline, NaN between edges.
        arrow_x, arrow_y: the end point of every edge (the arrow heads).
        edge_tip: per point of ``edge_x``, True where an arrow head is drawn.
        expanded: the open group paths this layout was made for.
        rows: the row of each column of the model's top level (kept by ``keep_rows``).
    """

    units: tuple[str, ...]
    members: dict[str, tuple[str, ...]]
    x: np.ndarray
    y: np.ndarray
    edges: tuple[tuple[int, int], ...]
    is_box: np.ndarray
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype="<U3"))
    w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    frames: tuple[Frame, ...] = ()
    edge_x: np.ndarray = field(default_factory=lambda: np.zeros(0))
    edge_y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    arrow_x: np.ndarray = field(default_factory=lambda: np.zeros(0))
    arrow_y: np.ndarray = field(default_factory=lambda: np.zeros(0))
    edge_tip: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    expanded: frozenset[str] = frozenset()
    rows: tuple[int, ...] = ()  # per top-level column: its row (``keep_rows``)
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _unit_of: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def index(self, unit: str) -> int:
        return self._index[unit] if self._index else self.units.index(unit)

    def unit_of(self, node: str) -> str | None:
        """The drawn unit of ``node`` (the node, or the box of its closed group)."""
        if self._unit_of:
            return self._unit_of.get(node)
        for u, m in self.members.items():
            if node in m:
                return u
        return None

    @property
    def num_nodes(self) -> int:
        return sum(len(m) for m in self.members.values())

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """(x0, x1, y0, y1) of everything drawn."""
        xs = [*(self.x - self.w / 2), *(f.x0 for f in self.frames)]
        xe = [*(self.x + self.w / 2), *(f.x1 for f in self.frames)]
        ys = [*(self.y - self.h / 2), *(f.y0 for f in self.frames)]
        ye = [*(self.y + self.h / 2), *(f.y1 for f in self.frames)]
        if not xs:
            return 0.0, 1.0, 0.0, 1.0
        return min(xs), max(xe), min(ys), max(ye)


# --- the structure of each group (independent of what is open): computed once per graph ---


@dataclass(frozen=True)
class _GroupPlan:
    """A group's own units (child groups and direct nodes), their ranks and in-group
    predecessors; weights and inputs attached to the op that first reads them."""

    units: tuple[tuple[bool, str], ...]  # (is_group, child path or node name)
    rank: tuple[int, ...]
    preds: tuple[tuple[int, ...], ...]
    satellites: dict[str, tuple[str, ...]]  # op -> sources drawn under it


def _plans(graph: Graph, h: Hierarchy) -> dict[str, _GroupPlan]:
    chains: dict[str, tuple[str, ...]] = {}
    for path, g in h.groups.items():
        chains[path] = (path,) if g.parent is None else (*chains[g.parent], path)
    host: dict[str, str] = {}  # source -> op it is drawn under (same group)
    for g in h.groups.values():
        direct = set(g.nodes)
        for n in g.nodes:
            node = graph.node(n)
            if node.is_source:
                use = graph.consumers(n)
                if use and use[0] in direct and not graph.node(use[0]).is_source:
                    host[n] = use[0]
    units: dict[str, list[tuple[bool, str]]] = {}
    slot: dict[str, dict[str, int]] = {}
    for path, g in h.groups.items():
        first: list[tuple[int, tuple[bool, str]]] = []
        for c in g.children:
            first.append((graph.position(h.members(c)[0]) if h.groups[c].num_nodes else 0,
                          (True, c)))  # fmt: skip
        for n in g.nodes:
            if n not in host:
                first.append((graph.position(n), (False, n)))
        first.sort(key=lambda t: t[0])
        units[path] = [u for _, u in first]
        slot[path] = {u[1]: i for i, u in enumerate(units[path])}
    preds: dict[str, list[set[int]]] = {p: [set() for _ in us] for p, us in units.items()}
    for a, b, _ in graph.edges():
        ca, cb = chains[h.node_group[a]], chains[h.node_group[b]]
        k = 0
        while k < len(ca) and k < len(cb) and ca[k] == cb[k]:
            k += 1
        lca = ca[k - 1]
        ua = ca[k] if k < len(ca) else host.get(a, a)
        ub = cb[k] if k < len(cb) else host.get(b, b)
        ia, ib = slot[lca][ua], slot[lca][ub]
        if ia < ib:  # a back edge (interleaved scopes) does not rank: the order stays a DAG
            preds[lca][ib].add(ia)
    out: dict[str, _GroupPlan] = {}
    for path, us in units.items():
        ps = preds[path]
        rank = [0] * len(us)
        succ: list[list[int]] = [[] for _ in us]
        for j in range(len(us)):
            for i in ps[j]:
                succ[i].append(j)
                rank[j] = max(rank[j], rank[i] + 1)
        # A free-standing source sits in the column just before its first reader.
        for i in range(len(us) - 1, -1, -1):
            if not ps[i] and succ[i] and not us[i][0] and graph.node(us[i][1]).is_source:
                rank[i] = max(min(rank[j] for j in succ[i]) - 1, 0)
        sats: dict[str, list[str]] = {}
        for s in h.groups[path].nodes:
            if s in host:
                sats.setdefault(host[s], []).append(s)
        out[path] = _GroupPlan(
            units=tuple(us), rank=tuple(rank), preds=tuple(tuple(sorted(p)) for p in ps),
            satellites={k: tuple(v) for k, v in sats.items()},
        )  # fmt: skip
    return out


_PLANS: Memo[tuple[Hierarchy, dict[str, _GroupPlan]]] = Memo("widgets.graph_layout", maxsize=8)


def _structure(graph: Graph) -> tuple[Hierarchy, dict[str, _GroupPlan]]:
    def build():
        h = hierarchy(graph)
        return h, _plans(graph, h)

    return _PLANS.get(graph, build)


# --- placing: a block is a laid-out group in its own coordinates (y down, anchor y = 0) ---


@dataclass
class _Block:
    w: float
    top: float
    bottom: float
    leaves: list[tuple[str, float, float, float, float, str]]  # id, cx, cy, w, h, kind
    frames: list[tuple[str, float, float, float, float]]  # path, x0, y0, x1, y1
    rows: list[float] = field(default_factory=list)  # per leaf: bottom of its row (root)
    col_rows: tuple[int, ...] = ()  # per column of the model's top level: its row (root)


def _leaf(uid: str, w: float, top: float, bottom: float, kind: str) -> _Block:
    h = bottom - top
    return _Block(w, top, bottom, [(uid, w / 2, (top + bottom) / 2, w, h, kind)], [])


def _place(path: str, plans: dict[str, _GroupPlan], h: Hierarchy, open_: frozenset[str],
           wrap: float | None, keep_rows: tuple[int, ...] | None = None) -> _Block:  # fmt: skip
    """Lay out the open group ``path`` (recursion depth = scope depth, a handful);
    ``keep_rows``: the row of each top-level column from an earlier layout, kept."""
    plan = plans[path]
    blocks: list[_Block] = []
    for is_group, uid in plan.units:
        if is_group and uid in open_:
            blocks.append(_place(uid, plans, h, open_, None))
        elif is_group:
            blocks.append(_leaf(box_id(uid), BOX_W, -BOX_H / 2, BOX_H / 2, "box"))
        else:
            sats = plan.satellites.get(uid, ())
            b = _leaf(uid, OP_W, -OP_H / 2, OP_H / 2, "op")
            for k, s in enumerate(sats):
                b.leaves.append((s, OP_W / 2 - 0.35, SAT_DY * (k + 1), OP_W * 0.5, SAT_DY, "sat"))
            b.bottom += SAT_DY * len(sats)
            blocks.append(b)
    ncol = max(plan.rank) + 1 if plan.rank else 0
    col_w = [0.0] * ncol
    for b, r in zip(blocks, plan.rank, strict=True):
        col_w[r] = max(col_w[r], b.w)
    # Columns left to right; at the model level they wrap into rows of width ``wrap``.
    # With ``keep_rows`` (a group was opened or closed) every column keeps its row: the
    # columns after the group in its row shift right, the rows below shift down, nothing
    # jumps to another row.
    kept = wrap is not None and keep_rows is not None and len(keep_rows) == ncol
    col_x, col_row, rows_x = [0.0] * ncol, [0] * ncol, 0.0
    row = 0
    for r in range(ncol):
        if kept:
            if keep_rows[r] != row:
                row, rows_x = keep_rows[r], 0.0
        elif wrap is not None and rows_x > 0 and rows_x + col_w[r] > wrap:
            row, rows_x = row + 1, 0.0
        col_x[r], col_row[r] = rows_x, row
        rows_x += col_w[r] + GAP_X
    ys = [0.0] * len(blocks)
    by_col: dict[int, list[int]] = {}
    for i, r in enumerate(plan.rank):
        by_col.setdefault(r, []).append(i)
    for r in range(ncol):
        idx = by_col.get(r, [])
        keys = []
        for i in idx:
            # Level with the topmost producer: the main chain stays on one line.
            same = [ys[p] for p in plan.preds[i] if col_row[plan.rank[p]] == col_row[r]]
            free = not plan.preds[i]
            keys.append((free, min(same) if same else 0.0, i))
        bottom = None
        for _free, target, i in sorted(keys):
            b = blocks[i]
            y = target if bottom is None else max(target, bottom + GAP_Y - b.top)
            ys[i], bottom = y, y + b.bottom
    # Rows stacked: each row's top under the previous row's bottom.
    nrow = (max(col_row) + 1) if ncol else 0
    r_top = [np.inf] * nrow
    r_bot = [-np.inf] * nrow
    for i, b in enumerate(blocks):
        rw = col_row[plan.rank[i]]
        r_top[rw] = min(r_top[rw], ys[i] + b.top)
        r_bot[rw] = max(r_bot[rw], ys[i] + b.bottom)
    shift = [0.0] * nrow
    for rw in range(1, nrow):
        shift[rw] = shift[rw - 1] + r_bot[rw - 1] - r_top[rw] + ROW_GAP
    is_root = path == ROOT
    pad_l, pad_t, pad_b = (0.0, 0.0, 0.0) if is_root else (PAD, PAD_TOP, PAD)
    out = _Block(0.0, 0.0, 0.0, [], [])
    top, bot, right = np.inf, -np.inf, 0.0
    for i, b in enumerate(blocks):
        r = plan.rank[i]
        rw = col_row[r]
        dx = pad_l + col_x[r] + (col_w[r] - b.w) / 2
        dy = ys[i] + shift[rw]
        row_bottom = r_bot[rw] + shift[rw]
        for uid, cx, cy, w, hh, box in b.leaves:
            out.leaves.append((uid, cx + dx, cy + dy, w, hh, box))
            out.rows.append(row_bottom)
        for fp, x0, y0, x1, y1 in b.frames:
            out.frames.append((fp, x0 + dx, y0 + dy, x1 + dx, y1 + dy))
        top, bot = min(top, dy + b.top), max(bot, dy + b.bottom)
        right = max(right, dx + b.w)
    if not blocks:
        top, bot = -OP_H / 2, OP_H / 2
    out.w = right + pad_l
    out.top, out.bottom = top - pad_t, bot + pad_b
    out.col_rows = tuple(col_row) if wrap is not None else ()
    if not is_root:
        out.frames.insert(0, (path, 0.0, out.top, out.w, out.bottom))
    return out


def _open_groups(h: Hierarchy, collapsed: Iterable[str], expanded: Iterable[str] | None):
    if expanded is not None:
        want = set(expanded)
        for p in list(want):
            h.group(p)  # unknown paths raise, naming close ones
            want.update(h.ancestors(p))
        return frozenset(want | {ROOT})
    closed = set()
    for c in collapsed:
        h.group(c)
        closed.add(c)
    return frozenset(p for p in h.groups if p not in closed)


def graph_layout(
    graph: Graph, collapsed: Iterable[str] = (), *, expanded: Iterable[str] | None = None,
    wrap: float | None = ROW_W, keep_rows: GraphLayout | None = None,
) -> GraphLayout:  # fmt: skip
    """Lay out ``graph`` as nested groups.

    Args:
        collapsed: groups drawn closed (one box each); every other group is open.
        expanded: instead, the groups drawn open (their ancestors open too); every other
            group is closed. ``expanded=()`` shows the model's top level only.
        wrap: the model's top level wraps into rows this wide (None: one row).
        keep_rows: an earlier layout of the same graph whose rows are kept (a group opened
            or closed moves no unit to another row: the GraphView passes its last layout).

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> lay = graph_layout(g, collapsed=layer_scopes(g))
    >>> lay.units[1:], lay.edges
    (('scope:layers.0', 'scope:layers.1'), ((0, 1), (1, 2)))
    """
    h, plans = _structure(graph)
    open_ = _open_groups(h, collapsed, expanded)
    rows = keep_rows.rows if keep_rows is not None and keep_rows.rows else None
    block = _place(ROOT, plans, h, open_, wrap, rows)
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    first = {}
    for leaf in block.leaves:
        uid = leaf[0]
        first[uid] = pos[h.members(uid[len(BOX_PREFIX) :])[0]] if leaf[5] == "box" else pos[uid]
    order = sorted(range(len(block.leaves)), key=lambda i: first[block.leaves[i][0]])
    leaves = [block.leaves[i] for i in order]
    row_bottom = np.array([block.rows[i] for i in order])
    units = tuple(lf[0] for lf in leaves)
    index = {u: i for i, u in enumerate(units)}
    members: dict[str, tuple[str, ...]] = {}
    unit_of: dict[str, str] = {}
    for u, lf in zip(units, leaves, strict=True):
        members[u] = h.members(u[len(BOX_PREFIX) :]) if lf[5] == "box" else (u,)
        for m in members[u]:
            unit_of[m] = u
    x = np.array([lf[1] for lf in leaves])
    y_down = np.array([lf[2] for lf in leaves])
    w = np.array([lf[3] for lf in leaves])
    hh = np.array([lf[4] for lf in leaves])
    pairs = set()
    for a, b, _ in graph.edges():
        ia, ib = index[unit_of[a]], index[unit_of[b]]
        if ia != ib:
            pairs.add((ia, ib))
    edges = tuple(sorted(pairs))
    kind = np.array([lf[5] for lf in leaves])
    ex, ey, ax, ay, tip = _route(edges, x, y_down, w, hh, kind, row_bottom)
    frames = tuple(
        Frame(p, h.groups[p].label, x0, -y1, x1, -y0) for p, x0, y0, x1, y1 in block.frames
    )
    return GraphLayout(
        units=units, members=members, x=x, y=-y_down, edges=edges,
        is_box=kind == "box", kind=kind, w=w, h=hh, frames=frames,
        edge_x=ex, edge_y=-ey if len(ey) else ey, arrow_x=ax, arrow_y=-ay, edge_tip=tip, expanded=open_,
        rows=block.col_rows, _index=index, _unit_of=unit_of,
    )  # fmt: skip


def _route(edges, x, y, w, h, kind, row_bottom):
    """Polylines for the edges (y down here): straight or one elbow between neighbouring
    columns; over the units in between (or through the gap under a row) otherwise. A weight
    drawn under its op gets a short straight line and no arrow head."""
    if not edges:
        z = np.zeros(0)
        return z, z, z, z, np.zeros(0, dtype=bool)
    # A node is drawn smaller than its cell: edges end at the marker, boxes at their side.
    is_box, sat = kind == "box", kind == "sat"
    half = np.where(is_box, w / 2, 0.3)
    left, right = x - half, x + half
    # Per row, the sorted centres of the units an edge could pass over.
    centres: dict[float, np.ndarray] = {}
    for rb in np.unique(row_bottom):
        centres[float(rb)] = np.sort(x[(row_bottom == rb) & ~sat])
    top = np.where(sat, np.inf, y - h / 2)
    xs: list[float] = []
    ys: list[float] = []
    ax, ay, tip = [], [], []
    g = GAP_X * 0.4
    for i, j in edges:
        xa, ya, xb, yb = right[i], y[i], left[j], y[j]
        if sat[i] and abs(x[j] - x[i]) < OP_W:  # a weight under the op that reads it
            xs.extend((x[i], x[j], np.nan))
            ys.extend((y[i], y[j] + 0.25, np.nan))
            tip.extend((False, False, False))
            continue
        if row_bottom[i] != row_bottom[j]:  # another row: through the gap under the source's
            band = row_bottom[i] + ROW_GAP / 2
            pts = [(xa, ya), (xa + g, ya), (xa + g, band), (xb - g, band), (xb - g, yb),
                   (xb, yb)]  # fmt: skip
        else:
            lo, hi = np.searchsorted(centres[float(row_bottom[i])], [xa, xb])
            if hi <= lo:  # nothing between them: neighbours
                xm = max(xb - g, xa)  # the turn sits in the gap before the consumer
                pts = [(xa, ya), (xb, yb)] if abs(ya - yb) < 1e-9 else [
                    (xa, ya), (xm, ya), (xm, yb), (xb, yb)]  # fmt: skip
            else:
                over = (x + w / 2 > xa + g) & (x - w / 2 < xb - g) & (row_bottom == row_bottom[i])
                lane = min(float(top[over].min()) if over.any() else ya, ya, yb) - LANE
                pts = [(xa, ya), (xa + g, ya), (xa + g, lane), (xb - g, lane), (xb - g, yb),
                       (xb, yb)]  # fmt: skip
        for px, py in pts:
            xs.append(px)
            ys.append(py)
        xs.append(np.nan)
        ys.append(np.nan)
        tip.extend([False] * (len(pts) - 1) + [True, False])
        ax.append(xb)
        ay.append(yb)
    return np.array(xs), np.array(ys), np.array(ax), np.array(ay), np.array(tip, dtype=bool)
