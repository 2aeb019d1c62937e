"""Context parallelism (Llama 3's CP, explorer/training/step_model/terms/cp.py): the config, the memory
and the bytes of the key/value exchange against hand formulas, the gradient group over
dp * cp, and plan_training's search of cp."""

import dataclasses

import pytest

import explorer as ex
from explorer.training import (
    ActivationTerms,
    SearchSpace,
    TrainingPlanError,
    activation_bytes_per_layer,
    estimate,
)
from explorer.training.step_model.kernels import _flash_shape, attention_s
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.terms import cp as cp_terms

HW = "a100-80g"


# ----- ParallelConfig ------------------------------------------------------------------------
def test_config_counts_cp_in_devices_and_weight_replicas():
    par = ex.ParallelConfig(dp=8, tp=8, pp=16, cp=16)
    assert par.devices == 8 * 8 * 16 * 16
    assert par.weight_replicas == 8 * 16
    assert str(par).startswith("dp8 x tp8 x pp16 x cp16, ")
    ring = par.replace(cp_kv_exchange="ring", sp=True)
    assert str(ring).startswith("dp8 x tp8 x pp16 x cp16 ring +sp, ")
    # cp = 1 keeps the printed form every other view and golden string uses
    assert str(ex.ParallelConfig(dp=2, tp=4)) == "dp2 x tp4 x pp1, mb1, 1f1b, zero0, recompute none"


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(cp=0), "cp=0"),
        (dict(cp=True), "cp=True"),
        (dict(cp=2.0), "cp=2.0"),
        (dict(cp=2, cp_kv_exchange="p2p"), "cp_kv_exchange='p2p'"),
        (dict(cp_kv_exchange="ring"), "cp=1"),
    ],
)
def test_config_rejects_bad_cp(kw, words):
    with pytest.raises(ex.training.ParallelConfigError, match=words.replace("(", r"\(")):
        ex.ParallelConfig(**kw)


def test_sequence_not_split_into_2cp_chunks_is_a_named_error():
    par = ex.ParallelConfig(tp=2, cp=3)
    with pytest.raises(cp_terms.ContextParallelError, match="seq=1000 is not divisible by 6"):
        ex.simulate("gpt2", par, hardware=HW, global_batch=4, seq=1000)
    assert issubclass(cp_terms.ContextParallelError, ex.ExplorerError)


def test_devices_dp_tp_pp_cp_over_the_profile_extend_it():
    """dp x tp x pp x cp counts every device: 16,384 on the 8,192-chip h100-sxm profile
    extends it (Cluster.extended) to the cluster a hand-built 2,048-node profile is."""
    par = ex.ParallelConfig(dp=64, tp=8, pp=2, cp=16)
    by_hand = dataclasses.replace(ex.hardware.load("h100-sxm"), max_nodes=2048)
    grown, built = (estimate("llama3-8b", par, hw, 64, 8192) for hw in ("h100-sxm", by_hand))
    assert grown.step_time_s == built.step_time_s and grown.memory == built.memory


