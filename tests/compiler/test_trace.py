"""Traces: summary, compare, Chrome trace export/import, PyTorch profiler import."""

import json

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F
from explorer.compiler.errors import CompilerError
from explorer.compiler.rewrite_diff import rewrite_diff
from explorer.trace import (
    RepeatedRuns,
    Timing,
    Trace,
    TraceError,
    TraceEvent,
    compare,
    comparison_to_chrome,
    flows,
    from_chrome,
    load_chrome,
    repeat_runs,
    save_chrome,
    slice_names,
)


def block(x, b, r):
    return F.gelu(x + b) + r


def test_compare_aligns_fused_kernel_with_eager_ops(rng):
    x = ex.tensor(rng.standard_normal((4, 8)))
    b = ex.tensor(rng.standard_normal(8))
    r = ex.tensor(rng.standard_normal((4, 8)))
    f = ex.jit(block)
    f(x, b, r)
    with ex.trace.record("eager") as te:
        block(x, b, r)
    with ex.trace.record("static") as ts:
        f(x, b, r)
    cmp = compare(te.trace, ts.trace)
    assert len(cmp.rows) == 1
    ops, kernel = cmp.rows[0]
    assert [e.name for e in ops] == ["add", "gelu", "add"] and kernel.name == "fused"
    assert "fused" in cmp.table()
    assert te.trace.summary()["ops"] == 3 and ts.trace.summary()["ops"] == 1


def test_chrome_roundtrip(tmp_path, rng):
    with ex.trace.record("eager") as rec:
        F.relu(ex.tensor(rng.standard_normal((3, 3))) * 2.0)
    path = save_chrome(rec.trace, tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert data["traceEvents"][0]["ph"] == "X"
    back = load_chrome(path)
    assert [(e.name, e.kind, e.shapes, e.flops) for e in back.events] == [
        (e.name, e.kind, e.shapes, e.flops) for e in rec.trace.events
    ]


def test_import_pytorch_profiler_trace():
    data = {
        "schemaVersion": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::addmm",
                "pid": 1,
                "tid": 1,
                "ts": 10.0,
                "dur": 5.0,
                "args": {"Input Dims": [[8, 16], [16, 4], [4]], "External id": 3},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "sgemm_kernel",
                "pid": 0,
                "tid": 7,
                "ts": 12.0,
                "dur": 2.0,
                "args": {},
            },
            {
                "ph": "X",
                "cat": "python_function",
                "name": "model.py(12): forward",
                "pid": 1,
                "tid": 1,
                "ts": 9.0,
                "dur": 9.0,
            },
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        ],
    }
    t = from_chrome(data, name="torch")
    assert isinstance(t, Trace)
    assert [e.kind for e in t.events] == ["python", "op", "kernel"]
    assert t.events[1].shapes == ((8, 16), (16, 4), (4,))
    assert t.summary()["ops"] == 2


def test_trace_event_str_and_summary():
    t = Trace(
        (TraceEvent("fused", "kernel", 0, 10, replaced=("add", "gelu"), live_bytes=64),), "s", 12.0
    )
    assert str(t.events[0]) == "kernel fused = add+gelu 10.0 us"
    s = t.summary()
    assert s["python_overhead_us"] == 2.0 and s["peak_bytes"] == 64


# --- repeated timing, flows, slice names, one Chrome file per comparison ------------------


def _run(total_us: float, name: str) -> Trace:
    return Trace((TraceEvent("op", "op", 0.0, total_us),), name, total_us)


def test_timing_median_quartiles_and_spread():
    t = Timing.of([4.0, 1.0, 100.0, 3.0, 2.0])
    assert (t.median, t.low, t.high, t.q1, t.q3) == (3.0, 1.0, 100.0, 2.0, 4.0)
    assert t.samples[t.median_index()] == 3.0
    even = Timing.of([1.0, 2.0, 3.0, 10.0])
    assert even.median == 2.5 and even.samples[even.median_index()] == 2.0  # nearest, lower
    for bad in ([], [1.0, -2.0], [float("nan")]):
        with pytest.raises(TraceError):
            Timing.of(bad)


def test_repeated_runs_speedup_is_the_median_of_paired_ratios():
    eager = tuple(_run(t, "eager") for t in (10.0, 30.0, 20.0))
    static = tuple(_run(t, "static") for t in (5.0, 5.0, 10.0))
    runs = RepeatedRuns(eager, static)
    assert runs.speedup.samples == (2.0, 6.0, 2.0)
    assert runs.speedup.median == 2.0 and (runs.speedup.low, runs.speedup.high) == (2.0, 6.0)
    assert runs.representative == (2, 0)  # the runs closest to the medians 20 and 5
    cmp = runs.comparison()
    assert cmp.eager is eager[2] and cmp.static.events == static[0].events
    with pytest.raises(TraceError, match="same number"):
        RepeatedRuns(eager, static[:2])


