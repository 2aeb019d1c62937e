"""MindSpore-style recursive programming, refined by local descent over many plans at once."""

from __future__ import annotations

import heapq
import math
import re
from collections import deque

import numpy as np

from ...memo import Memo
from ...sharding import Strategy
from ..problem import Problem
from .deadline import Deadline
from .propagation import neighbours

__all__ = ["solve_recursive"]


# a layer index in a module path ("layers.3.", "h.3.", "blocks.3."): copies of a layer
_LAYER = re.compile(r"(^|\.)\d+\.")
_CUT_KEYS: Memo[list] = Memo("search.recursive.cut_keys", maxsize=32)
_ROUND_CANDS: Memo[tuple] = Memo("search.recursive.round_cands", maxsize=1 << 16)
_STRUCTURES: Memo = Memo("search.recursive.structure", maxsize=32)
TOP_OPS, TOP_CUTS = 6, 4  # propagation starts of recursive programming: ops x their cuts
CHAIN_STARTS = 4  # the cheapest distinct local optima refined further by chain moves


def _axis_letters(s: Strategy, axes: tuple[str, ...]) -> tuple[str | None, ...]:
    owner = {a: c for c, ax in s.dim_axes for a in ax}
    return tuple(owner.get(a) for a in axes)


def solve_recursive(p: Problem, deadline: Deadline | None = None) -> dict[int, int]:
    """Recursive programming (see ``_rounds``) from a few starts, refined by local descent;
    the cheapest wins. Starts: rounds over the mesh axes outermost first, ops by descending
    cost and in graph order; the all-replicated plan (rounds are myopic where latency
    dominates, on tiny tensors); the data-parallel plan (``_Local.data_parallel``); and
    propagation from the most promising cuts of each scope's costliest op (coherent
    chains, e.g. heads split through a whole attention block), cuts ranked by their own
    cost plus their neighbours' cheapest answer (own costs tie often: every 8-way split
    computes the same), once alone and once inside the data-parallel plan.

    Rounds alone miss the data-parallel region: where every 2-way split computes alike,
    one op cuts the batch and its neighbour the sequence, and no local move undoes a
    whole region (tiny traced phi on dp2 x tp4 under the byte model: +37% over the
    optimum). The data-parallel start and propagation inside it reach it.

    All starts descend together, as rows of one array (``_Local.descend``), by single-op
    and edge moves. Then regions grow inside the best plan: each top op takes each cut
    that keeps its batch split and cuts more (e.g. the sequence over tp), propagated
    through the best plan, and descends (a sequence-parallel tail of the layers). The few
    cheapest distinct results descend further with chain moves, which re-pick three ops
    in a row together (e.g. a value gathered once after a chain of elementwise ops
    instead of at its start). No exact solver is called: every move is local, and each
    start's result is a local optimum of these moves. The plan never costs more than the
    data-parallel start.

    When ``deadline`` passes, the starts not yet made are skipped and the descent stops
    where it is: the cheapest plan so far (a descent never raises a plan's total)."""
    model = p.model
    local = _Local(p)
    local.deadline = deadline
    axes = tuple(a for a in model.mesh.axis_names if model.mesh.axis_size(a) > 1)
    nb = neighbours(p)
    by_cost = sorted(p.active, key=lambda i: (-float(np.max(p.cost[i])), i))
    by_graph = sorted(p.active)
    dp = local.data_parallel(axes)
    starts = [np.zeros(local.n, dtype=np.intp), dp]
    memo: dict = {}
    for n, order in enumerate((by_cost, by_graph)):
        if n and deadline is not None and deadline.passed("while making the starting plans"):
            break
        starts.append(local.array(_rounds(p, axes, order, nb, memo, local.base)))
    tops, scopes = [], set()
    for i in by_cost:  # the costliest op of each scope (attention, MLP, experts, head)
        # copies of a layer propagate alike: one scope for all of them
        scope = _LAYER.sub(r"\1*.", model.graph.node(model.names[i]).scope + ".")
        if scope not in scopes:
            scopes.add(scope)
            tops.append(i)
    for top in tops[:TOP_OPS]:
        if deadline is not None and deadline.passed("while making the starting plans"):
            break
        cuts = np.argsort(local.ahead(top), kind="stable")[:TOP_CUTS]
        starts.extend(local.propagate(top, cuts))
        starts.extend(local.propagate(top, cuts, background=dp))
    # propagation from different cuts often lands on one plan: each distinct start once
    x = _unique_rows(np.stack(starts))
    x = local.distinct(local.descend(x, by_cost, chains=False))
    if deadline is None or not deadline.passed("before growing regions in the best plan"):
        grown = []
        for top in tops[:TOP_OPS]:
            cuts = local.extensions(top, dp)
            if len(cuts):
                grown.extend(local.propagate(top, cuts, background=x[0]))
        if grown:
            grown = local.descend(_unique_rows(np.stack(grown)), by_cost, chains=False)
            x = local.distinct(np.concatenate([x, grown]))
    if deadline is None or not deadline.passed("before the chain moves"):
        x = x[:CHAIN_STARTS]
        x = local.distinct(local.descend(x, by_cost, chains=True, settled=True))
    return {i: int(x[0, i]) for i in p.active}


