"""Tests for explorer.hardware: catalog, Chip/Cluster, Mesh placement and groups, collectives.

Profiles are checked against the published figures their sources cite (datasheets, in the
units the datasheet uses); collectives against facts that hold independently of the
formulas: a ring all-reduce is a reduce-scatter followed by an all-gather, nccl-tests' bus
bandwidth of a latency-free ring equals the link bandwidth, a tree beats a ring on small
buffers over many devices and loses on large ones, times grow with size and group and
shrink with bandwidth, a two-level collective on one level is that level's ring.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from explorer.hardware import (
    Chip,
    Cluster,
    CollectiveKind,
    HardwareError,
    Mesh,
    MeshError,
    bytes_sent_per_device,
    hierarchical_time,
    load,
    load_file,
    names,
    resolve,
    ring_time,
    tree_time,
)
from explorer.hardware.catalog import datasets_dir

GIB = 1073741824  # 2**30
CATALOG = (
    "a100-40g",
    "a100-80g",
    "ascend-910",
    "ascend-910b",
    "ascend-910c",
    "b200",
    "dgx-a100-superpod",
    "dgx-h100-2dc",
    "dgx-h100-superpod",
    "gb200-nvl72",
    "h100-hbm2e-96g",
    "h100-sxm",
    "h200",
    "mi300x",
    "tpu-v4",
    "tpu-v5p",
    "v100-32g",
)


def toy_cluster(chips_per_node: int = 8, max_nodes: int = 4) -> Cluster:
    chip = Chip("toy", {"bf16": 1e14}, memory_bytes=16 * GIB, memory_bandwidth_bytes_per_s=1e12)
    return Cluster(
        name="toy",
        chip=chip,
        chips_per_node=chips_per_node,
        intra_node_bandwidth_bytes_per_s=100e9,
        intra_node_latency_s=1e-6,
        inter_node_bandwidth_bytes_per_s=10e9,
        inter_node_latency_s=10e-6,
        max_nodes=max_nodes,
        source="made up for tests",
    )


def a100_profile() -> dict:
    return json.loads((datasets_dir() / "hardware" / "a100-80g.json").read_text())


# ----- catalog ------------------------------------------------------------------------------
def test_catalog_names() -> None:
    assert names() == CATALOG


@pytest.mark.parametrize("name", CATALOG)
def test_every_profile_loads_with_a_source(name: str) -> None:
    cluster = load(name)
    assert cluster.name == name
    assert len(cluster.source) > 20
    assert cluster.chip.dtypes
    assert cluster.chip.memory_bytes > 8 * GIB
    assert cluster.intra_node_bandwidth_bytes_per_s >= cluster.inter_node_bandwidth_bytes_per_s
    assert cluster.capacity == cluster.chips_per_node * cluster.max_nodes


# Published per-GPU figures, in the datasheet's own units, as each profile's source cites
# them: dense bf16/fp16 TFLOP/s, HBM GB/s, NVLink GB/s (both directions summed), NIC Gb/s
# and NICs per GPU. The profile stores one direction in bytes/s.
PUBLISHED = {
    "a100-40g": ("bf16", 312, 1555, 600, 200, 1),
    "a100-80g": ("bf16", 312, 2039, 600, 200, 1),
    "h100-sxm": ("bf16", 1979 / 2, 3350, 900, 400, 1),  # 1,979 is the 2:4-sparse figure
    "h200": ("bf16", 1979 / 2, 4800, 900, 400, 1),
    "v100-32g": ("fp16", 125, 900, 300, 100, 4 / 8),  # DGX-1: 4 EDR NICs for 8 GPUs
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_profiles_match_their_published_figures(name: str) -> None:
    dtype, tflops, hbm_gb_s, nvlink_gb_s, nic_gbit_s, nics = PUBLISHED[name]
    cluster = load(name)
    assert cluster.chip.peak_flops(dtype) == pytest.approx(tflops * 1e12, rel=1e-3)
    assert cluster.chip.memory_bandwidth_bytes_per_s == hbm_gb_s * 1e9
    assert cluster.intra_node_bandwidth_bytes_per_s == nvlink_gb_s / 2 * 1e9
    assert cluster.inter_node_bandwidth_bytes_per_s == nic_gbit_s * nics * 1e9 / 8
    # the profile's source cites the figures it was built from
    assert f"NVLink {nvlink_gb_s} GB/s" in cluster.source
    assert f"{nic_gbit_s} Gb/s" in cluster.source


def test_a100_80g_is_80_gib_and_prints_its_figures() -> None:
    a100 = load("a100-80g")
    assert a100.chip.memory_bytes == 80 * GIB  # 81920 MiB (profile notes)
    assert a100.chips_per_node == 8  # DGX A100
    assert str(a100.chip) == "NVIDIA A100 SXM4 80GB (312 TFLOP/s bf16, 80 GiB, 2039 GB/s)"


def test_profiles_are_hashable_values() -> None:
    assert load("a100-80g") == load("a100-80g")
    assert hash(load("a100-80g")) == hash(load("a100-80g"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        load("a100-80g").max_nodes = 1  # type: ignore[misc]


def test_peak_flops_unknown_dtype_names_chip_and_dtypes() -> None:
    with pytest.raises(HardwareError, match=r"'NVIDIA Tesla V100 SXM2 32GB'.*fp32, fp16"):
        load("v100-32g").chip.peak_flops("bf16")


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(HardwareError, match=r"did you mean 'a100-80g'.*known profiles: a100-40g"):
        load("a100-80")
    with pytest.raises(HardwareError, match="known profiles"):
        load("cerebras")


def test_resolve_passes_clusters_through() -> None:
    toy = toy_cluster()
    assert resolve(toy) is toy
    assert resolve("tpu-v4") == load("tpu-v4")
    with pytest.raises(HardwareError, match="profile name"):
        resolve(42)  # type: ignore[arg-type]


def test_datasets_env_override(tmp_path, monkeypatch) -> None:
    (tmp_path / "hardware").mkdir()
    profile = a100_profile() | {"name": "mine"}
    (tmp_path / "hardware" / "mine.json").write_text(json.dumps(profile))
    monkeypatch.setenv("EXPLORER_DATASETS", str(tmp_path))
    assert names() == ("mine",)
    assert load("mine").chip.peak_flops("bf16") == 312e12


def test_name_must_match_file_stem(tmp_path, monkeypatch) -> None:
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "mine.json").write_text(json.dumps(a100_profile()))
    monkeypatch.setenv("EXPLORER_DATASETS", str(tmp_path))
    with pytest.raises(HardwareError, match=r"field 'name' is 'a100-80g'; expected 'mine'"):
        load("mine")


def test_malformed_json_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x",\n "source": }')
    with pytest.raises(HardwareError, match=r"broken\.json: malformed JSON at line 2"):
        load_file(path)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(HardwareError, match=r"nothere\.json: cannot read"):
        load_file(tmp_path / "nothere.json")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p["chip"].pop("memory_gib"), r"field 'chip\.memory_gib' is missing"),
        (lambda p: p.pop("source"), r"field 'source' is missing; expected a non-empty string"),
        (
            lambda p: p["cluster"].pop("inter_node_latency_us"),
            r"field 'cluster\.inter_node_latency_us' is missing; expected a non-negative number",
        ),
        (
            lambda p: p["cluster"].update(chips_per_node=8.5),
            r"field 'cluster\.chips_per_node' is 8\.5; expected a positive integer",
        ),
        (
            lambda p: p["chip"]["peak_tflops"].update(bf16="312"),
            r"field 'chip\.peak_tflops\.bf16' is '312'; expected a positive number \(TFLOP/s\)",
        ),
        (
            lambda p: p["chip"]["peak_tflops"].update(fp4=1000),
            r"field 'chip\.peak_tflops\.fp4' is not a known field",
        ),
        (
            lambda p: p["cluster"].update(intra_node_bandwidth_gbps=300),
            r"field 'cluster\.intra_node_bandwidth_gbps' is not a known field",
        ),
        (
            lambda p: p["chip"].update(memory_gb=80),
            r"field 'chip\.memory_gib' and 'chip\.memory_gb' are both given",
        ),
        (lambda p: p.update(chip=[1]), r"field 'chip' is list; expected a JSON object"),
    ],
)
def test_bad_field_names_file_field_and_expectation(tmp_path, edit, message) -> None:
    profile = a100_profile()
    edit(profile)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile))
    with pytest.raises(HardwareError, match=r"bad\.json: " + message):
        load_file(path)


def test_memory_gb_is_decimal(tmp_path) -> None:
    profile = a100_profile()
    profile["chip"].pop("memory_gib")
    profile["chip"]["memory_gb"] = 80
    path = tmp_path / "gb.json"
    path.write_text(json.dumps(profile))
    assert load_file(path).chip.memory_bytes == 80_000_000_000


def test_chip_and_cluster_validate() -> None:
    with pytest.raises(HardwareError, match="unknown dtype 'fp64'"):
        Chip("x", {"fp64": 1e12}, GIB, 1e11)
    with pytest.raises(HardwareError, match="memory_bytes must be a positive int"):
        Chip("x", {"bf16": 1e12}, 0, 1e11)
    with pytest.raises(HardwareError, match="chips_per_node must be a positive int"):
        dataclasses.replace(toy_cluster(), chips_per_node=0)
    with pytest.raises(HardwareError, match="unknown link level 'fast'"):
        toy_cluster().bandwidth("fast")  # type: ignore[arg-type]


# ----- collectives --------------------------------------------------------------------------
KINDS_RING = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
sizes = st.floats(0, 1e12, allow_nan=False)
groups = st.integers(1, 4096)
bandwidths = st.floats(1e6, 1e13, allow_nan=False)
latencies = st.floats(0, 1e-3, allow_nan=False)


@given(size=sizes, n=groups)
def test_all_reduce_bytes_are_reduce_scatter_plus_all_gather(size, n) -> None:
    ar = bytes_sent_per_device("all-reduce", size, n)
    rs = bytes_sent_per_device("reduce-scatter", size, n)
    assert ar == pytest.approx(rs + bytes_sent_per_device("all-gather", size, n))
    assert 0 <= rs <= size and ar <= 2 * size  # never more than the whole buffer (twice)
    for kind in CollectiveKind:
        assert bytes_sent_per_device(kind, size, 1) == 0.0


@given(size=sizes, n=groups, bw=bandwidths, alpha=latencies)
def test_ring_all_reduce_is_reduce_scatter_then_all_gather(size, n, bw, alpha) -> None:
    ar = ring_time("all-reduce", size, n, bw, alpha)
    rs = ring_time("reduce-scatter", size, n, bw, alpha)
    ag = ring_time("all-gather", size, n, bw, alpha)
    assert rs == pytest.approx(ag)  # the two halves are mirror images
    assert ar == pytest.approx(rs + ag)


@given(n=st.integers(2, 4096), bw=bandwidths)
def test_latency_free_ring_runs_at_bus_bandwidth(n, bw) -> None:
    """nccl-tests (PERFORMANCE.md): busbw = algbw * 2(n-1)/n for all-reduce and
    algbw * (n-1)/n for all-gather / reduce-scatter, equal to the link speed when the ring
    is bandwidth-bound."""
    size = 2.0**30
    algbw = size / ring_time("all-reduce", size, n, bw, 0.0)
    assert algbw * 2 * (n - 1) / n == pytest.approx(bw)
    algbw = size / ring_time("all-gather", size, n, bw, 0.0)
    assert algbw * (n - 1) / n == pytest.approx(bw)


@given(
    kind=st.sampled_from(KINDS_RING), size=sizes, n=st.integers(2, 512), bw=bandwidths,
    alpha=latencies,
)  # fmt: skip
def test_ring_time_is_monotone(kind, size, n, bw, alpha) -> None:
    t = ring_time(kind, size, n, bw, alpha)
    assert ring_time(kind, size * 2, n, bw, alpha) >= t
    assert ring_time(kind, size, n + 1, bw, alpha) >= t
    assert ring_time(kind, size, n, bw * 2, alpha) <= t
    assert ring_time(kind, size, n, bw, alpha * 2) >= t
    assert ring_time(kind, size, 1, bw, alpha) == 0.0


def test_send_recv_is_one_hop() -> None:
    one = ring_time("send/recv", 1e9, 2, 25e9, 10e-6)
    assert one == pytest.approx(ring_time("send/recv", 1e9, 64, 25e9, 10e-6))  # any group
    assert one == pytest.approx(ring_time("send/recv", 0, 2, 25e9, 10e-6) + 1e9 / 25e9)


def test_tree_beats_ring_on_small_buffers_and_loses_on_large() -> None:
    """Why NCCL uses trees for small all-reduces: the tree's latency is logarithmic in n,
    the ring's linear; the ring sends 2(n-1)/n of the buffer, the tree all of it twice, so
    the ring wins once the buffer is large enough to be bandwidth-bound."""
    bw, alpha = 25e9, 10e-6
    for n in (8, 1024):
        assert tree_time("all-reduce", 1e3, n, bw, alpha) < ring_time(
            "all-reduce", 1e3, n, bw, alpha
        )
    assert tree_time("all-reduce", 1e10, 8, bw, alpha) > ring_time("all-reduce", 1e10, 8, bw, alpha)
    # doubling the group adds one level (two latency steps) to a tree
    step = tree_time("all-reduce", 0, 2048, bw, alpha) - tree_time("all-reduce", 0, 1024, bw, alpha)
    assert step == pytest.approx(2 * alpha)
    assert tree_time("all-reduce", 1e9, 1, bw, alpha) == 0.0
    with pytest.raises(ValueError, match="no tree algorithm for all-gather"):
        tree_time("all-gather", 1e9, 8, 100e9, 1e-6)


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather", "reduce-scatter"])
def test_two_levels_on_one_level_is_that_levels_ring(kind) -> None:
    intra, inter = (100e9, 1e-6), (10e9, 10e-6)
    size = 8e9
    assert hierarchical_time(kind, size, 8, 1, intra, inter) == pytest.approx(
        ring_time(kind, size, 8, *intra)
    )
    assert hierarchical_time(kind, size, 1, 8, intra, inter) == pytest.approx(
        ring_time(kind, size, 8, *inter)
    )


def test_two_level_all_reduce_is_its_three_rings() -> None:
    """Reduce-scatter in the node, all-reduce of one shard across nodes, all-gather in the
    node (the NCCL/Horovod hierarchical all-reduce)."""
    intra, inter = (100e9, 1e-6), (10e9, 10e-6)
    size = 8e9
    want = (
        ring_time("reduce-scatter", size, 4, *intra)
        + ring_time("all-reduce", size / 4, 2, *inter)
        + ring_time("all-gather", size, 4, *intra)
    )
    assert hierarchical_time("all-reduce", size, 4, 2, intra, inter) == pytest.approx(want)
    # all-to-all regroups inside the node first, so it sends more than a direct exchange
    a2a = hierarchical_time("all-to-all", size, 4, 2, (1.0, 0.0), (1.0, 0.0))
    assert a2a > bytes_sent_per_device("all-to-all", size, 8)
    with pytest.raises(ValueError, match="send/recv has no hierarchical form"):
        hierarchical_time("send/recv", size, 4, 2, intra, inter)


@given(
    n_intra=st.integers(1, 16),
    n_inter=st.integers(1, 16),
    chunks=st.integers(1, 1000),
    kind=st.sampled_from(["all-reduce", "all-gather", "reduce-scatter"]),
)
def test_hierarchical_sends_the_same_bytes_as_a_ring(n_intra, n_inter, chunks, kind) -> None:
    """With B = 1 B/s and alpha = 0, time equals the bytes on the busiest link path."""
    n = n_intra * n_inter
    size = n * chunks
    got = hierarchical_time(kind, size, n_intra, n_inter, (1.0, 0.0), (1.0, 0.0))
    assert got == pytest.approx(bytes_sent_per_device(kind, size, n))


def test_bad_collective_inputs() -> None:
    with pytest.raises(ValueError, match=r"unknown collective kind 'allreduce'.*'all-reduce'"):
        ring_time("allreduce", 1, 2, 1e9, 0.0)
    with pytest.raises(ValueError, match="group size n must be a positive int"):
        ring_time("all-reduce", 1, 0, 1e9, 0.0)
    with pytest.raises(ValueError, match="size_bytes must be a non-negative"):
        ring_time("all-reduce", -1, 2, 1e9, 0.0)
    with pytest.raises(ValueError, match="bandwidth must be a positive"):
        ring_time("all-reduce", 1, 2, 0.0, 0.0)


# ----- mesh ---------------------------------------------------------------------------------
def test_default_placement_dp4_tp8() -> None:
    mesh = Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    assert mesh.link("tp") == "intra"
    assert mesh.link("dp") == "inter"
    assert mesh.bandwidth("tp") == 300e9
    assert mesh.bandwidth("dp") == 25e9
    assert mesh.latency("dp") == 10e-6
    assert str(mesh) == "Mesh(dp=4 [inter], tp=8 [intra]) on a100-80g"


def test_default_placement_three_axes() -> None:
    mesh = Mesh({"dp": 2, "pp": 2, "tp": 2}, hardware="a100-80g")
    assert [mesh.link(a) for a in mesh.axis_names] == ["intra", "intra", "intra"]
    # TPU v4 hosts hold 4 chips: tp (2) and pp (2*2 = 4) fit, dp (8) does not.
    mesh = Mesh({"dp": 2, "pp": 2, "tp": 2}, hardware="tpu-v4")
    assert [mesh.link(a) for a in mesh.axis_names] == ["inter", "intra", "intra"]


def test_mesh_shape_devices_coords() -> None:
    mesh = Mesh((("dp", 2), ("tp", 4)))
    assert mesh.axis_names == ("dp", "tp")
    assert mesh.shape == (2, 4)
    assert mesh.size == 8
    assert mesh.axis_size("tp") == 4
    assert mesh.devices.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert not mesh.devices.flags.writeable
    assert mesh.coords(6) == (1, 2)
    with pytest.raises(MeshError, match="device 8 is not in mesh"):
        mesh.coords(8)
    with pytest.raises(MeshError, match="unknown mesh axis 'pp'; this mesh has axes dp, tp"):
        mesh.axis_size("pp")


def test_groups_2x4() -> None:
    mesh = Mesh({"dp": 2, "tp": 4})
    assert mesh.groups(("tp",)) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert mesh.groups(("dp",)) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert mesh.groups(("dp", "tp")) == ((0, 1, 2, 3, 4, 5, 6, 7),)
    assert mesh.groups(("tp", "dp")) == ((0, 1, 2, 3, 4, 5, 6, 7),)
    assert mesh.groups(()) == tuple((d,) for d in range(8))
    assert mesh.groups("tp") == mesh.groups(("tp",))
    with pytest.raises(MeshError, match="more than once"):
        mesh.groups(("tp", "tp"))


def test_groups_3d() -> None:
    mesh = Mesh({"dp": 2, "pp": 2, "tp": 2})
    assert mesh.groups(("pp",)) == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert mesh.groups(("dp", "tp")) == ((0, 1, 4, 5), (2, 3, 6, 7))


@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_groups_partition_the_devices(sizes, data) -> None:
    axes = {f"a{i}": size for i, size in enumerate(sizes)}
    mesh = Mesh(axes)
    chosen = data.draw(st.lists(st.sampled_from(list(axes)), unique=True))
    groups = mesh.groups(tuple(chosen))
    assert sorted(d for g in groups for d in g) == list(range(mesh.size))
    assert {len(g) for g in groups} == {math.prod(axes[a] for a in chosen)}
    for group in groups:  # members differ only along the chosen axes
        kept = [i for i, name in enumerate(mesh.axis_names) if name not in chosen]
        assert len({tuple(mesh.coords(d)[i] for i in kept) for d in group}) == 1


def test_link_overrides() -> None:
    mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g", links={"dp": "intra", "tp": "inter"})
    assert (mesh.link("dp"), mesh.link("tp")) == ("intra", "inter")
    with pytest.raises(MeshError, match=r"axes dp, tp are placed on intra-node links but span 16"):
        Mesh({"dp": 2, "tp": 8}, hardware="a100-80g", links={"dp": "intra"})
    with pytest.raises(MeshError, match="more than the 8 chips per node of a100-80g"):
        Mesh({"dp": 2, "tp": 8}, hardware="a100-80g", links={"dp": "intra"})
    with pytest.raises(MeshError, match="links names unknown axis 'pp'"):
        Mesh({"dp": 2, "tp": 8}, hardware="a100-80g", links={"pp": "inter"})
    with pytest.raises(MeshError, match=r"links\['dp'\] is 'nvlink'; expected one of intra"):
        Mesh({"dp": 2, "tp": 8}, hardware="a100-80g", links={"dp": "nvlink"})


def test_mesh_larger_than_its_cluster_extends_it() -> None:
    """A profile's size is not a ceiling: the mesh's cluster grows (Cluster.extended), and
    says so; a cluster with no link between nodes cannot grow and the mesh is refused."""
    mesh = Mesh({"dp": 8, "tp": 8}, hardware=toy_cluster(chips_per_node=8, max_nodes=4))
    assert (mesh.hardware.max_nodes, mesh.hardware.extended_from) == (8, 4)
    assert str(mesh).endswith("on toy (extended from 4 to 8 nodes over its outermost level "
                              "'inter-node')")  # fmt: skip
    node = toy_cluster(chips_per_node=8, max_nodes=1)
    one_level = dataclasses.replace(node, link_levels=node.levels)  # the node level alone
    with pytest.raises(MeshError, match=r"has 64 devices but toy holds at most 8 .*cannot be "
                                        r"extended.*shrink"):  # fmt: skip
        Mesh({"dp": 8, "tp": 8}, hardware=one_level)


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({}, "mesh has no axes"),
        ((), "mesh has no axes"),
        ({"dp": 0}, r"axis 'dp' has size 0; sizes must be positive ints"),
        ({"dp": -2}, r"axis 'dp' has size -2"),
        ({"dp": 2.0}, r"axis 'dp' has size 2\.0"),
        ({"dp": True}, r"axis 'dp' has size True"),
        ({"d-p": 2}, r"axis name 'd-p' is not a Python identifier"),
        ({"1dp": 2}, r"axis name '1dp' is not a Python identifier"),
        ({"": 2}, r"axis name '' is not a Python identifier"),
        ((("dp", 2), ("dp", 4)), r"axis 'dp' appears twice"),
        ("dp", "mesh axes must be a dict"),
        ((("dp", 2, 3),), r"is not a \(name, size\) pair"),
    ],
)
def test_bad_mesh_axes(axes, message) -> None:
    with pytest.raises(MeshError, match=message):
        Mesh(axes)


def test_logical_mesh_has_no_links() -> None:
    mesh = Mesh({"dp": 2, "tp": 4})
    assert str(mesh) == "Mesh(dp=2, tp=4)"
    with pytest.raises(MeshError, match=r"has no link level: the mesh has no hardware"):
        mesh.link("dp")
    with pytest.raises(MeshError, match="needs hardware"):
        mesh.collective_time("all-reduce", GIB, ("tp",))
    assert mesh.collective_bytes("all-reduce", 1024, ("tp",)) == bytes_sent_per_device(
        "all-reduce", 1024, 4
    )


def test_mesh_value_semantics() -> None:
    a = Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    b = Mesh((("dp", 4), ("tp", 8)), hardware=load("a100-80g"))
    assert a == b and hash(a) == hash(b)
    assert a != Mesh({"tp": 8, "dp": 4}, hardware="a100-80g")
    assert a != Mesh({"dp": 4, "tp": 8}, hardware="h100-sxm")
    assert {a: 1}[b] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.axes = ()  # type: ignore[misc]
    assert repr(a).startswith("Mesh({'dp': 4, 'tp': 8}, hardware=Cluster(name='a100-80g'")
    assert repr(a).endswith("links={'dp': 'inter', 'tp': 'intra'})")


def test_mesh_collective_time_one_axis_is_ring() -> None:
    """One axis: a ring at the link that axis is placed on (NVLink for tp, the NIC for dp)."""
    mesh = Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    a100 = load("a100-80g")
    for axis, n, level in (("tp", 8, "intra"), ("dp", 4, "inter")):
        link = (a100.bandwidth(level), a100.latency(level))
        for kind in KINDS_RING:
            got = mesh.collective_time(kind, GIB, (axis,))
            assert got == pytest.approx(ring_time(kind, GIB, n, *link), rel=1e-12)
    assert mesh.collective_time("all-reduce", GIB, ("tp",)) < mesh.collective_time(
        "all-reduce", GIB, ("dp",)
    )
    assert mesh.collective_time("all-reduce", GIB, ()) == 0.0


def test_hierarchical_beats_ring_on_two_nodes() -> None:
    mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g")
    both = ("dp", "tp")
    ring = mesh.collective_time("all-reduce", GIB, both, algorithm="ring")
    hier = mesh.collective_time("all-reduce", GIB, both, "hierarchical")
    assert hier < ring / 5  # only 1/8 of the buffer crosses the slow NIC
    assert mesh.collective_time("all-reduce", GIB, both) == hier  # auto picks it
    # the flat ring runs all 16 GPUs at the NIC's speed
    assert ring == pytest.approx(ring_time("all-reduce", GIB, 16, 25e9, 10e-6), rel=1e-12)
    # and both send the same bytes per device
    assert mesh.collective_bytes("all-reduce", GIB, both) == bytes_sent_per_device(
        "all-reduce", GIB, 16
    )


def test_mesh_collective_options() -> None:
    mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g")
    inter = (25e9, 10e-6)  # the slowest link any step of a 16-GPU group crosses
    tree = mesh.collective_time("all-reduce", GIB, ("dp", "tp"), "tree")
    assert tree == pytest.approx(tree_time("all-reduce", GIB, 16, *inter), rel=1e-12)
    # send/recv across nodes under auto: one hop on the inter-node link
    hop = mesh.collective_time("send/recv", 25e6, ("dp", "tp"))
    assert hop == pytest.approx(ring_time("send/recv", 25e6, 2, *inter), rel=1e-12)
    with pytest.raises(MeshError, match="unknown algorithm 'nccl'; expected one of auto, ring"):
        mesh.collective_time("all-reduce", GIB, ("tp",), algorithm="nccl")  # type: ignore[arg-type]
    with pytest.raises(MeshError, match="unknown mesh axis 'ep'"):
        mesh.collective_time("all-reduce", GIB, ("ep",))
