"""The step model is the sum of its parallelisms' terms (explorer/training/step_model/terms/).

A simulated step's event totals, memory rows, bytes and FLOPs must equal what the tp, pp,
dp, zero, recompute and ep modules compute, summed over stages, microbatches and devices;
and the terms obey facts that hold independently of this code (ring volumes, ZeRO's
shards).
"""

import math

import pytest

import explorer as ex
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.terms import cp, dp, ep, pp, recompute, tp, zero

HW = "a100-80g"
# Event durations are differences of absolute times (end_s - start_s), so each carries a
# rounding error of about 1e-16 x the step time: 1e-9 relative covers thousands of events.
REL = 1e-9

CASES = [
    ("gpt2", 32, 512, dict(dp=2, tp=2, pp=2, microbatch_size=2)),
    ("gpt2", 32, 512, dict(pp=4, schedule="interleaved_1f1b", virtual_stages=3)),
    ("gpt2", 32, 512, dict(dp=8, microbatch_size=4, zero=2)),
    ("gpt2", 32, 512, dict(dp=4, tp=2, microbatch_size=2, zero=1, recompute="selective")),
    ("gpt3-13b", 64, 2048, dict(dp=8, zero=3)),
    ("gpt3-13b", 64, 2048, dict(dp=8, microbatch_size=4, zero=3, recompute="per_layer")),
    ("gpt3-13b", 64, 2048, dict(dp=2, tp=2, pp=2, sp=True, zero=1, recompute="full")),
    ("gpt3-175b", 256, 2048, dict(dp=8, tp=8, pp=8, schedule="gpipe", recompute="per_layer")),
    ("mixtral-8x7b", 64, 1024, dict(dp=8, tp=8, ep=8, zero=1, recompute="full", sp=True)),
    ("mixtral-8x7b", 64, 1024,
     dict(dp=4, tp=4, pp=2, ep=2, zero=2, recompute="selective", sp=True)),
    ("llama3-8b", 16, 4096, dict(dp=2, tp=2, pp=2, cp=4, zero=1, recompute="full", sp=True)),
    ("llama3-8b", 16, 4096, dict(dp=2, tp=4, pp=2, cp=2, cp_kv_exchange="ring")),
]  # fmt: skip


def _run(model, gb, seq, kw):
    par = ex.ParallelConfig(**kw)
    # no ZeRO overlap: every term's seconds are on the critical path, so they add up
    params = ex.training.TrainingParams(zero_gather_overlap_fraction=0.0,
                                        zero_grad_overlap_fraction=0.0)  # fmt: skip
    sim = ex.simulate(model, par, hardware=HW, global_batch=gb, seq=seq, params=params)
    cfg = ex.models.load(model)
    step = StepModel(cfg, par, ex.hardware.load(HW), gb, seq, params)
    return sim, step


@pytest.mark.parametrize("model, gb, seq, kw", CASES)
def test_step_totals_are_the_sum_of_the_terms(model, gb, seq, kw):
    sim, s = _run(model, gb, seq, kw)
    part, n_full, par, m = sim.partition, sim.config.recompute_num_layers, s.par, s.m
    stages, devices = range(par.stages), range(par.pp)
    dev_params = [
        sum(s.stage_params(part, c * par.pp + d) for c in range(par.virtual_stages))
        for d in devices
    ]
    stage_params = [s.stage_params(part, g) for g in stages]
    want = {
        "tp-comm": m * sum(sum(tp.stage_comm_s(s, part, g)) for g in stages),
        "ep-comm": m * sum(2 * ep.stage_s(s, part.layers(g)) for g in stages),
        "recompute": m * sum(recompute.layers_s(s, part.layers(g), n_full) for g in stages),
        "zero-gather": m
        * sum(
            (2 + zero.regather_fraction(s, part.layers(g), n_full))
            * zero.gather_s(s, p, part.layers(g))
            for g, p in zip(stages, stage_params, strict=True)
        )
        + sum(zero.tail_gather_s(s, p) for p in dev_params),
        "dp-comm": m
        * sum(
            dp.microbatch_s(s, p, part.layers(g)) for g, p in zip(stages, stage_params, strict=True)
        )
        + sum(dp.tail_s(s, p) for p in dev_params),
        "pp-comm": m * 2 * (par.stages - 1) * pp.p2p(s)[0],
        "cp-comm": m * sum(sum(cp.stage_s(s, part.layers(g), n_full)) for g in stages),
    }
    got = sim.timeline.time_by_kind()
    for kind, seconds in want.items():
        assert got[kind] == pytest.approx(seconds, rel=REL, abs=1e-15), kind
    # every kind that costs time in this configuration is one the terms account for
    assert {k for k, v in got.items() if v > 0} <= set(want) | {
        "compute-forward", "compute-backward", "optimizer", "idle"
    }  # fmt: skip

    for mem in sim.memory_per_device:
        params = dev_params[mem.stage]
        states = zero.model_state_bytes(params, par.weight_replicas, par.zero)
        assert (mem.parameters, mem.gradients, mem.optimizer_states) == pytest.approx(states)
        assert mem.zero_gather_buffer == zero.gather_buffer_bytes(s)
        chunks = [c * par.pp + mem.stage for c in range(par.virtual_stages)]
        counts = [part.layers(g) for g in chunks]
        assert mem.recompute_working_set == recompute.working_set(s, counts, n_full)

    worst = sim.memory.stage
    n = sum(part.layers(c * par.pp + worst) for c in range(par.virtual_stages))
    assert dict(sim.comm_bytes) == {
        "tp": tp.comm_bytes(s, n), "pp": pp.comm_bytes(s),
        "dp": dp.comm_bytes(s, dev_params[worst]), "zero": zero.comm_bytes(s, dev_params[worst]),
        "ep": ep.comm_bytes(s, n), "cp": cp.comm_bytes(s, n),
    }  # fmt: skip

    model_f, hw_f = s.flops()
    assert hw_f - model_f == pytest.approx(
        recompute.extra_flops_per_sequence(s) * gb / par.microbatch_size, rel=1e-9
    )


