"""The strategy search: exact methods agree, heuristics are checked, plans execute."""

import numpy as np
import pytest

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.search import CostParams, SearchError, search
from explorer.sharding import verify

A100 = "a100-80g"


def two_matmuls(batch=8, d=16):
    b = GraphBuilder("mlp2")
    x = b.input("x", (batch, d))
    h = b.op("relu", b.op("matmul", x, b.param("w1", (d, 4 * d)), name="fc1"), name="act")
    y = b.op("matmul", h, b.param("w2", (4 * d, d)), name="fc2")
    return b.build([y])


def attention_block():
    cfg = ex.models.ModelConfig(name="tiny", arch="decoder", hidden_size=32, num_layers=1,
                                num_heads=4, vocab_size=64, max_seq_len=16, dtype="fp32")  # fmt: skip
    return ex.models.build(cfg, batch=4, seq=16)


MESHES = [ex.Mesh({"tp": 4}, hardware=A100), ex.Mesh({"dp": 2, "tp": 2}, hardware=A100)]


@pytest.mark.parametrize("mesh", MESHES, ids=str)
@pytest.mark.parametrize("params", [CostParams(), CostParams.mindspore()], ids=["roofline", "ms"])
def test_exhaustive_equals_ilp_and_dp(mesh, params):
    g = two_matmuls()
    ex_plan = search(g, mesh, "exhaustive", params)
    ilp = search(g, mesh, "ilp", params)
    dp = search(g, mesh, "dynamic_programming", params)
    assert ilp.cost.total == pytest.approx(ex_plan.cost.total, rel=1e-9)
    assert dp.cost.total == pytest.approx(ex_plan.cost.total, rel=1e-9)
    assert dp.diagnostics["reduced_fully"]
    for plan in (ex_plan, ilp, dp):
        assert verify(g, plan, mesh).ok


# Recursive programming's measured bound: its worst cost / proven optimum over
# bench/search.py's 30 cases (6 graphs x 5 meshes) is 1.0423 (attention on a 2x2x2 mesh),
# measured 2026-11-30 on this commit's solver; the tests hold it to that.
RP_BOUND = 1.0424


def test_recursive_programming_close_to_optimum_and_executes():
    """RP within its measured bound (``RP_BOUND``, 1.0424) of the ILP optimum."""
    g = attention_block()
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=A100)
    opt = search(g, mesh, "ilp")
    rp = search(g, mesh, "recursive_programming")
    assert opt.status == "optimal"
    assert opt.cost.total <= rp.cost.total * (1 + 1e-9)
    assert rp.cost.total <= RP_BOUND * opt.cost.total
    assert verify(g, rp, mesh).ok and verify(g, opt, mesh).ok


def test_dynamic_programming_matches_ilp_on_a_layer():
    g = attention_block()
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=A100)
    assert search(g, mesh, "dynamic_programming").cost.total == pytest.approx(
        search(g, mesh, "ilp").cost.total, rel=1e-6)  # fmt: skip


def test_top_k_ranks_whole_plans():
    g = two_matmuls()
    mesh = MESHES[1]
    plans = search(g, mesh, "ilp", top_k=3).top_k(3)
    assert len(plans) == 3
    totals = [p.cost.total for p in plans]
    assert totals == sorted(totals)
    assert len({tuple(s.name for s in p.assignment.values()) for p in plans}) == 3
    with pytest.raises(SearchError, match="keeps one plan"):
        search(g, mesh, "recursive_programming").top_k(2)


def test_explain_breaks_down_the_alternatives():
    g = two_matmuls()
    plan = search(g, MESHES[1], "ilp")
    why = plan.explain("fc1", k=2)
    assert why.chosen.strategy == plan.assignment["fc1"]
    assert len(why.runners_up) == 2
    for alt in why.runners_up:
        assert alt.delta.total >= -1e-12  # the optimum is locally optimal too
        parts = alt.delta.compute + alt.delta.communication_total + alt.delta.gradient
        assert parts + alt.delta.memory == pytest.approx(alt.delta.total)
    assert "chose" in str(why)


