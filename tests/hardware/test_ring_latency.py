"""One ring-latency model in two forms: the one-link alpha-beta ring and NCCL's ring model."""

from __future__ import annotations

import pytest

from explorer.hardware import HardwareError, Mesh, load, ring_latency, ring_time

INTRA, INTER = 5e-6, 10e-6


@pytest.mark.parametrize(
    "kind, n, per_node, intra_steps, inter_steps",
    [
        ("all-gather", 32, 8, 28, 3),  # NCCL: nInterSteps = nNodes - 1
        ("reduce-scatter", 12, 4, 9, 2),
        ("all-reduce", 16, 8, 28, 2),  # nInterSteps = 2 (nNodes - 1)
        ("all-gather", 8, 8, 7, 0),  # one node: every hop intra
        ("all-gather", 4, 1, 0, 3),  # one member a node: every hop inter
    ],
)
def test_nccl_ring_model(kind, n, per_node, intra_steps, inter_steps) -> None:
    got = ring_latency(kind, n, INTRA, per_node=per_node, inter_latency=INTER)
    assert got == pytest.approx(intra_steps * INTRA + inter_steps * INTER, rel=1e-12)


def test_one_link_form_is_steps_times_latency_and_what_ring_time_charges() -> None:
    assert ring_latency("all-reduce", 8, INTER) == 14 * INTER
    assert ring_latency("all-to-all", 8, INTER) == 7 * INTER
    assert ring_latency("send/recv", 2, INTER) == INTER
    assert ring_latency("all-reduce", 1, INTER) == 0.0
    assert ring_time("all-gather", 0.0, 8, 1e9, INTER) == ring_latency("all-gather", 8, INTER)
    # per_node=1 (every hop crosses nodes) is the one-link form at the inter-node latency
    assert ring_latency("all-gather", 8, INTRA, per_node=1, inter_latency=INTER) == (
        ring_latency("all-gather", 8, INTER)
    )


def test_mesh_keeps_the_one_link_form_on_its_slowest_level() -> None:
    # dp=16 on 8-chip nodes: 14 of the 15 steps stay in a node, yet the mesh charges every
    # step the inter-node latency (the search's coarser alpha-beta form; see ring_latency)
    mesh = Mesh({"dp": 16}, hardware="a100-80g")
    a100 = load("a100-80g")
    latency_part = mesh.collective_time("all-gather", 0.0, ("dp",))
    assert latency_part == pytest.approx(15 * a100.latency("inter"), rel=1e-12)
    assert ring_latency("all-gather", 16, a100.latency("intra"), per_node=8,
                        inter_latency=a100.latency("inter")) < latency_part  # fmt: skip


def test_per_node_needs_inter_latency() -> None:
    with pytest.raises(HardwareError, match="inter_latency"):
        ring_latency("all-gather", 8, INTRA, per_node=4)
