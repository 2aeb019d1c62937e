"""shard_slices on uneven dims: every element is held, ceiling first as
torch.chunk (DTensor) cuts, and the executor refuses what it cannot run."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.sharding import (
    Layout,
    ShardingError,
    assign,
    execute,
    gather,
    node_strategies,
    predicted_bytes,
    replica_groups,
    shard_slices,
    verify,
)
from explorer.sharding.slices import shard_bounds

MESH = ex.Mesh({"a": 2, "b": 3})


def test_five_over_two_covers_every_element_once():
    mesh = ex.Mesh({"dp": 2})
    sl = shard_slices((5,), Layout((("dp",),)), mesh)
    x = np.arange(5)
    held = np.concatenate([x[sl[d]] for d in range(mesh.size)])
    assert held.tolist() == [0, 1, 2, 3, 4]  # element 4 used to be dropped
    assert [x[sl[d]].size for d in range(2)] == [3, 2]


@pytest.mark.parametrize("size", range(0, 13))
@pytest.mark.parametrize("shards", range(1, 7))
def test_bounds_equal_torch_chunk(size, shards):
    torch = pytest.importorskip("torch")
    chunks = [c.tolist() for c in torch.chunk(torch.arange(size), shards)] if size else []
    chunks += [[]] * (shards - len(chunks))  # DTensor pads the missing chunks as empty
    ours = [list(range(*shard_bounds(size, shards, i))) for i in range(shards)]
    assert ours == chunks


@st.composite
def shape_and_layout(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    dims: list[list[str]] = [[] for _ in range(rank)]
    for axis in draw(st.permutations(["a", "b"])):
        where = draw(st.integers(-1, rank - 1))  # -1: the axis does not split this tensor
        if where >= 0:
            dims[where].append(axis)
    return shape, Layout(tuple(tuple(d) for d in dims))


@settings(max_examples=150, deadline=None)
@given(shape_and_layout())
def test_every_element_held_by_each_replica_set_exactly_once(case):
    shape, layout = case
    sl = shard_slices(shape, layout, MESH)
    count = np.zeros(shape, dtype=int)
    for d in range(MESH.size):
        count[sl[d]] += 1
    shards = math.prod(layout.shards(i, MESH) for i in range(len(shape)))
    # each block is held by mesh.size / shards replicas; no element is missed
    assert (count == MESH.size // shards).all()
    groups = replica_groups(shape, layout, MESH)
    assert len(groups) == shards
    assert sorted(d for g in groups for d in g) == list(range(MESH.size))
    for g in groups:
        assert len({tuple((s.start, s.stop) for s in sl[d]) for d in g}) == 1


@settings(max_examples=60, deadline=None)
@given(shape_and_layout())
def test_gather_of_uneven_blocks_restores_the_array(case):
    shape, layout = case
    x = np.random.default_rng(0).standard_normal(shape)
    sl = shard_slices(shape, layout, MESH)
    np.testing.assert_array_equal(gather([x[sl[d]] for d in range(6)], shape, layout, MESH), x)


def test_empty_trailing_shards_stay_distinct_blocks():
    mesh = ex.Mesh({"x": 4})
    lay = Layout((("x",),))
    assert [s[0].stop - s[0].start for s in shard_slices((1,), lay, mesh).values()] == [1, 0, 0, 0]
    assert replica_groups((1,), lay, mesh) == ((0,), (1,), (2,), (3,))


def test_bad_shape_or_layout_raise_sharding_errors():
    with pytest.raises(ShardingError, match=r"rank 1 but layout .* gives 2 dims"):
        shard_slices((4,), Layout((("a",), ())), MESH)
    with pytest.raises(ShardingError, match=r"mesh axis 'tp'.*axes are a, b"):
        shard_slices((4,), Layout((("tp",),)), MESH)
    with pytest.raises(ShardingError, match=r"dim 0 of shape \(-1,\) is -1"):
        replica_groups((-1,), Layout(((),)), MESH)
    with pytest.raises(ShardingError, match=r"dim 1 .* is 2.5"):
        shard_slices((4, 2.5), Layout(((), ())), MESH)
    assert shard_slices((np.int64(4),), Layout((("a",),)), MESH)[0] == (slice(0, 2),)


def test_gather_checks_block_count_and_shapes():
    lay = Layout((("a",),))
    with pytest.raises(ShardingError, match=r"gather got 2 blocks for .* 6 devices"):
        gather([np.zeros(2), np.zeros(3)], (5,), lay, MESH)
    blocks = [np.zeros(3)] * 3 + [np.zeros(3)] * 3
    with pytest.raises(ShardingError, match=r"device 3's block has shape \(3,\).*gives it \(2,\)"):
        gather(blocks, (5,), lay, MESH)


def _vector_graph(n: int):
    b = GraphBuilder("vec")
    y = b.op("exp", b.input("x", (n,)), name="y")
    return b.build([y]), y


def test_executor_refuses_uneven_layout_naming_dim_size_axes_and_fix():
    mesh = ex.Mesh({"dp": 2})
    g, y = _vector_graph(5)
    assert [s.name for s in node_strategies(g, y, mesh)] == ["replicated"]  # never proposed
    plan = assign(g, mesh)
    uneven = dataclasses.replace(plan["x"], out_layout=Layout((("dp",),)))
    for run in (
        lambda: execute(g, mesh, {**plan, "x": uneven}),
        lambda: verify(g, {**plan, "x": uneven}, mesh),
        lambda: predicted_bytes(g, mesh, {**plan, "x": uneven}),
    ):
        with pytest.raises(ShardingError) as err:
            run()
        text = str(err.value)
        for words in ("%x", "dim 0 of size 5", "2 shards", "dp=2", "pad it", "even splits"):
            assert words in text, (words, text)


def test_even_split_of_the_same_op_still_verifies():
    mesh = ex.Mesh({"dp": 2})
    g, y = _vector_graph(6)
    rep = verify(g, assign(g, mesh, {y: "a=dp"}), mesh)
    assert rep.ok and rep.max_abs_err == 0.0
