"""Collectives and device placement written once: numbers captured before each merge.

Each formula that had two copies (the hierarchical all-reduce across datacenters, the ring
all-reduce of the cross-pool exchange and of local SGD's WAN bytes, the ring latency, the
device order of the mesh axes) is pinned here by the values it gave before the copies were
merged, as literals (rel=1e-12), so a merge that changed a number fails.
"""

from __future__ import annotations

import dataclasses

import pytest

import explorer as ex
from explorer.hardware import Mesh, load
from explorer.hardware.wan import collective_time, datacenters
from explorer.training import TrainingParams
from explorer.training.datacenters import gradient_sync
from explorer.training.hetero.data import cross_pool_allreduce_s
from explorer.training.hetero.pools import check_pools
from explorer.training.local_sgd import local_sgd
from explorer.training.pipeline.partition import uniform_partition
from explorer.training.replanning.migration import JobLayout
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.placement import mesh_order, stage_ranks
from explorer.training.step_model.terms.zero import ring_latency_s

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

REL = 1e-12


@pytest.fixture(scope="module")
def two():  # two datacenters of 8 A100 nodes each
    return datacenters(dataclasses.replace(load("a100-80g"), max_nodes=8), 2)


# ----- 1. hierarchical all-reduce across datacenters ----------------------------------------
WAN_COLLECTIVES = [
    ({"dp": 16, "tp": 8}, (0.33014, 0.16507, 0.16507, 0.6609375)),
    ({"dp": 8, "pp": 2, "tp": 8}, (0.57006, 0.28503, 0.28503, 0.581875)),
    ({"dp": 32, "tp": 4}, (0.2103, 0.10515, 0.10515, 0.76046875)),
    ({"dp": 2, "pp": 8, "tp": 8}, (2.01, 1.005, 1.005, 1.005)),
]
KINDS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")


@pytest.mark.parametrize("axes, seconds", WAN_COLLECTIVES)
def test_wan_collective_time_pinned(two, axes, seconds) -> None:
    mesh = Mesh(axes, hardware=two)
    got = tuple(collective_time(mesh, kind, 1e9, ("dp",)) for kind in KINDS)
    assert got == pytest.approx(seconds, rel=REL)


# (config, step_time_s, (size_bytes, flat, hierarchical, inside, wan),
#  local SGD rows for H = 1, 10, 100: (wan_bytes_per_step, step_time_s))
ACROSS = [
    (
        ex.ParallelConfig(dp=16, tp=8),
        0.8272665899482857,
        (328930816.0, 0.5354658, 0.11539786112, 0.02316515712, 0.092232704),
        ((41116352.0, 0.7984171246682856), (4111635.2, 0.7154076910682857),
         (411163.52, 0.7071067477082856)),
    ),
    (
        ex.ParallelConfig(dp=8, tp=4, pp=4, zero=1),
        0.6702338139141522,
        (204635136.0, 0.29381968, 0.12465567615999999, 0.01233810816, 0.11231756799999999),
        ((51158784.0, 0.6702338139141522), (5115878.4, 0.6198776018756655),
         (511587.84, 0.6097690207556655)),
    ),
    (
        ex.ParallelConfig(dp=32, tp=4, zero=3),
        2.1895235409938207,
        (657861632.0, 1.10662932, 0.1418723264, 0.0496396224, 0.092232704),
        ((41116352.0, 1.6284665617938205), (4111635.2, 1.5454571281938205),
         (411163.52, 1.5371561848338207)),
    ),
]  # fmt: skip


@pytest.mark.parametrize("par, step_s, sync, rows", ACROSS, ids=str)
def test_plans_across_datacenters_pinned(two, par, step_s, sync, rows) -> None:
    sim = ex.estimate("gpt3-1.3b", par, two, 256, 2048)
    assert sim.step_time_s == pytest.approx(step_s, rel=REL)
    s = gradient_sync(sim, hardware=two)
    got = (s.size_bytes, s.flat_s, s.hierarchical_s, s.inside_s, s.wan_s)
    assert got == pytest.approx(sync, rel=REL)
    r = local_sgd(sim, (1, 10, 100), hardware=two)
    assert [(row.wan_bytes_per_step, row.step_time_s) for row in r.rows] == [
        pytest.approx(row, rel=REL) for row in rows
    ]


# ----- 2. ring all-reduce of the cross-pool gradient exchange --------------------------------
def test_cross_pool_allreduce_pinned() -> None:
    gpt2, tparams = ex.models.load("gpt2"), TrainingParams()
    two_pools = check_pools([ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8)])
    three = check_pools([ex.Pool("h100-sxm", 16), ex.Pool("a100-80g", 8),
                         ex.Pool("a100-80g", 32, name="a100-b")])  # fmt: skip
    assert cross_pool_allreduce_s(gpt2, two_pools, tparams) == pytest.approx(
        0.0015754976000000001, rel=REL
    )
    assert cross_pool_allreduce_s(gpt2, three, tparams) == pytest.approx(0.0021139968, rel=REL)


