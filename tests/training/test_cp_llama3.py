"""Llama 3 405B at 128K with context parallelism cp16: the flash attention kernel stays causal when
the mask op is fused away, the gathered K/V's lifetime (kept for the backward or gathered
again), the layer in flight's exchange buffers, and the interleaved schedule's in-flight
counts against PyTorch's own schedule."""

from dataclasses import replace

import pytest

import explorer as ex
from explorer.training import TrainingParams, activation_bytes_per_layer
from explorer.training.pipeline.schedule import build_schedule, peak_in_flight
from explorer.training.step_model.kernels import _flash_shape, attention_s, part_times
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.terms import cp as cp_terms

HW = "h100-sxm"
FLASH = TrainingParams(flash_attention=True)


def _step(model, par, gb, seq, params=FLASH, hw=HW):
    return StepModel(ex.models.load(model), par, ex.hardware.load(hw), gb, seq, params)


# ----- the causal mask survives its fusion ---------------------------------------------------
@pytest.mark.parametrize("model", ["llama3-8b", "gpt3-1.3b"])
def test_fused_mask_keeps_the_flash_kernel_causal(model):
    par = ex.ParallelConfig(tp=2)
    fused = _step(model, par, 2, 2048)  # default fused_ops: the mask has no kernel of its own
    alone = _step(model, par, 2, 2048, FLASH.replace(fused_ops=()))
    assert "mask" in FLASH.fused_ops
    f_flops, f_bytes, f_seq, f_causal, dtype = _flash_shape(fused.costs.layer.kernels)
    a_flops, a_bytes, a_seq, a_causal, _ = _flash_shape(alone.costs.layer.kernels)
    assert f_causal and a_causal
    assert (f_flops, f_bytes, f_seq) == (a_flops, a_bytes, a_seq)
    # the layer's forward holds the causal kernel: half the blocks (plus the diagonal)
    chip, p = fused.cluster.chip, fused.tparams
    causal = attention_s(f_flops, f_bytes, f_seq, True, False, chip, p, dtype)
    full = attention_s(f_flops, f_bytes, f_seq, False, False, chip, p, dtype)
    nb = f_seq / p.flash_block_tokens
    assert (causal - p.kernel_overhead_s) / (full - p.kernel_overhead_s) == pytest.approx(
        (nb + 1) / (2 * nb), rel=1e-9
    )
    # the scores GEMM carries the fused mask; the flag does not change a GEMM's time
    plain = _step(model, par, 2, 2048, TrainingParams())
    ops = plain.costs.layer.kernels
    flagged = [o for o in ops if o.causal]
    assert [o.name.split(".")[-1] for o in flagged] == ["scores"]
    unflagged = tuple(replace(o, causal=False) for o in ops)
    assert part_times(ops, chip, plain.tparams) == part_times(unflagged, chip, plain.tparams)


# ----- the gathered K/V: kept for the backward, or gathered again ----------------------------
def test_regathered_kv_is_not_kept_and_costs_one_more_all_gather():
    par = ex.ParallelConfig(dp=1, tp=8, pp=2, cp=16, sp=True, microbatch_size=1)
    seq = 131072
    kept = _step("llama3-405b", par, 2, seq)
    again = _step("llama3-405b", par, 2, seq, FLASH.replace(cp_kv_regather=True))
    kv = cp_terms.kv_bytes(kept)
    # K and V of seq/cp positions, 8 kv heads of 128 over tp 8, bf16
    assert kv == 2 * 1 * (seq // 16) * (8 * 128 // 8) * 2
    # per layer and microbatch: the other ranks' K, V (15 kv) kept, or none
    assert kept.layer_act("none") - again.layer_act("none") == pytest.approx(15 * kv, rel=1e-12)
    assert kept.layer_act("full") == again.layer_act("full")
    # the backward all-gathers K, V again before it reduce-scatters dK, dV
    assert again.cp_fwd_s == pytest.approx(kept.cp_fwd_s, rel=1e-12)
    assert again.cp_bwd_s == pytest.approx(kept.cp_bwd_s + kept.cp_fwd_s, rel=1e-12)
    assert again.cp_bwd_bytes == pytest.approx(kept.cp_bwd_bytes + kept.cp_fwd_bytes, rel=1e-12)
    # the layer in flight: dK, dV of the whole sequence; with regather its K, V as well
    assert cp_terms.transient_bytes(kept) == 16 * kv
    assert cp_terms.transient_bytes(again) == 2 * 16 * kv
    ring = _step("llama3-405b", par.replace(cp_kv_exchange="ring"), 2, seq)
    assert cp_terms.transient_bytes(ring) == 0.0
    # the hand formula: activation_bytes_per_layer without the kept K, V
    h, a = 16384, 128
    assert activation_bytes_per_layer(
        seq, 1, h, a, 8, True, "selective", cp=16, kv_hidden=1024, kv_kept=False
    ) == activation_bytes_per_layer(seq, 1, h, a, 8, True, "selective", cp=16, kv_exchange="ring")


def test_device_memory_counts_the_layer_in_flights_exchange_buffers():
    par = ex.ParallelConfig(dp=1, tp=8, pp=2, cp=16, sp=True, recompute="full")
    r = ex.simulate("llama3-405b", par, HW, 4, 131072, FLASH)
    r1 = ex.simulate("llama3-405b", par, HW, 4, 131072, FLASH.replace(cp_kv_regather=True))
    step = _step("llama3-405b", par, 4, 131072)
    # full recompute keeps no K, V either way: the difference is the re-gathered K, V
    diff = r1.memory.activations - r.memory.activations
    assert diff == pytest.approx(16 * cp_terms.kv_bytes(step), rel=1e-12)


# ----- the interleaved schedule's in-flight counts -----------------------------------------------
@pytest.mark.parametrize(
    "pp, v, m",
    [(16, 8, 16), (16, 8, 32), (4, 2, 8), (4, 3, 4)],  # Llama 3 128K, 8K dp64; small ones
)
def test_in_flight_counts_match_pytorch_interleaved_1f1b(pp, v, m):
    """Our peak chunk-microbatches in flight per device equal PyTorch's interleaved 1F1B
    (torch.distributed.pipelining, whose flexible rounds come from Llama 3's schedule):
    warm-up forwards plus the first steady one. Llama 3 405B at 128K: 16 microbatches per
    pipeline (128 sequences over dp 8) = pp, so devices 0-7 run all 16 x 8 chunk forwards
    before their first backward (device d keeps min(143 - 2 d, 128))."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    warm = schedules._get_warmup_ops
    built = build_schedule("interleaved_1f1b", pp, m, v)
    for d in range(pp):
        rounds = max(1, m // pp)
        theirs = min(warm(d, v, m // rounds, pp, m) + 1, m * v)
        assert peak_in_flight("interleaved_1f1b", pp, m, d, v) == theirs
        assert built.in_flight(d) == theirs
    if (pp, v, m) == (16, 8, 16):
        assert [built.in_flight(d) for d in range(pp)] == [min(143 - 2 * d, 128) for d in range(pp)]
