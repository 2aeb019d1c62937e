"""Tests for explorer.hardware: catalog, Chip/Cluster, Mesh placement and groups, collectives.

Expected times are written out as literal arithmetic (worked by hand), not by calling the
formula under test.
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
    "h100-sxm",
    "h200",
    "tpu-v4",
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


def test_a100_80g_numbers() -> None:
    a100 = load("a100-80g")
    assert a100.chip.peak_flops("bf16") == 312e12
    assert a100.chip.peak_flops("fp32") == 19.5e12
    assert a100.chip.memory_bytes == 80 * GIB
    assert a100.chip.memory_bandwidth_bytes_per_s == 2039e9
    assert a100.chips_per_node == 8
    assert a100.intra_node_bandwidth_bytes_per_s == 300e9
    assert a100.inter_node_bandwidth_bytes_per_s == 25e9
    assert a100.intra_node_latency_s == 5e-6
    assert str(a100.chip) == "NVIDIA A100 SXM4 80GB (312 TFLOP/s bf16, 80 GiB, 2039 GB/s)"


def test_h100_dense_not_sparse() -> None:
    assert load("h100-sxm").chip.peak_flops("bf16") == 989.4e12
    assert load("h100-sxm").chip.peak_flops("fp8") == 1978.9e12


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
    with pytest.raises(HardwareError, match="memory_bytes must be positive"):
        Chip("x", {"bf16": 1e12}, 0, 1e11)
    with pytest.raises(HardwareError, match="chips_per_node must be a positive int"):
        dataclasses.replace(toy_cluster(), chips_per_node=0)
    with pytest.raises(HardwareError, match="unknown link level 'fast'"):
        toy_cluster().bandwidth("fast")  # type: ignore[arg-type]


# ----- collectives --------------------------------------------------------------------------
def test_bytes_sent_per_device_exact() -> None:
    assert bytes_sent_per_device("all-reduce", 1024, 8) == 1792.0  # 2 * 7/8 * 1024
    assert bytes_sent_per_device("all-gather", 1024, 4) == 768.0  # 3/4 * 1024
    assert bytes_sent_per_device("reduce-scatter", 1024, 4) == 768.0
    assert bytes_sent_per_device("all-to-all", 1000, 10) == 900.0
    assert bytes_sent_per_device("send/recv", 1000, 2) == 1000.0
    for kind in CollectiveKind:
        assert bytes_sent_per_device(kind, 1000, 1) == 0.0


def test_ring_all_reduce_1gib_on_8_devices() -> None:
    # 14 steps of 5 us, plus 2 * 7/8 * 1073741824 B = 1879048192 B at 300 GB/s.
    expected = 14 * 5e-6 + 1879048192 / 300e9
    assert expected == pytest.approx(6.333494e-3, rel=1e-6)
    got = ring_time(CollectiveKind.ALL_REDUCE, GIB, 8, bandwidth=300e9, latency=5e-6)
    assert got == pytest.approx(expected, rel=1e-12)


def test_ring_other_kinds() -> None:
    # 7 steps of 5 us + 7/8 * 1073741824 = 939524096 B at 300 GB/s
    for kind in ("all-gather", "reduce-scatter", "all-to-all"):
        got = ring_time(kind, GIB, 8, 300e9, 5e-6)
        assert got == pytest.approx(7 * 5e-6 + 939524096 / 300e9, rel=1e-12)
    assert ring_time("send/recv", 1e9, 2, 25e9, 10e-6) == pytest.approx(10e-6 + 0.04)
    assert ring_time("all-reduce", GIB, 1, 300e9, 5e-6) == 0.0


def test_tree_all_reduce() -> None:
    # ceil(log2 8) = 3 -> 6 latency steps; whole buffer up and down: 2 * 1e9 B at 100 GB/s.
    assert tree_time("all-reduce", 1e9, 8, 100e9, 1e-6) == pytest.approx(6e-6 + 0.02)
    # ceil(log2 5) = 3
    assert tree_time("all-reduce", 0, 5, 100e9, 1e-6) == pytest.approx(6e-6)
    with pytest.raises(ValueError, match="no tree algorithm for all-gather"):
        tree_time("all-gather", 1e9, 8, 100e9, 1e-6)


def test_hierarchical_formulas() -> None:
    intra, inter = (100e9, 1e-6), (10e9, 10e-6)
    s = 8e9  # 4 devices per node, 2 nodes
    # RS intra on 8e9: 3*1us + 6e9/100e9 ; AR inter on 2e9: 2*10us + 2e9/10e9 ; AG intra = RS
    assert hierarchical_time("all-reduce", s, 4, 2, intra, inter) == pytest.approx(
        2 * (3e-6 + 0.06) + (20e-6 + 0.2)
    )
    # AG inter on output 2e9: 10us + 1e9/10e9 ; AG intra on 8e9: 3us + 6e9/100e9
    assert hierarchical_time("all-gather", s, 4, 2, intra, inter) == pytest.approx(
        10e-6 + 0.1 + 3e-6 + 0.06
    )
    assert hierarchical_time("reduce-scatter", s, 4, 2, intra, inter) == pytest.approx(
        3e-6 + 0.06 + 10e-6 + 0.1
    )
    # A2A intra on 8e9: 3us + 6e9/100e9 ; A2A inter on 8e9: 10us + 4e9/10e9
    assert hierarchical_time("all-to-all", s, 4, 2, intra, inter) == pytest.approx(
        3e-6 + 0.06 + 10e-6 + 0.4
    )
    with pytest.raises(ValueError, match="send/recv has no hierarchical form"):
        hierarchical_time("send/recv", s, 4, 2, intra, inter)


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


def test_mesh_too_big_for_cluster() -> None:
    with pytest.raises(MeshError, match=r"has 64 devices but toy holds at most 32 .*shrink"):
        Mesh({"dp": 8, "tp": 8}, hardware=toy_cluster(chips_per_node=8, max_nodes=4))


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
    assert mesh.collective_bytes("all-reduce", 1024, ("tp",)) == 1536.0  # 2 * 3/4 * 1024


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
    mesh = Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    # tp: 14 * 5 us + 1879048192 B / 300 GB/s
    assert mesh.collective_time("all-reduce", GIB, ("tp",)) == pytest.approx(
        14 * 5e-6 + 1879048192 / 300e9
    )
    # dp: 6 * 10 us + 2 * 3/4 * 2**30 = 1610612736 B / 25 GB/s
    assert mesh.collective_time("all-reduce", GIB, ("dp",)) == pytest.approx(
        6 * 10e-6 + 1610612736 / 25e9
    )
    assert mesh.collective_time("all-reduce", GIB, ()) == 0.0


def test_hierarchical_beats_ring_on_two_nodes() -> None:
    mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g")
    both = ("dp", "tp")
    # Flat ring over 16 GPUs at the inter-node link: 30 * 10 us + 2 * 15/16 * 2**30 / 25e9.
    ring = 30 * 10e-6 + 2013265920 / 25e9
    assert mesh.collective_time("all-reduce", GIB, both, algorithm="ring") == pytest.approx(ring)
    # RS intra (7 * 5 us + 939524096 / 300e9), AR inter on 2**27 (2 * 10 us + 134217728 / 25e9),
    # AG intra (same as RS).
    hier = 2 * (7 * 5e-6 + 939524096 / 300e9) + (2 * 10e-6 + 134217728 / 25e9)
    assert mesh.collective_time("all-reduce", GIB, both, "hierarchical") == pytest.approx(hier)
    assert mesh.collective_time("all-reduce", GIB, both) == pytest.approx(hier)  # auto
    assert hier == pytest.approx(11.722203e-3, rel=1e-6)
    assert ring == pytest.approx(80.830637e-3, rel=1e-6)
    assert mesh.collective_bytes("all-reduce", GIB, both) == 2013265920.0


def test_mesh_collective_options() -> None:
    mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g")
    # tree over 16 at the slowest link: 2 * 4 * 10 us + 2 * 2**30 / 25e9
    assert mesh.collective_time("all-reduce", GIB, ("dp", "tp"), "tree") == pytest.approx(
        80e-6 + 2147483648 / 25e9
    )
    # send/recv across nodes under auto: one step on the inter-node link
    assert mesh.collective_time("send/recv", 25e6, ("dp", "tp")) == pytest.approx(10e-6 + 1e-3)
    with pytest.raises(MeshError, match="unknown algorithm 'nccl'; expected one of auto, ring"):
        mesh.collective_time("all-reduce", GIB, ("tp",), algorithm="nccl")  # type: ignore[arg-type]
    with pytest.raises(MeshError, match="unknown mesh axis 'ep'"):
        mesh.collective_time("all-reduce", GIB, ("ep",))
