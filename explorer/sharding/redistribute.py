"""Redistribution: the cheapest sequence of collectives that turns one layout into another.

Moves (each changes one layout into another on the same tensor):

============== ================================================== ==================
move           layout change                                      bytes sent (S)
============== ================================================== ==================
slice          an unused axis is appended (minor) to a dim         0 (local)
all-gather     the minor axes of a dim are removed                 output block
all-reduce     partial axes are summed away                        the block
reduce-scatter partial axes are summed and appended to a dim       input block
all-to-all     the minor axes of one dim move to another dim       the block
send/recv      (across a pipeline boundary only)                   the block
============== ================================================== ==================

A Dijkstra search over layouts orders paths by (time on the mesh's hardware, bytes per
device, number of steps, the steps' text), so ties break the same way on every run.

>>> from explorer.hardware import Mesh
>>> from explorer.ir import TensorType
>>> mesh = Mesh({"dp": 2, "tp": 4})
>>> t = TensorType((8, 16, 64), "bf16")
>>> src = Layout((("dp",), (), ()), partial=("tp",))
>>> print(redistribute(src, Layout((("dp",), (), ("tp",))), t, mesh))
bf16[A_dp, B, C]{U_tp} -> reduce-scatter(tp) -> bf16[A_dp, B, C_tp]
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from dataclasses import dataclass

from ..hardware import CollectiveKind, Mesh
from ..ir import TensorType
from ..memo import memoize
from .collective import Collective, make_collective, send_recv
from .errors import ShardingError
from .layout import Layout

__all__ = ["Move", "RedistributePlan", "redistribute", "redistribute_across_stages"]

SLICE = "slice"


@dataclass(frozen=True)
class Move:
    """One step with what the executor needs to perform it.

    ``op`` is ``"slice"`` or a `CollectiveKind` value; ``dim`` the dim gathered, scattered
    or sliced into (-1 for all-reduce), ``to_dim`` the target dim of an all-to-all.
    """

    op: str
    axes: tuple[str, ...]
    dim: int
    to_dim: int
    before: Layout
    after: Layout
    collective: Collective | None

    def __str__(self) -> str:
        return f"{self.op}({','.join(self.axes)})" if self.axes else self.op


@dataclass(frozen=True)
class RedistributePlan:
    """The moves from ``src`` to ``dst``; ``steps`` are the communicating ones."""

    src: Layout
    dst: Layout
    ttype: TensorType
    moves: tuple[Move, ...]

    @property
    def steps(self) -> tuple[Collective, ...]:
        return tuple(m.collective for m in self.moves if m.collective is not None)

    @property
    def bytes_per_device(self) -> float:
        return sum(c.bytes_per_device for c in self.steps)

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.steps)

    def format(self, letters: str | None = None) -> str:
        parts = [self.src.format(self.ttype, letters)]
        parts += [str(m) for m in self.moves]
        if not self.moves:
            parts.append("(no change)")
        parts.append(self.dst.format(self.ttype, letters))
        return " -> ".join(parts)

    def __str__(self) -> str:
        return self.format()


def redistribute(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh) -> RedistributePlan:
    """The cheapest plan turning ``src`` into ``dst`` (memoised on every argument).

    Raises `ShardingError` when either layout does not fit or ``dst`` is partial on an
    axis where ``src`` is not (a sum cannot be un-reduced).
    """
    return _plan(src, dst, ttype, mesh)


def redistribute_across_stages(
    src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh, link: str = "inter"
) -> RedistributePlan:
    """Sender stage reduces pending sums, sends its block (send/recv) to its peer device in
    the next stage, which then redistributes to ``dst``. Both stages use ``mesh``'s shape."""
    whole = Layout(src.dims)
    first = _plan(src, whole, ttype, mesh) if src.partial else None
    if dst.partial:
        raise ShardingError(
            f"a pipeline boundary cannot deliver partial layout {dst.format(ttype)}; "
            "reduce it on the sending stage"
        )
    local = math.prod(whole.local_shape(ttype.shape, mesh)) * ttype.dtype.itemsize
    hop = Move(
        CollectiveKind.SEND_RECV.value, (), -1, -1, whole, whole, send_recv(local, mesh, link=link)
    )
    last = _plan(whole, dst, ttype, mesh)
    moves = (first.moves if first else ()) + (hop,) + last.moves
    return RedistributePlan(src, dst, ttype, moves)


