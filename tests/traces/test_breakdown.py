"""explorer.traces.breakdown and classify: invariants on the vendored real traces, interval
arithmetic against a brute-force count, mesh axes of process groups."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import explorer as ex
from explorer.traces import Collective, TracesError, axis_of, breakdown, load_kineto, vendored
from explorer.traces.classify import CATEGORIES, classify_name, collective_kind, nelems
from explorer.traces.intervals import clip, length, merge, overlap, subtract


@pytest.fixture(scope="module")
def gpu():
    return load_kineto(vendored("nccl_data.json.gz"))


def test_every_gpu_kernel_has_a_category(gpu):
    r = gpu.ranks[0]
    assert all(k.category in CATEGORIES for k in r.kernels)
    assert {k.category for k in r.kernels} >= {"matmul", "norm", "elementwise", "optimizer",
                                                "memcpy", "communication"}  # fmt: skip
    assert all(k.category == "memcpy" for k in r.kernels if k.cat != "kernel")


def test_step_parts_add_up(gpu):
    b = breakdown(gpu, axes={"dp": 2})
    assert len(b.rows) == len(gpu.ranks[0].steps)
    for row in b.rows:
        assert row.compute_s + row.exposed_comm_s + row.idle_s == pytest.approx(row.window_s)
        assert 0 <= row.overlapped_comm_s <= row.compute_s
        assert row.comm_s == pytest.approx(sum(t for _, t in row.comm_by_axis), rel=0.05)


def test_categories_sum_to_the_kernels_of_the_step(gpu):
    r = gpu.ranks[0]
    b = breakdown(gpu)
    total = sum(t for row in b.rows for _, t in row.by_category)
    assigned = sum(k.dur for k in r.kernels
                   if any(s.ts <= r.launches.get(k.correlation, k.ts) <= s.end for s in r.steps)) * 1e-6  # fmt: skip
    assert total == pytest.approx(assigned)


def test_collective_bytes_per_step_equal_the_kernels_arguments(gpu):
    b = breakdown(gpu, axes={"dp": 2})
    r = gpu.ranks[0]
    per_step = sum(dict(row.comm_bytes).get("all-reduce dp", 0.0) for row in b.rows)
    args = sum(a.collective.size_bytes for a in r.collectives if a.collective.kind == "all-reduce")
    assert per_step == args


def test_cpu_only_trace_breaks_down_on_the_main_thread():
    t = load_kineto(vendored("cpu_only_rank-34.json.gz"))
    (row,) = breakdown(t).rows
    assert row.window_s == pytest.approx(t.ranks[0].steps[0].dur * 1e-6)
    assert row.compute_s + row.exposed_comm_s + row.idle_s == pytest.approx(row.window_s)


def test_cpu_communication_is_the_backend_threads_busy_time():
    t = load_kineto(vendored("cpu_gloo_fsdp"))
    rows = breakdown(t).rows
    for r in t.ranks:
        wire_slices = [a for a in r.ops if a.tid != r.main_tid and a.category == "communication"]
        assert wire_slices and all(a.name.startswith("gloo:") for a in wire_slices)
        for row in (x for x in rows if x.rank == r.rank):
            step = next(s for s in r.steps if s.number == row.step)
            wire = length(clip(((a.ts, a.end) for a in wire_slices), step.ts, step.end)) * 1e-6
            assert row.exposed_comm_s + row.overlapped_comm_s == pytest.approx(wire)
            assert row.category("communication") == pytest.approx(wire)
    # FSDP2's host work around its collectives (the self time of its FSDP:: scopes on the main
    # thread) is neither compute nor communication: idle, as a GPU's launch gaps
    idle = sum(r.idle_s for r in rows) / sum(r.window_s for r in rows)
    assert idle > 0.2


def test_text_form_has_a_line_per_row(gpu):
    b = breakdown(gpu)
    lines = str(b).splitlines()
    assert len(lines) == 1 + len(b.rows) and "exposed" in lines[0]
    assert b.mean("compute_s") == pytest.approx(sum(r.compute_s for r in b.rows) / len(b.rows))
    with pytest.raises(TracesError, match="not a row field"):
        b.mean("nope")


def test_breakdown_refuses_bad_input(gpu):
    with pytest.raises(TracesError, match="expected a KinetoTrace"):
        breakdown("trace.json")
    with pytest.raises(TracesError, match="axes"):
        breakdown(gpu, axes={"dp": 0})
    with pytest.raises(TracesError, match="axes"):
        breakdown(gpu, axes=[("dp", 2)])


@pytest.mark.parametrize(
    "ranks, axes, want",
    [
        ((0, 1), {"tp": 2, "dp": 4}, "tp"),
        ((1, 3, 5, 7), {"tp": 2, "dp": 4}, "dp"),
        ((0, 1, 2, 3, 4, 5, 6, 7), {"tp": 2, "dp": 4}, "tp+dp"),
        ((2, 6), {"tp": 2, "cp": 2, "dp": 2}, "dp"),
        ((0, 1, 2, 3), {"tp": 2, "cp": 2, "dp": 2}, "tp+cp"),
        ((0, 1), None, "world"),
        ((0, 4), None, "group of 2"),
    ],
)
def test_axis_of_a_group(ranks, axes, want):
    assert axis_of(Collective("send/recv"), 8, axes) == "?"  # no group recorded
    world = 2 if axes is None and ranks == (0, 1) else 8
    assert axis_of(Collective("all-reduce", group_ranks=ranks), world, axes) == want


def test_classify_names():
    assert classify_name("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "communication"
    assert collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce-scatter"
    assert classify_name("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert classify_name("void fbgemm_gpu::permute_2D_lengths_kernel<int>") is None
    assert (
        classify_name("multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>")
        == "optimizer"
    )
    assert classify_name("aten::view") is None
    assert nelems([[2, 3], [4]]) == 10


spans = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 50)).map(sorted).map(tuple), max_size=8
)


@given(spans, spans)
def test_interval_arithmetic_matches_counting_unit_cells(a, b):
    cells = lambda s: {t for lo, hi in s for t in range(lo, hi)}  # noqa: E731
    x, y = merge(a), merge(b)
    assert length(x) == len(cells(a))
    assert overlap(x, y) == len(cells(a) & cells(b))
    assert length(subtract(x, y)) == len(cells(a) - cells(b))


def test_traces_is_on_the_package():
    assert ex.traces.load_kineto is load_kineto
