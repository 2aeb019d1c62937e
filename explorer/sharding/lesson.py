"""Stepped lessons: one parallelism on a small mesh, op by op, with the numbers.

``lesson(kind, mesh)`` returns a tuple of `LessonStep`: each names the op, the layout of
every tensor it touches (which block each device holds, from `shard_slices`), the per-device
values (small float32 arrays), and for a collective its ring: the device rings, and per ring
round who sends which chunk to whom. The last step compares the sharded result with the
unsharded one computed by numpy (`Check`).

Kinds (the ring axes are ``axes``; the other mesh axes split the batch or hold replicas):

* ``tensor``: the Megatron MLP, ``x·W1`` column-split, GELU local, ``W2`` row-split giving
  partial sums, a ring all-reduce;
* ``data``: each replica's weight gradient is a partial sum, a ring all-reduce;
* ``sequence``: Megatron sequence parallelism, LayerNorm on a sequence shard, all-gather
  before the MLP, reduce-scatter after it;
* ``zero``: ZeRO-3, parameters stored sharded, all-gathered per use, the gradient
  reduce-scattered back to its shard;
* ``context``: context parallelism, queries, keys and values split by tokens, keys and
  values all-gathered (Llama 3's all-gather form of the K/V exchange), causal attention
  over each device's own queries; the causal work per device under a contiguous split and
  under the load-balanced split (2 x cp chunks, device r taking chunks r and 2cp-1-r);
* ``experts``: expert parallelism, a router, the all-to-all dispatch and combine with their
  capacity and dropped tokens (`explorer.sharding.lesson_experts`).

Ring schedule (``n`` ranks in ring order, every buffer cut into ``n`` chunks): in reduce-
scatter round ``s`` rank ``r`` sends chunk ``(r - s - 1) mod n`` to rank ``r + 1``, which adds
it to its copy; after ``n - 1`` rounds rank ``r`` holds the full sum of chunk ``r``. In
all-gather round ``s`` rank ``r`` sends chunk ``(r - s) mod n``, which the receiver stores.
All-reduce is both (``2 (n - 1)`` rounds, ``2 (n-1)/n`` of the buffer sent per device).

>>> from explorer.hardware import Mesh
>>> steps = lesson("tensor", Mesh({"dp": 2, "tp": 4}))
>>> [s.op for s in steps[:3]]
['x · W1 (column split)', 'GELU (local)', 'h · W2 (row split)']
>>> steps[-1].check.ok, len(steps[3].collective.rounds)
(True, 6)
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import numpy as np

from ..hardware import Mesh, bytes_sent_per_device
from ..ir import TensorType
from ..ir.opdef import get as get_op
from .collective import make_collective
from .errors import ShardingError
from .executor import gather
from .layout import Layout, format_axes
from .lesson_experts import experts_lesson
from .lesson_values import (
    TOLERANCE,
    Check,
    ChunkMove,
    LessonCollective,
    LessonStep,
    RingRound,
    TensorState,
)
from .slices import ring_groups, shard_slices

__all__ = [
    "lesson", "ring_collective", "LessonStep", "TensorState", "LessonCollective", "RingRound",
    "ChunkMove", "Check", "LessonKind", "LESSON_KINDS", "MAX_LESSON_DEVICES", "causal_work",
    "TOLERANCE",
]  # fmt: skip

LessonKind = Literal["tensor", "data", "sequence", "zero", "context", "experts"]
LESSON_KINDS: tuple[str, ...] = get_args(LessonKind)
MAX_LESSON_DEVICES = 64  # every device is drawn with its numbers
DTYPE = "fp32"


# --- rings ----------------------------------------------------------------------------------


def _schedule(kind: str, rings, counts: dict[int, list[int]], chunks=None):
    """Rounds of a ring ``kind``; updates ``counts`` (and ``chunks``: device -> list of chunk
    arrays) in place and yields (RingRound, chunks snapshot) per round."""
    n = len(rings[0])
    phases = []
    if kind in ("all-reduce", "reduce-scatter"):
        phases += [("reduce-scatter", s) for s in range(n - 1)]
    if kind in ("all-reduce", "all-gather"):
        phases += [("all-gather", s) for s in range(n - 1)]
    for i, (phase, s) in enumerate(phases):
        old_counts = {d: list(c) for d, c in counts.items()}
        old = {d: list(c) for d, c in chunks.items()} if chunks is not None else None
        moves = []
        for ring in rings:
            for r, src in enumerate(ring):
                dst = ring[(r + 1) % n]
                reduce = phase == "reduce-scatter"
                c = (r - s - 1) % n if reduce else (r - s) % n
                moves.append(ChunkMove(src, dst, c, reduce))
                counts[dst][c] = old_counts[dst][c] + old_counts[src][c] if reduce else \
                    old_counts[src][c]  # fmt: skip
                if chunks is not None:
                    chunks[dst][c] = old[dst][c] + old[src][c] if reduce else old[src][c].copy()
        frozen = tuple(tuple(counts[d]) for d in sorted(counts))
        yield RingRound(i + 1, phase, tuple(moves), frozen)


def _start_counts(kind: str, rings) -> dict[int, list[int]]:
    n = len(rings[0])
    counts: dict[int, list[int]] = {}
    for ring in rings:
        for r, d in enumerate(ring):
            counts[d] = [1] * n if kind != "all-gather" else [int(c == r) for c in range(n)]
    return counts


def ring_collective(kind: str, mesh: Mesh, axes: tuple[str, ...], size_bytes: float = 0.0,
                    tensor: str = "") -> LessonCollective:  # fmt: skip
    """The ring schedule of ``kind`` over ``axes`` (no values): what a teaching ring steps.

    ``size_bytes``: the buffer as `explorer.hardware.bytes_sent_per_device` counts it.

    >>> from explorer.hardware import Mesh
    >>> c = ring_collective("all-gather", Mesh({"dp": 2, "tp": 4}), ("tp",))
    >>> c.rings, c.rounds[0].moves[:2]
    (((0, 1, 2, 3), (4, 5, 6, 7)), (ChunkMove(src=0, dst=1, chunk=0, reduce=False), ChunkMove(src=1, dst=2, chunk=1, reduce=False)))
    """
    kind = _ring_kind(kind)
    axes = _ring_axes(mesh, axes)
    rings = ring_groups(mesh, axes)
    counts = _start_counts(kind, rings)
    start = tuple(tuple(counts[d]) for d in sorted(counts))
    rounds = tuple(r for r in _schedule(kind, rings, counts))
    sent = bytes_sent_per_device(kind, size_bytes, len(rings[0]))
    pred = make_collective(kind, float(size_bytes), axes, mesh, tensor) if size_bytes else None
    return LessonCollective(kind, axes, tensor, rings, -1, start, rounds, sent, pred)


def _ring_kind(kind: str) -> str:
    ok = ("all-reduce", "all-gather", "reduce-scatter")
    if kind not in ok:
        raise ShardingError(f"collective {kind!r} has no ring lesson; pick one of {', '.join(ok)}")
    return kind


def _ring_axes(mesh: Mesh, axes) -> tuple[str, ...]:
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    for a in axes:
        if a not in mesh.axis_names:
            raise ShardingError(
                f"ring axis {a!r} is not an axis of {mesh}; pick from {', '.join(mesh.axis_names)}"
            )
    n = math.prod(mesh.axis_size(a) for a in axes)
    if n < 2:
        raise ShardingError(
            f"axes {axes} of {mesh} hold {n} device: a ring needs 2 or more; pick a larger axis"
        )
    return axes


# --- the lesson builder ---------------------------------------------------------------------
class _Lesson:
    """Accumulates steps; every tensor state is made from a global array or local blocks."""

    def __init__(self, mesh: Mesh, axes: tuple[str, ...], seed: int) -> None:
        self.mesh, self.axes = mesh, axes
        self.others = tuple(a for a in mesh.axis_names if a not in axes)
        self.n = math.prod(mesh.axis_size(a) for a in axes)
        self.rng = np.random.default_rng(seed)
        self.steps: list[LessonStep] = []
        self.itemsize = TensorType((1,), DTYPE).dtype.itemsize

    def rand(self, *shape: int) -> np.ndarray:
        return np.round(self.rng.normal(size=shape), 1).astype(np.float32)

    def state(self, name: str, role: str, letters: str, layout: Layout, shape=None,
              full: np.ndarray | None = None, local=None, chunks=None) -> TensorState:  # fmt: skip
        shape = tuple(full.shape if full is not None else shape)
        ttype = TensorType(shape, DTYPE)
        layout.validate(ttype, self.mesh, name)
        sl = shard_slices(shape, layout, self.mesh)
        if local is None:
            local = [full[sl[d]] for d in range(self.mesh.size)]
        spans = tuple(tuple((s.start, s.stop) for s in sl[d]) for d in range(self.mesh.size))
        return TensorState(name, role, ttype, layout, letters, spans, tuple(local), chunks)

    def step(self, op: str, text: str, *tensors: TensorState, **kw) -> None:
        self.steps.append(LessonStep(len(self.steps), op, text, tuple(tensors), **kw))

    def ring(self, kind: str, state: TensorState, after: Layout, dim: int, text: str,
             keep: tuple[TensorState, ...] = ()) -> TensorState:  # fmt: skip
        """Add one step per ring round of ``kind`` on ``state`` along ``dim``; return the
        final state (layout ``after``)."""
        mesh, n = self.mesh, self.n
        rings = ring_groups(mesh, self.axes)
        counts = _start_counts(kind, rings)
        start = tuple(tuple(counts[d]) for d in sorted(counts))
        chunks: dict[int, list[np.ndarray]] = {}
        for ring in rings:
            for r, d in enumerate(ring):
                v = state.values[d]
                if kind == "all-gather":  # the output buffer: own block at its place
                    blank = np.full_like(v, np.nan)
                    chunks[d] = [v.copy() if c == r else blank for c in range(n)]
                else:
                    chunks[d] = list(np.split(v, n, axis=dim))
        block = state.values[0].size * self.itemsize
        size = block * n if kind == "all-gather" else block  # the hardware convention
        chunk_bytes = (size / n) if kind != "all-gather" else block
        snaps, rounds = [], []
        for rnd in _schedule(kind, rings, counts, chunks):
            rounds.append(rnd)
            snaps.append({d: [c.copy() for c in cs] for d, cs in chunks.items()})
        sent = sum(chunk_bytes for rnd in rounds for _ in rnd.moves) / mesh.size
        pred = make_collective(kind, float(size), self.axes, mesh, state.name)
        coll = LessonCollective(kind, self.axes, state.name, rings, dim, start, tuple(rounds),
                                float(sent), pred)  # fmt: skip
        position = {d: r for ring in rings for r, d in enumerate(ring)}
        for rnd, snap in zip(rounds, snaps, strict=True):
            last = rnd.index == len(rounds)
            if last:
                if kind == "reduce-scatter":
                    local = [snap[d][position[d]] for d in range(mesh.size)]
                else:
                    local = [np.concatenate(snap[d], axis=dim) for d in range(mesh.size)]
                cur = self.state(state.name, state.role, state.letters, after,
                                 shape=state.ttype.shape, local=local)  # fmt: skip
            else:
                local = [np.concatenate(snap[d], axis=dim) for d in range(mesh.size)]
                cur = TensorState(state.name, state.role, state.ttype, state.layout,
                                  state.letters, state.slices, tuple(local), rnd.counts)  # fmt: skip
            phase = rnd.phase
            verb = "adds it to its own copy" if phase == "reduce-scatter" else "stores it"
            words = (f"{kind} of {state.name} over {format_axes(self.axes)}, round "
                     f"{rnd.index} of {len(rounds)} ({phase} phase): every device sends one "
                     f"chunk (1/{n} of its buffer) to the next device of its ring, which "
                     f"{verb}. {text if last else ''}").strip()  # fmt: skip
            self.step(f"{kind} round {rnd.index}/{len(rounds)}", words, *keep, cur,
                      collective=coll, round=rnd.index)  # fmt: skip
        return cur


def _error(sharded: TensorState, reference: np.ndarray, mesh: Mesh) -> float:
    full = gather(list(sharded.values), sharded.ttype.shape, sharded.layout, mesh)
    return float(np.max(np.abs(full.astype(np.float64) - reference)))


def _gelu(x: np.ndarray) -> np.ndarray:
    return get_op("gelu").impl(x)


def _layernorm(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1]
    return get_op("layernorm").impl(x, np.ones(h, x.dtype), np.zeros(h, x.dtype))


# --- the four lessons -----------------------------------------------------------------------
def _tensor(ls: _Lesson) -> None:
    n, r, tp, dp = ls.n, ls.mesh.size // ls.n, ls.axes, ls.others
    t_, h_, f_ = 2 * r, 2 * n, 2 * n
    x, w1, w2 = ls.rand(t_, h_), ls.rand(h_, f_), ls.rand(f_, h_)
    L_x, L_cols, L_rows = Layout((dp, ())), Layout(((), tp)), Layout((tp, ()))
    a, b = format_axes(tp), format_axes(dp) if dp else "nothing"
    xs, w1s = ls.state("x", "input", "th", L_x, full=x), ls.state("W1", "weight", "hf", L_cols,
                                                                    full=w1)  # fmt: skip
    pre = [xs.values[d] @ w1s.values[d] for d in range(ls.mesh.size)]
    hp = ls.state("x·W1", "activation", "tf", Layout((dp, tp)), shape=(t_, f_), local=pre)
    ls.step("x · W1 (column split)",
            f"W1 is split by columns over {a}: each device multiplies its rows of x (x is split "
            f"by tokens over {b}) by its {f_ // n} columns of W1, so x·W1 comes out split by "
            "columns too. No communication.", xs, w1s, hp)  # fmt: skip
    hs = ls.state("h", "activation", "tf", hp.layout, shape=(t_, f_),
                  local=[_gelu(v) for v in hp.values])  # fmt: skip
    ls.step("GELU (local)", "GELU acts on each element alone, so every device applies it to "
            "its own columns: h keeps the column split. No communication.", hp, hs)  # fmt: skip
    w2s = ls.state("W2", "weight", "fh", L_rows, full=w2)
    part = [hs.values[d] @ w2s.values[d] for d in range(ls.mesh.size)]
    ys = ls.state("y", "output", "th", Layout((dp, ()), partial=tp), shape=(t_, h_), local=part)
    ls.step("h · W2 (row split)",
            f"W2 is split by rows over {a}, matching h's columns: each device's h·W2 is a "
            f"full-width block of y but only a partial sum (Σ): the true y is the sum of the "
            f"{n} devices' blocks.", hs, w2s, ys)  # fmt: skip
    done = ls.ring("all-reduce", ys, Layout((dp, ())), 1,
                   "Every device of each ring now holds the complete y.", keep=(hs, w2s))  # fmt: skip
    ref = _gelu(x.astype(np.float64) @ w1) @ w2
    err = _error(done, ref, ls.mesh)
    ls.step("result", f"y = GELU(x·W1)·W2 on {ls.mesh.size} devices equals the unsharded "
            f"result: max |error| = {err:.2g} (float32 rounding).", xs, done,
            check=Check(("y",), err))  # fmt: skip


def _data(ls: _Lesson) -> None:
    n, dp = ls.n, ls.axes
    t_, h_, f_ = 2 * ls.mesh.size, 4, n * max(1, 4 // n)
    x, w, target = ls.rand(t_, h_), ls.rand(h_, f_), ls.rand(t_, f_)
    a = format_axes(dp)
    L_b = Layout((dp, ()))
    xs, ws = ls.state("x", "input", "bh", L_b, full=x), ls.state("W", "weight", "hf",
                                                                  Layout(((), ())), full=w)  # fmt: skip
    y = [xs.values[d] @ ws.values[d] for d in range(ls.mesh.size)]
    ys = ls.state("y", "activation", "bf", L_b, shape=(t_, f_), local=y)
    ls.step("forward y = x · W", f"Data parallelism over {a}: every device holds the whole W "
            f"and runs the layer on its own {t_ // n} samples of the batch. No communication.",
            xs, ws, ys)  # fmt: skip
    ts = ls.state("target", "input", "bf", L_b, full=target)
    grads = [xs.values[d].T @ (ys.values[d] - ts.values[d]) for d in range(ls.mesh.size)]
    gs = ls.state("dW", "gradient", "hf", Layout(((), ()), partial=dp), shape=(h_, f_),
                  local=grads)  # fmt: skip
    ls.step("backward dW = xᵀ · (y − target)", "The loss is ½·|y − target|²: each device's "
            "weight gradient sums over its own samples only, a partial sum (Σ); the true "
            f"gradient is the sum over the {n} replicas.", xs, ys, gs)  # fmt: skip
    done = ls.ring("all-reduce", gs, Layout(((), ())), 1, "Every replica now holds the same "
                   "gradient and takes the same optimizer step.", keep=(ws,))  # fmt: skip
    ref = x.T.astype(np.float64) @ (x.astype(np.float64) @ w - target)
    err = _error(done, ref, ls.mesh)
    ls.step("result", f"The all-reduced gradient equals the unsharded xᵀ·(x·W − target) of "
            f"the whole batch: max |error| = {err:.2g} (float32 rounding).", ws, done,
            check=Check(("dW",), err))  # fmt: skip


def _sequence(ls: _Lesson) -> None:
    n, r, tp, dp = ls.n, ls.mesh.size // ls.n, ls.axes, ls.others
    t_, h_, f_ = 2 * r * n, 2 * n, 2 * n
    x, w1, w2 = ls.rand(t_, h_), ls.rand(h_, f_), ls.rand(f_, h_)
    a = format_axes(tp)
    L_seq, L_tok = Layout((dp + tp, ())), Layout((dp, ()))
    xs = ls.state("x", "input", "th", L_seq, full=x)
    ns = ls.state("ln(x)", "activation", "th", L_seq, shape=(t_, h_),
                  local=[_layernorm(v) for v in xs.values])  # fmt: skip
    ls.step("LayerNorm (sequence split)", f"Between the MLPs, activations are split along the "
            f"sequence over {a}: LayerNorm acts on each token alone, so every device normalizes "
            f"its own {t_ // ls.mesh.size} tokens and stores 1/{n} of the activations.", xs, ns)  # fmt: skip
    full = ls.ring("all-gather", ns, L_tok, 0, "Every device now holds all tokens of its "
                   "batch shard, as the column-split W1 needs.")  # fmt: skip
    w1s = ls.state("W1", "weight", "hf", Layout(((), tp)), full=w1)
    h = [_gelu(full.values[d] @ w1s.values[d]) for d in range(ls.mesh.size)]
    hs = ls.state("h", "activation", "tf", Layout((dp, tp)), shape=(t_, f_), local=h)
    ls.step("GELU(x · W1) (column split)", "As in tensor parallelism: each device multiplies "
            "all tokens by its columns of W1 and applies GELU locally.", full, w1s, hs)  # fmt: skip
    w2s = ls.state("W2", "weight", "fh", Layout((tp, ())), full=w2)
    part = [hs.values[d] @ w2s.values[d] for d in range(ls.mesh.size)]
    ys = ls.state("y", "output", "th", Layout((dp, ()), partial=tp), shape=(t_, h_), local=part)
    ls.step("h · W2 (row split)", "W2 split by rows gives each device a partial sum (Σ) of "
            "y for all tokens.", hs, w2s, ys)  # fmt: skip
    done = ls.ring("reduce-scatter", ys, L_seq, 0, f"Instead of an all-reduce, a reduce-"
                   f"scatter leaves each device the complete sum for its own 1/{n} of the "
                   "tokens: the sequence split again, for the next LayerNorm.")  # fmt: skip
    ref = _gelu(_layernorm(x.astype(np.float64)) @ w1) @ w2
    err = _error(done, ref, ls.mesh)
    ls.step("result", f"all-gather + reduce-scatter send the same bytes as one all-reduce, and "
            f"y equals the unsharded GELU(LN(x)·W1)·W2: max |error| = {err:.2g} (float32 "
            "rounding).", xs, done, check=Check(("y",), err))  # fmt: skip


def _zero(ls: _Lesson) -> None:
    n, dp = ls.n, ls.axes
    t_, h_, f_ = 2 * ls.mesh.size, n * max(1, 4 // n), 4
    x, w, target = ls.rand(t_, h_), ls.rand(h_, f_), ls.rand(t_, f_)
    a = format_axes(dp)
    L_b, L_w = Layout((dp, ())), Layout((dp, ()))
    xs, ws = ls.state("x", "input", "bh", L_b, full=x), ls.state("W", "weight", "hf", L_w,
                                                                  full=w)  # fmt: skip
    ls.step("parameters stored sharded", f"ZeRO-3 over {a}: each device stores only 1/{n} of "
            "W (and of its gradient and optimizer state); no device holds the whole layer.",
            xs, ws)  # fmt: skip
    wf = ls.ring("all-gather", ws, Layout(((), ())), 0, "Gather per use: the whole W exists "
                 "only while the layer runs.", keep=(xs,))  # fmt: skip
    y = [xs.values[d] @ wf.values[d] for d in range(ls.mesh.size)]
    ys = ls.state("y", "activation", "bf", L_b, shape=(t_, f_), local=y)
    ls.step("forward y = x · W, then free W", "Each device runs the layer on its own samples "
            "with the gathered W, then drops the gathered copy (ZeRO-3 gathers it again for "
            "the backward's input gradient).", xs, wf, ys)  # fmt: skip
    ts = ls.state("target", "input", "bf", L_b, full=target)
    grads = [xs.values[d].T @ (ys.values[d] - ts.values[d]) for d in range(ls.mesh.size)]
    gs = ls.state("dW", "gradient", "hf", Layout(((), ()), partial=dp), shape=(h_, f_),
                  local=grads)  # fmt: skip
    ls.step("backward dW = xᵀ · (y − target)", "Each device's gradient covers its own samples "
            "only: a partial sum (Σ) over the replicas.", xs, ys, gs)  # fmt: skip
    done = ls.ring("reduce-scatter", gs, L_w, 0, "Each device keeps the summed gradient of the "
                   "rows of W it stores, and updates only those.", keep=(ws,))  # fmt: skip
    x64 = x.astype(np.float64)
    err = max(_error(done, x64.T @ (x64 @ w - target), ls.mesh),
              _error(ys, x64 @ w, ls.mesh))  # fmt: skip
    ls.step("result", f"y and the sharded gradient equal the unsharded ones: max |error| = "
            f"{err:.2g} (float32 rounding).", ys, done, check=Check(("y", "dW"), err))  # fmt: skip


def _causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, first: int) -> np.ndarray:
    """softmax(q·kᵀ/√d, causal) · v for queries at positions ``first``.. of the sequence."""
    scores = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[-1])
    rows = np.arange(first, first + q.shape[0])[:, None]
    scores = np.where(np.arange(k.shape[0])[None, :] <= rows, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def causal_work(tokens: int, cp: int, balanced: bool) -> tuple[int, ...]:
    """Query-key pairs each of ``cp`` devices scores in causal attention over ``tokens``
    tokens: a contiguous split (device r: tokens r·t/cp ..) or the load-balanced one (the
    sequence cut into 2·cp chunks, device r taking chunks r and 2·cp−1−r).

    >>> causal_work(8, 4, False), causal_work(8, 4, True)
    ((3, 7, 11, 15), (9, 9, 9, 9))
    """
    if balanced:
        c = tokens // (2 * cp)
        owned = [list(range(r * c, (r + 1) * c)) + list(range((2 * cp - 1 - r) * c,
                                                              (2 * cp - r) * c))
                 for r in range(cp)]  # fmt: skip
    else:
        b = tokens // cp
        owned = [list(range(r * b, (r + 1) * b)) for r in range(cp)]
    return tuple(sum(i + 1 for i in toks) for toks in owned)


def _context(ls: _Lesson) -> None:
    n, cp = ls.n, ls.axes
    t_, d_ = 2 * n, 4
    q, k, v = ls.rand(t_, d_), ls.rand(t_, d_), ls.rand(t_, d_)
    a = format_axes(cp)
    L_tok = Layout((cp, ()))
    qs, ks, vs = (ls.state(name, "activation", "td", L_tok, full=arr)
                  for name, arr in (("q", q), ("k", k), ("v", v)))  # fmt: skip
    flat, even = causal_work(t_, n, False), causal_work(t_, n, True)
    others = (f" (the devices along {format_axes(ls.others)} hold other sequences; here they "
              "repeat this one)") if ls.others else ""  # fmt: skip
    ls.step("q, k, v split by tokens",
            f"Context parallelism over {a}: each device holds the queries, keys and values of "
            f"its own {t_ // n} of the {t_} tokens{others}. Causal attention lets token i look "
            f"at tokens 0..i only, so a contiguous split gives the devices {list(flat)} "
            f"query-key pairs to score: the last does {flat[-1] / flat[0]:.1f}x the first's "
            f"work. Cutting the sequence into {2 * n} chunks and giving device r chunks r and "
            f"{2 * n - 1}-r balances it: {list(even)}.", qs, ks, vs)  # fmt: skip
    kf = ls.ring("all-gather", ks, Layout(((), ())), 0, "Every device now holds all keys.",
                 keep=(qs,))  # fmt: skip
    vf = ls.ring("all-gather", vs, Layout(((), ())), 0, "Every device now holds all values.",
                 keep=(qs, kf))  # fmt: skip
    out = []
    for d in range(ls.mesh.size):
        first = qs.slices[d][0][0]
        out.append(_causal_attention(qs.values[d], kf.values[d], vf.values[d], first)
                   .astype(np.float32))  # fmt: skip
    os_ = ls.state("out", "output", "td", L_tok, shape=(t_, d_), local=out)
    ls.step("causal attention on local queries",
            "Each device scores its own queries against all the keys up to their positions "
            "and averages the values: its rows of the output, split by tokens like q. No "
            "communication.", qs, kf, vf, os_)  # fmt: skip
    ref = _causal_attention(q, k, v, 0)
    err = _error(os_, ref, ls.mesh)
    ls.step("result", f"The token-split attention equals the unsharded causal attention: "
            f"max |error| = {err:.2g} (float32 rounding).", qs, os_, check=Check(("out",), err))  # fmt: skip


def _experts(ls: _Lesson) -> None:
    experts_lesson(ls, Check, _error, _gelu)


_LESSONS = {"tensor": _tensor, "data": _data, "sequence": _sequence, "zero": _zero,
            "context": _context, "experts": _experts}  # fmt: skip


def lesson(kind: LessonKind, mesh: Mesh, *, axes: tuple[str, ...] | str | None = None,
           seed: int = 0) -> tuple[LessonStep, ...]:  # fmt: skip
    """The stepped lesson of one parallelism on ``mesh``.

    Args:
        kind: ``tensor``, ``data``, ``sequence``, ``zero``, ``context`` or ``experts``.
        mesh: at most `MAX_LESSON_DEVICES` devices (each is drawn).
        axes: the ring axes (default: the last axis for tensor and sequence, every axis for
            data and zero); the other axes split the batch (tensor, sequence) or hold
            replicas (data, zero).
        seed: the random inputs (rounded to one decimal, float32).

    >>> from explorer.hardware import Mesh
    >>> s = lesson("sequence", Mesh({"dp": 2, "tp": 4}))
    >>> sorted({st.collective.kind for st in s if st.collective})
    ['all-gather', 'reduce-scatter']
    """
    if kind not in _LESSONS:
        raise ShardingError(
            f"lesson kind {kind!r} is unknown; pick one of {', '.join(LESSON_KINDS)}"
        )
    if mesh.size > MAX_LESSON_DEVICES:
        raise ShardingError(
            f"{mesh} has {mesh.size} devices; a lesson draws every device with its numbers, "
            f"so it takes at most {MAX_LESSON_DEVICES}: use a smaller mesh such as "
            "Mesh({'dp': 2, 'tp': 4})"
        )
    if axes is None:
        last = (mesh.axis_names[-1],)
        axes = last if kind in ("tensor", "sequence", "context", "experts") else mesh.axis_names
    ls = _Lesson(mesh, _ring_axes(mesh, axes), seed)
    _LESSONS[kind](ls)
    return tuple(ls.steps)