@memoize(maxsize=8192, name="sharding.redistribute.plan")
def _plan(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh) -> RedistributePlan:
    src.validate(ttype, mesh)
    dst.validate(ttype, mesh)
    extra = sorted(set(dst.partial) - set(src.partial))
    if extra:
        raise ShardingError(
            f"cannot redistribute {src.format(ttype)} to {dst.format(ttype)}: the target is a "
            f"partial sum over {extra} where the source is not; a finished value cannot be "
            "made partial again (pick a target without those partial axes)"
        )
    if src == dst:
        return RedistributePlan(src, dst, ttype, ())
    best = _shortest_from(src, ttype, mesh, frozenset(dst.partial))
    if dst not in best:  # unreachable for valid layouts: gather all, then slice
        raise ShardingError(f"no redistribution from {src.format(ttype)} to {dst.format(ttype)}")
    return RedistributePlan(src, dst, ttype, best[dst])


@memoize(maxsize=2048, name="sharding.redistribute.shortest_from")
def _shortest_from(
    src: Layout, ttype: TensorType, mesh: Mesh, keep: frozenset[str]
) -> dict[Layout, tuple[Move, ...]]:
    """Dijkstra from ``src`` to every reachable layout at once (one search serves every
    target with the same kept partial axes). Entries are ordered by (time, bytes, steps,
    text), so ties break deterministically and each target gets the path an early-stopping
    search to it would return."""
    moves = _moves(ttype, mesh, keep)
    count = itertools.count()
    # The search walks layout numbers, so its inner loop hashes ints, not layouts; an entry
    # names the layout it came from and the move. An entry no better than one already
    # queued for its layout is not queued: the earlier one (equal or smaller, and counted
    # first) would be popped before it, so no result changes.
    start = moves.number(src)
    heap = [((0.0, 0.0, 0, ""), next(count), start, -1, None)]
    queued: dict[int, tuple] = {start: heap[0][0]}
    came: dict[int, tuple[int, Move | None]] = {}  # settled layout -> (from, move)
    while heap:
        (time, nbytes, nsteps, text), _, u, parent, move = heapq.heappop(heap)
        if u in came:
            continue
        came[u] = (parent, move)
        for mv, key, v, dt, db in moves.out(u):
            if v in came:
                continue
            order = (time + dt, nbytes + db, nsteps + 1, text + " " + key)
            seen = queued.get(v)
            if seen is not None and seen <= order:
                continue
            queued[v] = order
            heapq.heappush(heap, (order, next(count), v, u, mv))
    # a layout settles after the one it came from: paths extend in settling order
    paths: dict[int, tuple[Move, ...]] = {}
    out: dict[Layout, tuple[Move, ...]] = {}
    for u, (parent, move) in came.items():
        paths[u] = () if move is None else paths[parent] + (move,)
        out[moves.layouts[u]] = paths[u]
    return out


class _MoveGraph:
    """The moves out of each layout of one tensor type on one mesh (with the partial axes
    ``keep`` never reduced), generated the first time a search reaches the layout.

    Layouts are numbered in the order they are first met; ``out(u)`` lists the moves out of
    layout ``u`` as ``(move, text, target number, seconds, bytes)``."""

    def __init__(self, ttype: TensorType, mesh: Mesh, keep: frozenset[str]) -> None:
        self.ttype, self.mesh, self.keep = ttype, mesh, keep
        self.layouts: list[Layout] = []
        self._numbers: dict[Layout, int] = {}
        self._out: list[tuple | None] = []
        self._lock = threading.Lock()

    def number(self, lay: Layout) -> int:
        u = self._numbers.get(lay)
        if u is None:
            with self._lock:
                u = self._numbers.get(lay)
                if u is None:
                    u = len(self.layouts)
                    self.layouts.append(lay)
                    self._out.append(None)
                    self._numbers[lay] = u
        return u

    def out(self, u: int) -> tuple:
        edges = self._out[u]
        if edges is None:
            lay = self.layouts[u]
            edges = tuple(
                (mv, _key(mv), self.number(mv.after),
                 mv.collective.time_s if mv.collective else 0.0,
                 mv.collective.bytes_per_device if mv.collective else 0.0)
                for mv in _gen_moves(lay, self.ttype, self.mesh, self.keep)
            )  # fmt: skip
            self._out[u] = edges  # another thread may store an equal tuple: either serves
        return edges


