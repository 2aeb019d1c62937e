"""Redistribution: golden plans, errors, and hypothesis properties (the global value is
preserved; the bytes the executor measures equal the bytes the plan charges)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.hardware import CollectiveKind
from explorer.ir import TensorType
from explorer.sharding import (
    Layout,
    ShardingError,
    gather,
    redistribute,
    redistribute_across_stages,
    shard_slices,
)  # fmt: skip
from explorer.sharding.comm import apply_move

T = TensorType((8, 16, 64), "bf16")
MESH = ex.Mesh({"dp": 2, "tp": 4})


def L(*dims, partial=()):  # noqa: N802 - reads like the notation
    return Layout(tuple(tuple(d.split("+")) if d else () for d in dims), partial)


@pytest.mark.parametrize(
    "src, dst, text",
    [
        (L("dp", "", "", partial=("tp",)), L("dp", "", ""),
         "bf16[A_dp, B, C]{U_tp} -> all-reduce(tp) -> bf16[A_dp, B, C]"),
        (L("dp", "", "", partial=("tp",)), L("dp", "", "tp"),
         "bf16[A_dp, B, C]{U_tp} -> reduce-scatter(tp) -> bf16[A_dp, B, C_tp]"),
        (L("dp", "", "tp"), L("dp", "", ""),
         "bf16[A_dp, B, C_tp] -> all-gather(tp) -> bf16[A_dp, B, C]"),
        (L("", "tp", ""), L("", "", "tp"),
         "bf16[A, B_tp, C] -> all-to-all(tp) -> bf16[A, B, C_tp]"),
        (L("", "", ""), L("dp", "", "tp"),
         "bf16[A, B, C] -> slice(dp) -> slice(tp) -> bf16[A_dp, B, C_tp]"),
        (L("dp", "", ""), L("dp", "", ""), "bf16[A_dp, B, C] -> (no change) -> bf16[A_dp, B, C]"),
    ],
)  # fmt: skip
def test_golden_plans(src, dst, text):
    assert str(redistribute(src, dst, T, MESH)) == text


def test_plan_with_letters_and_collective_str():
    plan = redistribute(L("dp", "", "", partial=("tp",)), L("dp", "", ""), T, MESH)
    assert plan.format("bsh") == "bf16[B_dp, S, H]{U_tp} -> all-reduce(tp) -> bf16[B_dp, S, H]"
    (c,) = plan.steps
    assert c.kind is CollectiveKind.ALL_REDUCE and c.axes == ("tp",)
    assert str(c) == "all-reduce(tp) 8 KiB"
    assert c.size_bytes == 8192  # the dp-split block
    assert c.bytes_per_device == MESH.collective_bytes("all-reduce", 8192, ("tp",)) == 12288
    assert plan.bytes_per_device == c.bytes_per_device and plan.time_s == 0.0


def test_time_from_hardware_links():
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    plan = redistribute(L("", "", "", partial=("tp",)), L("", "", ""), T, mesh)
    assert plan.time_s == pytest.approx(mesh.collective_time("all-reduce", T.nbytes, ("tp",)))
    assert plan.time_s > 0


def test_memoised_and_deterministic():
    a = redistribute(L("dp", "", "tp"), L("tp", "dp", ""), T, MESH)
    b = redistribute(L("dp", "", "tp"), L("tp", "dp", ""), T, MESH)
    assert a is b
    other = redistribute(L("dp", "", "tp"), L("tp", "dp", ""), TensorType(T.shape, "fp32"), MESH)
    assert other is not a and other.bytes_per_device == 2 * a.bytes_per_device


def test_cannot_make_partial():
    with pytest.raises(ShardingError, match=r"partial sum over \['tp'\]"):
        redistribute(L("", "", ""), L("", "", "", partial=("tp",)), T, MESH)


def test_invalid_layout_rejected():
    with pytest.raises(ShardingError, match="unknown mesh axis 'pp'"):
        redistribute(L("pp", "", ""), L("", "", ""), T, MESH)


def test_across_stages():
    plan = redistribute_across_stages(L("dp", "", "", partial=("tp",)), L("", "", "tp"), T, MESH)
    kinds = [c.kind for c in plan.steps]
    assert CollectiveKind.SEND_RECV in kinds
    hop = [c for c in plan.steps if c.kind is CollectiveKind.SEND_RECV][0]
    assert hop.bytes_per_device == T.nbytes // 2  # the dp-split block
    assert "send/recv" in str(plan)


MESHES = [ex.Mesh({"x": 4}), ex.Mesh({"a": 2, "b": 4}), ex.Mesh({"a": 2, "b": 2, "c": 2})]


@st.composite
def layout_pairs(draw):
    mesh = draw(st.sampled_from(MESHES))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([4, 8, 16])) for _ in range(rank))

    def draw_layout(allowed_partial):
        dims = [[] for _ in range(rank)]
        partial = []
        for a in draw(st.permutations(list(mesh.axis_names))):
            choice = draw(st.sampled_from(["none", "partial"] + list(range(rank))))
            if choice == "partial" and a in allowed_partial:
                partial.append(a)
            elif (
                isinstance(choice, int)
                and shape[choice]
                % (np.prod([mesh.axis_size(x) for x in dims[choice]]) * mesh.axis_size(a))
                == 0
            ):
                dims[choice].append(a)
        return Layout(tuple(tuple(d) for d in dims), tuple(partial))

    src = draw_layout(set(mesh.axis_names))
    dst = draw_layout(set(src.partial))
    return mesh, TensorType(shape, "fp32"), src, dst


def _blocks(value, ttype, lay, mesh, rng):
    """Per-device blocks of ``value`` in ``lay``; partial axes get random addends."""
    sl = shard_slices(ttype.shape, lay, mesh)
    blocks = [value[sl[d]].copy() for d in range(mesh.size)]
    if not lay.partial:
        return blocks
    addends = {}
    for d in range(mesh.size):
        coords = dict(zip(mesh.axis_names, mesh.coords(d), strict=True))
        block = tuple((s.start, s.stop) for s in sl[d])
        key = (block, tuple(coords[a] for a in lay.partial))
        if key not in addends:
            addends[key] = rng.standard_normal(blocks[d].shape)
        blocks[d] = addends[key]
    # make the partial sum equal ``value``: the first addend of each block takes the rest
    total = gather(blocks, ttype.shape, lay, mesh)
    fix = value - total
    for d in range(mesh.size):
        coords = dict(zip(mesh.axis_names, mesh.coords(d), strict=True))
        if all(coords[a] == 0 for a in lay.partial):
            blocks[d] = blocks[d] + fix[sl[d]]
    return blocks


@settings(max_examples=30, deadline=None)
@given(layout_pairs(), st.integers(0, 2**16))
def test_redistribution_preserves_value_and_bytes(case, seed):
    mesh, ttype, src, dst = case
    rng = np.random.default_rng(seed)
    value = rng.standard_normal(ttype.shape)
    blocks = _blocks(value, ttype, src, mesh, rng)
    np.testing.assert_allclose(gather(blocks, ttype.shape, src, mesh), value, atol=1e-9)
    plan = redistribute(src, dst, ttype, mesh)
    measured = 0.0
    for mv in plan.moves:
        assert mv.before.validate(ttype, mesh) is mv.before
        blocks, sent = apply_move(mv, blocks, mesh, ttype.dtype.itemsize)
        measured += sent
    assert measured == pytest.approx(plan.bytes_per_device, abs=1e-9)
    np.testing.assert_allclose(gather(blocks, ttype.shape, dst, mesh), value, atol=1e-9)
    if not dst.partial:  # every device holds exactly its block of the value
        sl = shard_slices(ttype.shape, dst, mesh)
        for d in range(mesh.size):
            np.testing.assert_allclose(blocks[d], value[sl[d]], atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(layout_pairs())
def test_no_plan_costs_more_than_gather_then_slice(case):
    mesh, ttype, src, dst = case
    plan = redistribute(src, dst, ttype, mesh)
    # reducing/gathering everything first then slicing is always possible
    worst = redistribute(src, Layout(tuple(() for _ in src.dims), dst.partial), ttype, mesh)
    assert (
        plan.bytes_per_device
        <= worst.bytes_per_device
        + (redistribute(worst.dst, dst, ttype, mesh).bytes_per_device)
        + 1e-9
    )