def test_raising_beta_never_increases_communicated_bytes():
    g = attention_block()
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=A100)
    last = None
    for beta in (0.01, 0.1, 1.0, 10.0, 100.0):
        plan = search(g, mesh, "ilp", CostParams(beta_communication=beta, gamma_param_comm=beta))
        if last is not None:
            assert plan.cost.comm_bytes <= last + 1e-6
        last = plan.cost.comm_bytes


def test_slow_inter_node_axis_keeps_tensor_parallel_inside_the_node():
    # 2 nodes of 4 GPUs: "node" crosses nodes, "gpu" stays inside.
    cfg = ex.models.ModelConfig(name="t", arch="decoder", hidden_size=256, num_layers=1,
                                num_heads=8, vocab_size=512, max_seq_len=64)  # fmt: skip
    g = ex.models.build(cfg, batch=8, seq=64)
    hw = ex.hardware.load(A100)
    hw = type(hw)(**{**hw.__dict__, "chips_per_node": 4})
    mesh = ex.Mesh({"node": 2, "gpu": 4}, hardware=hw)
    assert mesh.link("node") == "inter" and mesh.link("gpu") == "intra"
    plan = search(g, mesh, "ilp")
    for name in ("layers.0.mlp.fc1", "layers.0.mlp.fc2", "layers.0.attn.q"):
        s = plan.assignment[name]
        model_axes = {c: axes for c, axes in s.dim_axes}
        batch_letter = s.first_letter
        for c, axes in model_axes.items():
            if c != batch_letter:
                assert "node" not in axes, (name, s.name)


def test_memory_cap_infeasible_states_minimum():
    g = two_matmuls(batch=8, d=64)
    with pytest.raises(SearchError, match=r"smallest memory per device .* needs is"):
        search(g, MESHES[0], "ilp", CostParams(device_memory_cap_bytes=1000))


def test_memory_cap_is_a_constraint():
    g = two_matmuls(batch=8, d=64)
    mesh = MESHES[0]
    free = search(g, mesh, "ilp", CostParams(memory_weight_per_byte=0))
    need = free.diagnostics["memory_bytes"]
    capped = search(g, mesh, "ilp", CostParams(device_memory_cap_bytes=need * 0.6))
    assert capped.diagnostics["memory_bytes"] <= need * 0.6
    assert capped.cost.total >= free.cost.total


def test_unknown_method_lists_valid_ones():
    with pytest.raises(SearchError, match="valid methods: exhaustive, ilp"):
        search(two_matmuls(), MESHES[0], "greedy")


def test_sharding_propagation_follows_annotations():
    g = two_matmuls(batch=64, d=4096)  # weights dominate: Megatron territory
    mesh = ex.Mesh({"tp": 4}, hardware=A100)
    plan = search(g, mesh, "sharding_propagation", annotations={"fc1": "n=tp"})
    assert plan.assignment["fc1"].name == "n=tp"
    # fc2, reached last, took its cheapest strategy given its fixed neighbour (act) and
    # its weight laid out to match
    assert all(alt.delta.total >= -1e-15 for alt in plan.explain("fc2", k=10).runners_up)
    assert plan.assignment["fc2"].name != "replicated"
    assert plan.assignment["w2"].out_layout == plan.assignment["fc2"].in_layouts[1]
    assert plan.assignment["w1"].out_layout == plan.assignment["fc1"].in_layouts[1]
    small = two_matmuls()
    assert verify(small, search(small, mesh, "sharding_propagation",
                                annotations={"fc1": "n=tp"}), mesh).ok  # fmt: skip


def test_contradictory_annotations_name_both_ops():
    b = GraphBuilder("tied")
    x = b.input("x", (8, 16))
    w = b.param("w", (16, 16))
    y = b.op("matmul", b.op("matmul", x, w, name="m1"), w, name="m2")
    g = b.build([y])
    mesh = ex.Mesh({"tp": 4}, hardware=A100)
    with pytest.raises(SearchError, match="contradictory annotations: %m1 needs %w .* %m2 needs"):
        search(g, mesh, "sharding_propagation", annotations={"m1": "n=tp", "m2": "k=tp"})


