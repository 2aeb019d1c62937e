"""Traces: summary, compare, Chrome trace export/import, PyTorch profiler import."""

import json

import explorer as ex
from explorer.compiler import F
from explorer.trace import Trace, TraceEvent, compare, from_chrome, load_chrome, save_chrome


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
