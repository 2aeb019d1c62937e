"""Link levels: levels parsed from JSON, the old two-level profiles giving
the same numbers, mesh axes mapped to the levels they cross, links shared by concurrent
rings (checked against numbers worked out by hand below), bad JSON named by file."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest

import explorer as ex
from explorer.hardware import (
    Chip,
    Cluster,
    HardwareError,
    Mesh,
    MeshError,
    hierarchical_time,
    load,
    load_file,
    ring_time,
)
from explorer.hardware.catalog import datasets_dir
from explorer.hardware.levels import AxisLink, Level, axis_link
from explorer.training import TrainingParams

GIB = 2**30
LEGACY = ("a100-40g", "a100-80g", "ascend-910", "ascend-910b", "h100-sxm", "h200", "tpu-v4",
          "v100-32g")  # fmt: skip
CHIP = Chip("toy", {"bf16": 1e14}, memory_bytes=16 * GIB, memory_bandwidth_bytes_per_s=1e12)


def toy(levels: tuple[Level, ...], chips_per_node: int = 8, max_nodes: int = 8) -> Cluster:
    """A cluster built from levels; the two-level fields are read off them (node level and
    the one above), as the JSON loader does."""
    node = next(i for i, lv in enumerate(levels) if lv.group_size == chips_per_node)
    up = levels[min(node + 1, len(levels) - 1)]
    return Cluster(
        "toy", CHIP, chips_per_node,
        levels[node].bandwidth_bytes_per_s, levels[node].latency_s,
        up.bandwidth_bytes_per_s, up.latency_s, max_nodes, "made up for tests",
        link_levels=levels,
    )  # fmt: skip


# ----- levels parsed ------------------------------------------------------------------------
def test_superpod_profiles_parse_their_levels() -> None:
    h100 = load("dgx-h100-superpod")
    assert [lv.name for lv in h100.levels] == ["nvlink", "ib-leaf", "ib-spine"]
    assert [lv.group_size for lv in h100.levels] == [8, 256, 1024]  # node, SU of 32, 4 SUs
    assert [lv.bandwidth_bytes_per_s for lv in h100.levels] == [450e9, 50e9, 50e9]
    assert [lv.rails for lv in h100.levels] == [1, 8, 8]
    assert h100.level("ib-spine").oversubscription == 1.0
    assert h100.capacity == 127 * 8  # the RA's 4-SU system: 127 DGX H100
    # the two-level figures are read off the levels: NVLink inside, the NIC above
    assert h100.intra_node_bandwidth_bytes_per_s == 450e9
    assert h100.inter_node_bandwidth_bytes_per_s == 50e9
    assert h100.inter_node_latency_s == 10e-6
    a100 = load("dgx-a100-superpod")
    assert [lv.group_size for lv in a100.levels] == [8, 160, 1120]
    assert [lv.bandwidth_bytes_per_s for lv in a100.levels] == [300e9, 25e9, 25e9]
    for cluster in (h100, a100):
        assert "Reference Architecture" in cluster.source
        for level in cluster.levels:  # every level cites its figures; latencies are assumed
            assert "assumption" in level.source and len(level.source) > 40
    # what is recalled rather than read is marked as such
    assert "assumption" in a100.level("ib-leaf").source
    assert "assumption" in a100.level("ib-spine").source


@pytest.mark.parametrize("name", LEGACY)
def test_old_profiles_derive_two_levels_from_their_fields(name: str) -> None:
    c = load(name)
    intra, inter = c.levels
    assert (intra.name, intra.group_size, intra.rails) == ("intra-node", c.chips_per_node, 1)
    assert (inter.name, inter.group_size) == ("inter-node", c.capacity)
    assert inter.rails == c.chips_per_node  # one NIC per chip: one ring gets one chip's share
    assert (intra.bandwidth_bytes_per_s, intra.latency_s) == (c.bandwidth("intra"),
                                                              c.latency("intra"))  # fmt: skip
    assert (inter.bandwidth_bytes_per_s, inter.latency_s) == (c.bandwidth("inter"),
                                                              c.latency("inter"))  # fmt: skip
    assert c.link_levels == ()  # nothing explicit: dataclasses.replace re-derives them
    slower = dataclasses.replace(c, inter_node_bandwidth_bytes_per_s=1e9)
    assert slower.levels[-1].bandwidth_bytes_per_s == 1e9


# ----- old JSON, same numbers ---------------------------------------------------------------
def _old_time(mesh: Mesh, kind: str, size: float, names: list[str], algorithm: str) -> float:
    """The two-level model as it was: a ring at the slowest labelled link; hierarchical on
    the intra/inter fields when the labels mix."""
    c = mesh.hardware
    n = math.prod(mesh.axis_size(a) for a in names)
    labels = {mesh.link(a) for a in names}
    if algorithm == "auto" and len(labels) > 1 and kind != "send/recv":
        n_in = math.prod(mesh.axis_size(a) for a in names if mesh.link(a) == "intra")
        return hierarchical_time(kind, size, n_in, n // n_in,
                                 (c.bandwidth("intra"), c.latency("intra")),
                                 (c.bandwidth("inter"), c.latency("inter")))  # fmt: skip
    bw = min(c.bandwidth(x) for x in labels)
    lat = max(c.latency(x) for x in labels)
    return ring_time(kind, size, n, bw, lat)


@pytest.mark.parametrize("name", LEGACY)
def test_old_profiles_time_every_aligned_collective_as_before(name: str) -> None:
    """Power-of-two meshes (nodes hold whole groups): every collective, every axis set, the
    same seconds as the two-level model (to 1e-12)."""
    cluster = load(name)
    for sizes in itertools.product([1, 2, 4], [1, 2, 8], [1, 4], [1, 2, 8]):
        axes = dict(zip(("pp", "dp", "ep", "tp"), sizes, strict=True))
        mesh = Mesh(axes, hardware=cluster)
        for combo in (("tp",), ("dp",), ("pp",), ("dp", "ep"), ("dp", "tp"), tuple(axes)):
            names = [a for a in combo if axes[a] > 1]
            if not names:
                continue
            for kind, algorithm in itertools.product(
                ("all-reduce", "all-gather", "send/recv"), ("ring", "auto")
            ):
                got = mesh.collective_time(kind, GIB, names, algorithm)  # type: ignore[arg-type]
                want = _old_time(mesh, kind, GIB, names, algorithm)
                assert got == pytest.approx(want, rel=1e-12), (axes, names, kind, algorithm)


def test_a_group_straddling_nodes_is_priced_at_the_network() -> None:
    """The one place the numbers changed (a fix): with 12 devices on 8-chip nodes, pp=2 x
    dp=3 x tp=2 labels dp 'intra' (2*3 = 6 <= 8), yet the dp group (6, 8, 10) of the second
    pipeline stage spans two nodes. The old model priced dp at NVLink; the slowest group runs
    over the NIC, so the collective does."""
    mesh = Mesh({"pp": 2, "dp": 3, "tp": 2}, hardware="a100-80g")
    assert mesh.link("dp") == "intra"
    assert (6, 8, 10) in mesh.groups("dp")
    assert mesh.levels("dp") == ("intra-node", "inter-node")
    assert mesh.bandwidth("dp") == 25e9
    assert mesh.collective_time("all-reduce", GIB, ("dp",)) == pytest.approx(
        ring_time("all-reduce", GIB, 3, 25e9, 10e-6), rel=1e-12
    )


# ----- mapping of axes to levels ------------------------------------------------------------
def test_axes_map_to_the_levels_they_cross() -> None:
    """pp=2 x dp=32 x tp=8 on the H100 SuperPOD: tp fills the NVLink domain, dp spans the 32
    nodes of one SU (256 GPUs, rail-aligned leaf), pp jumps 256 ids to the next SU."""
    mesh = Mesh({"pp": 2, "dp": 32, "tp": 8}, hardware="dgx-h100-superpod")
    assert mesh.level_summary() == (
        ("pp", 2, ("ib-spine",)),
        ("dp", 32, ("ib-leaf",)),
        ("tp", 8, ("nvlink",)),
    )
    # dp x tp together: NVLink edges inside each node and leaf edges between them
    assert mesh.levels(("dp", "tp")) == ("nvlink", "ib-leaf")
    assert mesh.levels(()) == ()
    # the same axes, fewer of them, stay inside one node
    assert Mesh({"dp": 4, "tp": 2}, hardware="dgx-h100-superpod").levels("dp") == ("nvlink",)
    # dp=128 x tp=4 (512 GPUs) spills over the SU: leaf inside, spine across
    big = Mesh({"dp": 128, "tp": 4}, hardware="dgx-h100-superpod")
    assert big.levels("dp") == ("nvlink", "ib-leaf", "ib-spine")


def test_cluster_axis_bandwidth_is_the_mesh_link() -> None:
    c = load("dgx-h100-superpod")
    link = c.axis_bandwidth({"pp": 2, "dp": 32, "tp": 8}, "dp")
    assert isinstance(link, AxisLink)
    assert link == Mesh({"pp": 2, "dp": 32, "tp": 8}, hardware=c).axis_link("dp")
    assert (link.bandwidth_bytes_per_s, link.latency_s, link.levels) == (50e9, 10e-6,
                                                                         ("ib-leaf",))  # fmt: skip
    assert link.flows == (8,)  # the 8 dp rings (one per tp rank) leaving each node
    assert c.axis_bandwidth((("dp", 32), ("tp", 8)), ("tp",)).levels == ("nvlink",)
    with pytest.raises(MeshError, match=r"unknown mesh axis 'cp'; the axes are dp, tp"):
        c.axis_bandwidth({"dp": 32, "tp": 8}, "cp")


def test_links_overrides_read_the_mesh_as_a_slice_of_a_job() -> None:
    """dp=4 x tp=2 fits one node, but marking dp 'inter' says the mesh is a slice: every dp
    step changes node (the node's other chips run the same rings)."""
    sliced = Mesh({"dp": 4, "tp": 2}, hardware="a100-80g", links={"dp": "inter"})
    assert sliced.levels("dp") == ("inter-node",)
    assert sliced.axis_link("dp").flows == (8,)  # 4 other rails' rings x 2 tp ranks
    assert sliced.bandwidth("dp") == 25e9
    packed = Mesh({"dp": 4, "tp": 2}, hardware="a100-80g")
    assert packed.levels("dp") == ("intra-node",)


# ----- shared links -------------------------------------------------------------------------
NVLINK = Level("nvlink", 8, 300e9, 5e-6, rails=1, source="toy")
# A node with four 50 GB/s NICs shared by 8 chips: 25 GB/s per chip when all send.
FOUR_NICS = Level("ib", 64, 25e9, 10e-6, rails=4, source="toy")


def test_eight_dp_rings_out_of_a_tp8_node_share_its_nics() -> None:
    """Node NIC bandwidth 4 x 50 = 200 GB/s. Eight dp rings (one per tp rank) leave each
    node: 200 / 8 = 25 GB/s each. A single flat ring over dp x tp leaves each node once:
    it gets one whole NIC, 50 GB/s (min(50, 200 / 1))."""
    cluster = toy((NVLINK, FOUR_NICS))
    mesh = Mesh({"dp": 2, "tp": 8}, hardware=cluster)
    dp = mesh.axis_link("dp")
    assert dp.flows == (8,)
    assert dp.bandwidth_bytes_per_s == 200e9 / 8 == 25e9
    flat = mesh.axis_link(("dp", "tp"))
    assert flat.levels == ("nvlink", "ib") and flat.flows == (1, 1)
    assert flat.bandwidth_bytes_per_s == 50e9
    assert mesh.collective_time("all-reduce", GIB, ("dp", "tp"), "ring") == pytest.approx(
        ring_time("all-reduce", GIB, 16, 50e9, 10e-6), rel=1e-12
    )
    # dp=2 x tp=4: four rings leave each node (two dp members per node): 200 / 4 = 50
    assert Mesh({"dp": 4, "tp": 4}, hardware=cluster).axis_link("dp").bandwidth_bytes_per_s == (
        50e9
    )


def test_concurrent_collectives_on_other_axes_share_the_links_they_cross() -> None:
    """pp=2 x dp=2 x tp=8 on 8-chip nodes: 8 dp rings and 8 pp rings leave each node. Run
    together they are 16 flows on the 200 GB/s of NICs: 12.5 GB/s each, and a bandwidth-bound
    dp all-reduce takes twice as long. tp (NVLink only) shares nothing with them."""
    cluster = toy((NVLINK, FOUR_NICS))
    mesh = Mesh({"pp": 2, "dp": 2, "tp": 8}, hardware=cluster)
    alone = mesh.axis_link("dp")
    shared = mesh.axis_link("dp", concurrent=[("pp",)])
    assert (alone.flows, shared.flows) == ((8,), (16,))
    assert shared.bandwidth_bytes_per_s == 200e9 / 16 == 12.5e9
    t_alone = mesh.collective_time("all-reduce", GIB, ("dp",))
    t_shared = mesh.collective_time("all-reduce", GIB, ("dp",), concurrent=[("pp",)])
    assert t_shared == pytest.approx(ring_time("all-reduce", GIB, 2, 12.5e9, 10e-6), rel=1e-12)
    assert t_shared > 1.99 * t_alone
    assert mesh.axis_link("dp", concurrent=[("tp",)]) == alone


def test_oversubscribed_spine_divides_the_uplinks() -> None:
    """Leaf groups of 16 chips (two nodes), spine 4:1 oversubscribed. dp=8 x tp=8: 8 dp rings
    leave each leaf group through the spine; its aggregate uplink is 25e9 * 16 / 4 = 100e9,
    so 100e9 / 8 = 12.5e9 per ring (a NIC alone would give 25e9)."""
    leaf = Level("leaf", 16, 25e9, 10e-6, rails=8, source="toy")
    spine = Level("spine", 64, 25e9, 20e-6, rails=8, oversubscription=4.0, source="toy")
    mesh = Mesh({"dp": 8, "tp": 8}, hardware=toy((NVLINK, leaf, spine)))
    link = mesh.axis_link("dp")
    assert link.levels == ("leaf", "spine") and link.flows == (8, 8)
    assert link.bandwidth_bytes_per_s == 12.5e9
    assert link.latency_s == 20e-6  # the slowest level's alpha
    blocking = dataclasses.replace(spine, oversubscription=1.0)
    free = Mesh({"dp": 8, "tp": 8}, hardware=toy((NVLINK, leaf, blocking)))
    assert free.axis_link("dp").bandwidth_bytes_per_s == 25e9


def test_axis_link_function_matches_the_level_formula() -> None:
    level = Level("ib", 64, 25e9, 1e-5, rails=4)
    assert level.per_flow_bytes_per_s(8, 1) == 50e9  # one rail
    assert level.per_flow_bytes_per_s(8, 16) == 12.5e9  # 200e9 shared by 16
    link = axis_link((NVLINK, FOUR_NICS), (("dp", 2), ("tp", 8)), "tp")
    assert link == AxisLink(300e9, 5e-6, ("nvlink",), (1,))


# ----- errors -------------------------------------------------------------------------------
def superpod() -> dict:
    return json.loads((datasets_dir() / "hardware" / "dgx-h100-superpod.json").read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p["cluster"]["levels"][1].update(group_size=100),
         r"level 'ib-leaf' groups 100 chips, not a larger multiple of level 'nvlink'"),
        (lambda p: p["cluster"]["levels"][2].pop("source"),
         r"field 'cluster\.levels\[2\]\.source' is missing; expected a non-empty string citing"),
        (lambda p: p["cluster"]["levels"][0].update(bandwith_gb_per_s=1),
         r"field 'cluster\.levels\[0\]\.bandwith_gb_per_s' is not a known field"),
        (lambda p: p["cluster"]["levels"][2].update(oversubscription=0.5),
         r"field 'cluster\.levels\[2\]\.oversubscription' is 0\.5; expected a number >= 1"),
        (lambda p: p["cluster"]["levels"][1].update(rails=0),
         r"field 'cluster\.levels\[1\]\.rails' is 0; expected a positive integer"),
        (lambda p: p["cluster"].update(levels=[]),
         r"field 'cluster\.levels' is \[\]; expected a non-empty list"),
        (lambda p: p["cluster"].update(inter_node_bandwidth_gb_per_s=25),
         r"inter_node_bandwidth_bytes_per_s=25000000000\.0 disagrees with level 'ib-leaf'"),
        (lambda p: p["cluster"].update(max_nodes=200),
         r"outermost level 'ib-spine' groups 1024 chips but the cluster holds 1600; add an"),
        (lambda p: p["cluster"]["levels"][1].update(name="nvlink"),
         r"level name 'nvlink' appears twice"),
        (lambda p: p["cluster"].update(chips_per_node=4),
         r"no level of group_size 4 \(chips_per_node\)"),
    ],
)  # fmt: skip
def test_bad_level_json_is_a_named_error_naming_the_file(tmp_path, edit, message) -> None:
    profile = superpod()
    edit(profile)
    path = tmp_path / "dgx-h100-superpod.json"
    path.write_text(json.dumps(profile))
    with pytest.raises(HardwareError, match=message) as info:
        load_file(path)
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group_size": 0}, r"group_size=0 is not a positive int; give the chips in one group"),
        ({"rails": 2.5}, r"rails=2\.5 is not a positive int"),
        ({"bandwidth_bytes_per_s": -1.0}, r"bandwidth_bytes_per_s=-1\.0 is not a positive"),
        ({"latency_s": math.nan}, r"latency_s=nan is not a non-negative finite number"),
        ({"oversubscription": 0.5}, r"oversubscription=0\.5 is below 1; give downlink:uplink"),
        ({"name": ""}, r"Level name '' is not a non-empty string"),
    ],
)
def test_bad_level_is_a_named_error(kwargs, message) -> None:
    base = {"name": "ib", "group_size": 8, "bandwidth_bytes_per_s": 1e9, "latency_s": 1e-6}
    with pytest.raises(HardwareError, match=message):
        Level(**{**base, **kwargs})


