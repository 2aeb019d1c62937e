"""The step model's tables (issue 26): the mesh and its collectives' seconds shared by the
configurations with the same mesh axes, a stage's compute seconds and activation bytes kept
by its shape. Each table's entries equal the value computed afresh, and the sharing is real
(the same mesh object, one table filled by the first configuration)."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import Mesh, load
from explorer.hardware.wan import collective_time
from explorer.training import TrainingParams
from explorer.training.pipeline.partition import StagePartition
from explorer.training.step_model import model as step_model
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.placement import mesh_axes
from explorer.training.step_model.terms import recompute

HW = load("a100-80g")


def _step(par: ex.ParallelConfig, gb: int = 64, model: str = "gpt3-1.3b") -> StepModel:
    return StepModel(ex.models.load(model), par, HW, gb, 2048, TrainingParams())


def test_configurations_with_one_mesh_share_it_and_its_collectives():
    a = _step(ex.ParallelConfig(dp=4, tp=2, pp=2, zero=1, microbatch_size=1))
    b = _step(ex.ParallelConfig(dp=4, tp=2, pp=2, zero=3, microbatch_size=2, recompute="full"))
    c = _step(ex.ParallelConfig(dp=2, tp=4, pp=2))
    assert a.mesh is b.mesh and a._collective_times is b._collective_times
    assert c.mesh is not a.mesh and c.mesh.axes != a.mesh.axes
    fresh = Mesh(mesh_axes(a.par, a.cluster), hardware=a.cluster)
    assert fresh == a.mesh
    for kind, size, axes in [
        ("all-reduce", 3.0e8, ("dp",)),
        ("all-gather", 1.5e7, ("tp",)),
        ("send/recv", 4.0e6, ("pp",)),
        ("reduce-scatter", 2.0e8, ("dp", "ep", "cp")),
    ]:
        seconds = a.collective_s(kind, size, axes)
        assert seconds == collective_time(fresh, kind, size, axes) > 0.0
        assert a._collective_times[(kind, size, axes)] == seconds
        assert b.collective_s(kind, size, axes) == seconds  # b reads a's entry


def test_mesh_table_follows_the_cluster_object():
    """Another cluster (here the job view of multi-rail rings) gets its own mesh."""
    a = _step(ex.ParallelConfig(dp=4, tp=2, pp=2))
    other = StepModel(
        ex.models.load("gpt3-1.3b"), ex.ParallelConfig(dp=4, tp=2, pp=2), HW, 64, 2048,
        TrainingParams(multi_rail_collectives=not HW.multi_rail_rings),
    )  # fmt: skip
    assert other.cluster is not a.cluster
    assert other.mesh is not a.mesh and other.mesh.hardware is other.cluster


@pytest.mark.parametrize(
    "model, par",
    [
        ("gpt3-1.3b", ex.ParallelConfig(dp=2, tp=2, pp=4, recompute="per_layer")),
        ("gpt3-1.3b", ex.ParallelConfig(dp=2, tp=2, pp=4, recompute="selective")),
        ("deepseek-v3", ex.ParallelConfig(dp=8, pp=2, ep=8)),  # dense first layers
    ],
)
def test_stage_tables_equal_a_fresh_computation(model, par):
    s = _step(par, model=model)
    L = s.cfg.num_layers
    part = StagePartition.from_layers([L // 4 + 1, L // 4, L // 4 - 1, L - 3 * (L // 4)][: par.pp])
    if par.pp == 2:
        part = StagePartition.from_layers([L // 2 + 1, L - L // 2 - 1])
    for n_full in (None, 0, 1, 2):
        for g in range(par.stages):
            n = part.layers(g)
            want = recompute.layers_act(s, n, n_full) - recompute.offload_saved_bytes(s, n, n_full)
            if part.has_embed(g):
                want += s.embed_act()
            assert s.stage_act(part, g, n_full) == want
            assert s.stage_act(part, g, n_full) == want  # the kept entry
            assert s.stage_compute_s(part, g) == s._stage_compute_of(part, g)
    if s.dense is not None:
        assert not s._stage_compute  # a stage's seconds depend on where it is
    else:
        assert len(s._stage_compute) == len({part.shapes[g] for g in range(par.stages)})


def test_estimate_time_by_kind_sums_stage_by_stage():
    """estimate's kinds: each stage's segments (x m / p) added in stage order, then the
    tails' and the idle time; the total is the step time."""
    par = ex.ParallelConfig(dp=2, tp=2, pp=4, microbatch_size=1, zero=1)
    r = ex.estimate("gpt3-1.3b", par, HW, 16, 2048, params=TrainingParams())
    kinds = dict(r.time_by_kind)
    s = _step(par, gb=16)
    part, p, m = r.partition, par.pp, s.m
    want: dict[str, float] = {}
    for g in range(par.stages):
        f, b = s.stage_segments(part, g, None)
        for k, x in f + b:
            want[k] = want.get(k, 0.0) + x * m / p
    for k in ("compute-forward", "compute-backward", "tp-comm", "recompute"):
        assert kinds[k] == want[k]
    assert sum(kinds.values()) == pytest.approx(r.step_time_s, rel=1e-12)
    assert step_model._MESHES.peek((tuple(mesh_axes(par, s.cluster).items()), id(s.cluster)))
