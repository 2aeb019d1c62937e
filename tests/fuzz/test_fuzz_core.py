"""Fuzzing the core values: CostParams, ParallelConfig, SearchSpace, TrainingParams and the
Chrome trace import (files written to a temporary folder), with generated mostly-bad values.

Same contract as ``test_fuzz.py`` (``interfaces.outcome``): a valid object that passes its
own validation again (a CostParams also gives a finite plan cost on a small graph; an
imported trace has finite times and durations >= 0), or an ``ExplorerError`` subclass with a
message; never a builtin exception, never a hang. ``bench/fuzz.py`` counts these too.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

import explorer as ex
from explorer.search.planner import Planner
from explorer.trace import Trace, TraceEvent, load_chrome, to_chrome
from explorer.training import ParallelConfig, SearchSpace, TrainingParams

from .interfaces import (
    FLOATS,
    INTS,
    JSON_VALUES,
    JUNK_FILES,
    TEXT,
    Interface,
    _dump,
    fuzz_outcomes,
)
from .test_fuzz import FUZZ

# ----- values -------------------------------------------------------------------------------
NUMBERS = st.one_of(INTS, FLOATS, st.floats(0, 4), st.integers(0, 8), st.booleans(), TEXT,
                    st.none())  # fmt: skip
ANY = st.one_of(NUMBERS, JSON_VALUES)


def _edits(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """Up to three keyword arguments, each a plausible value or an arbitrary one."""
    pair = st.sampled_from(sorted(fields)).flatmap(
        lambda k: st.tuples(st.just(k), st.one_of(fields[k], fields[k], ANY))
    )
    return st.lists(pair, max_size=3).map(dict)


def _same(obj: Any) -> Any:
    """A constructed object validates again to an equal object (NaN would not be equal)."""
    assert dataclasses.replace(obj) == obj, obj
    return obj


# ----- CostParams: valid ones must give a finite plan cost on a small graph -----------------
COST_FIELDS = {f.name: NUMBERS for f in dataclasses.fields(ex.CostParams)}
COST_FIELDS["unit"] = st.sampled_from(["seconds", "bytes", "flops", ""])
COST_FIELDS["device_memory_cap_bytes"] = st.one_of(st.none(), st.sampled_from([1.0, 2**30, 1e300]),
                                                   NUMBERS)  # fmt: skip


@functools.cache
def _planner() -> Planner:
    graph = ex.models.build(ex.models.load("mlp-small"), batch=8)
    return Planner(graph, ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g"))


def _cost_params(kw: dict, folder: Path):
    params = _same(ex.CostParams(**kw))
    plan = _planner().search("dynamic_programming", params)
    assert math.isfinite(plan.cost.total) and plan.cost.total >= 0, (params, plan.cost)
    return params


# ----- ParallelConfig, SearchSpace, TrainingParams ------------------------------------------
SIZES = st.one_of(st.integers(1, 8), INTS, st.booleans())
PARALLEL_FIELDS = {
    "dp": SIZES, "tp": SIZES, "pp": SIZES, "ep": SIZES, "microbatch_size": SIZES,
    "num_microbatches": st.one_of(st.none(), SIZES), "sp": st.booleans(),
    "schedule": st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b", "zb", ""]),
    "virtual_stages": st.one_of(st.none(), SIZES), "zero": st.integers(-1, 4),
    "recompute": st.sampled_from(["none", "per_layer", "selective", "full", "x"]),
    "recompute_num_layers": st.one_of(st.none(), SIZES),
}  # fmt: skip
TUPLES = st.one_of(st.none(), st.lists(SIZES, max_size=3).map(tuple), st.just(()), ANY)
SPACE_FIELDS = {
    "tp": TUPLES, "pp": TUPLES, "microbatch_sizes": TUPLES, "virtual_stages": TUPLES,
    "ep": TUPLES, "zero": st.lists(st.integers(-1, 4), max_size=3).map(tuple),
    "schedules": st.lists(st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b", "x"]),
                          max_size=3).map(tuple),
    "recompute": st.lists(st.sampled_from(["none", "per_layer", "x"]), max_size=2).map(tuple),
    "sp": st.one_of(st.none(), st.lists(st.booleans(), max_size=2).map(tuple)),
}  # fmt: skip
TRAINING_FIELDS = {
    "cost": st.one_of(st.just(ex.CostParams()), ANY),
    "optimizer_step_bytes_per_param": NUMBERS, "p2p_scatter_gather": st.booleans(),
    "zero3_prefetch_layers": SIZES,
    "search_method": st.sampled_from(["dynamic_programming", "ilp", "exhaustive", "x"]),
    "fused_ops": st.one_of(st.just(("scale",)), st.lists(TEXT, max_size=2).map(tuple)),
}  # fmt: skip


def _parallel(kw: dict, folder: Path):
    return _same(ParallelConfig(**kw))


def _space(kw: dict, folder: Path):
    return _same(SearchSpace(**kw))


def _training(kw: dict, folder: Path):
    return _same(TrainingParams(**kw))


# ----- Chrome trace files -------------------------------------------------------------------
BASE_TRACE = to_chrome(Trace((
    TraceEvent("add", "op", 0.0, 2.0, ((2, 3),), 24, 6, 48),
    TraceEvent("fused", "kernel", 3.0, 1.0, replaced=("add", "gelu"), detail="x"),
), "base", 9.0))  # fmt: skip
EVENT_KEYS = ["ph", "name", "cat", "ts", "dur", "pid", "tid", "args"]
ARG_KEYS = ["flops", "bytes_allocated", "shapes", "Input Dims", "live_bytes", "replaced"]
TRACE_VALUES = st.one_of(ANY, st.sampled_from(["X", "B", "E", "M", -100, 1e308, [[1, -2]]]))


@st.composite
def chrome_files(draw) -> bytes:
    data = {"traceEvents": [dict(e, args=dict(e["args"])) for e in BASE_TRACE["traceEvents"]],
            "otherData": dict(BASE_TRACE["otherData"])}  # fmt: skip
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["event", "args", "top", "other"]))
        value = draw(TRACE_VALUES)
        if where == "top":
            data[draw(st.sampled_from(["traceEvents", "otherData", "x"]))] = value
            continue
        if where == "other" and isinstance(data.get("otherData"), dict):
            data["otherData"][draw(st.sampled_from(["name", "wall_us"]))] = value
            continue
        events = data.get("traceEvents")
        if not isinstance(events, list) or not events:
            continue
        i = draw(st.integers(0, len(events) - 1))
        if where == "event" and isinstance(events[i], dict):
            events[i][draw(st.sampled_from(EVENT_KEYS))] = value
        elif isinstance(events[i], dict) and isinstance(events[i].get("args"), dict):
            events[i]["args"][draw(st.sampled_from(ARG_KEYS))] = value
    return _dump(data if draw(st.booleans()) else data["traceEvents"])


def _trace_file(content: bytes, folder: Path):
    path = folder / "trace.json"
    path.write_bytes(content)
    trace = load_chrome(path)
    for e in trace.events:
        assert math.isfinite(e.start_us) and math.isfinite(e.dur_us) and e.dur_us >= 0, e
        assert e.flops >= 0 and e.bytes_allocated >= 0 and e.live_bytes >= -1, e
    assert math.isfinite(trace.summary()["total_us"]) and trace.wall_us >= 0
    return trace


CORE_INTERFACES: dict[str, Interface] = {
    i.name: i
    for i in (
        Interface("cost_params", _edits(COST_FIELDS), _cost_params),
        Interface("parallel_config", _edits(PARALLEL_FIELDS), _parallel),
        Interface("search_space", _edits(SPACE_FIELDS), _space),
        Interface("training_params", _edits(TRAINING_FIELDS), _training),
        Interface("trace_import", st.one_of(chrome_files(), chrome_files(), JUNK_FILES),
                  _trace_file),
    )
}  # fmt: skip
#: Examples per interface (fixed; the whole file runs in well under 30 s).
EXAMPLES = {name: 200 for name in CORE_INTERFACES}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fuzz_core_interface(name, tmp_path_factory):
    seen = fuzz_outcomes(CORE_INTERFACES[name], EXAMPLES[name], tmp_path_factory.mktemp(name), FUZZ)
    assert {"valid", "named"} <= set(seen), (name, seen)
