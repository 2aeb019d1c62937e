"""The memory plan's arena: checked by simulating the schedule, not by reading the plan back.

Liveness is recomputed here from the graph alone (a value is live from the step that writes
it to the last step that reads it or a view of it); at every step the byte ranges of the
live planned values must be disjoint, except a value written in place over an input that
dies at that step. Outputs of the arena plan equal a run without any plan bit for bit, and
the arena lies between the largest live set and the sum without reuse.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F
from explorer.compiler.executor import Program
from explorer.compiler.kernels import ALIASES
from explorer.compiler.passes.memory_plan import ALIGN, host_bytes, plan_memory
from explorer.ir import Graph

N = 16
LIFETIMES = ("held", "call")
UNARY = ("exp", "tanh", "neg", "relu", "scale")
BINARY = ("add", "mul", "sub", "maximum")


def random_graph(seed: int, size: int = 24) -> Graph:
    """A graph of ``size`` random ops over (N, N) values: elementwise (many can run in
    place), matmuls, transposes and reshapes (views that keep their source alive)."""
    r = random.Random(seed)
    b = ex.GraphBuilder(f"random{seed}")
    vals = [b.input("x", (N, N)), b.input("y", (N, N))]
    for k in range(size):
        kind = r.random()
        a = vals[-1] if r.random() < 0.5 else r.choice(vals)
        name = f"v{k}"
        if kind < 0.35:
            op = r.choice(UNARY)
            attrs = {"factor": 0.5} if op == "scale" else {}
            vals.append(b.op(op, a, name=name, **attrs))
        elif kind < 0.65:
            vals.append(b.op(r.choice(BINARY), a, r.choice(vals), name=name))
        elif kind < 0.8:
            vals.append(b.op("matmul", a, r.choice(vals), name=name))
        elif kind < 0.9:
            vals.append(b.op("transpose", a, name=name, perm=(1, 0)))
        else:
            flat = b.op("reshape", a, name=f"{name}_flat", shape=(N * N,))
            vals.append(b.op("reshape", flat, name=name, shape=(N, N)))
    outs = r.sample(vals[2:], k=min(3, len(vals) - 2))
    return b.build(sorted(set(outs + [vals[-1]]), key=vals.index))


def live_ranges(graph: Graph, lifetime: str = "held", copies=()) -> dict[str, tuple[int, int]]:
    """Value -> (first step, last step) with reads through views counted, computed here
    independently of the plan (an output planned per call is live past the last step; a
    reshape in ``copies`` owns its memory, and may be a view: its source lives as long)."""
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    source = {}
    for n in graph.nodes:
        view = n.op in ALIASES and n.inputs and n.name not in copies
        source[n.name] = source[n.inputs[0]] if view else n.name
    last = {n.name: pos[n.name] for n in graph.nodes}
    for n in graph.nodes:
        for a in n.inputs:
            last[source[a]] = max(last[source[a]], pos[n.name])
    for n in reversed(graph.nodes):
        if n.name in copies:
            last[source[n.inputs[0]]] = max(last[source[n.inputs[0]]], last[n.name])
    if lifetime == "call":
        for o in graph.outputs:
            last[source[o]] = len(graph.nodes)
    return {v: (pos[v], last[v]) for v in last}


def check_no_overlap(graph: Graph, plan) -> None:
    """At every step, the live values and the arena of the nested programs running at that
    step (a cond/loop group runs at its first member) occupy disjoint bytes."""
    ranges = live_ranges(graph, plan.lifetime, plan.copies)
    offsets = plan.offsets()
    in_place = set(plan.in_place)
    nodes = {n.name: n for n in graph.nodes}
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    first_member = {}
    for n in graph.nodes:
        if n.op in ("cond", "loop"):
            first_member.setdefault(n.attr("group"), n.name)
    assert set(plan.nested_regions()) == set(first_member.values())
    for step in range(len(graph.nodes) + 1):
        live = [v for v in offsets if ranges[v][0] <= step <= ranges[v][1]]
        spans = sorted([(offsets[v], offsets[v] + host_bytes(nodes[v].type), v) for v in live]
                       + [(o, o + z, m) for m, (o, z) in plan.nested_regions().items()
                          if pos[m] == step])  # fmt: skip
        for (lo1, hi1, a), (lo2, hi2, c) in zip(spans, spans[1:], strict=False):
            if lo2 < hi1:
                # allowed only for a value written in place over its input at this step
                writer, read = (a, c) if ranges[a][0] == step else (c, a)
                assert (writer in in_place and ranges[writer][0] == step
                        and read in nodes[writer].inputs and ranges[read][1] == step), (
                    f"step {step}: {a} [{lo1}, {hi1}) and {c} [{lo2}, {hi2}) overlap")  # fmt: skip


def largest_live_set(graph: Graph, plan) -> int:
    ranges = live_ranges(graph, plan.lifetime, plan.copies)
    blocks = [(min(ranges[v][0] for v in b.values), max(ranges[v][1] for v in b.values),
               b.nbytes) for b in plan.blocks]  # fmt: skip
    return max((sum(s for a, z, s in blocks if a <= t <= z) for t in range(len(graph.nodes) + 1)),
               default=0)  # fmt: skip


def feeds(graph: Graph, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    srcs = [n for n in graph.nodes if n.op in ("input", "param")]
    return [(rng.standard_normal(n.type.shape) / 4).astype(np.float32) for n in srcs]


@pytest.mark.parametrize("lifetime", LIFETIMES)
@pytest.mark.parametrize("seed", range(40))
def test_arena_never_overlaps_two_live_values(seed, lifetime):
    g = random_graph(seed)
    plan = plan_memory(g, lifetime)
    check_no_overlap(g, plan)
    assert all(b.offset % ALIGN == 0 and b.nbytes % ALIGN == 0 for b in plan.blocks)


@pytest.mark.parametrize("lifetime", LIFETIMES)
@pytest.mark.parametrize("seed", range(40))
def test_arena_lies_between_the_largest_live_set_and_no_reuse(seed, lifetime):
    g = random_graph(seed)
    plan = plan_memory(g, lifetime)
    assert plan.lifetime == lifetime
    bound = largest_live_set(g, plan)
    assert plan.lower_bound_bytes == bound
    assert bound <= plan.arena_bytes <= plan.naive_bytes
    assert plan.arena_bytes == max((b.end for b in plan.blocks), default=0)


@pytest.mark.parametrize("lifetime", LIFETIMES)
@pytest.mark.parametrize("seed", range(40))
def test_reuse_gives_identical_outputs(seed, lifetime):
    g = random_graph(seed)
    xs = feeds(g, seed)
    planned = Program(g, plan_memory(g, lifetime))
    plain = Program(g, None)
    want = plain.run(xs)
    for _ in range(2):  # a second call reuses the arena: the outputs must not change
        got = planned.run(xs)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    with ex.trace.record():  # the interpreted run writes the same arena
        got = planned.run(xs)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_random_graphs_do_reuse_storage():
    # the checks above would pass on a plan that never reuses: over the 40 graphs the arena
    # must be well below the sum without reuse, and values must share storage
    plans = [plan_memory(random_graph(s)) for s in range(40)]
    assert sum(p.arena_bytes for p in plans) < 0.6 * sum(p.naive_bytes for p in plans)
    assert sum(len(p.shared()) for p in plans) > 20 and sum(len(p.in_place) for p in plans) > 20


def test_chain_of_elementwise_ops_runs_in_one_block():
    b = ex.GraphBuilder("chain")
    x = b.input("x", (N, N))
    v = b.op("exp", x, name="a")
    for k in range(5):
        v = b.op("tanh", v, name=f"t{k}")
    g = b.build([b.op("matmul", v, x, name="out")])
    plan = plan_memory(g)
    assert len(plan.blocks) == 1 and plan.blocks[0].values == ("a", "t0", "t1", "t2", "t3", "t4")
    assert plan.arena_bytes == N * N * 4 and plan.naive_bytes == 6 * N * N * 4
    assert plan.in_place == ("t0", "t1", "t2", "t3", "t4")


def test_no_in_place_write_over_an_input_read_through_a_view():
    # add(e, transpose(e)): e dies at the add, but the add reads it transposed too; writing
    # the sum over e would read overwritten elements
    b = ex.GraphBuilder("view")
    x = b.input("x", (N, N))
    e = b.op("exp", x, name="e")
    s = b.op("add", e, b.op("transpose", e, name="t", perm=(1, 0)), name="s")
    g = b.build([b.op("matmul", s, x, name="out")])
    plan = plan_memory(g)
    assert "s" not in plan.in_place
    a = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)
    np.testing.assert_array_equal(Program(g, plan).run([a])[0], Program(g, None).run([a])[0])


def test_outputs_are_fresh_arrays_not_in_the_held_arena():
    g = random_graph(3)
    prog = Program(g, plan_memory(g, "held"))
    outs = prog.run(feeds(g, 3))
    assert prog.arena.nbytes == prog.persistent_bytes == plan_memory(g, "held").arena_bytes > 0
    for o in outs:
        assert not np.shares_memory(o, prog.arena)


def test_per_call_arena_holds_the_outputs_and_each_call_has_its_own():
    g = random_graph(3)
    plan = plan_memory(g, "call")
    prog = Program(g, plan)
    assert prog.persistent_bytes == 0  # nothing held between calls
    xs = feeds(g, 3)
    first, second = prog.run(xs), prog.run(xs)
    planned_outs = [k for k, o in enumerate(g.outputs) if o in plan.offsets()]
    assert planned_outs
    for k in planned_outs:
        assert first[k].base is not None  # a view of its call's arena
        assert not np.shares_memory(first[k], second[k])
        np.testing.assert_array_equal(first[k], second[k])


def test_the_plan_picks_a_per_call_arena_when_the_outputs_dominate():
    # a 256 KiB output after a 128 KiB intermediate that is dead by then: held, the call
    # peaks at arena + output; per call, the output reuses the intermediate's storage
    b = ex.GraphBuilder("wide")
    x, w1 = b.input("x", (8, 64)), b.input("w1", (64, 4096))
    w2, w = b.input("w2", (4096, 64)), b.input("w", (64, 8192))
    t = b.op("tanh", b.op("matmul", x, w1, name="m"), name="t")
    s = b.op("matmul", t, w2, name="s")
    g = b.build([b.op("matmul", s, w, name="logits")])
    held, call, picked = plan_memory(g, "held"), plan_memory(g, "call"), plan_memory(g)
    kib = 1024
    assert held.output_bytes == 256 * kib and held.arena_bytes == 128 * kib + 2 * kib
    assert held.peak_bytes == held.arena_bytes + 256 * kib
    assert call.peak_bytes == call.arena_bytes == call.lower_bound_bytes == 256 * kib + 2 * kib
    assert picked == call and picked.offsets()["logits"] == 0 == picked.offsets()["m"]
    # a small program keeps its arena: views per call would cost more than they save
    b = ex.GraphBuilder("small")
    x = b.input("x", (4, 4))
    g = b.build([b.op("exp", b.op("tanh", x, name="t"), name="y")])
    assert plan_memory(g).lifetime == "held"


def test_plan_reports_what_shares_storage():
    b = ex.GraphBuilder("share")
    x = b.input("x", (N, N))
    a = b.op("matmul", x, x, name="a")  # dies at b
    m = b.op("matmul", a, x, name="b")  # dies at c
    c = b.op("matmul", m, x, name="c")  # may reuse a's storage
    g = b.build([b.op("matmul", c, x, name="out")])
    plan = plan_memory(g)
    assert plan.offsets()["a"] == plan.offsets()["c"] != plan.offsets()["b"]
    assert plan.shared() == (("a", "c"),)
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * N * N * 4
    d = plan.as_dict()
    assert d["arena_bytes"] == 2 * N * N * 4 and d["naive_bytes"] == 3 * N * N * 4
    assert "3 values in 3 blocks" in str(plan)


def test_traced_static_run_counts_the_arena_and_frees_temporaries():
    # live bytes of a traced run: the arena, plus fresh arrays until their last reader
    b = ex.GraphBuilder("live")
    x = b.input("x", (N, N))
    big = b.op("broadcast_to", x, name="big", shape=(4, N, N))  # a view: allocates nothing
    s = b.op("sum", big, name="s", axes=(0,))  # planned
    g = b.build([b.op("exp", s, name="out")])
    prog = Program(g, plan_memory(g))
    with ex.trace.record() as rec:
        prog.run([np.ones((N, N), np.float32)])
    events = [e for e in rec.trace.events if e.kind == "kernel"]
    arena = prog.arena.nbytes
    assert arena == N * N * 4
    assert [e.live_bytes for e in events] == [arena, arena, arena + N * N * 4]
    assert [e.bytes_allocated for e in events] == [0, 0, N * N * 4]


def test_eager_and_static_traces_of_a_torch_module_count_memory_alike():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    x = torch.randn(4, 16)
    prog = ex.compile(m.eval(), (x,), disk_cache="off")
    cmp = prog.compare(x)
    weights = sum(p.numel() * p.element_size() for p in m.parameters())
    eager, static = cmp.eager.summary()["peak_bytes"], cmp.static.summary()["peak_bytes"]
    # both count what their run allocated, not the weights they were fed (8.3 KiB here)
    assert 4 * 64 * 4 <= eager < weights and 0 < static < weights
    assert static >= prog.memory_plan.peak_bytes  # the arena and the outputs, at least


def looped(x, w, head):
    while x.sum() < 4000.0:  # data-dependent: a loop node running nested programs
        x = F.tanh(x @ w) + 1.0
        if x.max() > 1.5:
            x = x * 1.25
        else:
            x = x + 0.5
    return x @ head


@pytest.mark.parametrize("lifetime", LIFETIMES)
def test_nested_programs_run_in_a_block_of_the_arena(lifetime, rng):
    x = ex.tensor((rng.standard_normal((64, 64)) * 0.1).astype(np.float32))
    w = ex.tensor((rng.standard_normal((64, 64)) * 0.1).astype(np.float32))
    head = ex.tensor((rng.standard_normal((64, 512)) * 0.1).astype(np.float32))
    g = ex.jit(looped).lower(x, w, head)
    plan = plan_memory(g, lifetime)
    regions = plan.nested_regions()
    assert len(regions) == 1 and min(z for _, z in regions.values()) > 0
    check_no_overlap(g, plan)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes
    prog = Program(g, plan)
    # the loop's condition and body hold no arena of their own: all is in this one
    assert prog.persistent_bytes == (plan.arena_bytes if lifetime == "held" else 0)
    feeds = [a.numpy() for a in (x, w, head)]
    want = looped(x, w, head).numpy()
    np.testing.assert_allclose(prog.run(feeds)[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(prog.run(feeds)[0], Program(g, None).run(feeds)[0])
    with ex.trace.record():
        np.testing.assert_array_equal(prog.run(feeds)[0], Program(g, None).run(feeds)[0])


def test_reshape_of_a_transpose_is_written_into_the_arena():
    # numpy copies a reshape of a transposed array: planned, it writes a block instead of
    # allocating each call (the merge of attention heads in every transformers model)
    b = ex.GraphBuilder("heads")
    x = b.input("x", (N, 4, 8))
    e = b.op("exp", x, name="e")
    t = b.op("transpose", e, name="t", perm=(1, 0, 2))
    r = b.op("reshape", t, name="r", shape=(4, N * 8))
    out_view = b.op("reshape", b.op("transpose", e, name="t2", perm=(1, 0, 2)), name="r2",
                    shape=(4 * N * 8,))  # fmt: skip
    g = b.build([b.op("tanh", r, name="y"), out_view])
    plan = plan_memory(g, "held")
    assert plan.copies == ("r",)  # r2 is an output: never a view of a planned value
    assert "r" in plan.offsets() and "e" not in plan.offsets()  # e escapes through r2
    check_no_overlap(g, plan)
    prog = Program(g, plan)
    a = np.random.default_rng(1).standard_normal((N, 4, 8)).astype(np.float32)
    want = [np.tanh(np.exp(a).transpose(1, 0, 2).reshape(4, N * 8)),
            np.exp(a).transpose(1, 0, 2).reshape(-1)]  # fmt: skip
    with ex.trace.record() as rec:
        got = prog.run([a])
    for u, v in zip(got, want, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-6)
    alloc = {e.detail: e.bytes_allocated for e in rec.trace.events if e.kind == "kernel"}
    assert alloc["r"] == 0 and alloc["r2"] == N * 4 * 8 * 4  # r2 copies, fresh


def test_kernels_writing_into_the_arena_allocate_no_copy_of_their_output():
    # numpy's take(mode="raise") fills a temporary of the output's size before copying it
    # into out: the embedding kernel must not (tracemalloc counts numpy's allocations)
    import tracemalloc

    from explorer.compiler.kernels import make_kernel

    b = ex.GraphBuilder("emb")
    ids, table = b.input("ids", (1, 512), "int64"), b.input("table", (1000, 64))
    g = b.build([b.op("embedding", ids, table, name="e")])
    node = g.node("e")
    k = make_kernel(node, g.input_types("e"))
    idx = (np.arange(512) % 1000).reshape(1, 512)
    tab = np.random.default_rng(0).standard_normal((1000, 64)).astype(np.float32)
    out = np.empty((1, 512, 64), np.float32)
    tracemalloc.start()
    try:
        k(idx, tab, out=out)
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        k(idx, tab, out=out)
        extra = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert extra < out.nbytes // 8, extra
    np.testing.assert_array_equal(out, tab[idx])