def _key(mv: Move) -> str:
    return f"{mv.op}:{','.join(mv.axes)}:{mv.dim}:{mv.to_dim}"


def _nbytes(lay: Layout, ttype: TensorType, mesh: Mesh) -> int:
    return math.prod(lay.local_shape(ttype.shape, mesh)) * ttype.dtype.itemsize


def _fits(lay_dims, dim: int, ttype: TensorType, mesh: Mesh) -> bool:
    n = math.prod(mesh.axis_size(a) for a in lay_dims[dim])
    return ttype.shape[dim] % n == 0


def _with_dim(dims, dim: int, axes: tuple[str, ...]):
    return dims[:dim] + (axes,) + dims[dim + 1 :]


@memoize(maxsize=1024, name="sharding.redistribute.moves")
def _moves(ttype: TensorType, mesh: Mesh, keep: frozenset[str]) -> _MoveGraph:
    return _MoveGraph(ttype, mesh, keep)


def _gen_moves(lay: Layout, ttype: TensorType, mesh: Mesh, keep: frozenset[str]):
    dims, rank = lay.dims, lay.rank
    here = _nbytes(lay, ttype, mesh)
    used = set(lay.axes) | set(lay.partial)
    free = [a for a in mesh.axis_names if a not in used and mesh.axis_size(a) > 1]
    reducible = [a for a in lay.partial if a not in keep]
    subsets = [s for r in range(1, len(reducible) + 1)
               for s in itertools.combinations(reducible, r)]  # fmt: skip
    for sub in subsets:
        rest = tuple(a for a in lay.partial if a not in sub)
        after = Layout(dims, rest)
        c = make_collective(CollectiveKind.ALL_REDUCE, here, sub, mesh)
        yield Move(CollectiveKind.ALL_REDUCE.value, sub, -1, -1, lay, after, c)
        for d in range(rank):
            nd = _with_dim(dims, d, dims[d] + sub)
            if _fits(nd, d, ttype, mesh):
                c = make_collective(CollectiveKind.REDUCE_SCATTER, here, sub, mesh)
                yield Move(CollectiveKind.REDUCE_SCATTER.value, sub, d, -1, lay,
                           Layout(nd, rest), c)  # fmt: skip
    for d in range(rank):
        for k in range(1, len(dims[d]) + 1):
            suffix = dims[d][len(dims[d]) - k :]
            nd = _with_dim(dims, d, dims[d][: len(dims[d]) - k])
            after = Layout(nd, lay.partial)
            big = _nbytes(after, ttype, mesh)
            c = make_collective(CollectiveKind.ALL_GATHER, big, suffix, mesh)
            yield Move(CollectiveKind.ALL_GATHER.value, suffix, d, -1, lay, after, c)
            for e in range(rank):
                if e == d:
                    continue
                nd2 = _with_dim(nd, e, nd[e] + suffix)
                if _fits(nd2, e, ttype, mesh):
                    c = make_collective(CollectiveKind.ALL_TO_ALL, here, suffix, mesh)
                    yield Move(CollectiveKind.ALL_TO_ALL.value, suffix, d, e, lay,
                               Layout(nd2, lay.partial), c)  # fmt: skip
    for a in free:
        for d in range(rank):
            nd = _with_dim(dims, d, dims[d] + (a,))
            if _fits(nd, d, ttype, mesh):
                yield Move(SLICE, (a,), d, -1, lay, Layout(nd, lay.partial), None)
