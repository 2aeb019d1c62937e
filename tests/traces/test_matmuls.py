"""explorer.traces.gemm_table against the raw events of the vendored CPU DDP trace."""

from __future__ import annotations

import gzip
import json

import pytest

from explorer.traces import TracesError, gemm_dims, gemm_table, load_kineto, vendored


def test_counts_and_flops_match_the_raw_events():
    folder = vendored("cpu_gloo_ddp")
    rows = gemm_table(load_kineto(folder))
    raw = []
    for rank in (0, 1):
        events = json.load(gzip.open(folder / f"rank-{rank}.json.gz"))["traceEvents"]
        raw += [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::addmm"]
    flops = 0
    for e in raw:
        (_, (m, k), (_, n)) = e["args"]["Input Dims"][:3]
        flops += 2 * m * k * n
    addmm = [r for r in rows if r.op == "aten::addmm"]
    assert sum(r.count for r in addmm) == len(raw)
    assert sum(r.flops for r in addmm) == flops
    assert sum(r.seconds for r in addmm) == pytest.approx(sum(e["dur"] for e in raw) * 1e-6)
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)


def test_dims_of_each_gemm_op():
    assert gemm_dims("aten::mm", ((8, 4), (4, 2))) == (1, 8, 4, 2)
    assert gemm_dims("aten::bmm", ((3, 8, 4), (3, 4, 2))) == (3, 8, 4, 2)
    assert gemm_dims("aten::mm", ((8, 4), (5, 2))) is None  # inner dims disagree
    assert gemm_dims("aten::add", ((8, 4), (8, 4))) is None
    with pytest.raises(TracesError, match="expected a KinetoTrace"):
        gemm_table([])