def _rounds(
    p: Problem, axes: tuple[str, ...], order: list[int], nb, memo: dict | None = None,
    base: list | None = None,
) -> dict[int, int]:  # fmt: skip
    """One pass of recursive programming: one round per mesh axis, in the order given.

    In each round every op, visited in ``order``, picks which of its dims the round's
    axis cuts (or none): the cut with the lowest op cost plus the redistribution cost to
    every neighbour under the neighbour's current cut. Earlier rounds' cuts are kept, so
    the final strategy is built axis by axis as MindSpore builds it halving by halving
    (a mesh written as binary axes, e.g. ``Mesh({"d0": 2, ..., "d9": 2})``, gets
    log2(devices) rounds). ``memo`` keeps look-aheads for other passes over the same
    problem (they depend on the two ops' earlier cuts only); ``base``, each op's own cost
    with the tie-break.
    """
    memo = {} if memo is None else memo
    base = {i: p.cost[i] + p.eps * p.tie[i] for i in p.active} if base is None else base
    model = p.model
    keys = _cut_keys(model, axes)
    decided: dict[int, tuple] = {i: (None,) * len(axes) for i in p.active}
    current = {i: keys[i][decided[i]] for i in p.active}

    def round_cands(r: int, i: int) -> tuple[tuple[tuple, ...], np.ndarray]:
        return _round_cands(model, axes, i, r, decided[i][:r])

    cands: dict[int, dict[int, np.ndarray]] = {}
    for r in range(len(axes)):
        cands[r] = {i: round_cands(r, i)[1] for i in p.active}
        visited: set[int] = set()
        for i in order:
            cand_keys, ks = round_cands(r, i)
            c = base[i][ks]
            for slot, (j, m) in enumerate(nb[i]):
                if j in visited:  # neighbours that already cut this round: their cut
                    c = c + m[ks, current[j]]
                    continue
                # the others: the cheapest cut they could still take (look-ahead)
                lk = (axes, i, slot, r, decided[i][:r], decided[j][:r])
                ahead = memo.get(lk)
                if ahead is None:
                    kj = cands[r][j]
                    ahead = memo[lk] = np.minimum.reduce(m[ks[:, None], kj] + p.cost[j][kj], axis=1)
                c = c + ahead
            best = int(c.argmin())
            decided[i] = cand_keys[best]
            current[i] = int(ks[best])
            visited.add(i)
    return current