# ----- memory --------------------------------------------------------------------------------
S, B, H, A, KV = 8192, 2, 4096, 32, 1024


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("cp", [2, 4, 16])
def test_activations_per_layer_fall_by_cp(recompute, sp, cp):
    whole = activation_bytes_per_layer(S, B, H, A, 4, sp, recompute)
    ring = activation_bytes_per_layer(S, B, H, A, 4, sp, recompute, cp=cp, kv_exchange="ring")
    assert ring == pytest.approx(whole / cp, rel=1e-12)
    gathered = activation_bytes_per_layer(S, B, H, A, 4, sp, recompute, cp=cp, kv_hidden=KV)
    # all-gather keeps the other ranks' K and V (2 + 2 bytes per position and kv channel)
    # for the backward, except under full recompute (the forward runs again)
    extra = 0.0 if recompute == "full" else 4 * B * (S - S // cp) * KV / 4
    assert gathered == pytest.approx(whole / cp + extra, rel=1e-12)


def test_simulated_activation_memory_falls_by_cp():
    # Same dp, pp, batch (so the same microbatches in flight); cp devices more.
    base = dict(dp=2, tp=2, pp=2, microbatch_size=1, recompute="full", sp=True)
    one = ex.simulate("llama3-8b", ex.ParallelConfig(**base), HW, 16, 8192)
    four = ex.simulate(
        "llama3-8b", ex.ParallelConfig(**base, cp=4, cp_kv_exchange="ring"), HW, 16, 8192
    )
    assert one.config.num_microbatches == four.config.num_microbatches
    for a, b in zip(one.memory_per_device, four.memory_per_device, strict=True):
        assert b.activations == pytest.approx(a.activations / 4, rel=1e-12)
        assert b.recompute_working_set == pytest.approx(a.recompute_working_set / 4, rel=1e-12)
    # the weights are those of the cp = 1 job (cp ranks hold the same weights)
    assert four.memory.parameters == pytest.approx(one.memory.parameters)


# ----- communication -------------------------------------------------------------------------
def _step(model, par, gb, seq):
    cfg = ex.models.load(model)
    return StepModel(cfg, par, ex.hardware.load(HW), gb, seq, ex.training.TrainingParams())


@pytest.mark.parametrize("exchange", ["all_gather", "ring"])
def test_kv_exchange_bytes_match_the_hand_formula(exchange):
    model, gb, seq = "llama3-8b", 16, 8192
    cfg = ex.models.load(model)  # 32 heads, 8 kv heads of 128
    tp, cp, mb, dp, pp = 2, 4, 2, 2, 2
    par = ex.ParallelConfig(
        dp=dp, tp=tp, pp=pp, cp=cp, microbatch_size=mb, cp_kv_exchange=exchange, sp=True
    )
    sim = ex.simulate(model, par, HW, gb, seq)
    # K and V of this rank's seq/cp positions, kv heads split over tp, 2 bytes (bf16)
    kv = 2 * mb * (seq // cp) * (8 * 128 // tp) * 2
    assert cfg.kv_heads == 8 and cfg.dim_head == 128
    if exchange == "all_gather":
        per_layer = (cp - 1) * kv + (cp - 1) * kv  # all-gather K,V; reduce-scatter dK,dV
    else:
        per_layer = (cp - 1) * kv + (cp - 1) * 2 * kv  # ring: K,V; then K,V and dK,dV
    m = gb // (dp * mb)
    layers = sim.partition.layers(sim.memory.stage)
    assert dict(sim.comm_bytes)["cp"] == per_layer * layers * m


def test_all_gather_is_exposed_and_a_hidden_ring_costs_no_time():
    par = ex.ParallelConfig(dp=2, tp=2, pp=2, cp=4, sp=True)
    ag = _step("llama3-8b", par, 16, 32768)
    size = 4 * cp_terms.kv_bytes(ag)  # the gathered K, V of the 4 ranks
    bw = ag.tparams.cost.bandwidth_efficiency
    assert ag.cp_fwd_s == pytest.approx(ag.mesh.collective_time("all-gather", size, "cp") / bw)
    assert ag.cp_bwd_s == pytest.approx(ag.mesh.collective_time("reduce-scatter", size, "cp") / bw)
    ring = _step("llama3-8b", par.replace(cp_kv_exchange="ring"), 16, 32768)
    # at 32K positions a chunk's attention outlasts sending the next chunk's K, V
    chunk_attention = cp_terms.attention_core_s(ring)[0] / 4
    send = ring.mesh.collective_time("send/recv", cp_terms.kv_bytes(ring), "cp") / bw
    assert send < chunk_attention
    assert (ring.cp_fwd_s, ring.cp_bwd_s) == (0.0, 0.0)
    assert ring.cp_fwd_bytes == 3 * cp_terms.kv_bytes(ring)


def test_ring_overlap_with_a_fused_attention_kernel_is_that_kernel():
    # with flash attention the ring hides behind the fused kernel the layer's own time
    # holds (kernels.attention_s: causal blocks at flash_attention_efficiency), the
    # device's 1/cp share of it, 1/cp of that per ring step
    cfg, p = ex.models.load("llama3-8b"), ex.training.TrainingParams(flash_attention=True)
    par = ex.ParallelConfig(tp=2, cp=4, cp_kv_exchange="ring")
    step = StepModel(cfg, par, ex.hardware.load(HW), 4, 32768, p)
    assert step.costs.layer.recompute_selective_s == 0.0  # no separate core kernels
    ops, chip = step.costs.layer.kernels, step.cluster.chip
    flops, nbytes, seq, causal, dtype = _flash_shape(ops)
    assert (seq, causal) == (32768, True)
    fwd = attention_s(flops, nbytes, seq, True, False, chip, p, dtype)
    bwd = attention_s(flops, nbytes, seq, True, True, chip, p, dtype)
    assert cp_terms.attention_core_s(step) == pytest.approx((fwd / 4, bwd / 4), rel=1e-12)
    # that kernel is part of the layer's forward: without flash the core's own kernels
    no_flash = StepModel(cfg, par, ex.hardware.load(HW), 4, 32768, ex.training.TrainingParams())
    core = no_flash.costs.layer.recompute_selective_s
    back = core * no_flash.tparams.cost.backward_compute_ratio
    assert cp_terms.attention_core_s(no_flash) == (core, back)


def test_gradients_are_reduced_over_dp_times_cp():
    model, gb, seq = "llama3-8b", 8, 8192
    with_cp = ex.simulate(model, ex.ParallelConfig(tp=2, pp=2, cp=4), HW, gb, seq)
    step = _step(model, ex.ParallelConfig(tp=2, pp=2, cp=4), gb, seq)
    params = step.stage_params(with_cp.partition, with_cp.memory.stage)  # the device reported
    assert dict(with_cp.comm_bytes)["dp"] == pytest.approx(2 * 3 / 4 * params * 2)  # all-reduce
    alone = ex.simulate(model, ex.ParallelConfig(tp=2, pp=2), HW, gb, seq)
    assert dict(alone.comm_bytes)["dp"] == 0.0  # no replica, no reduction
    # ZeRO-1 shards the optimizer states over the 4 context-parallel ranks too
    z1 = ex.simulate(model, ex.ParallelConfig(tp=2, pp=2, cp=4, zero=1), HW, gb, seq)
    z1_params = step.stage_params(z1.partition, z1.memory.stage)
    assert z1.memory.optimizer_states == pytest.approx(z1_params * 12 / 4)  # fp32 Adam, 1/4


def test_cp_divides_each_devices_compute_and_keeps_model_flops():
    model, seq = "llama3-8b", 16384
    one = _step(model, ex.ParallelConfig(tp=2), 4, seq)
    four = _step(model, ex.ParallelConfig(tp=2, cp=4), 4, seq)
    assert four.costs.layer.forward_s == pytest.approx(one.costs.layer.forward_s / 4)
    assert four.costs.layer.flops == one.costs.layer.flops
    assert four.flops() == one.flops()


# ----- plan_training ----------------------------------------------------------------------
def test_cp_searched_only_for_long_sequences():
    assert cp_terms.needs_cp(8192, 8192) == (1,)
    assert cp_terms.needs_cp(16384, 8192) == (1, 2)
    assert cp_terms.needs_cp(131072, 8192) == (1, 2, 4, 8, 16)
    assert cp_terms.needs_cp(1500, 100) == (1, 2)  # 2 x 4 = 8 chunks do not divide 1500
    plan = ex.plan_training("gpt2", devices=8, hardware=HW, global_batch=64, seq=1024)
    assert plan.config.cp == 1
    assert all(a.config.cp == 1 for a in plan.alternatives)


@pytest.mark.parametrize(
    "kw",
    [dict(cp=(0,)), dict(cp=()), dict(cp_min_positions=0), dict(cp_kv_exchange=("mesh",))],
)
def test_search_space_rejects_bad_cp_choices(kw):
    with pytest.raises(TrainingPlanError, match="SearchSpace.cp"):
        SearchSpace(**kw)


def test_plan_training_searches_cp_when_asked():
    space = SearchSpace(tp=(2,), pp=(1,), cp=(1, 2), microbatch_sizes=(1,), zero=(1,))
    plan = ex.plan_training("llama3-8b", devices=8, hardware=HW, global_batch=8, seq=8192,
                            space=space)  # fmt: skip
    cps = {plan.config.cp} | {a.config.cp for a in plan.alternatives + plan.over_memory}
    assert cps == {1, 2}
    assert plan.config.devices == 8


# Llama 3 (Llama Team 2024, Table 4): 405B at seq 131,072 on 16,384 H100s, TP8 CP16 PP16
# DP8, 16M tokens per batch (128 sequences). The profile is h100-sxm with 2,048 nodes.
def test_llama3_405b_at_128k_on_16384_gpus_picks_context_parallelism():
    hw = dataclasses.replace(ex.hardware.load("h100-sxm"), max_nodes=2048)
    # FlashAttention keeps no attention scores (Dao et al. 2022); without it a 128K
    # sequence's scores alone exceed 80 GiB on any of these layouts.
    params = ex.training.TrainingParams(activations=ActivationTerms(attention_bytes=0.0))
    space = SearchSpace(tp=(8,), pp=(1, 16), microbatch_sizes=(1,), schedules=("1f1b",))
    plan = ex.plan_training("llama3-405b", devices=16384, hardware=hw, global_batch=128,
                            seq=131072, params=params, space=space, simulate_top=1)  # fmt: skip
    assert plan.config.cp > 1
    assert plan.config.devices == 16384 and plan.sim.fits
    # every cp = 1 layout of this space is over memory or slower
    assert all(c.config.cp > 1 or not c.fits or c.step_time_s >= plan.sim.step_time_s
               for c in plan.alternatives + plan.over_memory)  # fmt: skip
