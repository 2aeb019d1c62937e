"""Reverse mode through a ``while`` on a tensor under ``@jit``, in O(n) body runs.

The forward pass is a ``loop`` node (it also counts its trips). Its gradient is one
``while_vjp`` node that replays the loop once storing the state entering each iteration
(n body runs, n states kept), then walks the states backwards applying the body's
vector-Jacobian product (a subgraph traced once with a tape: one body run each)::

    states = []; s = state_0
    while cond(s): states.append(s); s = body(s)          # n body runs
    cot = dL/d(state after the loop); gcap = 0
    for s_k in reversed(states):                           # n vjp runs
        cot, dcap = vjp(body, s_k)(cot); gcap += dcap
    dL/d(state_0) = cot; dL/d(captured tensors) = gcap

So a gradient costs 3n body runs in all (the forward loop, the replay, the vjp), where
recomputing each iteration's state from the start cost n + n + n(n-1)/2; the price is the
n stored states (a static graph cannot size that stack, so it lives inside the node).
``while_vjp`` returns every gradient packed in one fp32 vector (one output keeps it an
ordinary node for the executor), unpacked by ``getitem``/``reshape``.

A gradient of that gradient needs the backward to be taped too: while an outer tape records,
the backward is instead a loop that recomputes each iteration's state from the start (built
of ``while_``, so differentiable again; O(n^2) body runs).

``while_`` (what a converted ``while`` calls) lives here because a differentiable loop is
built here.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ...ir import DType
from ...ir.opdef import REQUIRED, OpDef, OpGroup, register
from ...ir.ops_tensor import Subgraph, _by_size_sig
from .. import functional as F
from ..autodiff import VJP, Tape, backward
from ..errors import LoopLimitExceeded
from ..executor import Program
from ..passes.memory_plan import plan_memory
from ..tensor import Tensor
from ..trace_stack import capturing, no_tapes, tapes, tracing
from .capture import Tracer
from .control import as_tensor, is_symbolic, loop

__all__ = ["while_", "differentiable_loop"]

TRIPS = "__jit_trips"


def _float(t: Any) -> bool:
    return isinstance(t, Tensor) and t.dtype.is_float


def while_(cond_fn, body_fn, init: tuple, names: tuple[str, ...], line: int):
    """A converted ``while``: Python loop while the test is a Python value; a ``loop``
    node from the first iteration whose test is a tensor (differentiable while a gradient
    tape records: ``differentiable_loop``)."""
    vals = tuple(init)
    c = cond_fn(*vals)
    while not is_symbolic(c):
        if not c:
            return vals
        vals = tuple(body_fn(*vals))
        c = cond_fn(*vals)
    if tapes():
        return differentiable_loop(cond_fn, body_fn, vals, names, line)
    return loop(cond_fn, body_fn, vals, names, line)[0]


def differentiable_loop(cond_fn, body_fn, vals: tuple, names: tuple[str, ...], line: int):
    """A ``loop`` node (with a trip counter) and tape entries that differentiate it."""
    # the bodies are subgraphs: their ops are not ops of the outer tapes
    with no_tapes() as outer:
        out, state_idx, caps = loop(
            lambda *a: cond_fn(*a[:-1]),
            lambda *a: (*body_fn(*a[:-1]), a[-1] + 1),
            (*vals, 0), (*names, TRIPS), line,
        )  # fmt: skip
    trips_tensor = out[-1]
    loop_node = next(n for n in reversed(capturing().nodes) if n.name == trips_tensor.value)
    state_idx = [k for k in state_idx if k < len(vals)]
    result = out[:-1]
    init = [as_tensor(vals[k]) for k in state_idx]
    inputs = (*init, *caps)
    plan = _Backward(body_fn, vals, state_idx, init, list(caps), trips_tensor, names, line,
                     loop_node)  # fmt: skip
    for i, k in enumerate(state_idx):
        if _float(result[k]):
            for tape in outer:
                tape.push("while_loop", inputs, {"vjp": plan, "index": i}, result[k])
    return result


class _Backward:
    """Builds the gradient of one forward loop, for the cotangent of one output: a
    ``while_vjp`` node (O(n) body runs); while an outer tape records (a gradient of this
    gradient) a loop that recomputes each iteration's state from the start instead, built
    of ``while_`` and so differentiable again (O(n^2) body runs)."""

    def __init__(self, body_fn, vals, state_idx, init, caps, trips, names, line,
                 loop_node) -> None:  # fmt: skip
        self.body_fn, self.vals, self.state_idx = body_fn, vals, state_idx
        self.init, self.caps, self.trips = init, caps, trips
        self.names, self.line = names, line
        self.attrs = dict(loop_node.attrs)  # the forward loop's cond/body subgraphs
        self.fs = [i for i, t in enumerate(init) if _float(t)]  # differentiable states
        self.fc = [i for i, t in enumerate(caps) if _float(t)]  # differentiable captures

    def _body(self, state: list[Any]) -> list[Any]:
        full = list(self.vals)
        for k, v in zip(self.state_idx, state, strict=True):
            full[k] = v
        out = self.body_fn(*full)
        return [out[k] for k in self.state_idx]

    def _vjp(self, state: list[Any], cot: list[Tensor]) -> list[Tensor]:
        """d(sum(body(state)[i] * cot[i]))/d(float states, float captures), traced here."""
        wrt = [state[i] for i in self.fs] + [self.caps[i] for i in self.fc]
        with Tape() as tape:
            for t in wrt:
                tape.watch(t)
            new = self._body(state)
            total = None
            for i, c in zip(self.fs, cot, strict=True):
                term = F.sum(F.mul(as_tensor(new[i]), c), None)
                total = term if total is None else F.add(total, term)
        grads = backward(tape, total, wrt)
        return [F.cast(d, w.dtype) if d.dtype != w.dtype else d
                for d, w in zip(grads, wrt, strict=True)]  # fmt: skip

    def _vjp_graph(self, tracer: Tracer):
        """The body's VJP as a subgraph: (states and trip count, cotangents of the float
        states, captures) -> (d states, d captures); and the outer tensors it captures."""
        sub = Tracer(f"{tracer.name}.while{self.line}.vjp", tracer, mode=tracer.mode)
        state = [sub.input(self.names[k], t.type)
                 for k, t in zip(self.state_idx, self.init, strict=True)]  # fmt: skip
        sub.input(TRIPS, self.trips.type)  # the replayed state carries the trip count
        cot = [sub.input(f"__jit_cot{i}", self.init[i].type) for i in self.fs]
        with tracing(sub):
            grads = self._vjp(state, cot)
        graph = sub.build(grads)
        return graph, list(sub.captures)

    def __call__(self, g: Tensor, index: int) -> list[Tensor | None]:
        if not self.fs:
            return [None] * (len(self.init) + len(self.caps))
        if tapes():
            return self._recomputing(g, index)
        tracer = capturing()
        grads: list[Tensor | None] = [None] * (len(self.init) + len(self.caps))
        cot = [as_tensor(g if i == index else F.zeros_like(self.init[i])) for i in self.fs]
        vjp, vcaps = self._vjp_graph(tracer)
        state = [*self.init, as_tensor(0)]  # as the loop node takes it: trip count last
        n, nl = len(state), len(self.caps)
        a = self.attrs
        attrs = {
            "cond": a["cond"], "body": a["body"], "vjp": Subgraph(vjp), "n_state": n,
            "cond_args": a["cond_args"], "body_args": a["body_args"], "n_caps": nl,
            "wrt": tuple(self.fs) + tuple(n + i for i in self.fc),
            "max_iter": a.get("max_iter", 1_000_000),
        }  # fmt: skip
        packed = tracer.add_node("while_vjp", (*state, *self.caps, *cot, *vcaps), attrs,
                                 "while_vjp")  # fmt: skip
        off = 0
        targets = [self.init[i] for i in self.fs] + [self.caps[i] for i in self.fc]
        slots = list(self.fs) + [len(self.init) + i for i in self.fc]
        for slot, t in zip(slots, targets, strict=True):
            piece = F.reshape(F.getitem(packed, (slice(off, off + t.size),)), t.shape)
            grads[slot] = F.cast(piece, t.dtype) if t.dtype != DType.FP32 else piece
            off += t.size
        return grads

    # --- differentiable again (higher-order gradients) -------------------------------------
    def _recompute(self, k: Tensor) -> list[Any]:
        """The state entering iteration ``k``: ``k`` trips of the body from the start."""
        names = (TRIPS, *(self.names[j] for j in self.state_idx))
        out = while_(
            lambda j, *s: j < k, lambda j, *s: (j + 1, *self._body(list(s))),
            (0, *self.init), names, self.line,
        )  # fmt: skip
        return list(out[1:])

    def _step(self, k: Tensor, cot: list[Tensor], gcap: list[Tensor]):
        grads = self._vjp(self._recompute(k), cot)
        n = len(self.fs)
        return k - 1, *grads[:n], *[F.add(a, b) for a, b in zip(gcap, grads[n:], strict=True)]

    def _recomputing(self, g: Tensor, index: int) -> list[Tensor | None]:
        cot = [g if i == index else F.zeros_like(self.init[i]) for i in self.fs]
        gcap = [F.zeros_like(self.caps[i]) for i in self.fc]
        n, m = len(self.fs), len(self.fc)
        names = ("__jit_k", *(f"__jit_dstate{i}" for i in range(n)),
                 *(f"__jit_dcap{i}" for i in range(m)))  # fmt: skip
        out = while_(
            lambda k, *rest: k >= 0,
            lambda k, *rest: self._step(k, list(rest[:n]), list(rest[n:])),
            (self.trips - 1, *cot, *gcap), names, self.line,
        )  # fmt: skip
        grads: list[Tensor | None] = [None] * (len(self.init) + len(self.caps))
        for j, i in enumerate(self.fs):
            grads[i] = out[1 + j]
        for j, i in enumerate(self.fc):
            grads[len(self.init) + i] = out[1 + n + j]
        return grads


def _while_loop_vjp(g, inputs, out, attrs):
    return attrs["vjp"](g, attrs["index"])


VJP["while_loop"] = _while_loop_vjp


# --- the while_vjp op ---------------------------------------------------------------------

_LOCAL = threading.local()


def _program(sub: Subgraph) -> Program:
    """The program running ``sub``, one per thread (a program's slots serve one call)."""
    progs = getattr(_LOCAL, "programs", None)
    if progs is None:
        progs = _LOCAL.programs = weakref.WeakKeyDictionary()
    prog = progs.get(sub)
    if prog is None:
        prog = progs[sub] = Program(sub.graph, plan_memory(sub.graph))
    return prog


def _while_vjp_impl(*xs, cond, body, vjp, n_state, cond_args, body_args, n_caps, wrt,
                    max_iter):  # fmt: skip
    """Replay the loop storing each iteration's entering state, then the VJPs backwards.

    ``xs``: the loop's state and captures (as the ``loop`` node takes them), then the
    cotangents of the float states, then the tensors the VJP subgraph captures."""
    cond_p, body_p, vjp_p = _program(cond), _program(body), _program(vjp)
    n_cot = sum(1 for w in wrt if w < n_state)
    state = [np.array(x, copy=True) for x in xs[:n_state]]
    loop_rest = list(xs[n_state : n_state + n_caps])
    cot = [np.asarray(x) for x in xs[n_state + n_caps : n_state + n_caps + n_cot]]
    vcaps = list(xs[n_state + n_caps + n_cot :])
    history = []
    for _ in range(max_iter):
        full = state + loop_rest
        if not bool(np.asarray(cond_p.run([full[i] for i in cond_args])[0])):
            break
        history.append(state)
        state = [np.array(v, copy=True) for v in body_p.run([full[i] for i in body_args])]
    else:
        raise LoopLimitExceeded(
            f"while_vjp: the loop ran past max_iter={max_iter}; raise max_iter or check that "
            "the loop condition becomes false"
        )
    gcap: list[np.ndarray] | None = None
    for s in reversed(history):
        outs = vjp_p.run([*s, *cot, *vcaps])
        cot = [np.array(o, copy=True) for o in outs[:n_cot]]
        g = [np.array(o, copy=True) for o in outs[n_cot:]]
        gcap = g if gcap is None else [a + b for a, b in zip(gcap, g, strict=True)]
    if gcap is None:
        gcap = [np.zeros(xs[w].shape, np.float32) for w in wrt[n_cot:]]
    parts = [np.asarray(c, np.float32).reshape(-1) for c in cot + gcap]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def _while_vjp_shape(in_types, attrs) -> tuple[int, ...]:
    return (sum(in_types[w].numel for w in attrs["wrt"]),)


def _while_vjp_flops(in_types, out_type, attrs) -> int:
    per_trip = attrs["body"].graph.flops() + attrs["vjp"].graph.flops()
    return int(per_trip + attrs["cond"].graph.flops())


register(OpDef("while_vjp", OpGroup.MOVEMENT, None, None, 0, _while_vjp_impl,
               attrs={"cond": REQUIRED, "body": REQUIRED, "vjp": REQUIRED, "n_state": REQUIRED,
                      "cond_args": REQUIRED, "body_args": REQUIRED, "n_caps": REQUIRED,
                      "wrt": REQUIRED, "max_iter": 1_000_000},
               signature_rule=lambda i, a: _by_size_sig(i, _while_vjp_shape(i, a)),
               shape_rule=_while_vjp_shape,
               dtype_rule=lambda i, a: DType.FP32,
               flops_rule=_while_vjp_flops,
               doc="gradient of a while on a tensor: replay storing states, then the body's "
                   "VJP backwards (FLOPs per iteration); all gradients packed in one fp32 "
                   "vector"))  # fmt: skip
