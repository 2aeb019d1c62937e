"""Layout: validation, notation (golden), conversions, shard slices."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.ir import TensorType
from explorer.sharding import Layout, ShardingError, replica_groups, shard_slices

MESH = ex.Mesh({"dp": 2, "tp": 4})
T = TensorType((8, 16, 64), "bf16")


def test_format_golden():
    lay = Layout((("dp",), (), ("tp",)))
    assert lay.format(T, letters="bsh") == "bf16[B_dp, S, H_tp]"
    assert Layout(((), (), ()), partial=("tp",)).format(T, "bsh") == "bf16[B, S, H]{U_tp}"
    assert Layout((("dp", "tp"), (), ())).format(T) == "bf16[A_{dp,tp}, B, C]"
    assert Layout(((), (), ()), ("tp", "dp")).format(T) == "bf16[A, B, C]{U_{dp,tp}}"
    assert Layout(()).format(TensorType((), "fp32")) == "fp32[]"
    assert str(Layout((("dp",), ()))) == "[A_dp, B]"


def test_partial_is_sorted_and_replicated_constructor():
    assert Layout(((),), ("tp", "dp")).partial == ("dp", "tp")
    assert Layout.replicated(3) == Layout(((), (), ()))
    assert Layout.replicated(2).is_replicated


def test_local_shape_and_split_counts():
    lay = Layout((("dp",), (), ("tp",)))
    assert lay.local_shape(T.shape, MESH) == (4, 16, 16)
    assert lay.split_counts(MESH) == (2, 1, 4)


def test_partition_spec_round_trip():
    lay = Layout((("dp",), (), ("tp",)))
    assert lay.to_partition_spec() == ("dp", None, "tp")
    assert Layout.from_partition_spec(lay.to_partition_spec()) == lay
    two = Layout((("dp", "tp"), ()), partial=())
    assert two.to_partition_spec() == (("dp", "tp"), None)
    assert Layout.from_partition_spec((("dp", "tp"), None)) == two
    assert Layout.from_partition_spec((None,), partial=("tp",)).partial == ("tp",)


def test_mindspore_round_trip():
    lay = Layout((("dp",), (), ("tp",)))
    dm, tmap = lay.to_mindspore(MESH)
    assert (dm, tmap) == ((2, 4), (1, -1, 0))
    assert Layout.from_mindspore(dm, tmap, MESH) == lay
    multi = Layout((("dp", "tp"), (), ()))
    assert multi.to_mindspore(MESH)[1] == ((1, 0), -1, -1)
    assert Layout.from_mindspore(*multi.to_mindspore(MESH), MESH) == multi


@pytest.mark.parametrize(
    "lay, words",
    [
        (Layout((("pp",), (), ())), ["unknown mesh axis 'pp'", "dp, tp"]),
        (Layout((("dp",), ())), ["rank 3", "one tuple of axes per dim"]),
        (Layout(((), ("tp",), ("dp",))), []),
    ],
)
def test_validate_errors_name_the_reason(lay, words):
    if not words:
        lay.validate(T, MESH)
        return
    with pytest.raises(ShardingError) as err:
        lay.validate(T, MESH, tensor="h")
    for w in words:
        assert w in str(err.value)
    assert isinstance(err.value, ValueError)


def test_indivisible_names_tensor_and_axes():
    with pytest.raises(ShardingError, match=r"%x .*dim 1 of size 6.*8 shards.*dp=2 x tp=4"):
        Layout(((), ("dp", "tp"))).validate(TensorType((4, 6)), MESH, tensor="x")


def test_duplicate_axis_rejected_at_construction():
    with pytest.raises(ShardingError, match="'tp' more than once"):
        Layout((("tp",), ("tp",)))
    with pytest.raises(ShardingError, match="'tp' more than once"):
        Layout((("tp",), ()), partial=("tp",))


def test_shard_slices_and_replicas():
    lay = Layout((("tp",), ()))
    sl = shard_slices((8, 6), lay, MESH)
    assert sl[0] == (slice(0, 2), slice(0, 6))
    assert sl[5] == (slice(2, 4), slice(0, 6))  # device 5 = (dp 1, tp 1)
    assert replica_groups((8, 6), lay, MESH) == ((0, 4), (1, 5), (2, 6), (3, 7))
    both = Layout((("dp", "tp"), ()))
    starts = [shard_slices((8, 6), both, MESH)[d][0].start for d in range(8)]
    assert starts == [0, 1, 2, 3, 4, 5, 6, 7]  # dp major, tp minor
    minor = Layout((("tp", "dp"), ()))
    starts = [shard_slices((8, 6), minor, MESH)[d][0].start for d in range(8)]
    assert starts == [0, 2, 4, 6, 1, 3, 5, 7]
    assert replica_groups((8, 6), Layout.replicated(2), MESH) == (tuple(range(8)),)
