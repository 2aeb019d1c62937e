"""explorer.traces.table: kernels and ops kept by column. The table reads back exactly what
was appended (sorted by start), the columnar step assignment equals the one on tuples, and
loading a generated trace allocates a fraction of the file's size (it was about twice the
file's size when every event was kept as Python objects)."""

from __future__ import annotations

import dataclasses
import functools
import json
import tracemalloc

import numpy as np
import pytest

import explorer.traces.kineto as kineto
import explorer.traces.table as table
from explorer.traces import Activity, Collective, breakdown, load_kineto, vendored
from explorer.traces.breakdown import kernels_by_step
from explorer.traces.stream import read_document
from explorer.traces.table import NONE_ID, ActivityTable, LaunchTimes


def _acts(n: int) -> list[Activity]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        out.append(Activity(
            f"k{i % 7}", "kernel", float(rng.integers(0, 50)), float(i % 5), tid={0: 7, 1: "t"}[i % 2],
            stream=7 if i % 3 else None, correlation=i if i % 4 else None,
            external_id=i + 1 if i % 5 else None, category=("matmul", None)[i % 2],
            op="aten::mm" if i % 2 else "", shapes=((2, 3), (3, 4)) if i % 3 == 0 else (),
            collective=Collective("all-reduce", i) if i % 6 == 0 else None,
            launched=float(i) if i % 2 else None,
        ))  # fmt: skip
    return out


def test_a_table_reads_back_its_activities_sorted_by_start(monkeypatch):
    monkeypatch.setattr(table, "_SLAB", 4)  # several slabs
    acts = _acts(23)
    t = ActivityTable.of(acts)
    want = sorted(acts, key=lambda a: a.ts)  # stable, as the loader's sort
    assert list(t) == want and t == tuple(want) and len(t) == 23
    assert t[0] == want[0] and t[-1] == want[-1] and t[5] == want[5]
    assert list(t[3:9]) == want[3:9] and list(t[::-5]) == want[::-5]
    assert t.column("correlation").dtype == np.int64
    assert (t.column("correlation") == NONE_ID).sum() == sum(a.correlation is None for a in acts)
    with pytest.raises(IndexError):
        t[23]
    assert t != tuple(want[:-1])


def test_launch_times_keep_the_last_time_of_a_repeated_id():
    lt = LaunchTimes.of(np.array([5, 3, 5, 9]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert dict(lt) == {3: 2.0, 5: 3.0, 9: 4.0}
    assert lt.get(4) is None and lt.get(9) == 4.0
    got = lt.lookup(np.array([9, 4, 3, NONE_ID]))
    assert got[0] == 4.0 and got[2] == 2.0 and np.isnan(got[1]) and np.isnan(got[3])


def test_a_loaded_trace_is_columnar_and_its_kernels_know_their_launch():
    r = load_kineto(vendored("nccl_data.json.gz")).ranks[0]
    assert isinstance(r.kernels, ActivityTable) and isinstance(r.ops, ActivityTable)
    assert r.kernels.nbytes() / len(r.kernels) <= 80 and r.ops.nbytes() / len(r.ops) <= 80
    linked = [k for k in r.kernels if k.correlation in r.launches]
    assert len(linked) > 0.9 * len(r.kernels)
    assert all(k.launched == r.launches[k.correlation] for k in linked)


@pytest.mark.parametrize("name", ["nccl_data.json.gz", "sampled_rank-0.json.gz"])
def test_step_assignment_on_columns_equals_the_one_on_tuples(name):
    t = load_kineto(vendored(name))
    r = t.ranks[0]
    plain = dataclasses.replace(r, kernels=tuple(r.kernels), ops=tuple(r.ops))
    cols, tuples = kernels_by_step(r), kernels_by_step(plain)
    assert [len(k) for k in cols] == [len(k) for k in tuples] and sum(map(len, cols)) > 0
    assert all(list(a) == list(b) for a, b in zip(cols, tuples, strict=True))
    assert breakdown(t) == breakdown(type(t)((plain,)))


def _generated(path, launches: int) -> int:
    """A Kineto-like trace: per launch a CPU op (with its shapes), a runtime call and a
    kernel; one step marker."""
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(launches):
            ts = i * 10.0
            for ev in (
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts,
                 "dur": 4.0, "args": {"External id": i, "Input Dims": [[256, 1024], [1024, 64]],
                                      "Input type": ["float", "float"]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": ts + 1, "dur": 2.0, "args": {"correlation": i}},
                {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0,
                 "tid": 7, "ts": ts + 5, "dur": 3.5,
                 "args": {"External id": i, "stream": 7, "correlation": i}},
            ):  # fmt: skip
                f.write(json.dumps(ev) + ",\n")
        f.write(json.dumps({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                            "pid": 1, "tid": 1, "ts": 0.0, "dur": launches * 10.0}) + "]}")  # fmt: skip
    return path.stat().st_size


def _peak(path) -> tuple[int, object]:
    tracemalloc.start()
    try:
        r = load_kineto(path).ranks[0]
        return tracemalloc.get_traced_memory()[1], r
    finally:
        tracemalloc.stop()


def test_loading_grows_by_a_fraction_of_the_file(tmp_path, monkeypatch):
    # a small read buffer and small segments, so that both files span many of each
    monkeypatch.setattr(kineto, "read_document", functools.partial(read_document, chunk=1 << 16))
    monkeypatch.setattr(table, "SEGMENT", 4096)
    small = _generated(tmp_path / "rank-0.json", 10_000)
    large = _generated(tmp_path / "rank-1.json", 40_000)
    p_small, _ = _peak(tmp_path / "rank-0.json")
    p_large, r = _peak(tmp_path / "rank-1.json")
    assert len(r.kernels) == len(r.ops) - 1 == 40_000
    assert r.kernels[0].op == "aten::mm" and r.kernels[0].launched == 1.0
    # the read buffer is a constant (a few chunks of text); what grows with the file is what
    # is kept: as Python objects about twice the file's bytes, by column about a fifth
    growth = (p_large - p_small) / (large - small)
    assert 0 < growth < 0.3, (p_small, p_large, small, large)