def test_dp_bytes_are_a_ring_all_reduce_and_zero1_moves_the_same():
    """ZeRO-1 replaces the all-reduce by a reduce-scatter and an all-gather of the same
    total volume (Rajbhandari et al. 2020, section 7.2.1): 2 (n-1)/n of the gradients."""
    base = dict(dp=8, microbatch_size=4)
    (s0, st0), (s1, _) = (_run("gpt2", 32, 512, base | {"zero": z}) for z in (0, 1))
    params = st0.stage_params(s0.partition, 0)
    grad_bytes = params * 2  # bf16 gradients
    b0, b1 = dict(s0.comm_bytes), dict(s1.comm_bytes)
    assert b0["dp"] == pytest.approx(2 * 7 / 8 * grad_bytes, rel=1e-12)
    assert b0["zero"] == 0
    assert b1["dp"] + b1["zero"] == pytest.approx(b0["dp"], rel=1e-12)


def test_zero_shards_and_recompute_ladder():
    """Each ZeRO stage divides one more model state by dp; recompute policies order
    activations none > selective > full, and per_layer sits between selective and full."""
    for z, split in ((0, (1, 1, 1)), (1, (1, 1, 8)), (2, (1, 8, 8)), (3, (8, 8, 8))):
        w, g, o = zero.model_state_bytes(1e9, 8, z)
        assert (w * split[0], g * split[1], o * split[2]) == pytest.approx((2e9, 2e9, 12e9))
    _, s = _run("gpt3-13b", 64, 2048, dict(dp=8, recompute="per_layer"))
    acts = [recompute.layers_act(s, 40, k) for k in range(41)]
    assert all(a > b for a, b in zip(acts, acts[1:], strict=False))
    assert acts[0] == 40 * recompute.layer_act(s, "selective")
    assert acts[-1] == 40 * recompute.layer_act(s, "full")
    assert recompute.layer_act(s, "none") > acts[0] / 40
    assert recompute.layer_policies("per_layer", 5, None) == (0, 5, 0)


def test_moe_terms_split_the_experts_and_pay_all_to_all():
    _, with_ep = _run("mixtral-8x7b", 64, 1024, dict(dp=8, tp=8, ep=8, zero=1, sp=True))
    _, no_ep = _run("mixtral-8x7b", 64, 1024, dict(dp=8, tp=8, zero=1, sp=True))
    layer = with_ep.costs.layer
    assert layer.expert_params > 0
    dense = (layer.params - layer.expert_params) / 8
    assert with_ep.layer_params == pytest.approx(dense + layer.expert_params / 64, rel=1e-12)
    assert no_ep.layer_params == pytest.approx(layer.params / 8, rel=1e-12)
    assert ep.all_to_all(no_ep) == (0.0, 0.0) and ep.all_to_all(with_ep)[0] > 0
    # all-to-all over 8: each device keeps 1/8 of its tokens and sends the rest
    _, sent = ep.all_to_all(with_ep)
    cfg = with_ep.cfg
    size = 1024 * cfg.experts_top_k * cfg.capacity_factor * cfg.hidden_size * 2 / 8
    assert sent == pytest.approx(2 * size * 7 / 8, rel=1e-12)
    assert math.isfinite(sent)