def test_repeat_runs_records_each_call_on_its_own(rng):
    x = ex.tensor(rng.standard_normal((4, 8)))
    b = ex.tensor(rng.standard_normal(8))
    r = ex.tensor(rng.standard_normal((4, 8)))
    f = ex.jit(block)
    f(x, b, r)
    runs = repeat_runs(block, f, (x, b, r), n=3)
    assert len(runs) == 3 and len(runs.speedup) == 3
    assert all([e.name for e in t.compute_events] == ["add", "gelu", "add"] for t in runs.eager)
    assert all([e.name for e in t.compute_events] == ["fused"] for t in runs.static)
    assert all(not t.of_kind("compile") for t in runs.static)  # the steady state only
    for bad in (0, -1, 2.5, True):
        with pytest.raises(TraceError, match="runs"):
            repeat_runs(block, f, (x, b, r), n=bad)


def _comparison(rng):
    x = ex.tensor(rng.standard_normal((4, 8)))
    b = ex.tensor(rng.standard_normal(8))
    r = ex.tensor(rng.standard_normal((4, 8)))

    def two(x, b, r):
        return F.matmul(block(x, b, r), ex.tensor(np.eye(8)))

    f = ex.jit(two)
    f(x, b, r)
    with ex.trace.record("eager") as te:
        two(x, b, r)
    with ex.trace.record("static") as ts:
        f(x, b, r)
    return compare(te.trace, ts.trace)


def test_flows_link_every_eager_op_to_the_kernel_that_did_its_work(rng):
    cmp = _comparison(rng)
    fl = flows(cmp)
    eager, kernels = cmp.eager.compute_events, cmp.static.compute_events
    assert sorted(f.eager_index for f in fl) == list(range(len(eager)))
    for f in fl:
        assert eager[f.eager_index] is f.eager and kernels[f.kernel_index] is f.kernel
        assert f.fused == (len(f.kernel.replaced) > 1)
        if f.fused:
            assert f.eager.name in f.kernel.replaced
        else:
            assert f.eager.name == f.kernel.name
    assert slice_names(cmp.eager, cmp.static) == tuple(
        sorted({e.name for e in eager} | {k.name for k in kernels})
    )


def test_comparison_chrome_file_has_named_processes_and_flows_inside_slices(rng):
    cmp = _comparison(rng)
    data = json.loads(json.dumps(comparison_to_chrome(cmp)))
    evs = data["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert names == {1: "eager run", 2: "static run (@jit)", 3: "compilation (first call)"}
    slices = [e for e in evs if e["ph"] == "X"]
    assert min(e["ts"] for e in slices) == 0.0  # each run from 0, never negative
    starts = {e["id"]: e for e in evs if e["ph"] == "s"}
    ends = {e["id"]: e for e in evs if e["ph"] == "f"}
    assert len(starts) == len(ends) == len(flows(cmp))
    for i, s in starts.items():
        f = ends[i]
        assert any(x["pid"] == 1 and x["ts"] <= s["ts"] <= x["ts"] + x["dur"] for x in slices)
        assert any(x["pid"] == 2 and x["ts"] <= f["ts"] <= x["ts"] + x["dur"] for x in slices)
    back = from_chrome(data)  # our reader takes the file back (flows and metadata skipped)
    assert len(back.compute_events) == len(cmp.eager.compute_events) + len(
        cmp.static.compute_events
    )


# --- what a rewrite step changed ----------------------------------------------------------


def test_rewrite_diff_names_what_each_step_changed(rng):
    x = ex.tensor(rng.standard_normal((4, 8)))
    b = ex.tensor(rng.standard_normal(8))
    r = ex.tensor(rng.standard_normal((4, 8)))
    steps = ex.jit(block).steps(x, b, r)
    assert steps, "O2 fuses add+gelu+add"
    for step in steps:
        d = rewrite_diff(step)
        before = {n.name for n in step.before.nodes}
        after = {n.name for n in step.after.nodes}
        assert set(d.removed) == before - after and set(d.added) == after - before
        for n in d.rewritten:
            assert step.before.node(n) != step.after.node(n)
        assert set(d.removed) | set(d.rewritten) <= set(d.before_focus)
        assert set(d.added) | set(d.rewritten) <= set(d.after_focus)
        assert set(d.before_focus) <= before and set(d.after_focus) <= after
    fuse = next(s for s in steps if s.pass_name == "fuse")
    d = rewrite_diff(fuse)
    assert d.changed and d.status(d.removed[0], "before") == "removed"
    assert d.status(d.rewritten[0], "after") == "rewritten"
    plan = [s for s in steps if s.pass_name == "memory_plan"]
    if plan:  # assigns buffers without touching the graph: matched, nothing removed
        dm = rewrite_diff(plan[0])
        assert not dm.changed and set(dm.matched) == set(plan[0].nodes)
    with pytest.raises(CompilerError, match="context"):
        rewrite_diff(fuse, context=-1)
