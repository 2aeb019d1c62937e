"""What the linked widgets need from the training planner: stages of graph nodes, the
operator-level plan of the chosen configuration, progress callbacks."""

import pytest

import explorer as ex
from explorer.training import SearchSpace, uniform_partition
from explorer.training.planning.result import stage_of_scope


@pytest.fixture(scope="module")
def pp_plan():
    return ex.plan_training("gpt2", devices=8, hardware="a100-80g", global_batch=64, seq=512,
                            space=SearchSpace(tp=(2,), pp=(2,)))  # fmt: skip


def test_stage_of_scope_follows_the_partition():
    p = uniform_partition(8, 4)  # embed+2 | 2 | 2 | 2+head
    assert [stage_of_scope(p, f"layers.{i}") for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert stage_of_scope(p, "embed") == 0 and stage_of_scope(p, "head.loss") == 3
    assert stage_of_scope(p, "layers.5.mlp.fc1") == 2
    with pytest.raises(ValueError, match="layer 8 but the model has 8"):
        stage_of_scope(p, "layers.8")
    with pytest.raises(ValueError, match="no stage"):
        stage_of_scope(p, "tokens")


def test_plan_stage_map_on_a_reduced_graph(pp_plan):
    assert pp_plan.config.pp == 2
    part = pp_plan.sim.partition
    full = ex.models.build(ex.models.load("gpt2"), batch=2, seq=64)
    stages = pp_plan.stage_map(full)
    assert stages["layers.0.mlp.fc1"] == 0 and stages["head.loss"] == 1
    assert "tokens" not in stages
    assert stages["layers.11.mlp.fc1"] == pp_plan.stage_of("layers.11") == part.stages - 1
    small = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=2, seq=64)
    reduced = pp_plan.stage_map(small)  # drawn layer k stands for model layer 3k
    for k in range(4):
        assert reduced[f"layers.{k}.mlp.fc1"] == pp_plan.stage_of(f"layers.{3 * k}")


def test_sharding_plan_is_the_dp_x_tp_plan_of_a_few_layers(pp_plan):
    sp = pp_plan.sharding_plan(layers=2)
    c = pp_plan.config
    assert sp.mesh.shape == (c.dp, c.tp) and sp.mesh.axis_names == ("dp", "tp")
    assert {n.scope.split(".")[1] for n in sp.graph.nodes if n.scope.startswith("layers")} == {
        "0",
        "1",
    }
    assert sp.graph.node("tokens").type.shape[0] == c.dp * c.microbatch_size
    assert "chose" in str(sp.explain("layers.0.mlp.fc1"))
    assert pp_plan.model_config.name == "gpt2"


def test_progress_callbacks_reach_the_total():
    calls = []
    ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
                     progress=lambda d, t: calls.append((d, t)))  # fmt: skip
    assert calls[-1][0] == calls[-1][1] and len(calls) > 2
    assert all(b == calls[0][1] for _, b in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    calls.clear()
    ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512,
                     progress=lambda d, t: calls.append((d, t)))  # fmt: skip
    assert calls[-1] == (200, 200) and [d for d, _ in calls] == sorted(d for d, _ in calls)
