"""Memory planning: every planned value at a byte offset of one arena, reused over time.

A value is *planned* when its kernel fills an ``out`` array (``WRITES_OUT``) and it does
not leave the function (outputs are fresh arrays the caller owns: never double-buffered).
Its *lifetime* runs from the step that writes it to the last step that reads it or a view
of it (reshape, transpose, slices keep their source alive). An elementwise kernel
(``IN_PLACE``) whose input of the same type dies at it writes over that input: the two
values form one *block* whose lifetime is the union of theirs.

Blocks get offsets by the greedy-by-size rule of TFLite's arena planner and XLA's heap
simulator ("Efficient Memory Management for Deep Neural Net Inference", Pisarchyk & Lee
2020): largest block first, each placed in the smallest gap (best fit) between the blocks
already placed whose lifetimes overlap its own, else above them. Sizes are rounded up to
``ALIGN`` bytes. Three figures bound the result:

- ``lower_bound_bytes``: the largest sum of block sizes live at one step; no offset
  assignment of these lifetimes needs less (those blocks coexist);
- ``arena_bytes``: what the plan allocates, ``>= lower_bound_bytes``;
- ``naive_bytes``: every planned value in its own allocation (no reuse; sizes rounded up
  alike), ``>= arena_bytes``.

Where the arena lives (``lifetime``):

- ``"held"``: allocated once with the program and kept between calls (a TFLite
  interpreter's arena); outputs are fresh arrays. A call's peak is the arena plus its
  outputs: the arena is still held when the last kernel writes the output.
- ``"call"``: allocated by each call, with the outputs planned in it (alive to the end), so
  the call's peak is the arena alone, the largest live set with the outputs counted, as an
  eager run frees as it goes; the returned outputs are views of that call's arena (their
  own arrays: the next call allocates another one), which they keep alive.
  Each call pays one allocation and one view per planned value (about 0.3 us each);
  `plan_memory` picks it when it lowers the peak by ``CALL_MIN_SAVING``, the outputs fill
  at least ``CALL_MIN_OUTPUT_SHARE`` of the arena (what they keep alive after the call) and
  the arena is at least ``CALL_MIN_BYTES`` (under it, the views cost more time than the
  bytes saved are worth to an overhead-bound program).

A cond/loop step runs nested programs (branches; condition and body): their arena, the
largest of their held plans, is one more block of this arena, live at that step only, so
their memory is reused by the values before and after the step (XLA's heap simulator
nests called computations the same way). Their outputs are fresh arrays.

>>> import explorer as ex
>>> b = ex.GraphBuilder("g"); x = b.input("x", (64, 64))
>>> y = b.op("exp", b.op("matmul", b.op("exp", x), x), name="y")
>>> plan = plan_memory(b.build([b.op("matmul", y, x)]))
>>> plan.arena_bytes, plan.lower_bound_bytes, plan.naive_bytes, plan.in_place
(32768, 32768, 49152, ('y',))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...ir import Graph, TensorType
from ..errors import CompilerError
from ..kernels import ALIASES, IN_PLACE, WRITES_OUT
from .rewrite import RewriteStep

__all__ = ["ALIGN", "CALL_MIN_BYTES", "CALL_MIN_SAVING", "CALL_MIN_OUTPUT_SHARE", "Block", "Lifetime", "MemoryPlan",
           "plan_memory", "memory_plan", "host_bytes", "nested_arena_bytes", "copying_reshapes"]  # fmt: skip

ALIGN = 64
"""Byte alignment of every block's offset and size (a cache line; numpy's SIMD loops and
BLAS read aligned rows fastest)."""
CALL_MIN_BYTES = 1 << 16
"""Smallest arena allocated per call (``"call"``): writing 64 KiB takes microseconds, as
much as the per-call views of a program of a few dozen planned values."""
CALL_MIN_SAVING = 0.05
"""Fraction of the held plan's peak (arena + outputs) a per-call arena must save: the plans
count no kernel's temporaries, so a smaller difference may not be one. GPT-2 small's
512-token prefill saves 7% (held: a 9.4 MB arena beside the 102.9 MB logits)."""
CALL_MIN_OUTPUT_SHARE = 0.5
"""Share of a per-call arena the outputs must fill: they keep the whole arena alive while
the caller holds them (a loop's state would hold two bodies' arenas at the next run)."""

Lifetime = Literal["held", "call"]

# views whose reshape numpy copies (not contiguous in general)
_STRIDED = frozenset({"transpose", "slice", "expand", "broadcast_to", "getitem"})

# ops that run nested programs inside one step (attributes holding their graphs)
_NESTED = {"cond": ("then_", "else_"), "loop": ("cond", "body")}


def nested_arena_bytes(node) -> int:
    """Bytes of the arena the programs of a cond/loop node need: the largest of their held
    plans (they run one at a time: a branch, or the condition then the body)."""
    return max(plan_memory(node.attr(k).graph, "held").arena_bytes for k in _NESTED[node.op])


@dataclass(frozen=True)
class Block:
    """One region of the arena over one lifetime.

    Args:
        values: the values it holds one after another (the first is written by its kernel,
            each next one in place over the one before).
        offset: its first byte in the arena.
        nbytes: its size (the largest value's bytes, rounded up to ``ALIGN``).
        first, last: the steps (positions in the graph's node order) that write its first
            value and read its last value, both included.
        nested: the block is the arena of the programs a cond/loop step runs (its
            branches, or its condition and body: one at a time, so they share it);
            ``values`` is the step's first member node.
    """

    values: tuple[str, ...]
    offset: int
    nbytes: int
    first: int
    last: int
    nested: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    def overlaps_in_time(self, other: Block) -> bool:
        return self.first <= other.last and other.first <= self.last

    def overlaps_in_space(self, other: Block) -> bool:
        return self.offset < other.end and other.offset < self.end


@dataclass(frozen=True)
class MemoryPlan:
    """Where each planned value lives in the arena, and what the reuse saved.

    ``blocks`` in order of their first step; ``arena_bytes`` the arena's size;
    ``naive_bytes`` the sum of the planned values' sizes (no reuse); ``lower_bound_bytes``
    the largest live set (no plan of these lifetimes needs less); ``in_place`` the values
    written over an input; ``lifetime`` where the arena lives (module docstring);
    ``output_bytes`` the bytes of the outputs the kernels write (fresh arrays when held,
    in the arena per call); ``peak_bytes`` what a call holds at most of both; ``copies``
    the reshapes of strided views written into the arena (`copying_reshapes`).
    """

    blocks: tuple[Block, ...]
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    in_place: tuple[str, ...]
    lifetime: Lifetime = "held"
    output_bytes: int = 0
    copies: tuple[str, ...] = ()

    @property
    def peak_bytes(self) -> int:
        """The arena plus, when held, the fresh outputs written while it is held."""
        return self.arena_bytes + (self.output_bytes if self.lifetime == "held" else 0)

    @property
    def planned_bytes(self) -> int:
        """The arena's bytes (the name kept from the plan of separate buffers)."""
        return self.arena_bytes

    @property
    def buffer_bytes(self) -> tuple[int, ...]:
        """The buffers the executor allocates: the one arena (none when nothing is planned)."""
        return (self.arena_bytes,) if self.arena_bytes else ()

    def offsets(self) -> dict[str, int]:
        """Planned value -> its byte offset in the arena."""
        return {v: b.offset for b in self.blocks if not b.nested for v in b.values}

    def nested_regions(self) -> dict[str, tuple[int, int]]:
        """cond/loop step (its first member) -> (offset, bytes) of its programs' arena."""
        return {b.values[0]: (b.offset, b.nbytes) for b in self.blocks if b.nested}

    def buffers(self) -> dict[str, int]:
        """Planned value -> its byte offset (two values share storage when their ranges
        overlap: only when their lifetimes do not)."""
        return self.offsets()

    def block_of(self, value: str) -> Block:
        for b in self.blocks:
            if value in b.values:
                return b
        raise CompilerError(
            f"memory plan: %{value} has no block in the arena (it is an input, a parameter, "
            "an output or a view); ask block_of for a value listed in offsets()"
        )

    def shared(self) -> tuple[tuple[str, ...], ...]:
        """Groups of blocks that reuse storage: blocks whose byte ranges overlap (at other
        times), joined transitively; each group lists the first value of its blocks in
        order of their first step. A block alone in its range is in no group."""
        parent = list(range(len(self.blocks)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        by_offset = sorted(range(len(self.blocks)), key=lambda i: self.blocks[i].offset)
        for k, i in enumerate(by_offset):  # sweep: each block against those starting below its end
            for j in by_offset[k + 1 :]:
                if self.blocks[j].offset >= self.blocks[i].end:
                    break
                parent[find(j)] = find(i)
        groups: dict[int, list[int]] = {}
        for i in range(len(self.blocks)):
            groups.setdefault(find(i), []).append(i)
        return tuple(
            tuple(self.blocks[i].values[0] for i in sorted(g))
            for g in groups.values()
            if len(g) > 1
        )

    @property
    def reuse(self) -> float:
        """``naive_bytes / arena_bytes`` (1.0 when nothing is planned)."""
        return self.naive_bytes / self.arena_bytes if self.arena_bytes else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "lifetime": self.lifetime, "arena_bytes": self.arena_bytes,
            "output_bytes": self.output_bytes, "peak_bytes": self.peak_bytes,
            "naive_bytes": self.naive_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "values": sum(len(b.values) for b in self.blocks if not b.nested),
            "nested": sum(b.nested for b in self.blocks),
            "blocks": len(self.blocks), "in_place": len(self.in_place),
            "shared_groups": len(self.shared()),
        }  # fmt: skip

    def __str__(self) -> str:
        n = sum(len(b.values) for b in self.blocks if not b.nested)
        k = sum(b.nested for b in self.blocks)
        nested = f", {k} nested program arenas" if k else ""
        return (f"{n} values in {len(self.blocks) - k} blocks of a {self.arena_bytes} B arena "
                f"{'per call' if self.lifetime == 'call' else 'held'} "
                f"(no reuse {self.naive_bytes} B, largest live set {self.lower_bound_bytes} B), "
                f"{len(self.in_place)} in place{nested}")  # fmt: skip


def host_bytes(t: TensorType) -> int:
    """Bytes of a value of type ``t`` as the executor holds it: bf16, fp16 and fp8 values
    are numpy float32 arrays (``DType.numpy``), twice or four times ``t.nbytes``."""
    return t.numel * np.dtype(t.dtype.numpy).itemsize


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _roots(graph: Graph, copies: frozenset[str] = frozenset()) -> dict[str, str]:
    """Value -> the value owning its memory (views lead to their source)."""
    root: dict[str, str] = {}
    for n in graph.nodes:
        alias = n.op in ALIASES and n.inputs and n.name not in copies
        root[n.name] = root[n.inputs[0]] if alias else n.name
    return root


def copying_reshapes(graph: Graph) -> frozenset[str]:
    """The reshapes of a strided view (a transpose, slice, expand, getitem): numpy copies
    them, so they get a block and write into it (`Program` gives them a kernel that does;
    one whose input turns out contiguous returns a view, and its source is kept alive as
    long). Not those that are, or are viewed by, an output: an output must never be a view
    of a planned value."""
    copies = {n.name for n in graph.nodes
              if n.op == "reshape" and n.inputs and graph.node(n.inputs[0]).op in _STRIDED
              and host_bytes(n.type) > 0}  # fmt: skip
    while True:  # dropping one can make another one's view an output's: to a fixed point
        root = _roots(graph, frozenset(copies))
        escaping = {root[o] for o in graph.outputs} & copies
        if not escaping:
            return frozenset(copies)
        copies -= escaping


def _lifetimes(graph: Graph, outputs: bool
               ) -> tuple[list[list[str]], list[str], dict[str, int], dict[str, int], int]:  # fmt: skip
    """(chains of values sharing one block, the values written in place, first step and
    last step of each chain's head, bytes of the kernel-written outputs); ``outputs``: plan
    the outputs too, alive past the last step."""
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    copies = copying_reshapes(graph)
    root = _roots(graph, copies)
    last: dict[str, int] = {}
    for n in graph.nodes:
        for a in n.inputs:
            r = root[a]
            last[r] = max(last.get(r, -1), pos[n.name])
    for n in reversed(graph.nodes):  # a copy may return a view: its source lives as long
        if n.name in copies:
            r = root[n.inputs[0]]
            last[r] = max(last.get(r, -1), last.get(n.name, pos[n.name]))
    escapes = {root[o] for o in graph.outputs}
    written = [n for n in graph.nodes
               if (n.op in WRITES_OUT or n.name in copies) and host_bytes(n.type) > 0]  # fmt: skip
    out_bytes = sum(host_bytes(n.type) for n in written if n.name in escapes)
    if outputs:
        for r in escapes:
            last[r] = len(graph.nodes)
    planned = [n for n in written if outputs or n.name not in escapes]
    head: dict[str, str] = {}  # value -> the first value of its chain
    chains: dict[str, list[str]] = {}
    in_place: list[str] = []
    for n in planned:
        i = pos[n.name]
        chosen = None
        if n.op in IN_PLACE:
            for a in n.inputs:
                # the input dies here, is not read through a view by another input of this
                # kernel, and has this value's shape and dtype
                if (a in head and last.get(a) == i and graph.node(a).type == n.type
                        and sum(root[b] == a for b in n.inputs) == 1):  # fmt: skip
                    chosen = head[a]
                    break
        if chosen is None:
            head[n.name] = n.name
            chains[n.name] = [n.name]
        else:
            head[n.name] = chosen
            chains[chosen].append(n.name)
            in_place.append(n.name)
    first = {h: pos[h] for h in chains}
    end = {h: max(last.get(v, pos[v]) for v in chain) for h, chain in chains.items()}
    return list(chains.values()), in_place, first, end, out_bytes, copies


def _place(sizes: list[int], first: list[int], last: list[int]) -> list[int]:
    """Offsets by greedy-by-size with best fit (see the module docstring)."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], first[i], i))
    offset = [-1] * len(sizes)
    placed: list[int] = []
    for i in order:
        busy = sorted(
            (offset[j], offset[j] + sizes[j]) for j in placed
            if first[j] <= last[i] and first[i] <= last[j]
        )  # fmt: skip
        best, best_gap, top = None, None, 0
        for lo, hi in busy:
            gap = lo - top
            if gap >= sizes[i] and (best_gap is None or gap < best_gap):
                best, best_gap = top, gap
            top = max(top, hi)
        offset[i] = top if best is None else best
        placed.append(i)
    return offset


def plan_memory(graph: Graph, lifetime: Lifetime | None = None) -> MemoryPlan:
    """The arena plan of ``graph`` in its node order (the order the executor runs it);
    ``lifetime`` None picks the one of lower peak (module docstring)."""
    if lifetime is None:
        held = plan_memory(graph, "held")
        if held.output_bytes == 0:
            return held
        call = plan_memory(graph, "call")
        saves = call.peak_bytes <= (1 - CALL_MIN_SAVING) * held.peak_bytes
        mostly_outputs = call.output_bytes >= CALL_MIN_OUTPUT_SHARE * call.arena_bytes
        return call if saves and mostly_outputs and call.arena_bytes >= CALL_MIN_BYTES else held
    if lifetime not in ("held", "call"):
        raise CompilerError(f"plan_memory: lifetime={lifetime!r} is not 'held', 'call' or "
                            "None; pass one of them (None picks)")  # fmt: skip
    chains, in_place, first, end, out_bytes, copies = _lifetimes(graph, lifetime == "call")
    heads = [c[0] for c in chains]
    sizes = [_aligned(max(host_bytes(graph.node(v).type) for v in c)) for c in chains]
    starts = [first[h] for h in heads]
    ends = [end[h] for h in heads]
    nested = [False] * len(chains)
    groups: set[str] = set()
    for i, n in enumerate(graph.nodes):
        if n.op in _NESTED and n.attr("group") not in groups:
            groups.add(n.attr("group"))  # the executor runs the group at its first member
            need = _aligned(nested_arena_bytes(n))
            if need:
                chains.append([n.name])
                sizes.append(need)
                starts.append(i)
                ends.append(i)
                nested.append(True)
    offsets = _place(sizes, starts, ends)
    blocks = tuple(
        Block(tuple(c), o, s, a, b, k)
        for c, o, s, a, b, k in sorted(zip(chains, offsets, sizes, starts, ends, nested,
                                           strict=True), key=lambda t: (t[3], t[1]))
    )  # fmt: skip
    arena = max((b.end for b in blocks), default=0)
    delta = [0] * (len(graph.nodes) + 2)  # outputs planned per call live past the end
    for b in blocks:
        delta[b.first] += b.nbytes
        delta[b.last + 1] -= b.nbytes
    live, bound = 0, 0
    for d in delta:
        live += d
        bound = max(bound, live)
    naive = sum(_aligned(host_bytes(graph.node(v).type)) for c, k in zip(chains, nested, strict=True)
                if not k for v in c) + sum(z for z, k in zip(sizes, nested, strict=True) if k)  # fmt: skip
    copied = tuple(n.name for n in graph.nodes if n.name in copies)
    return MemoryPlan(blocks, arena, naive, bound, tuple(in_place), lifetime, out_bytes, copied)


def memory_plan(graph: Graph) -> tuple[Graph, list[RewriteStep], MemoryPlan]:
    """The plan; the graph is unchanged (the plan travels beside it to the executor)."""
    plan = plan_memory(graph)
    step = RewriteStep("memory_plan", "reuse_buffers", plan.in_place, graph, graph, str(plan))
    return graph, [step], plan
