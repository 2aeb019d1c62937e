"""Mesh.collective_time keeps each collective's links (everything but the size) per
(kind, axes, algorithm, concurrent): the seconds it returns are those of the formulas on
the links computed afresh, at every size, and bad input is refused on every call."""

import pytest

import explorer as ex
from explorer.hardware import HardwareError, MeshError
from explorer.hardware.collectives import hierarchical_time, ring_time, tree_time

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv")
SIZES = (0.0, 1.0, 4096.0, 3.3e6, 2.0**30, 7.7e9)


def _fresh(mesh: ex.Mesh, kind, size, axes, algorithm="auto", concurrent=()):
    """The seconds from a new mesh of the same axes and cluster (nothing memoized)."""
    twin = ex.Mesh(dict(mesh.axes), hardware=mesh.hardware, links=dict(mesh.links))
    return twin.collective_time(kind, size, list(axes), algorithm, list(concurrent))


@pytest.mark.parametrize("hw", ["a100-80g", "dgx-h100-superpod", "gb200-nvl72"])
def test_memoized_links_give_the_seconds_of_fresh_links(hw):
    mesh = ex.Mesh({"pp": 4, "dp": 16, "tp": 8}, hardware=hw)
    cases = [("tp",), ("dp",), ("pp",), ("dp", "tp"), ("pp", "dp", "tp")]
    for axes in cases:
        for kind in KINDS:
            for size in SIZES:
                got = mesh.collective_time(kind, size, axes)
                assert got == _fresh(mesh, kind, size, axes), (axes, kind, size)
    # the same axes asked again at a new size: the memo answers, the formula is applied
    link = mesh.axis_link(("dp",))
    n = 16
    for size in SIZES:
        want = ring_time("all-gather", size, n, link.bandwidth_bytes_per_s, link.latency_s)
        if not mesh.hardware.multi_rail_rings:
            assert mesh.collective_time("all-gather", size, ("dp",)) == want


def test_algorithms_and_concurrent_collectives_are_memoized_apart():
    mesh = ex.Mesh({"dp": 16, "tp": 8}, hardware="a100-80g")
    size = 2.0**28
    ring = mesh.collective_time("all-reduce", size, ("dp", "tp"), "ring")
    tree = mesh.collective_time("all-reduce", size, ("dp", "tp"), "tree")
    hier = mesh.collective_time("all-reduce", size, ("dp", "tp"), "hierarchical")
    auto = mesh.collective_time("all-reduce", size, ("dp", "tp"))
    assert len({ring, tree, hier}) == 3 and auto == hier
    link = mesh.axis_link(("dp", "tp"))
    assert tree == tree_time("all-reduce", size, 128, link.bandwidth_bytes_per_s, link.latency_s)
    intra, inter = mesh.axis_link(("tp",)), mesh.axis_link(("dp",))
    assert hier == hierarchical_time(
        "all-reduce", size, 8, 16, (intra.bandwidth_bytes_per_s, intra.latency_s),
        (inter.bandwidth_bytes_per_s, inter.latency_s),
    )  # fmt: skip
    alone = mesh.collective_time("all-gather", size, ("dp",))
    shared = mesh.collective_time("all-gather", size, ("dp",), concurrent=(("dp",),))
    assert shared == _fresh(mesh, "all-gather", size, ("dp",), concurrent=(("dp",),))
    assert alone == _fresh(mesh, "all-gather", size, ("dp",))


def test_bad_input_is_refused_on_every_call():
    mesh = ex.Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    mesh.collective_time("all-gather", 1e6, ("tp",))  # the links are memoized now
    for _ in range(2):
        with pytest.raises(HardwareError, match="size_bytes"):
            mesh.collective_time("all-gather", -1.0, ("tp",))
        with pytest.raises(MeshError, match="unknown mesh axis"):
            mesh.collective_time("all-gather", 1e6, ("ep",))
        with pytest.raises(HardwareError, match="no tree algorithm"):
            mesh.collective_time("all-gather", 1e6, ("tp",), "tree")
        with pytest.raises(MeshError, match="unknown algorithm"):
            mesh.collective_time("all-gather", 1e6, ("tp",), "star")
        with pytest.raises(HardwareError, match="unknown collective kind"):
            mesh.collective_time("gather", 1e6, ("tp",))


def test_the_memo_is_no_part_of_the_value():
    a = ex.Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    b = ex.Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    a.collective_time("all-reduce", 1e6, ("dp",))
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    # axes given as a list (not memoized) and as a tuple (memoized) agree
    assert a.collective_time("all-reduce", 5e6, ["dp", "tp"]) == a.collective_time(
        "all-reduce", 5e6, ("dp", "tp")
    )


def test_bytes_sent_follow_the_group_size_memoized_or_not():
    mesh = ex.Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    for _ in range(2):
        assert mesh.collective_bytes("all-gather", 4096, ("tp",)) == 4096 * 7 / 8
        assert mesh.collective_bytes("all-reduce", 4096, ("dp", "tp")) == 2 * 4096 * 31 / 32
        assert mesh.collective_bytes("all-reduce", 4096, ["dp"]) == 2 * 4096 * 3 / 4
        with pytest.raises(MeshError, match="unknown mesh axis"):
            mesh.collective_bytes("all-gather", 4096, ("ep",))
        with pytest.raises(HardwareError, match="size_bytes"):
            mesh.collective_bytes("all-gather", -1, ("tp",))
