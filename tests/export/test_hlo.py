"""HLO text reading without JAX: replica groups, reduce-scatter written as all-reduce plus
dynamic-slice, tuple all-reduces, async forms."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.export import ExportError, collectives, groups_to_axes, parse_replica_groups
from explorer.hardware import CollectiveKind

MESH = ex.Mesh({"dp": 2, "tp": 4})


@pytest.mark.parametrize(
    "text, axes",
    [
        ("{{0,1,2,3},{4,5,6,7}}", ("tp",)),
        ("{{0,4},{1,5},{2,6},{3,7}}", ("dp",)),
        ("[2,4]<=[8]", ("tp",)),
        ("[4,2]<=[2,4]T(1,0)", ("dp",)),
        ("[1,8]<=[8]", ("dp", "tp")),
        ("{}", ("dp", "tp")),
        ("mesh['axis_0'=2,'axis_1'=4,'axis_2'=1] {'axis_1'}", ("tp",)),
        ("mesh['axis_0'=2,'axis_1'=4,'axis_2'=1] {'axis_0'}", ("dp",)),
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_0','axis_1'}", ("dp", "tp")),
        ("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_0'}", ("tp",)),
        ("mesh['axis_0'=4,'axis_1'=2], device_ids=(0,4,1,5,2,6,3,7) {'axis_1'}", ("dp",)),
    ],
)
def test_replica_group_forms_map_to_mesh_axes(text, axes):
    assert groups_to_axes(parse_replica_groups(text, 8), MESH) == axes


def test_groups_matching_no_axes():
    assert groups_to_axes(((0, 1), (2, 3), (4, 5), (6, 7)), MESH) is None
    assert groups_to_axes(tuple((i,) for i in range(8)), MESH) == ()


def test_unreadable_groups_name_the_text():
    with pytest.raises(ExportError, match="cannot read replica groups"):
        parse_replica_groups("<<weird>>", 8)


HLO = """
HloModule jit_f, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

%fused_slice (param_0: f32[1,8,64], param_1: s32[]) -> f32[1,2,64] {
  %param_0 = f32[1,8,64]{2,1,0} parameter(0)
  %param_1 = s32[] parameter(1)
  %c = s32[] constant(0)
  ROOT %ds = f32[1,2,64]{2,1,0} dynamic-slice(%param_0, %c, %param_1, %c), dynamic_slice_sizes={1,2,64}
}

ENTRY %main (p0: f32[1,8,64], p1: f32[64,64], p2: f32[64]) -> f32[1,2,64] {
  %p0 = f32[1,8,64]{2,1,0} parameter(0)
  %p1 = f32[64,64]{1,0} parameter(1)
  %p2 = f32[64]{0} parameter(2)
  %off = s32[] constant(2)
  %ar = f32[1,8,64]{2,1,0} all-reduce(%p0), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
  %rs = f32[1,2,64]{2,1,0} fusion(%ar, %off), kind=kLoop, calls=%fused_slice
  %ar2 = f32[1,8,64]{2,1,0} all-reduce(%p0), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  %ds2 = f32[1,2,64]{2,1,0} dynamic-slice(%ar2, %off, %off, %off), dynamic_slice_sizes={1,2,64}
  %use = f32[1,8,64]{2,1,0} add(%ar2, %ar2)
  %t = (f32[64,64]{1,0}, /*index=1*/f32[64]{0}) all-reduce(%p1, %p2), channel_id=3, replica_groups={{0,4},{1,5},{2,6},{3,7}}, to_apply=%add
  %ag = f32[1,8,64]{2,1,0} all-gather(%rs), channel_id=4, replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}, dimensions={1}, use_global_device_ids=true
  %ag3 = f32[1,8,64]{2,1,0} all-gather(%rs), channel_id=6, replica_groups=mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_1'}, dimensions={0}, use_global_device_ids=true
  %ags = (f32[1,2,64]{2,1,0}, f32[1,8,64]{2,1,0}) all-gather-start(%rs), channel_id=5, replica_groups=[2,4]<=[8], dimensions={1}
  %agd = f32[1,8,64]{2,1,0} all-gather-done(%ags)
  ROOT %r = f32[1,2,64]{2,1,0} copy(%rs)
}
"""


def test_collectives_of_hlo_text():
    got = collectives(HLO, MESH)
    kinds = [(c.kind.value, c.axes, c.size_bytes, c.index) for c in got]
    assert kinds == [
        ("reduce-scatter", ("tp",), 2048.0, None),  # all-reduce + dynamic-slice in a fusion
        ("all-reduce", ("tp",), 2048.0, None),  # another user needs the whole sum
        ("all-reduce", ("dp",), 16384.0, 0),  # a tuple, element by element
        ("all-reduce", ("dp",), 256.0, 1),
        ("all-gather", ("tp",), 2048.0, None),  # the gathered output
        ("all-gather", ("dp",), 2048.0, None),  # the mesh form with device ids
        ("all-gather", ("tp",), 2048.0, None),  # async start: the output half of the tuple
    ]
    rs = got[0]
    assert rs.hlo_kind == "all-reduce" and rs.kind is CollectiveKind.REDUCE_SCATTER
    assert rs.bytes_per_device == MESH.collective_bytes("reduce-scatter", 2048, ("tp",)) == 1536
    assert got[2].bytes_per_device == 16384.0  # all-reduce over 2: 2 * 1/2 * S
    assert str(got[0]) == "reduce-scatter(tp) f32[1,8,64] %ar"