def test_cluster_levels_must_agree_and_nest() -> None:
    with pytest.raises(HardwareError, match=r"link_levels=.* is not a tuple of Level"):
        dataclasses.replace(load("a100-80g"), link_levels="nvlink")  # type: ignore[arg-type]
    explicit = load("dgx-h100-superpod")
    with pytest.raises(HardwareError, match=r"disagrees with level 'ib-leaf'.*change both"):
        dataclasses.replace(explicit, inter_node_bandwidth_bytes_per_s=1e9)
    with pytest.raises(HardwareError, match=r"levels holds 'nvlink'; expected Level objects"):
        dataclasses.replace(explicit, link_levels=("nvlink",))  # type: ignore[arg-type]


# ----- the training step model sees the topology --------------------------------------------
def test_training_dp_comm_pays_for_an_oversubscribed_spine() -> None:
    """gpt3-1.3b, dp=8 x tp=8 on 64 A100s in leaf groups of two nodes: each dp ring crosses
    the spine, 8 rings per leaf group. A 4:1 spine gives each 25e9 * 16 / 4 / 8 = 12.5e9
    instead of 25e9: the all-reduce's bandwidth term doubles, its latency term
    L = 2 (n - 1) alpha / bandwidth_efficiency does not, so dp-comm(4:1) = 2 dp-comm(1:1) - L.
    Tensor parallelism stays on NVLink and does not move."""
    a100 = load("a100-80g")

    def pod(over: float) -> Cluster:
        spine = Level("spine", 64, 25e9, 10e-6, rails=8, oversubscription=over, source="toy")
        levels = (NVLINK, Level("leaf", 16, 25e9, 10e-6, rails=8, source="toy"), spine)
        return Cluster("toy-pod", a100.chip, 8, 300e9, 5e-6, 25e9, 10e-6, 8, "toy",
                       link_levels=levels)  # fmt: skip

    params = TrainingParams()
    params = dataclasses.replace(
        params,
        grad_overlap_fraction=0.0,
        cost=dataclasses.replace(params.cost, grad_comm_overlap=0.0),
    )
    par = ex.ParallelConfig(dp=8, tp=8, microbatch_size=1)
    free, tight = (
        dict(ex.simulate("gpt3-1.3b", par, pod(o), 64, 2048, params).time_by_kind)
        for o in (1.0, 4.0)
    )
    latency = 2 * (8 - 1) * 10e-6 / params.cost.bandwidth_efficiency
    assert tight["dp-comm"] == pytest.approx(2 * free["dp-comm"] - latency, rel=1e-9)
    assert tight["tp-comm"] == free["tp-comm"]
    # non-blocking, the pod prices dp exactly as the two-level a100-80g profile does
    flat = dict(ex.simulate("gpt3-1.3b", par, "a100-80g", 64, 2048, params).time_by_kind)
    assert free["dp-comm"] == pytest.approx(flat["dp-comm"], rel=1e-12)


def test_hierarchical_collective_on_three_levels_uses_each_phase_link() -> None:
    """dp=4 x tp=8 on the H100 SuperPOD, auto: reduce-scatter over NVLink (8 GPUs, 450e9,
    5 us), all-reduce of 1/8 of the buffer over the leaf (4 nodes, 50e9, 10 us), all-gather
    over NVLink."""
    mesh = Mesh({"dp": 4, "tp": 8}, hardware="dgx-h100-superpod")
    want = (
        ring_time("reduce-scatter", GIB, 8, 450e9, 5e-6)
        + ring_time("all-reduce", GIB / 8, 4, 50e9, 10e-6)
        + ring_time("all-gather", GIB, 8, 450e9, 5e-6)
    )
    assert mesh.collective_time("all-reduce", GIB, ("dp", "tp")) == pytest.approx(want, rel=1e-12)
    with pytest.raises(MeshError, match=r"unknown mesh axis 'cp'; this mesh has axes dp, tp"):
        mesh.collective_time("all-reduce", GIB, ("dp",), concurrent=[("cp",)])
