"""Raw cost tables of a graph on a mesh, built once; ``weigh(params)`` turns them into costs.

The tables hold what does not depend on the weights: per node and strategy the local FLOPs,
bytes and memory and the in-op collectives; per edge and strategy pair the redistribution
steps; per parameter edge the gradient all-reduce. Changing a ``CostParams`` knob only
re-weighs these arrays (fast re-planning for the cost tuner).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..hardware import CollectiveKind, Mesh
from ..ir import Graph, OpGroup
from ..memo import memoize
from ..sharding import Layout, Strategy, redistribute, strategies
from ..sharding.redistribute import _shortest_from
from .errors import SearchError
from .params import CostParams

__all__ = ["CostModel", "NodeTable", "EdgeTable", "Weighted", "KINDS", "node_terms", "edge_terms"]

KINDS: tuple[CollectiveKind, ...] = tuple(CollectiveKind)
_KIND_INDEX = {k: i for i, k in enumerate(KINDS)}


@dataclass
class NodeTable:
    """Per-strategy raw quantities of one node (arrays indexed by strategy)."""

    name: str
    strategies: tuple[Strategy, ...]
    flops: np.ndarray
    rw_bytes: np.ndarray
    read_bytes: np.ndarray
    mem_bytes: np.ndarray
    coll_time: np.ndarray  # [k, m] seconds of the in-op (and output) collectives
    coll_bytes: np.ndarray  # [k, m] bytes sent per device
    coll_kind: np.ndarray  # [k, m] index into KINDS, -1 for padding
    is_dp: np.ndarray
    peak_flops: float
    mem_bw: float
    multiplicity: int = 1


@dataclass
class EdgeTable:
    """Redistribution (and gradient) costs of one use of a value, per strategy pair."""

    src: str
    dst: str
    pos: int
    time: np.ndarray  # [ku, kv, steps]
    nbytes: np.ndarray  # [ku, kv, steps]
    kind: np.ndarray  # [ku, kv, steps]
    grad_time: np.ndarray  # [ku, kv]
    grad_bytes: np.ndarray  # [ku, kv]
    multiplicity: int = 1
    allowed: np.ndarray | None = None  # [ku, kv] False where a follower may not go


@dataclass
class Weighted:
    """Costs under one CostParams: node vectors and edge matrices (multiplicity included)."""

    params: CostParams
    node_cost: list[np.ndarray]
    edge_cost: list[np.ndarray]
    mem: list[np.ndarray]
    cap_bytes: float | None
    tie: list[np.ndarray] = field(default_factory=list)


class CostModel:
    """The raw tables of ``graph`` on ``mesh``.

    Args:
        graph: the graph to plan.
        mesh: the device mesh (with hardware for the time-based preset).
        multiplicity: how many times each node (and each edge, keyed by consumer) stands
            for identical copies (repeated layers solved once).
        edge_multiplicity: per (src, dst) override of the edge count.
        extra_edges: ``(src, dst, pos, count)`` edges priced beside the graph's own (the
            layer-to-layer edges between copies of a repeated layer); ``src == dst`` is
            allowed (a node reading its own previous copy).
    """

    def __init__(
        self, graph: Graph, mesh: Mesh, multiplicity: dict[str, int] | None = None,
        edge_multiplicity: dict[tuple[str, str], int] | None = None,
        extra_edges: tuple[tuple[str, str, int, int], ...] = (),
    ) -> None:  # fmt: skip
        self.graph, self.mesh = graph, mesh
        self.strategies = strategies(graph, mesh)
        self.names = [n.name for n in graph.nodes]
        self.index = {n: i for i, n in enumerate(self.names)}
        mult = multiplicity or {}
        emult = edge_multiplicity or {}
        self.nodes = [self._node_table(n, mult.get(n, 1)) for n in self.names]
        self.edges: list[EdgeTable] = []
        for u, v, pos in graph.edges():
            m = emult.get((u, v), mult.get(v, 1))
            self.edges.append(self._edge_table(u, v, pos, m))
        self.n_graph_edges = len(self.edges)  # the extra edges follow
        for u, v, pos, m in extra_edges:
            self.edges.append(self._edge_table(u, v, pos, m))
        self._link()

    def _link(self) -> None:
        self.adj: list[list[int]] = [[] for _ in self.names]
        for e, t in enumerate(self.edges):
            self.adj[self.index[t.src]].append(e)
            self.adj[self.index[t.dst]].append(e)

    @classmethod
    def expanded(cls, tiled: CostModel, graph: Graph, rep: Callable[[str], str]) -> CostModel:
        """The tables of the full ``graph`` copied from ``tiled`` (built on its tiled graph,
        where ``rep(name)`` stands for ``name``), every multiplicity one: no strategy or
        redistribution is enumerated again. Layer ``k`` -> ``k+1`` edges of the tile copy
        the tiled model's extra (wrap) edges."""
        self = object.__new__(cls)
        self.graph, self.mesh = graph, tiled.mesh
        self.names = [n.name for n in graph.nodes]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.strategies = {}
        self.nodes = []
        for n in self.names:
            r = rep(n)
            strats = tiled.strategies[r]
            if r != n:
                strats = tuple(s._renamed(n) for s in strats)
            self.strategies[n] = strats
            nt = tiled.nodes[tiled.index[r]]
            self.nodes.append(dataclasses.replace(nt, name=n, strategies=strats, multiplicity=1))
        by_key = {(et.src, et.dst, et.pos): et for et in tiled.edges}
        self.edges = [dataclasses.replace(by_key[rep(u), rep(v), pos], src=u, dst=v, multiplicity=1)
                      for u, v, pos in graph.edges()]  # fmt: skip
        self.n_graph_edges = len(self.edges)
        self._link()
        return self

    # --- tables -----------------------------------------------------------------------
    def _node_table(self, name: str, multiplicity: int) -> NodeTable:
        g, mesh = self.graph, self.mesh
        strats = self.strategies[name]
        colls = []
        for s in strats:
            cs = list(s.collectives)
            if name in g.outputs and s.out_layout.partial:  # the output must be whole
                clean = Layout(s.out_layout.dims)
                cs += list(redistribute(s.out_layout, clean, g.node(name).type, mesh).steps)
            colls.append(cs)
        m = max((len(c) for c in colls), default=0)
        k = len(strats)
        ct, cb, ck = np.zeros((k, m)), np.zeros((k, m)), -np.ones((k, m), dtype=int)
        for i, cs in enumerate(colls):
            for j, c in enumerate(cs):
                ct[i, j], cb[i, j], ck[i, j] = c.time_s, c.bytes_per_device, _KIND_INDEX[c.kind]
        node = g.node(name)
        peak = mem_bw = 0.0
        if mesh.hardware is not None:
            chip = mesh.hardware.chip
            dtype = node.type.dtype.value
            if dtype in chip.dtypes:
                peak = chip.peak_flops(dtype)
            elif not any(s.local_flops for s in strats) or g.group(name) is not OpGroup.CONTRACTION:
                # Elementwise and reduction ops run on vector units, for which profiles list
                # no peak (Ascend 910 lists only its fp16/int8 cube rates): they are costed
                # as memory-bound, by bytes over bandwidth alone.
                peak = float("inf")
            else:
                peak = chip.peak_flops(dtype)  # raises: names the chip and the dtypes it has
            mem_bw = chip.memory_bandwidth_bytes_per_s
        return NodeTable(
            name=name, strategies=strats,
            flops=np.array([s.local_flops for s in strats], dtype=float),
            rw_bytes=np.array([s.bytes_read + s.bytes_written for s in strats], dtype=float),
            read_bytes=np.array([s.bytes_read for s in strats], dtype=float),
            mem_bytes=np.array([s.memory_bytes for s in strats], dtype=float),
            coll_time=ct, coll_bytes=cb, coll_kind=ck,
            is_dp=np.array([s.is_data_parallel for s in strats]),
            peak_flops=peak, mem_bw=mem_bw, multiplicity=multiplicity,
        )  # fmt: skip

    def _edge_table(self, u: str, v: str, pos: int, mult: int) -> EdgeTable:
        g = self.graph
        su, sv = self.strategies[u], self.strategies[v]
        ttype = g.node(u).type
        is_param = g.node(u).op == "param"
        src = tuple(s.out_layout for s in su)
        dst = tuple(s.in_layouts[pos] for s in sv)
        used = (
            tuple(tuple(a for _, axes in s.dim_axes for a in axes) for s in sv) if is_param else ()
        )
        # A weight (or input) read by one op only follows that op: it is laid out exactly
        # as the op needs it (MindSpore gives parameters their consumer's layout), so only
        # matching pairs are priced. This keeps tables small on meshes with many axes.
        follower = g.node(u).is_source and len(g.consumers(u)) == 1 and u not in g.outputs
        t, b, k, gt, gb, ok = _pair_arrays(src, dst, ttype, used, follower, self.mesh)
        return EdgeTable(u, v, pos, t, b, k, gt, gb, mult, ok)

    # --- weights ----------------------------------------------------------------------
    def weigh(self, params: CostParams) -> Weighted:
        """Node cost vectors and edge cost matrices under ``params`` (``node_terms`` and
        ``edge_terms`` summed: the one weighing formula, shared with the breakdown)."""
        p = params
        if p.unit == "seconds" and self.mesh.hardware is None:
            raise SearchError(
                f"{self.mesh} has no hardware, so time-based costs cannot be computed; "
                "pass hardware= to Mesh or use CostParams.mindspore() (byte-based)"
            )
        node_cost, mem, tie = [], [], []
        for nt in self.nodes:
            compute, comm, memory = node_terms(nt, p)
            node_cost.append(compute + comm.sum(axis=-1) + memory)
            mem.append(nt.mem_bytes * nt.multiplicity)
            tie.append(np.where(nt.is_dp, 0.0, 1.0) if p.prefer_data_parallel_on_ties
                       else np.zeros(len(nt.strategies)))  # fmt: skip
        edge_cost = []
        for et in self.edges:
            comm, grad = edge_terms(et, p)
            c = comm.sum(axis=-1) + grad
            if et.allowed is not None:
                c = np.where(et.allowed, c, np.inf)
            edge_cost.append(c)
        cap = p.device_memory_cap_bytes
        return Weighted(p, node_cost, edge_cost, mem, cap, tie)

    @staticmethod
    def _adjust(c: np.ndarray, p: CostParams) -> np.ndarray:
        return message_cost(c, p)

    def total(self, w: Weighted, choice: list[int]) -> float:
        """Objective of one assignment (strategy index per node)."""
        cost = sum(float(w.node_cost[i][k]) for i, k in enumerate(choice))
        for e, et in enumerate(self.edges):
            cost += float(w.edge_cost[e][choice[self.index[et.src]], choice[self.index[et.dst]]])
        return cost

    def memory(self, w: Weighted, choice: list[int]) -> float:
        return sum(float(w.mem[i][k]) for i, k in enumerate(choice))

    def device_memory_cap(self, params: CostParams) -> float | None:
        if params.device_memory_cap_bytes is not None:
            return params.device_memory_cap_bytes
        if self.mesh.hardware is not None:
            return float(self.mesh.hardware.chip.memory_bytes)
        return None


