"""The executor of compiled graphs: each step a kernel chosen at compile time, writing
into the memory plan's arena, run as one generated Python function.

The arena (`MemoryPlan`) is allocated once and held between calls (``"held"``: each
planned value a view made once, ``out=b7``), or allocated by each call with the outputs in
it (``"call"``: ``a = _empty(...)`` opens the plan, each value a view made per call,
``out=_nd(s7, d7, a, 4096)``). The programs a cond/loop step runs get a block of it.

``Program.run`` calls the *precompiled plan*: straight-line Python source, made once per
program, with one line per kernel call (``v7 = k3(v2, v5, out=b7)``): no per-op loop, no
slot lists or dict lookups, and a ``del`` after each value's last use, so a temporary that
no buffer holds is freed as soon as it is dead. Traced runs (``explorer.trace.record``)
take the interpreter (``run_interpreted``), which records one event per kernel; both run
the same kernels on the same buffers. Neither is ``explorer.ir.Interpreter``, which
evaluates any graph node by node with the registry's numpy impls (the reference and SPMD
runs): a compiled program's steps are not the graph's nodes (a fused group or a cond/loop
group is one step, outputs go into the memory plan's buffers), and its speed comes from
calling them without a per-node dispatch.

>>> import explorer as ex, numpy as np
>>> b = ex.GraphBuilder("g"); x = b.input("x", (2, 3))
>>> g = b.build([b.op("relu", b.op("scale", x, factor=2.0))])
>>> float(Program(g).run([np.ones((2, 3), np.float32)])[0].sum())
12.0
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .. import trace as _trace
from ..ir import Graph
from .codegen.build import has_queued, start_queued
from .errors import CompilerError, LoopLimitExceeded
from .kernels import make_kernel
from .passes.memory_plan import MemoryPlan, host_bytes, plan_memory

__all__ = ["Program", "fresh_bytes"]


class Program:
    """A graph made ready to run: kernels chosen, buffers allocated, the plan generated.

    ``run(feeds)`` takes the arrays of the graph's inputs then parameters, in graph order;
    ``source`` is the plan's Python source.
    """

    def __init__(self, graph: Graph, plan: MemoryPlan | None = None, *,
                 region: np.ndarray | None = None, external: bool = False) -> None:  # fmt: skip
        """``region``: the arena of a held plan, lent by the program running this one (a
        cond/loop step's block of its arena); ``external``: the arena is passed to every
        ``run`` (a cond/loop step of a program whose arena is allocated per call)."""
        self.graph = graph
        self.plan = plan
        slot = {n.name: i for i, n in enumerate(graph.nodes)}
        self.env: list[np.ndarray | None] = [None] * len(graph.nodes)
        self.feed_slots = [slot[n.name] for n in graph.nodes if n.op in ("input", "param")]
        self.feed_names = [n.name for n in graph.nodes if n.op in ("input", "param")]
        # one arena for every planned value (MemoryPlan.lifetime): "held", allocated here
        # (or lent: ``region``) and kept between calls, each value a view made once; "call",
        # allocated by each call (or passed to it: ``external``), each value an `_ArenaView`
        # that the call turns into a view of its arena
        self.arena_bytes = plan.arena_bytes if plan is not None else 0
        self.per_call = plan is not None and plan.lifetime == "call" and not external
        self.external = external
        per_run = self.per_call or external
        if region is not None and not per_run:
            self.arena = region[: self.arena_bytes]
        else:
            self.arena = np.empty(0 if per_run else self.arena_bytes, np.uint8)
        owned = 0 if region is not None or per_run else self.arena.nbytes
        self.buffers = [self.arena] if owned else []
        views: dict[str, np.ndarray | _ArenaView] = {}
        nested: dict[str, tuple[int, int]] = {}
        if plan is not None:
            for name, off in plan.offsets().items():
                t = graph.node(name).type
                dt = np.dtype(t.dtype.numpy)
                views[name] = (_ArenaView(t.shape, dt, off) if per_run else
                               self.arena[off : off + host_bytes(t)].view(dt).reshape(t.shape))  # fmt: skip
            nested = plan.nested_regions()
        sub_programs: list[Program] = []
        # a step: (kernel, input slots, output slots, preallocated out or None); a cond or
        # loop group is one step writing all its members' slots
        self.steps: list[tuple] = []
        self.meta: list[tuple] = []  # (name, op, shapes, flops, bytes, replaced) per step
        self.constants: dict[int, np.ndarray] = {}
        done_groups: set[str] = set()
        for n in graph.nodes:
            s = slot[n.name]
            if n.op == "constant":
                self.env[s] = self.constants[s] = n.attr("value").array
                continue
            if n.op in ("input", "param"):
                continue
            in_types = graph.input_types(n.name)
            ins = tuple(slot[a] for a in n.inputs)
            out = None
            if n.op in ("cond", "loop"):
                group = n.attr("group")
                if group in done_groups:
                    continue
                done_groups.add(group)
                members = sorted((m.attr("index"), slot[m.name]) for m in graph.nodes
                                 if m.op == n.op and m.attr("group") == group)  # fmt: skip
                picked = tuple(i for i, _ in members)
                if n.name in nested:  # its programs run in a block of this arena
                    off, size = nested[n.name]
                    if per_run:
                        out = _ArenaView((size,), np.dtype(np.uint8), off)
                        fn, progs = _control_kernel(n, picked, external=True)
                    else:
                        fn, progs = _control_kernel(n, picked, region=self.arena[off : off + size])
                else:
                    fn, progs = _control_kernel(n, picked)
                sub_programs += progs
                outs = tuple(s for _, s in members)
            else:
                copy = plan is not None and n.name in plan.copies
                fn = _reshape_into(n.type.shape) if copy else make_kernel(n, in_types)
                out = views.get(n.name)
                outs = (s,)
            self.steps.append((fn, ins, outs, out))
            replaced = n.attr("ops", ()) if n.op in ("fused", "masked_softmax") else ()
            replaced = n.attr("ops", ()) if n.op == "generated" else replaced
            # bytes a traced run may allocate for this step (the arena's values allocate
            # nothing; a view allocates nothing: checked on the result, see run_interpreted)
            nbytes = 0 if n.name in views else host_bytes(n.type)
            self.meta.append((n.name, n.op, tuple(t.shape for t in in_types) + (n.type.shape,),
                              graph.node_flops(n.name), nbytes, tuple(replaced)))  # fmt: skip
        self.out_slots = [slot[o] for o in graph.outputs]
        # bytes held between calls: this program's own arena and those its nested programs
        # allocated themselves (none when they run in a block of this arena)
        self.persistent_bytes = owned + sum(p.persistent_bytes for p in sub_programs)
        self._clear = [i for i, n in enumerate(graph.nodes) if n.op != "constant"]
        self._dying = self._dying_after()
        self.source, self._plan = self._generate()

    def _dying_after(self) -> list[tuple[int, ...]]:
        """Per step, the slots whose value is dead after it (its last reader, or itself when
        nothing reads it); feeds, constants and outputs are never dead."""
        last: dict[int, int] = {}
        for j, (_, ins, outs, _) in enumerate(self.steps):
            for s in outs:
                last.setdefault(s, j)
            for s in ins:
                last[s] = j
        keep = set(self.out_slots) | set(self.constants) | set(self.feed_slots)
        dying: list[list[int]] = [[] for _ in self.steps]
        for s, j in last.items():
            if s not in keep:
                dying[j].append(s)
        return [tuple(sorted(d)) for d in dying]

    def bound_plan(self, bound: Mapping[int, np.ndarray], order: Sequence[int]
                   ) -> tuple[str, Callable[..., list[np.ndarray]]]:  # fmt: skip
        """(source, plan) of a plan whose feeds at positions ``bound`` (of ``feed_names``:
        weights, folded values) are baked in as constants; it takes the other feeds, at the
        positions ``order``, as its arguments. A call then passes only what varies."""
        free = [self.feed_slots[i] for i in order]
        fixed = {self.feed_slots[i]: a for i, a in bound.items()}
        if set(free) | set(fixed) != set(self.feed_slots) or set(free) & set(fixed):
            raise CompilerError(
                f"program {self.graph.name!r}: bound feeds {sorted(bound)} and call feeds "
                f"{list(order)} must split its {len(self.feed_slots)} feeds between them"
            )
        return self._generate(fixed, free)

    def _generate(self, fixed: Mapping[int, np.ndarray] | None = None,
                  free: Sequence[int] | None = None) -> tuple[str, object]:  # fmt: skip
        """The plan: one Python function calling the kernels in order (``fixed``: feed
        slots read as constants; ``free``: the slots of its arguments, in order)."""
        ns: dict[str, object] = {}
        fixed = fixed or {}

        def ref(s: int) -> str:
            if s in self.constants:
                ns[f"c{s}"] = self.constants[s]
                return f"c{s}"
            if s in fixed:
                ns[f"c{s}"] = fixed[s]
                return f"c{s}"
            return f"v{s}"

        last: dict[int, int] = {}
        for j, (_, ins, _, _) in enumerate(self.steps):
            for s in ins:
                last[s] = j
        keep = set(self.out_slots) | set(self.constants) | set(fixed)
        params = [f"v{s}" for s in (self.feed_slots if free is None else free)]
        params += ["a"] if self.external else []
        lines = [f"def plan({', '.join(params)}):"]
        ns["_empty"], ns["_nd"], ns["_u8"] = np.empty, np.ndarray, np.uint8
        if self.per_call:
            lines.append(f"    a = _empty({self.arena_bytes}, _u8)")
        for j, (fn, ins, outs, out) in enumerate(self.steps):
            ns[f"k{j}"] = fn
            args = [ref(s) for s in ins]
            if isinstance(out, _ArenaView):
                ns[f"s{j}"], ns[f"d{j}"] = out.shape, out.dtype
                args.append(f"out=_nd(s{j}, d{j}, a, {out.offset})")
            elif out is not None:
                ns[f"b{j}"] = out
                args.append(f"out=b{j}")
            target = ", ".join(f"v{s}" for s in outs) + ("," if len(outs) > 1 else "")
            lines.append(f"    {target} = k{j}({', '.join(args)})")
            dead = sorted({s for s in ins if last[s] == j and s not in keep})
            dead += [s for s in outs if s not in last and s not in keep]  # never read
            if dead:
                lines.append(f"    del {', '.join(f'v{s}' for s in dead)}")
        lines.append(f"    return [{', '.join(ref(s) for s in self.out_slots)}]")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<plan of {self.graph.name}>", "exec"), ns)  # noqa: S102
        return source, ns["plan"]

    def run(self, feeds: Sequence[np.ndarray], arena: np.ndarray | None = None
            ) -> list[np.ndarray]:  # fmt: skip
        """The outputs for ``feeds``; ``arena``: this run's arena, for a program made
        ``external`` (uint8, at least ``arena_bytes``)."""
        if self.external and (arena is None or arena.nbytes < self.arena_bytes):
            raise CompilerError(
                f"program {self.graph.name!r} runs in an arena its caller passes: got "
                f"{None if arena is None else arena.nbytes} bytes, it needs {self.arena_bytes}; "
                "pass a uint8 array of that size as arena="
            )
        if len(feeds) != len(self.feed_slots):
            raise CompilerError(
                f"program {self.graph.name!r} takes {len(self.feed_slots)} arrays "
                f"({', '.join(self.feed_names)}), got {len(feeds)}; pass the inputs then the "
                "parameters in graph order"
            )
        try:
            if _trace.active() is None:
                return self._plan(*feeds, arena) if self.external else self._plan(*feeds)
            return self.run_interpreted(feeds, arena)
        finally:
            if has_queued():  # numba kernels compile after this run, not during it
                start_queued()

    def run_interpreted(self, feeds: Sequence[np.ndarray], arena: np.ndarray | None = None
                        ) -> list[np.ndarray]:  # fmt: skip
        """The steps one by one over the slot list (recording kernel events when a trace is
        being recorded): the reference the plan is tested against."""
        env = self.env
        for s, a in zip(self.feed_slots, feeds, strict=True):
            env[s] = a
        rec = _trace.active()
        # live: the arena (held by the program, or this call's) plus the fresh arrays alive
        # after each step, freed after their last reader as the plan frees them (feeds are
        # not counted, as an eager run counts only what its ops allocate)
        if self.per_call:
            arena = np.empty(self.arena_bytes, np.uint8)
        live = self.arena_bytes
        held: dict[int, int] = {}
        for (fn, ins, outs, out), (name, op, shapes, flops, _, replaced), dying in zip(
            self.steps, self.meta, self._dying, strict=True
        ):
            if isinstance(out, _ArenaView):
                out = np.ndarray(out.shape, out.dtype, arena, out.offset)
            t0 = time.perf_counter()
            args = [env[i] for i in ins]
            res = fn(*args) if out is None else fn(*args, out=out)
            t1 = time.perf_counter()
            if len(outs) == 1:
                env[outs[0]] = res
            else:
                for s, v in zip(outs, res, strict=True):
                    env[s] = v
            if rec is not None:
                nbytes = 0
                if out is None or op in ("cond", "loop"):  # the outputs of nested programs
                    for s in outs:
                        nbytes += held.setdefault(s, fresh_bytes(env[s], args))
                live += nbytes
                rec.add(_trace.TraceEvent(op, "kernel", (t0 - rec.t0) * 1e6, (t1 - t0) * 1e6,
                                          shapes, nbytes, flops, live, replaced, name))  # fmt: skip
                for s in dying:
                    live -= held.pop(s, 0)
        outs = [env[s] for s in self.out_slots]
        for s in self._clear:  # drop references so the caller's arrays can be freed
            env[s] = None
        return outs


def _reshape_into(shape: tuple[int, ...]) -> Callable:
    """A reshape written into ``out`` (numpy's reshape of a strided view allocates a copy);
    a contiguous input is reshaped as a view (the plan keeps its source alive as long)."""

    def k_reshape(x, out=None):
        if out is None or x.flags.c_contiguous:
            return x.reshape(shape)
        np.copyto(out.reshape(x.shape), x)  # out is C-contiguous: C order, as reshape reads
        return out

    return k_reshape


class _ArenaView(NamedTuple):
    """A planned value of a per-call arena: its shape, dtype and byte offset."""

    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int


def fresh_bytes(value: object, args: Sequence[object]) -> int:
    """Bytes a kernel allocated for ``value``: those of the array that owns its memory (a
    kernel may return a reshaped view of its fresh result), 0 when it shares memory with an
    input (a view, or an input returned as is)."""
    if not isinstance(value, np.ndarray):
        return 0
    if any(isinstance(a, np.ndarray) and np.may_share_memory(value, a) for a in args):
        return 0
    owner = value
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    return owner.nbytes


def _control_kernel(node, picked: tuple[int, ...], region: np.ndarray | None = None,
                    external: bool = False) -> tuple[Callable, list[Program]]:  # fmt: skip
    """One step for all outputs of a cond/loop group (the members left after DCE, whose
    output indices are ``picked``): runs the body once per call and returns their values
    (one array for one member, else a tuple); and its programs. They run in ``region`` (a
    block of the caller's held arena), in the block passed as ``out`` to each call
    (``external``), or else each in an arena of its own."""
    attrs = dict(node.attrs)

    def program(key: str) -> Program:
        g = attrs[key].graph
        if region is None and not external:
            return Program(g, plan_memory(g))
        return Program(g, plan_memory(g, "held"), region=region, external=external)

    if node.op == "cond":
        progs = (program("then_"), program("else_"))
        picks = (attrs["then_args"], attrs["else_args"])

        def k_cond(pred, *args, out=None):
            which = 0 if bool(np.asarray(pred)) else 1
            outs = progs[which].run([args[i] for i in picks[which]], out)
            return outs[picked[0]] if len(picked) == 1 else tuple(outs[i] for i in picked)

        return k_cond, list(progs)
    cond_p, body_p = program("cond"), program("body")
    n, ca, ba, max_iter = (
        attrs["n_state"],
        attrs["cond_args"],
        attrs["body_args"],
        attrs.get("max_iter", 1_000_000),
    )

    def k_loop(*args, out=None):
        state = list(args[:n])
        rest = list(args[n:])
        for _ in range(max_iter):
            full = state + rest
            if not bool(np.asarray(cond_p.run([full[i] for i in ca], out)[0])):
                break
            # the body's outputs are its own arrays (fresh, or views of its call's arena),
            # never overwritten by a later run: the state takes them without a copy
            state = body_p.run([full[i] for i in ba], out)
        else:
            raise LoopLimitExceeded(
                f"loop %{node.name} ran past max_iter={max_iter}; raise max_iter or check "
                "that the loop condition becomes false"
            )
        return state[picked[0]] if len(picked) == 1 else tuple(state[i] for i in picked)

    return k_loop, [cond_p, body_p]
