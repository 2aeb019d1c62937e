"""MeshView names the link level each mesh axis spans."""

from __future__ import annotations

import explorer as ex
from widgets import MeshView
from widgets.figures.mesh import levels_text


def test_levels_line_names_each_axis_level_and_bandwidth() -> None:
    mesh = ex.Mesh({"pp": 2, "dp": 32, "tp": 8}, hardware="dgx-h100-superpod")
    text = levels_text(mesh)
    assert text == (
        "links: pp=2: ib-spine, 50 GB/s per ring (256 rings share the links out of each "
        "ib-leaf group) · dp=32: ib-leaf, 50 GB/s per ring (8 rings share the links out of "
        "each node) · tp=8: nvlink, 450 GB/s per ring"
    )
    assert levels_text(ex.Mesh({"dp": 2, "tp": 4})) == ""  # a logical mesh has no links


def test_mesh_view_shows_the_levels_and_follows_a_new_mesh() -> None:
    view = MeshView(ex.Mesh({"dp": 4, "tp": 8}, hardware="a100-80g"))
    assert view.levels_line.value.startswith("links: dp=4: inter-node, 25 GB/s per ring")
    assert view.levels_line in view.children
    view._set_mesh(ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    assert view.levels_line.value == (
        "links: dp=2: intra-node, 300 GB/s per ring · tp=4: intra-node, 300 GB/s per ring"
    )
