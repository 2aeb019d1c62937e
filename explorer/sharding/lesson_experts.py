"""The expert-parallel lesson (``lesson("experts", mesh)``): a mixture-of-experts layer with
one expert per device of the ``ep`` ring axes, stepped with its numbers.

Tokens split over ``ep``; a replicated router picks one expert per token (top-1, gate = its
softmax probability); each device packs its tokens into a send buffer of ``E`` slots of
``capacity`` tokens (tokens past an expert's capacity are dropped: their layer output is 0,
the residual carries them, as in GShard and Switch); an **all-to-all** hands slot block ``e``
of every device to device ``e`` (dispatch); each device runs its expert on what it received;
a second all-to-all returns the results (combine); each device scales its tokens' results by
their gates. The last step compares the result with the same layer computed unsharded, with
the same routing and the same drops.

The builder takes the lesson machinery as arguments (`explorer.sharding.lesson` imports this
module, not the other way round).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..hardware import bytes_sent_per_device
from .collective import make_collective
from .layout import Layout, format_axes
from .lesson_values import ChunkMove, LessonCollective, RingRound
from .slices import ring_groups

__all__ = ["experts_lesson", "all_to_all", "CAPACITY_FACTOR"]

#: Slots per expert and source device, as a multiple of an even share (tokens / experts).
CAPACITY_FACTOR = 1.5


def _route(x: np.ndarray, router: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logits = x.astype(np.float64) @ router
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p.argmax(axis=1), p.max(axis=1)


def _pack(expert: np.ndarray, experts: int, capacity: int) -> list[list[int]]:
    """Per expert, the local token indices that get a slot (in token order; the rest drop)."""
    return [[int(t) for t in np.flatnonzero(expert == e)[:capacity]] for e in range(experts)]


def all_to_all(
    tensor: str, rings: tuple[tuple[int, ...], ...], axes: tuple[str, ...], nbytes: float, mesh: Any
) -> LessonCollective:
    """The all-to-all of a ``nbytes`` buffer per device over ``rings`` as one round: device
    ``ring[i]`` sends its block ``j`` to ``ring[j]`` for every ``j != i`` (block ``j`` is for
    member ``j``; each device keeps its own). ``counts``: one contribution per block, before
    and after (nothing is summed)."""
    n = len(rings[0])
    moves = tuple(ChunkMove(r[i], r[j], j, False) for r in rings for i in range(n)
                  for j in range(n) if i != j)  # fmt: skip
    ones = tuple((1,) * n for _ in range(mesh.size))
    sent = len(moves) / len(rings) * nbytes / n / n
    pred = make_collective("all-to-all", float(nbytes), axes, mesh, tensor)
    return LessonCollective("all-to-all", axes, tensor, rings, 0, ones,
                            (RingRound(1, "all-to-all", moves, ones),), float(sent), pred)  # fmt: skip


def experts_lesson(ls: Any, check: Callable, error: Callable, gelu: Callable) -> None:
    """Add the steps of the expert-parallel lesson to ``ls`` (an ``_Lesson``)."""
    n, ep, mesh = ls.n, ls.axes, ls.mesh
    e_, per, h_, f_ = n, 4, 4, 4  # one expert per device, 4 tokens per device
    cap = max(1, math.ceil(CAPACITY_FACTOR * per / e_))
    x, router = ls.rand(n * per, h_), ls.rand(h_, e_)
    w1, w2 = ls.rand(e_, h_, f_), ls.rand(e_, f_, h_)
    a = format_axes(ep)
    L_tok, L_rep = Layout((ep, ())), Layout(((), ()))
    xs = ls.state("x", "input", "th", L_tok, full=x)
    rs = ls.state("router", "weight", "he", L_rep, full=router)
    pos = {d: xs.slices[d][0][0] for d in range(mesh.size)}
    routes = {d: _route(xs.values[d], router) for d in range(mesh.size)}
    picks = [routes[d][0] for d in range(mesh.size)]
    rings = ring_groups(mesh, ep)  # each in the order of the blocks split over ep
    ring_of = {d: list(r) for r in rings for d in r}
    rank = {d: r.index(d) for r in rings for d in r}
    ring_members = ring_of[0]  # the other rings hold the same tokens (replicas)
    load = np.bincount(np.concatenate([picks[d] for d in ring_members]), minlength=e_)
    slots = {d: _pack(picks[d], e_, cap) for d in range(mesh.size)}
    dropped = sum(per - sum(len(s) for s in slots[d]) for d in ring_members)
    ls.step("router: one expert per token",
            f"Expert parallelism over {a}: expert e lives on device e of the ring, tokens are "
            f"split over it ({per} per device). A router (replicated, {h_} x {e_}) scores each "
            f"token; it goes to its best expert with that softmax probability as its gate. "
            f"Tokens per expert: {load.tolist()}. Each device has {cap} slots per expert "
            f"(capacity factor {CAPACITY_FACTOR:g} x {per}/{e_} tokens): {dropped} token(s) "
            "over capacity are dropped (output 0; the residual carries them).", xs, rs)  # fmt: skip
    send = []
    for d in range(mesh.size):
        buf = np.zeros((e_ * cap, h_), np.float32)
        for e, toks in enumerate(slots[d]):
            buf[e * cap : e * cap + len(toks)] = xs.values[d][toks]
        send.append(buf)
    ss = ls.state("send", "activation", "sh", L_tok, shape=(n * e_ * cap, h_), local=send)
    ls.step("pack the send buffers",
            f"Each device sorts its tokens into {e_} blocks of {cap} slots, block e for expert "
            "e (empty slots stay zero): the buffer the all-to-all sends.", xs, ss)  # fmt: skip
    recv = []
    for d in range(mesh.size):
        blocks = [send[q][rank[d] * cap : (rank[d] + 1) * cap] for q in ring_of[d]]
        recv.append(np.concatenate(blocks))
    nbytes = send[0].size * send[0].itemsize
    sent = bytes_sent_per_device("all-to-all", nbytes, n)
    rv = ls.state("recv", "activation", "sh", L_tok, shape=(n * n * cap, h_), local=recv)
    dispatch = all_to_all("send", rings, ep, nbytes, mesh)
    ls.step("all-to-all: dispatch",
            f"Device d sends block e of its buffer to device e of its ring and keeps block d: "
            f"every device ends with the slots of its own expert from all {n} devices. Each "
            f"sends {sent:g} of its {nbytes} bytes ((n-1)/n, the cost model's all-to-all).",
            ss, rv, collective=dispatch, round=1)  # fmt: skip
    # the experts' W1 stacked: rows e*h .. (e+1)*h are expert e's, on device e of the ring
    ws1 = ls.state("W1", "weight", "hf", Layout((ep, ())), full=w1.reshape(e_ * h_, f_))
    out = [gelu(recv[d] @ ws1.values[d]) @ w2[rank[d]] for d in range(mesh.size)]
    os_ = ls.state("expert out", "activation", "sh", L_tok, shape=(n * n * cap, h_), local=out)
    ls.step("each device runs its expert",
            "Every device applies its own expert (GELU(x·W1)·W2) to the slots it received; "
            "empty slots stay zero (GELU(0) = 0). No communication.", rv, ws1, os_)  # fmt: skip
    back = []
    for d in range(mesh.size):
        back.append(np.concatenate([out[q][rank[d] * cap : (rank[d] + 1) * cap]
                                    for q in ring_of[d]]))  # fmt: skip
    bs = ls.state("combined", "activation", "sh", L_tok, shape=(n * e_ * cap, h_), local=back)
    ls.step("all-to-all: combine",
            f"The reverse all-to-all returns each slot to the device its token came from "
            f"(again {sent:g} bytes sent per device).", os_, bs,
            collective=all_to_all("expert out", rings, ep, nbytes, mesh), round=1)  # fmt: skip
    ys = []
    for d in range(mesh.size):
        y = np.zeros((per, h_), np.float32)
        for e, toks in enumerate(slots[d]):
            for k, t in enumerate(toks):
                y[t] = routes[d][1][t] * back[d][e * cap + k]
        ys.append(y)
    yst = ls.state("y", "output", "th", L_tok, shape=(n * per, h_), local=ys)
    ref = np.zeros((n * per, h_))
    for d in ring_members:
        expert, gate = routes[d]
        for e, toks in enumerate(_pack(expert, e_, cap)):
            for t in toks:
                row = x[pos[d] + t].astype(np.float64)
                ref[pos[d] + t] = gate[t] * (gelu(row @ w1[e]) @ w2[e])
    err = error(yst, ref, mesh)
    ls.step("result", f"Each token's output is its gate times its expert's result (0 if "
            f"dropped); it equals the same layer computed unsharded with the same routing: "
            f"max |error| = {err:.2g} (float32 rounding).", xs, yst,
            check=check(("y",), err))  # fmt: skip