# ----- 3. ring latency ----------------------------------------------------------------------
# (config, global batch, ZeRO-3 ring latency, estimate's step time) on a100-80g, gpt3-1.3b
ZERO3 = [
    (ex.ParallelConfig(dp=32, zero=3), 64, 0.00017, 0.710437091335282),
    (ex.ParallelConfig(dp=4, zero=3), 64, 1.5000000000000002e-05, 2.391370538683537),
    (ex.ParallelConfig(dp=16, tp=2, zero=3), 64, 9.000000000000002e-05, 0.7183143026419487),
    (ex.ParallelConfig(dp=8, cp=2, tp=4, zero=3), 64, 0.00011000000000000002,
     0.6024442711076411),
    (ex.ParallelConfig(dp=12, tp=2, zero=3), 48, 6.500000000000001e-05, 0.6765923278603762),
]  # fmt: skip


@pytest.mark.parametrize("par, batch, latency_s, step_s", ZERO3, ids=str)
def test_zero3_ring_latency_pinned(par, batch, latency_s, step_s) -> None:
    a100, cfg = load("a100-80g"), ex.models.load("gpt3-1.3b")
    s = StepModel(cfg, par, a100, batch, 2048, TrainingParams())
    assert ring_latency_s(s) == pytest.approx(latency_s, rel=REL)
    assert ex.estimate(cfg, par, a100, batch, 2048).step_time_s == pytest.approx(step_s, rel=REL)


# Mesh.collective_time of 1 MiB (all-reduce, all-gather, reduce-scatter) on a100-80g
MESH = [
    ({"dp": 2, "tp": 8}, ("tp",), (7.611669333333335e-05, 3.805834666666667e-05,
                                   3.805834666666667e-05)),
    ({"dp": 2, "tp": 8}, ("dp", "tp"), (0.00010135957333333334, 5.067978666666667e-05,
                                        5.067978666666667e-05)),
    ({"dp": 4, "tp": 8}, ("dp",), (0.00012291456, 6.145728e-05, 6.145728e-05)),
    ({"pp": 2, "dp": 3, "tp": 2}, ("dp",), (9.592405333333333e-05, 4.796202666666666e-05,
                                            4.796202666666666e-05)),
]  # fmt: skip


@pytest.mark.parametrize("axes, over, seconds", MESH)
def test_mesh_collective_time_pinned(axes, over, seconds) -> None:
    mesh = Mesh(axes, hardware="a100-80g")
    got = (
        mesh.collective_time("all-reduce", 2**20, over),
        mesh.collective_time("all-gather", 2**20, over),
        mesh.collective_time("reduce-scatter", 2**20, over),
    )
    assert got == pytest.approx(seconds, rel=REL)


# ----- 4. device order of the mesh axes -----------------------------------------------------
RANKS = [
    (ex.ParallelConfig(dp=2, tp=2, pp=2), False, [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]),
    (ex.ParallelConfig(dp=4, tp=2, pp=2, ep=2), False,
     [[[0, 1], [2, 3], [4, 5], [6, 7]], [[8, 9], [10, 11], [12, 13], [14, 15]]]),
    (ex.ParallelConfig(dp=2, cp=2, tp=2, pp=2, ep=2), True,
     [[[0, 1], [2, 3], [4, 5], [6, 7]], [[8, 9], [10, 11], [12, 13], [14, 15]]]),
    (ex.ParallelConfig(dp=4, cp=2, tp=1, pp=2, ep=2), True,
     [[[0], [1], [2], [3], [8], [9], [10], [11]], [[4], [5], [6], [7], [12], [13], [14], [15]]]),
]  # fmt: skip


@pytest.mark.parametrize("par, dp_outermost, ranks", RANKS, ids=str)
def test_job_layout_ranks_pinned(par, dp_outermost, ranks) -> None:
    layout = JobLayout(par, uniform_partition(4, par.pp), tuple(range(par.devices)),
                       (1.0,) * 6, dp_outermost)  # fmt: skip
    assert layout.ranks().tolist() == ranks


@pytest.mark.parametrize("par, dp_outermost, ranks", RANKS, ids=str)
def test_stage_ranks_are_the_step_models_mesh_groups(par, dp_outermost, ranks) -> None:
    """Migration's rank grid and the step model's mesh are one placement: the tp groups and
    the replica groups (dp, ep, cp) of `stage_ranks` are the mesh's groups along those axes."""
    grid = stage_ranks(par, dp_outermost)
    assert grid.tolist() == ranks
    mesh = Mesh(mesh_order(par, dp_outermost))
    assert sorted(tuple(row) for row in grid.reshape(-1, par.tp).tolist()) == list(
        mesh.groups(("tp",))
    )
    replicas = grid.transpose(0, 2, 1).reshape(-1, par.dp * par.cp)
    assert sorted(tuple(sorted(row)) for row in replicas.tolist()) == list(
        mesh.groups(("dp", "ep", "cp"))
    )