# --- the weighing formula (the solver's objective, the breakdown and explain use it) ------
def message_cost(c, p: CostParams):
    """MindSpore's message adjustment: small messages cost a constant, others c + bias."""
    return np.where(c <= 0, 0.0, np.where(c <= p.message_threshold_bytes,
                    p.message_constant_bytes, c + p.message_bias_bytes))  # fmt: skip


def _comm_units(time_s, nbytes, p: CostParams):
    """One collective step's unweighted cost: seconds at the achievable bandwidth, or
    adjusted bytes."""
    return time_s / p.bandwidth_efficiency if p.unit == "seconds" else message_cost(nbytes, p)


def _factors(p: CostParams) -> tuple[float, float, float]:
    """Weights of compute, of communication and of gradient traffic (training counts the
    backward pass; overlapped gradient traffic is free)."""
    fwd_bwd = 1 + (p.backward_compute_ratio if p.training else 0)
    comm_x = 1 + (p.backward_comm_ratio if p.training else 0)
    grad_w = p.gamma_param_comm * (1 - p.grad_comm_overlap) if p.training else 0.0
    return p.alpha_compute * fwd_bwd, p.beta_communication * comm_x, grad_w


def node_terms(nt: NodeTable, p: CostParams, k=slice(None)):
    """``(compute, comm per collective step, memory)`` of node strategies ``k`` (all by
    default: arrays over strategies; an int: one strategy), multiplicity included."""
    w_compute, w_comm, _ = _factors(p)
    if p.unit == "seconds":
        compute = np.maximum(nt.flops[k] / (nt.peak_flops * p.compute_efficiency),
                             nt.rw_bytes[k] / (nt.mem_bw * p.bandwidth_efficiency))  # fmt: skip
    else:
        compute = nt.read_bytes[k]
    m = nt.multiplicity
    comm = w_comm * _comm_units(nt.coll_time[k], nt.coll_bytes[k], p) * m
    return w_compute * compute * m, comm, p.memory_weight_per_byte * nt.mem_bytes[k] * m