def _cut_keys(model, axes: tuple[str, ...]) -> list[dict[tuple, int]]:
    """Per node: which of its strategies cuts which dim on each axis (the first strategy of
    each cut). Depends on the tables only, so it is memoized on (model, axes)."""

    def compute() -> list[dict[tuple, int]]:
        out = []
        for nt in model.nodes:
            found: dict[tuple, int] = {}
            for k, s in enumerate(nt.strategies):
                found.setdefault(_axis_letters(s, axes), k)
            out.append(found)
        return out

    return _CUT_KEYS.get((model, axes), compute)


def _round_cands(
    model, axes, i: int, r: int, prefix: tuple
) -> tuple[tuple[tuple, ...], np.ndarray]:
    """Round ``r``'s candidates of node ``i``: earlier rounds' cuts (``prefix``) kept, this
    round's axis free, later ones unset."""

    def compute():
        keys = _cut_keys(model, axes)[i]
        cand = [(key, k) for key, k in keys.items()
                if key[:r] == prefix and all(x is None for x in key[r + 1 :])]  # fmt: skip
        return tuple(key for key, _ in cand), np.array([k for _, k in cand])

    return _ROUND_CANDS.get((model, axes, i, r, prefix), compute)


def _unique_rows(x: np.ndarray) -> np.ndarray:
    """The distinct rows of ``x``, first occurrences in order."""
    return np.stack(list({row.tobytes(): row for row in x}.values()))


# A move must gain a relative 1e-12 (more than rounding): it must cost below now * _KEEP.
# Costs are never negative (CostParams rejects negative weights); an infinite cost (a
# forbidden pair) is left for any finite one.
_KEEP = 1 - 1e-12


