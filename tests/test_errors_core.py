"""Named errors of the core: Chrome trace import, search bounds (ILP top_k, exhaustive size), training
arguments and MoE capacity_factor each end in a named error (an ``ExplorerError``) that
names the value, the place and the fix, never a builtin exception or a silent answer."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import pytest

import explorer as ex
from explorer.search.planner import Planner
from explorer.search.solvers import exhaustive, ilp
from explorer.trace import Trace, TraceError, TraceEvent, compare, from_chrome, load_chrome
from explorer.training import SearchSpace, TrainingPlanError, plan_training

NAN, INF = float("nan"), float("inf")


def x_event(**kw):
    return {"ph": "X", "name": "matmul", "cat": "op", "ts": 0.0, "dur": 5.0, **kw}


# ----- trace import -------------------------------------------------------------------------
# (trace data, words the message must hold); these raised KeyError/TypeError/ValueError or
# were accepted (dur -100 gave total -100 us, ts NaN gave nan) before they were checked.
MALFORMED = [
    ({}, ["traceEvents"]),
    ({"traceEvents": 3}, ["events are int"]),
    ({"traceEvents": None}, ["events are NoneType"]),
    ({"traceEvents": [x_event()], "otherData": []}, ["otherData"]),
    ({"traceEvents": [x_event()], "otherData": {"wall_us": "x"}}, ["otherData", "wall_us"]),
    ({"traceEvents": [x_event()], "otherData": {"wall_us": -1}}, ["wall_us=-1"]),
    (7, ["events are int"]),
    ("trace", ["events are str"]),
    ([3], ["event 0", "int"]),
    ([x_event(), "x"], ["event 1", "str"]),
    ([x_event(dur=-100)], ["event 0", "dur=-100"]),
    ([x_event(ts=NAN)], ["event 0", "ts=nan"]),
    ([x_event(ts=INF)], ["event 0", "ts=inf"]),
    ([x_event(dur="long")], ["event 0", "dur='long'"]),
    ([x_event(ts=None)], ["event 0", "ts=None"]),
    ([x_event(ts=True)], ["event 0", "ts=True"]),
    ([x_event(args=[1])], ["event 0", "args="]),
    ([x_event(args={"shapes": [["x"]]})], ["event 0", "args.shapes"]),
    ([x_event(args={"shapes": [[-2, 3]]})], ["event 0", "args.shapes"]),
    ([x_event(args={"shapes": 5})], ["event 0", "args.shapes"]),
    ([x_event(args={"flops": -1})], ["event 0", "args.flops=-1"]),
    ([x_event(args={"flops": "many"})], ["event 0", "args.flops"]),
    ([x_event(args={"bytes_allocated": NAN})], ["event 0", "args.bytes_allocated"]),
    ([x_event(args={"live_bytes": -5})], ["event 0", "args.live_bytes=-5"]),
    ([x_event(args={"replaced": "add"})], ["event 0", "args.replaced"]),
    ([x_event(args={"replaced": [1, 2]})], ["event 0", "args.replaced"]),
    ([{"ph": "B", "name": "a", "ts": 0}, {"ph": "E", "name": "a"}], ["event 1", "ts=None"]),
    ([{"ph": "B", "name": "a"}], ["event 0", "ts=None"]),
    ([{"ph": "B", "name": "a", "ts": 10}, {"ph": "E", "name": "a", "ts": 4}], ["event 1", "B"]),
]


@pytest.mark.parametrize("data,words", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_chrome_trace_is_a_named_error(data, words):
    with pytest.raises(TraceError) as info:
        from_chrome(data, where="t.json")
    msg = str(info.value)
    assert msg.startswith("t.json"), msg
    for w in words:
        assert w in msg, (w, msg)


def test_well_formed_edge_cases_still_import():
    # numbers as strings (some exporters), a tensor list's dims, integral float counters,
    # metadata and flow events: all read, not refused
    t = from_chrome([
        x_event(ts="3.5", dur="2", args={"Input Dims": [[2, 3], [[1], [2]], []], "flops": 6.0}),
        {"ph": "M", "name": "process_name", "args": {"name": "x"}},
        {"ph": "s", "id": 1, "ts": NAN},
        {"ph": "B", "name": "b", "pid": [1], "ts": 1}, {"ph": "E", "name": "b", "pid": [1], "ts": 4},
    ])  # fmt: skip
    assert [(e.name, e.start_us, e.dur_us) for e in t.events] == [("b", 1.0, 3.0),
                                                                  ("matmul", 3.5, 2.0)]  # fmt: skip
    assert t.events[1].shapes == ((2, 3), ())
    assert t.events[1].flops == 6


def test_round_trip_of_our_own_format_is_unchanged():
    events = (TraceEvent("add", "op", 0.0, 2.0, ((2, 3),), 24, 6, 48),
              TraceEvent("fused", "kernel", 3.0, 1.0, replaced=("add", "gelu"), detail="x"))  # fmt: skip
    t = Trace(events, "mine", 9.0)
    assert from_chrome(ex.trace.to_chrome(t)) == t


@pytest.mark.parametrize(
    "content,words",
    [
        (b"\xff\xfe{}", ["byte 0", "UTF-8"]),
        (b"{not json", ["not valid JSON"]),
        (b"[" * 100_000, ["nested too deeply"]),
        (json.dumps({"traceEvents": [x_event(dur=-1)]}).encode(), ["event 0", "dur=-1"]),
    ],
    ids=["not-utf8", "bad-json", "deep", "bad-event"],
)
def test_trace_file_problems_name_the_file(tmp_path, content, words):
    path = tmp_path / "run.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_chrome(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    for w in words:
        assert w in msg, (w, msg)


def test_trace_path_problems(tmp_path):
    with pytest.raises(TraceError, match="is a directory"):
        load_chrome(tmp_path)
    with pytest.raises(TraceError, match="no such file"):
        load_chrome(tmp_path / "missing.json")
    with pytest.raises(TraceError, match="expected a file path"):
        load_chrome(None)


def test_speedup_of_an_empty_static_run_is_a_named_error():
    # defined behaviour: the ratio is undefined (was inf); table() says so instead of raising
    eager = Trace((TraceEvent("add", dur_us=4.0),), "eager")
    for static in (Trace((), "static"), Trace((TraceEvent("add", "kernel"),), "static")):
        cmp = compare(eager, static)
        with pytest.raises(TraceError, match="undefined.*took 0"):
            _ = cmp.speedup
        assert "speedup (total time): undefined" in cmp.table()
    with pytest.raises(TraceError):
        _ = compare(Trace(), Trace()).speedup
    assert compare(eager, Trace((TraceEvent("add", "kernel", dur_us=2.0),))).speedup == 2.0


# ----- search bounds ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    return ex.models.build(ex.models.load("mlp-small"), batch=8), ex.Mesh({"dp": 2, "tp": 2})


@pytest.mark.parametrize(
    "top_k", [ilp.ILP_TOP_K_LIMIT + 1, 10**6, 10**5000], ids=["limit+1", "1e6", "1e5000"]
)
def test_ilp_top_k_above_the_limit_is_refused_up_front(small, top_k):
    g, mesh = small
    with pytest.raises(ex.ExplorerError) as info:
        ex.search(g, mesh, "ilp", top_k=top_k)
    msg = str(info.value)
    assert f"ILP_TOP_K_LIMIT={ilp.ILP_TOP_K_LIMIT}" in msg
    assert "explorer.search.solvers.ilp.ILP_TOP_K_LIMIT" in msg


def test_ilp_top_k_limit_can_be_raised(small, monkeypatch):
    g, mesh = small
    monkeypatch.setattr(ilp, "ILP_TOP_K_LIMIT", 1)
    with pytest.raises(ex.ExplorerError, match="ILP_TOP_K_LIMIT=1"):
        ex.search(g, mesh, "ilp", top_k=2)
    monkeypatch.setattr(ilp, "ILP_TOP_K_LIMIT", 2)
    plan = ex.search(g, mesh, "ilp", top_k=2)
    assert plan.status == "optimal"


def test_exhaustive_size_counts_with_logarithms():
    # 3**5000 has 2386 digits: formatting it exactly hit Python's int-to-string limit
    with pytest.raises(ex.ExplorerError) as info:
        exhaustive.check_size([3] * 5000)
    msg = str(info.value)
    assert "about 10^2386 assignments of 5000 nodes" in msg
    assert "EXHAUSTIVE_LIMIT" in msg
    with pytest.raises(ex.ExplorerError, match="1,000,000 assignments"):
        exhaustive.check_size([10] * 6)
    exhaustive.check_size([10] * 5)  # 100,000 is under the limit
    exhaustive.check_size([5, 0] * 3000)  # no assignment at all: nothing to refuse
    assert math.log10(exhaustive.EXHAUSTIVE_LIMIT) < 6


def test_exhaustive_on_a_full_large_graph_is_refused_before_solving():
    g = ex.models.build(ex.models.load("gpt3-175b"), batch=8)
    planner = Planner(g, ex.Mesh({"dp": 8, "tp": 8}), reuse_layers=False)
    with pytest.raises(ex.ExplorerError, match=r"about 10\^\d+ assignments"):
        planner.search("exhaustive")


# ----- training arguments and MoE capacity_factor (already named before this change) -------


@pytest.mark.parametrize("kw", [{"top_k": 0}, {"top_k": -3}, {"simulate_top": 0},
                                {"top_k": True}])  # fmt: skip
def test_plan_training_counts(kw):
    name, value = next(iter(kw.items()))
    with pytest.raises(TrainingPlanError, match=f"{name}={value!r}; expected an int >= 1"):
        plan_training(ex.models.load("gpt2"), 8, **kw)


@pytest.mark.parametrize("field", ["tp", "pp", "microbatch_sizes", "virtual_stages", "ep"])
@pytest.mark.parametrize("value", [(0,), (-1,), ()])
def test_search_space_values(field, value):
    with pytest.raises(TrainingPlanError, match=f"SearchSpace.{field}="):
        SearchSpace(**{field: value})


@pytest.mark.parametrize("value", [NAN, INF, -INF, 0.0, -1.0, "big", None])
def test_moe_capacity_factor(value):
    cfg = ex.models.load("mixtral-8x7b")
    with pytest.raises(ex.models.ModelConfigError, match="capacity_factor"):
        dataclasses.replace(cfg, capacity_factor=value)


def test_ilp_time_limit_bounds_all_top_k_solves_and_says_so(small, monkeypatch):
    # a clock that jumps far ahead after the first solve: the budget is spent, the search
    # stops with one plan and reports it (before, each of the k solves had the whole limit)
    ticks = iter([0.0, 0.0])
    monkeypatch.setattr(ilp, "time", types.SimpleNamespace(monotonic=lambda: next(ticks, 1e9)))
    g, mesh = small
    plan = ex.search(g, mesh, "ilp", top_k=5, time_limit_s=30.0)
    assert "ran out after 1 of top_k=5 plans" in plan.diagnostics["top_k"]
    monkeypatch.undo()
    plan = ex.search(g, mesh, "ilp", top_k=3)
    assert "top_k" not in plan.diagnostics


def test_huge_top_k_with_another_method_is_named():
    # 10**5000 has more digits than Python prints (ValueError from str(int) before)
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    mesh = ex.Mesh({"dp": 2}, hardware="a100-80g")
    with pytest.raises(ex.ExplorerError, match=r"top_k=about 2\^16609 ranks whole plans"):
        ex.search(g, mesh, "dynamic_programming", top_k=10**5000)