def edge_terms(et: EdgeTable, p: CostParams, ku=slice(None), kv=slice(None)):
    """``(comm per redistribution step, gradient)`` of edge strategy pairs ``[ku, kv]``,
    multiplicity included."""
    _, w_comm, w_grad = _factors(p)
    m = et.multiplicity
    comm = w_comm * _comm_units(et.time[ku, kv], et.nbytes[ku, kv], p) * m
    grad = w_grad * _comm_units(et.grad_time[ku, kv], et.grad_bytes[ku, kv], p) * m
    return comm, grad


@memoize(maxsize=4096, name="search.pair_arrays")
def _pair_arrays(src, dst, ttype, used, follower, mesh: Mesh):
    """Per (source strategy, destination strategy): the redistribution steps' time, bytes
    and kind, and the gradient all-reduce; ``ok`` marks the pairs a follower may take.
    Shared between models (read-only arrays); the key is every input.

    Many strategies share a layout, so the redistributions are found once per pair of
    distinct layouts (indexed, not hashed, in the loops: a table holds up to ~10^4 pairs)."""
    us, vs = list(dict.fromkeys(src)), list(dict.fromkeys(dst))
    ui = {a: i for i, a in enumerate(us)}
    vi = {b: j for j, b in enumerate(vs)}
    si, dj = [ui[a] for a in src], [vi[b] for b in dst]
    ok = None
    if follower:
        ok = np.array([[a == b for b in dst] for a in src], dtype=bool)
        for j in range(len(dst)):  # a required layout no source strategy has: price it
            if not ok[:, j].any():
                ok[:, j] = True
        want = np.zeros((len(us), len(vs)), dtype=bool)
        for i, j in zip(*np.nonzero(ok), strict=True):
            want[si[i], dj[j]] = True
    else:
        want = np.ones((len(us), len(vs)), dtype=bool)
    # plans[p][q]: the collectives turning us[p] into vs[q] (None: not priced)
    plans: list[list[tuple | None]] = [[None] * len(vs) for _ in us]
    for p, a in enumerate(us):
        kept_a = set(a.partial)
        froms: dict[tuple[str, ...], dict] = {}  # one Dijkstra from ``a`` per kept axes
        for q in np.flatnonzero(want[p]):
            b = vs[q]
            if a == b:
                plans[p][q] = ()
            elif not (set(b.partial) - kept_a):
                # one Dijkstra from ``a`` serves every target (redistribute's own search)
                best = froms.get(b.partial)
                if best is None:
                    best = froms[b.partial] = _shortest_from(a, ttype, mesh, frozenset(b.partial))
                plans[p][q] = tuple(m.collective for m in best[b] if m.collective is not None)
            else:
                plans[p][q] = redistribute(a, b, ttype, mesh).steps  # raises: explains why
    steps = max((len(c) for row in plans for c in row if c is not None), default=0)
    ku, kv = len(src), len(dst)
    # the distinct pairs' steps as arrays, then gathered per strategy pair
    ut, unb = np.zeros((len(us), len(vs), steps)), np.zeros((len(us), len(vs), steps))
    ukd = -np.ones((len(us), len(vs), steps), dtype=int)
    for p, row in enumerate(plans):
        for q, cs in enumerate(row):
            for s, c in enumerate(cs or ()):
                ut[p, q, s], unb[p, q, s], ukd[p, q, s] = (
                    c.time_s,
                    c.bytes_per_device,
                    _KIND_INDEX[c.kind],
                )
    priced = np.array([[c is not None for c in row] for row in plans], dtype=bool).reshape(
        len(us), len(vs)
    )
    rows, cols = np.ix_(si, dj)
    t, nb, kd = ut[rows, cols], unb[rows, cols], ukd[rows, cols]
    gt, gb = np.zeros((ku, kv)), np.zeros((ku, kv))
    if used:
        has = priced[rows, cols]
        for i, a in enumerate(src):
            for j in range(kv):
                if not has[i, j]:
                    continue
                axes = tuple(x for x in mesh.axis_names if x in used[j] and x not in a.axes)
                if axes:
                    size = float(np.prod(a.local_shape(ttype.shape, mesh))) * ttype.dtype.itemsize
                    gb[i, j] = mesh.collective_bytes("all-reduce", size, axes)
                    if mesh.hardware is not None:
                        gt[i, j] = mesh.collective_time("all-reduce", size, axes)
    return t, nb, kd, gt, gb, ok


def is_source(graph: Graph, name: str) -> bool:
    return graph.group(name) is OpGroup.SOURCE