class _Structure:
    """What local moves need of a problem's graph, independent of the weights (cached on
    the CostModel): per op its neighbour slots (one per edge end, parallel edges apart),
    the moves over two and three ops, and the propagation orders."""

    def __init__(self, p: Problem) -> None:
        n = len(p.model.names)
        self.n = n
        slots: list[list[tuple[int, int, bool]]] = [[] for _ in range(n)]  # (nbr, edge, T)
        between: dict[tuple[int, int], list[int]] = {}
        for e, (i, j, _m) in enumerate(p.edges):
            slots[i].append((j, e, False))
            slots[j].append((i, e, True))
            if i != j:
                between.setdefault((min(i, j), max(i, j)), []).append(e)
        self.slots = slots
        self.nbs = [np.array([j for j, _, _ in sl], dtype=np.intp) for sl in slots]
        self.adj = [sorted(set(self.nbs[i].tolist()) - {i}) for i in range(n)]
        # where each slot's columns start in the op's stacked edge matrices
        self.off = [np.cumsum([0, *(len(p.cost[j]) for j in self.nbs[i][:-1])]).astype(np.intp)
                    for i in range(n)]  # fmt: skip
        self.between = between
        act = set(p.active)
        self.pairs = [(i, j) for i, j in sorted(between) if i in act and j in act]
        self.chains = []
        for b in sorted(act):
            if len(self.adj[b]) != 2:  # through ops that link two others only (elementwise)
                continue
            for x, a in enumerate(self.adj[b]):
                for c in self.adj[b][x + 1 :]:
                    if a in act and c in act and c not in self.adj[a]:  # an induced path
                        self.chains.append((a, b, c))
        self.prop: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        self.paths = {False: [self._path(m) for m in self.pairs]}
        self.paths[True] = self.paths[False] + [self._path(m) for m in self.chains]

    def _path(self, nodes: tuple[int, ...]):
        """A move: its ops, per op its slots outside the move, and the ops whose change
        makes it worth re-trying."""
        inside = set(nodes)
        keep = []
        for v in nodes:
            kp = np.array([s for s, j in enumerate(self.nbs[v]) if j not in inside], dtype=np.intp)
            keep.append((self.off[v][kp], self.nbs[v][kp]))
        watch = sorted(inside.union(*(self.adj[v] for v in nodes)))
        return nodes, keep, np.array(watch, dtype=np.intp)

    def propagation_order(self, p: Problem, top: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``solve_propagation``'s visiting order from ``top``: each op with the slots of
        the neighbours already fixed when it settles (the same for every cut of ``top``)."""
        if top not in self.prop:
            done: set[int] = set()
            order = []
            queue = deque([top])

            def settle(v: int) -> None:
                fixed = np.array([s for s, j in enumerate(self.nbs[v]) if j in done], dtype=np.intp)
                order.append((v, self.off[v][fixed], self.nbs[v][fixed]))
                done.add(v)
                queue.append(v)

            for root in [top, *p.active]:
                if root not in done:
                    settle(root)
                while queue:
                    u = queue.popleft()
                    for v in self.nbs[u].tolist():
                        if v not in done:
                            settle(v)
            self.prop[top] = order
        return self.prop[top]


class _Local:
    """Local moves over a Problem for many plans at once (rows of an int array). Each op's
    edge matrices are stacked side by side, so that its cost given its neighbours, for
    every plan, is one gather (``unary``)."""

    def __init__(self, p: Problem) -> None:
        self.deadline: Deadline | None = None  # set per search by solve_recursive
        # memoized on everything _Structure reads: the node count, the active nodes, the
        # edges' ends and every node's strategy count
        sizes = tuple(0 if c is None else len(c) for c in p.cost)
        shape = (len(p.model.names), tuple(p.active), tuple((i, j) for i, j, _ in p.edges), sizes)
        st = _STRUCTURES.get(shape, lambda: _Structure(p))
        self.p, self.st, self.n = p, st, st.n
        self.off = st.off
        self.stack: list[np.ndarray | None] = []
        for i in range(self.n):
            mats = [p.edges[e][2].T if t else p.edges[e][2] for _, e, t in st.slots[i]]
            self.stack.append(np.hstack(mats) if mats else None)
        self.base: list[np.ndarray | None] = [None] * self.n
        for i in p.active:
            self.base[i] = p.cost[i] + p.eps * p.tie[i]
        self.link: dict[tuple[int, int], np.ndarray] = {}
        for (i, j), es in st.between.items():
            m = sum((p.edges[e][2] for e in es[1:]), p.edges[es[0]][2])
            self.link[i, j], self.link[j, i] = m, m.T
        self.moves = {}
        for chains, paths in st.paths.items():
            self.moves[chains] = []
            for nodes, keep, watch in paths:
                links = [self.link[a, b] for a, b in zip(nodes, nodes[1:], strict=False)]
                # per op: its base cost and the slots outside the move (None: no slot)
                ops = [(self.base[v][:, None], *self._slots(v, cols, js))
                       for v, (cols, js) in zip(nodes, keep, strict=True)]  # fmt: skip
                self.moves[chains].append((nodes, ops, links, watch, watch.tolist()))
        self.whole = [None if self.base[i] is None else
                      (self.base[i][:, None], *self._slots(i, st.off[i], st.nbs[i]))
                      for i in range(self.n)]  # fmt: skip

    def _slots(self, i: int, cols: np.ndarray, js: np.ndarray) -> tuple:
        """(stack, cols, js) of a gather over the slots ``cols``/``js`` of op ``i``; no
        stack where it has no slot."""
        return (self.stack[i] if len(js) else None), cols, js

    def ahead(self, i: int) -> np.ndarray:
        """Op ``i``'s cost under each strategy plus, for every neighbour, its cheapest
        strategy given that one (ranks cuts whose own costs tie, e.g. equal-size splits)."""
        c = self.base[i].copy()
        for s, j in enumerate(self.st.nbs[i]):
            cols = slice(self.off[i][s], self.off[i][s] + len(self.p.cost[j]))
            c += np.minimum.reduce(self.stack[i][:, cols] + self.p.cost[j], axis=1)
        return c

    def array(self, choice: dict[int, int]) -> np.ndarray:
        cur = np.zeros(self.n, dtype=np.intp)
        for i, k in choice.items():
            cur[i] = k
        return cur

    def unary(self, i: int, x: np.ndarray, cols=None, js=None) -> np.ndarray:
        """[k, plan]: op ``i``'s cost under each of its strategies given its neighbours
        in each plan of ``x`` (only the slots ``cols``/``js`` when given)."""
        if js is None:
            cols, js = self.off[i], self.st.nbs[i]
        if not len(js):
            return np.repeat(self.base[i][:, None], len(x), axis=1)
        return self.base[i][:, None] + np.add.reduce(self.stack[i][:, cols + x[:, js]], axis=2)

    def propagate(
        self, top: int, cuts: np.ndarray, background: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """``solve_propagation(p, {top: k})`` for every ``k`` in ``cuts`` at once. With a
        ``background`` plan, each op settles against all its neighbours, those not yet
        reached holding their background strategy (a cut grown inside that plan, e.g. a
        tensor-parallel block inside the data-parallel plan); without, against the reached
        ones only."""
        if background is None:
            x = np.zeros((len(cuts), self.n), dtype=np.intp)
        else:
            x = np.repeat(background[None, :], len(cuts), axis=0)
        for v, cols, js in self.st.propagation_order(self.p, top):
            if v == top:
                x[:, v] = cuts
            elif background is None:
                x[:, v] = self.unary(v, x, cols, js).argmin(axis=0)
            else:
                x[:, v] = self.unary(v, x).argmin(axis=0)
        return list(x)

    def extensions(self, i: int, dp: np.ndarray) -> np.ndarray:
        """Op ``i``'s strategies that keep its cuts in the plan ``dp`` and cut more (e.g.
        the batch over dp and the sequence or heads over tp); none where ``dp`` replicates
        it."""
        strats = self.p.model.nodes[i].strategies
        have = set(strats[dp[i]].dim_axes)
        ks = [k for k, s in enumerate(strats) if have and have < set(s.dim_axes)]
        return np.array(ks, dtype=np.intp)

    def data_parallel(self, axes: tuple[str, ...]) -> np.ndarray:
        """The data-parallel plan: each op computed from a graph input splits its batch
        (its first input's first dim) over as many devices as it divides, the mesh's axes
        in order on ties; parameters, what is computed from them alone (position tables,
        masks) and ops with no such cut are replicated. A start that rounds and propagation
        miss where every op's own cuts tie (an 8-way split computes alike on any dim)."""
        mesh, model = self.p.model.mesh, self.p.model
        graph = model.graph
        data: set[str] = set()  # the values computed from a graph input (the batch)
        for node in graph.nodes:  # in topological order
            if node.op == "input" or any(a in data for a in node.inputs):
                data.add(node.name)
        x = np.zeros(self.n, dtype=np.intp)
        for i in self.p.active:
            if model.names[i] not in data:
                continue
            best = 1
            for k, s in enumerate(model.nodes[i].strategies):
                if s.is_data_parallel and set(s.dim_axes[0][1]) <= set(axes):
                    size = math.prod(mesh.axis_size(a) for a in s.dim_axes[0][1])
                    if size > best:
                        x[i], best = k, size
        return x

    def objective(self, x: np.ndarray) -> np.ndarray:
        p = self.p
        total = np.zeros(len(x))
        for i in p.active:
            total += p.cost[i][x[:, i]]
        for i, j, m in p.edges:
            total += m[x[:, i], x[:, j]]
        return total

    def distinct(self, x: np.ndarray) -> np.ndarray:
        """The distinct plans of ``x``, cheapest first (ties by plan, for determinism)."""
        x = _unique_rows(x)
        obj = self.objective(x)
        return x[np.lexsort((*x.T[::-1], obj))]

    def descend(self, x: np.ndarray, order: list[int], chains: bool, settled: bool = False,
                max_sweeps: int = 64) -> np.ndarray:  # fmt: skip
        """Local descent of every plan (row) of ``x``; the total never grows. Each op takes
        its best strategy given its neighbours'; then each edge (and, with ``chains``, each
        path of three ops) re-picks its ops together, all other neighbours fixed. A move is
        re-tried in a plan only after something near it changed; stops when none gains.
        ``settled``: no single-op or edge move gains in ``x`` yet (a descent's result)."""
        return _Descent(self, x, order, max_sweeps).run(chains, settled)


class _Descent:
    """The state of one ``_Local.descend``: the plans, which ops wait for a single move (a
    work list visited in sweeps over ``order``), and per plan and op when it last changed
    (so that an edge or chain move is re-tried only after a change near it)."""

    def __init__(self, local: _Local, x: np.ndarray, order: list[int], max_sweeps: int) -> None:
        self.local = local
        self.x = x.copy()
        self.adj = local.st.adj
        self.pos = dict(zip(order, range(len(order)), strict=True))
        self.order = order
        self.max_sweeps = max_sweeps
        n = local.n
        # Work list: ops whose neighbours changed (in some plan), as a heap of (sweep,
        # position, op); an op marked behind the sweep's position waits for the next sweep.
        # ``key`` drops the stale entries of ops unmarked or marked again.
        self.pending = [False] * n
        self.key: list[tuple[int, int] | None] = [None] * n
        self.heap: list[tuple[int, int, int]] = []
        self.sweep, self.position = 0, -1  # where the work list is being visited
        self.clock = 1  # counts moves
        self.last = [0] * n  # per op, the clock of its last change in any plan
        self._rows(self.x)

    def _rows(self, x: np.ndarray) -> None:
        self.x = x
        self.rows_all = np.arange(len(x))
        self.changed_at = np.zeros((len(x), self.local.n), dtype=np.int64)  # [plan, op] clock

    def mark(self, j: int) -> None:
        if not self.pending[j]:
            self.pending[j] = True
            self.key[j] = (self.sweep + (self.pos[j] <= self.position), self.pos[j])
            heapq.heappush(self.heap, (*self.key[j], j))

    def move(self, rows: np.ndarray, i: int, k: np.ndarray) -> None:
        """Op ``i`` takes strategies ``k`` in the plans ``rows``; its neighbours are marked."""
        self.x[rows, i] = k
        self.changed_at[rows, i] = self.last[i] = self.clock
        self.clock += 1
        for j in self.adj[i]:
            self.mark(j)

    def singles(self) -> None:
        """Single-op moves until the work list is empty (or ``max_sweeps`` sweeps). Every
        plan is looked at: cheaper than tracking which ones changed, and a plan whose
        neighbours did not change keeps its strategy (only a strict gain moves)."""
        x, rows = self.x, self.rows_all
        deadline = self.local.deadline
        while self.heap:
            if deadline is not None and deadline.passed("during the local descent"):
                break
            sweep, q, i = heapq.heappop(self.heap)
            if not self.pending[i] or self.key[i] != (sweep, q):
                continue
            if sweep >= self.max_sweeps:
                break
            self.sweep, self.position = sweep, q
            self.pending[i] = False
            base, stack, off, nbs = self.local.whole[i]
            if stack is None:
                u = np.broadcast_to(base, (len(base), len(x)))
            else:
                u = base + np.add.reduce(stack[:, off + x[:, nbs]], axis=2)
            now = u[x[:, i], rows]
            k = u.argmin(axis=0)
            gain = (u[k, rows] < now * _KEEP).nonzero()[0]
            if gain.size:
                self.move(gain, i, k[gain])
        self.heap.clear()
        self.pending[:] = [False] * len(self.pending)
        self.sweep, self.position = 0, -1

    def try_path(self, path, rows: np.ndarray) -> np.ndarray:
        """Re-pick the ops of ``path`` in the plans ``rows`` (a Viterbi pass along the path,
        every other neighbour fixed); the rows that gained."""
        nodes, keep, links, _, _ = path
        xr = self.x[rows]
        r = np.arange(len(rows))
        cur = [xr[:, v] for v in nodes]
        us = [np.broadcast_to(base, (len(base), len(rows))) if stack is None
              else base + np.add.reduce(stack[:, cols + xr[:, js]], axis=2)
              for base, stack, cols, js in keep]  # fmt: skip
        if len(nodes) == 2:  # both ends at once: the whole [k0, k1, plan] table
            tot = us[0][:, None, :] + links[0][:, :, None]
            tot += us[1][None, :, :]
            k1 = tot.shape[1]
            flat = tot.reshape(-1, len(rows))
            best = flat.argmin(axis=0)
            sel = (flat[best, r] < flat[cur[0] * k1 + cur[1], r] * _KEEP).nonzero()[0]
            if not sel.size:
                return sel
            ks = [best[sel] % k1, best[sel] // k1]
        else:
            sel, ks = _viterbi(us, links, cur, r)
            if not sel.size:
                return sel
        for v, kv in zip(nodes, reversed(ks), strict=True):
            diff = kv != xr[sel, v]
            if diff.any():
                self.move(rows[sel][diff], v, kv[diff])
        for v in nodes:  # re-picked together: no single move of one of them gains
            self.pending[v] = False
        return sel

    def run(self, chains: bool, settled: bool) -> np.ndarray:
        if not settled:
            for i in self.order:
                self.mark(i)
        self.singles()
        if not settled:  # plans that met under single moves descend alike from here
            self._rows(_unique_rows(self.x))
        moves = self.local.moves[chains]
        n_edge_moves = len(self.local.moves[False])
        tried = np.zeros((len(self.x), len(moves)), dtype=np.int64)  # [plan, move] clock
        low = [0] * len(moves)  # per move, its earliest failure over the plans (0: none)
        if settled:  # edge moves failed everywhere: re-tried only after a change near them
            tried[:, :n_edge_moves] = 1  # the clock when it last failed
            low[:n_edge_moves] = [1] * n_edge_moves
        deadline = self.local.deadline
        for _ in range(self.max_sweeps):
            self.singles()
            if deadline is not None and deadline.passed("during the local descent"):
                break
            improved = False
            for mx, path in enumerate(moves):
                if 0 < low[mx] > max(map(self.last.__getitem__, path[4])):
                    continue  # nothing it depends on changed, in any plan, since it failed
                t = tried[:, mx]
                near = np.maximum.reduce(self.changed_at[:, path[3]], axis=1)
                rows = self.rows_all[(t == 0) | (near >= t)]
                if not rows.size:
                    continue  # nothing it depends on changed since it last failed
                stamp = self.clock
                gained = self.try_path(path, rows)
                tried[rows, mx] = stamp
                if gained.size:
                    tried[rows[gained], mx] = 0
                    improved = True
                    self.singles()
                low[mx] = int(t.min())
            if not improved:
                break
        return self.x


def _viterbi(us, links, cur, r):
    """The plans (of ``r``) where a path gains, and its ops' new strategies, last op first."""
    f, back = us[0], []
    now = f[cur[0], r]
    for t in range(1, len(us)):
        tot = f[:, None, :] + links[t - 1][:, :, None]
        back.append(tot.argmin(axis=0))
        f = np.minimum.reduce(tot, axis=0) + us[t]
        now = now + links[t - 1][cur[t - 1], cur[t]] + us[t][cur[t], r]
    k = f.argmin(axis=0)
    sel = (f[k, r] < now * _KEEP).nonzero()[0]
    ks = [k[sel]]
    if sel.size:
        for arg in reversed(back):
            ks.append(arg[ks[-1], sel])
    return sel, ks