def test_bad_annotation_lists_the_strategies():
    with pytest.raises(SearchError, match="is not one of its strategies"):
        search(two_matmuls(), MESHES[0], "sharding_propagation", annotations={"fc1": "z=tp"})


def test_repeated_layers_are_planned_once_and_cost_is_exact():
    cfg = ex.models.ModelConfig(name="t", arch="decoder", hidden_size=32, num_layers=6,
                                num_heads=4, vocab_size=64, max_seq_len=16, dtype="fp32")  # fmt: skip
    g = ex.models.build(cfg, batch=4, seq=16)
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=A100)
    tiled = search(g, mesh, "ilp")
    # layer 0 reads the embedding, so layers 1..5 are the identical run
    assert "layers 1..5 identical: 5 layers planned as 2" in tiled.diagnostics["repeated_layers"]
    for k in range(2, 6):
        assert (tiled.assignment[f"layers.{k}.mlp.fc1"].name
                == tiled.assignment["layers.1.mlp.fc1"].name)  # fmt: skip
    # the tiled cost equals the cost of the same assignment evaluated on the full graph
    full = ex.search.Planner(g, mesh, reuse_layers=False)
    m = full.model
    w = m.weigh(tiled.params)
    choice = [m.nodes[i].strategies.index(
        next(s for s in m.nodes[i].strategies if s.name == tiled.assignment[n].name))
        for i, n in enumerate(m.names)]  # fmt: skip
    assert m.total(w, choice) == pytest.approx(tiled.cost.total, rel=1e-9)
    assert verify(g, tiled, mesh).ok


def test_replanning_reuses_tables():
    g = two_matmuls()
    mesh = MESHES[1]
    a = search(g, mesh, "ilp", CostParams(beta_communication=1.0))
    b = search(g, mesh, "ilp", CostParams(beta_communication=1000.0))
    assert a._model is b._model
    assert isinstance(b.changed(a), tuple)
    assert np.isfinite(b.cost.total)


def _bench_layer():
    return ex.models.ModelConfig(name="layer", arch="decoder", hidden_size=256, num_layers=1,
                                 num_heads=8, vocab_size=512, max_seq_len=64, dtype="fp32")  # fmt: skip


def _bench_attention():
    from explorer.models.layers import attention

    b = GraphBuilder("attention", dtype="fp32")
    x = b.input("x", (8, 64, 256))
    with b.scope("attn"):
        y = attention(b, _bench_layer(), x, causal=True)
    return b.build([y])


def _bench_moe():
    moe = _bench_layer().replace(name="moe-layer", num_experts=8, experts_top_k=2,
                                 activation="swiglu", norm="rmsnorm", position="rope", bias=False)  # fmt: skip
    return ex.models.build(moe, batch=8, seq=64)


@pytest.mark.parametrize(
    "graph, axes",
    [(_bench_attention, {"x": 2, "y": 2, "z": 2}), (_bench_attention, {"dp": 2, "tp": 4}),
     (_bench_moe, {"dp": 2, "tp": 4})],
    ids=["attention-2x2x2", "attention-2x4", "moe-2x4"],
)  # fmt: skip
def test_recursive_programming_within_its_measured_bound_on_the_worst_bench_cases(graph, axes):
    """The bench cases where RP is furthest from the optimum (1.0423, 1.0345, 1.0153 when
    measured): RP stays within ``RP_BOUND`` of dynamic programming's proven optimum."""
    g, mesh = graph(), ex.Mesh(axes, hardware=A100)
    params = CostParams(device_memory_cap_bytes=float("inf"))  # as bench/search.py
    opt = search(g, mesh, "dynamic_programming", params)
    assert opt.status == "optimal"
    rp = search(g, mesh, "recursive_programming", params)
    assert opt.cost.total <= rp.cost.total * (1 + 1e-9)
    assert rp.cost.total <= RP_BOUND * opt.cost.total
