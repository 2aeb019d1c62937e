"""Kernel time by shape (explorer/training/step_model/kernels.py) and the step model's knobs.

Claims checked: a GEMM one tile over a wave boundary costs exactly one more wave; memory-
bound kernels scale with their bytes; a GEMM never beats its HBM roofline; flash
attention skips the masked blocks; overlap=1 hides communication up to the backward
time; every float knob of TrainingParams is validated with an error naming it.
"""

import dataclasses
import math

import pytest

import explorer as ex
from explorer.training import TrainingParams, TrainingParamsError
from explorer.training.params import knob_table
from explorer.training.step_model.costs import OpShape
from explorer.training.step_model.kernels import (
    KERNEL_FIELDS,
    attention_s,
    gemm_s,
    memory_s,
    part_times,
)
from explorer.training.step_model.model import StepModel, exposed_s

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

HW = ex.hardware.load("a100-80g")
CHIP = HW.chip
NO_OVERHEAD = TrainingParams(kernel_overhead_s=0.0)
KNOBS = [f for f in dataclasses.fields(TrainingParams) if "range" in f.metadata]


def _one_tile_chip(units=108, tile=(128, 128)):
    return dataclasses.replace(CHIP, compute_units=units, matmul_tile_shapes=(tile,))


def test_chip_profiles_carry_sm_counts_and_cublas_tiles():
    assert CHIP.compute_units == 108 and (256, 128) in CHIP.matmul_tile_shapes
    assert ex.hardware.load("h100-sxm").chip.compute_units == 132
    assert ex.hardware.load("tpu-v4").chip.compute_units is None  # no SM-style waves
    with pytest.raises(ex.hardware.HardwareError, match="compute_units=0"):
        dataclasses.replace(CHIP, compute_units=0)
    with pytest.raises(ex.hardware.HardwareError, match="matmul_tile_shapes"):
        dataclasses.replace(CHIP, matmul_tile_shapes=((128,),))


@pytest.mark.parametrize("units, tile, rows, cols", [(108, (128, 128), 12, 9),
                                                    (132, (256, 128), 12, 11)])  # fmt: skip
def test_one_tile_over_a_wave_boundary_costs_one_more_wave(units, tile, rows, cols):
    chip = _one_tile_chip(units, tile)
    tm, tn = tile
    k = 8192  # compute-bound shapes: the HBM roofline must not decide
    m, n = tm * rows, tn * cols  # rows x cols = units tiles: exactly one wave
    full = gemm_s(1, m, n, k, 2, chip, NO_OVERHEAD)
    over = gemm_s(1, m, n + 1, k, 2, chip, NO_OVERHEAD)  # one more tile column: two waves
    under = gemm_s(1, m - 1, n, k, 2, chip, NO_OVERHEAD)  # a partly filled tile: one wave
    per_unit = CHIP.peak_flops("bf16") * NO_OVERHEAD.matmul_efficiency_cap / units
    wave = 2.0 * tm * tn * k / per_unit
    assert full == pytest.approx(wave, rel=1e-12)
    assert under == pytest.approx(wave, rel=1e-12)
    assert over == pytest.approx(2 * wave, rel=1e-12)
    # batched: the tiles of every batch entry share the waves
    assert gemm_s(2, m // 2, n, k, 2, chip, NO_OVERHEAD) == pytest.approx(wave, rel=1e-12)


def test_gemm_is_the_best_tile_and_never_beats_its_roofline():
    p = NO_OVERHEAD
    largest = dataclasses.replace(CHIP, matmul_tile_shapes=CHIP.matmul_tile_shapes[:1])
    for m, n, k in [(2048, 640, 5140), (8192, 8192, 64), (64, 50257, 5140), (1, 1, 1)]:
        t = gemm_s(1, m, n, k, 2, CHIP, p)
        flops_floor = 2.0 * m * n * k / (CHIP.peak_flops("bf16") * p.matmul_efficiency_cap)
        bytes_floor = 2 * (m * k + k * n + m * n) / (CHIP.memory_bandwidth_bytes_per_s * 0.8)
        assert t >= max(flops_floor, bytes_floor) * (1 - 1e-12)
        # more tiles to choose from never make a kernel slower
        assert t <= gemm_s(1, m, n, k, 2, largest, p) * (1 + 1e-12)
    # a GEMM with a tiny K is memory-bound: the bytes decide
    m, n, k = 8192, 8192, 8
    assert gemm_s(1, m, n, k, 2, CHIP, p) == pytest.approx(
        2 * (m * k + k * n + m * n) / (CHIP.memory_bandwidth_bytes_per_s * p.hbm_efficiency)
    )
    assert gemm_s(1, 0, 5, 5, 2, CHIP, p) == 0.0


def test_gemm_without_units_is_flops_at_the_cap():
    # a chip no KERNEL_FACTS entry names, with no units or tiles given
    chip = dataclasses.replace(CHIP, name="toy", compute_units=None, matmul_tile_shapes=())
    assert chip.compute_units is None
    m = n = k = 4096
    assert gemm_s(1, m, n, k, 2, chip, NO_OVERHEAD) == pytest.approx(
        2.0 * m * n * k / (CHIP.peak_flops("bf16") * NO_OVERHEAD.matmul_efficiency_cap)
    )


@pytest.mark.parametrize("nbytes", [1e6, 3.5e7, 2e9])
def test_memory_bound_ops_scale_with_bytes(nbytes):
    for eff in (0.5, 0.8):
        p = TrainingParams(kernel_overhead_s=0.0, hbm_efficiency=eff)
        bw = CHIP.memory_bandwidth_bytes_per_s * eff
        assert memory_s(nbytes, CHIP, p) == pytest.approx(nbytes / bw, rel=1e-12)
        assert memory_s(2 * nbytes, CHIP, p) == pytest.approx(2 * memory_s(nbytes, CHIP, p))
    p = TrainingParams(kernel_overhead_s=3e-6)
    assert memory_s(nbytes, CHIP, p) - memory_s(0.0, CHIP, p) == pytest.approx(
        nbytes / (CHIP.memory_bandwidth_bytes_per_s * p.hbm_efficiency)
    )


def test_part_times_add_kernels_backward_ratios_and_overheads():
    ln = OpShape("ln", "memory", flops=0.0, read_bytes=3e7, written_bytes=1e7)
    mm = OpShape("mm", "gemm", flops=2.0 * 2048 * 1024 * 4096, read_bytes=0.0,
                 written_bytes=0.0, m=2048, n=1024, k=4096)  # fmt: skip
    view = OpShape("r", "view", flops=0.0, read_bytes=1e9, written_bytes=1e9)
    p = TrainingParams(kernel_overhead_s=5e-6, memory_bound_backward_ratio=1.5)
    t = part_times((ln, mm, view), CHIP, p)
    assert (t.forward_kernels, t.backward_kernels) == (2, 3)  # view: no kernel; mm: dA, dB
    fwd = memory_s(4e7, CHIP, p) + gemm_s(1, 2048, 1024, 4096, 2, CHIP, p)
    bwd = memory_s(6e7, CHIP, p) + gemm_s(1, 2048, 4096, 1024, 2, CHIP, p) + gemm_s(
        1, 4096, 1024, 2048, 2, CHIP, p)  # fmt: skip
    assert t.forward_s == pytest.approx(fwd, rel=1e-12)
    assert t.backward_s == pytest.approx(bwd, rel=1e-12)
    frozen = dataclasses.replace(mm, grads=1)  # an input that needs no gradient
    assert part_times((frozen,), CHIP, p).backward_kernels == 1


def test_flash_attention_skips_masked_blocks_and_replaces_the_core():
    p = NO_OVERHEAD
    flops, nbytes = 4.0 * 2048 * 2048 * 128 * 12, 4 * 2048 * 128 * 12 * 2
    full = attention_s(flops, nbytes, 2048, False, False, CHIP, p)
    causal = attention_s(flops, nbytes, 2048, True, False, CHIP, p)
    nb = 2048 / p.flash_block_tokens
    assert causal / full == pytest.approx((nb + 1) / (2 * nb), rel=1e-12)
    back = attention_s(flops, nbytes, 2048, False, True, CHIP, p)
    assert back / full == pytest.approx(p.flash_backward_flops_ratio, rel=1e-12)

    cfg = ex.models.load("gpt3-1.3b")
    par = ex.ParallelConfig(dp=2, tp=2, recompute="selective")
    plain = StepModel(cfg, par, HW, 8, 2048, TrainingParams())
    flash = StepModel(cfg, par, HW, 8, 2048, TrainingParams(flash_attention=True))
    # the s x s scores, softmax and their kernels are gone; nothing is recomputed
    assert flash.costs.layer.forward_s < plain.costs.layer.forward_s
    assert flash.costs.layer.recompute_selective_s == 0 < plain.costs.layer.recompute_selective_s


def test_exposed_overlap_hides_up_to_the_window():
    assert exposed_s(3.0, 2.0, 1.0) == 1.0  # the backward (2 s) hides 2 of 3 s
    assert exposed_s(1.0, 2.0, 1.0) == 0.0  # all of it
    assert exposed_s(1.0, 2.0, 0.25) == 0.75
    assert exposed_s(1.0, 2.0, 0.0) == 1.0


def _sim(**kw):
    par = ex.ParallelConfig(dp=16, microbatch_size=4)
    return ex.simulate("gpt2", par, "a100-80g", 64, 1024, params=TrainingParams(**kw))


def test_overlap_one_hides_the_gradient_all_reduce_up_to_the_backward():
    base, hidden = _sim(), _sim(grad_overlap_fraction=1.0)
    comm = dict(base.time_by_kind)["dp-comm"]
    assert comm > 0
    # dp-comm in time_by_kind is per pipeline device (pp=1: the device's tail)
    cfg, hw = ex.models.load("gpt2"), ex.hardware.load("a100-80g")
    s = StepModel(cfg, hidden.config, hw, 64, 1024, TrainingParams(grad_overlap_fraction=1.0))
    window = s.device_backward_s(hidden.partition, 0, None)
    want = max(comm - window, 0.0)
    assert dict(hidden.time_by_kind)["dp-comm"] == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert base.step_time_s - hidden.step_time_s == pytest.approx(comm - want, rel=1e-9)
    # a slower network: the all-reduce outlasts the backward, only the window is hidden
    slow = dataclasses.replace(hw, inter_node_bandwidth_bytes_per_s=1e8)
    par = ex.ParallelConfig(dp=16, microbatch_size=4)
    a = ex.simulate("gpt2", par, slow, 64, 1024)
    b = ex.simulate("gpt2", par, slow, 64, 1024, TrainingParams(grad_overlap_fraction=1.0))
    assert a.step_time_s - b.step_time_s == pytest.approx(window, rel=1e-9)


def test_zero3_gathers_hide_behind_compute():
    par = ex.ParallelConfig(dp=8, zero=3)
    a = ex.simulate("gpt2", par, "a100-80g", 16, 512)
    b = ex.simulate(
        "gpt2", par, "a100-80g", 16, 512, TrainingParams(zero_gather_overlap_fraction=1)
    )
    assert dict(a.time_by_kind)["zero-gather"] > dict(b.time_by_kind)["zero-gather"]
    assert b.step_time_s < a.step_time_s


def test_microbatch_overhead_adds_per_stage_pass():
    par = ex.ParallelConfig(pp=2, microbatch_size=1)
    a = ex.simulate("gpt2", par, "a100-80g", 8, 256)
    b = ex.simulate("gpt2", par, "a100-80g", 8, 256, TrainingParams(microbatch_overhead_s=1e-3))
    m = a.config.num_microbatches
    busy = lambda r: sum(v for k, v in r.time_by_kind if k.startswith("compute"))  # noqa: E731
    # per device: m forwards and m backwards, 1 ms each
    assert busy(b) - busy(a) == pytest.approx(2 * m * 1e-3, rel=1e-9)


def test_simulate_responds_smoothly_to_the_float_knobs():
    """Calibration fits these by least squares: a small change of a knob moves the step
    time by a small amount, in the expected direction."""
    par = ex.ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=2)

    def t(**kw):
        return ex.simulate("gpt2", par, "a100-80g", 16, 512, TrainingParams(**kw)).step_time_s

    base = t()
    for name, value, slower in [("matmul_efficiency_cap", 0.6, True),
                                ("hbm_efficiency", 0.7, True),
                                ("kernel_overhead_s", 4e-6, True),
                                ("memory_bound_backward_ratio", 2.2, True)]:  # fmt: skip
        x = t(**{name: value})
        assert (x > base) == slower, name
        assert abs(x / base - 1) < 0.2, name
    near = t(matmul_efficiency_cap=0.6501)
    assert abs(near / base - 1) < 1e-3


def test_flat_kernel_model_keeps_the_search_costs():
    cfg = ex.models.load("gpt2")
    par = ex.ParallelConfig(dp=2, tp=2)
    flat = StepModel(cfg, par, HW, 8, 512, TrainingParams(kernel_model="flat"))
    from explorer.training.step_model.stage_costs import stage_costs

    p = TrainingParams()
    whole = stage_costs(cfg, 512, 2, 1, HW, p.cost, p.search_method, p.fused_ops)
    assert flat.costs.layer.forward_s == whole.layer.forward_s
    shaped = StepModel(cfg, par, HW, 8, 512, p)
    assert shaped.costs.layer.forward_s != whole.layer.forward_s
    assert shaped.costs.layer.tp_forward_s == whole.layer.tp_forward_s  # comm untouched


@pytest.mark.parametrize("knob", KNOBS, ids=lambda f: f.name)
def test_every_knob_is_validated_with_its_name(knob):
    lo, hi = knob.metadata["range"]
    auto = knob.metadata.get("auto")  # None stands for the chip's (or the state's) figure
    for bad in (math.nan, math.inf, -math.inf, hi + 1.0, lo - 1.0, "0.5", True, None):
        if bad is None and auto:
            assert getattr(TrainingParams(**{knob.name: None}), knob.name) is None
            continue
        with pytest.raises(TrainingParamsError, match=f"TrainingParams.{knob.name}="):
            TrainingParams(**{knob.name: bad})
    if knob.metadata["low_open"]:
        with pytest.raises(TrainingParamsError, match=knob.name):
            TrainingParams(**{knob.name: lo})
    TrainingParams(**{knob.name: hi})  # the range is inclusive above
    assert knob.metadata["unit"] and knob.metadata["source"]
    assert "assumption" in knob.metadata["source"] or any(
        c.isdigit() for c in knob.metadata["source"]
    )  # a citation (with its year) or the word assumption


def test_kernel_fields_and_the_knob_table():
    names = {f.name for f in dataclasses.fields(TrainingParams)}
    assert set(KERNEL_FIELDS) <= names
    table = knob_table(TrainingParams())
    for f in KNOBS:
        assert f"\n{f.name} | " in table
    for bad, msg in [(dict(kernel_model="fast"), "kernel_model='fast'"),
                     (dict(flash_attention=1), "flash_attention=1")]:  # fmt: skip
        with pytest.raises(TrainingParamsError, match=msg):
            TrainingParams(**bad)


@pytest.mark.parametrize("model, tp", [("gpt2", 2), ("gpt3-13b", 8), ("llama3-8b", 2)])
def test_layer_kernels_are_the_searched_ops_local_shapes(model, tp):
    """Every GEMM's (batch, M, N, K) reproduces its local FLOPs (2 batch M N K), and the
    layer's GEMM FLOPs over the tp ranks are the whole layer's contraction FLOPs."""
    cfg = ex.models.load(model)
    s = StepModel(cfg, ex.ParallelConfig(dp=2, tp=tp), HW, 8, 512, TrainingParams())
    ops = s.costs.layer.kernels
    gemms = [o for o in ops if o.kind == "gemm"]
    assert {"q", "o"} <= {o.name.split(".")[-1] for o in gemms}
    for o in gemms:
        assert 2 * o.batch * o.m * o.n * o.k == o.flops, o.name
        assert o.grads == 2  # activations and weights both need gradients
    g = ex.models.build(cfg.replace(num_layers=1), batch=1, seq=512)
    whole = sum(
        g.node_flops(n.name)
        for n in g.ops
        if n.scope.startswith("layers.0") and g.group(n.name).value == "contraction"
    )
    assert sum(o.flops for o in gemms) * tp == pytest.approx(whole, rel=1e-12)
    # fused ops are left out of the layer's kernels (TrainingParams.fused_ops)
    assert not {o.name.split(".")[-1] for o in ops} & set(TrainingParams().fused_ops)


def test_flash_attention_keeps_no_scores_in_memory():
    """With flash attention, no recomputation keeps the activations selective
    recomputation keeps (the 5 a s / h term of Korthikanti et al. is gone), and selective
    recomputation costs no time or working set."""
    cfg = ex.models.load("gpt3-1.3b")
    par = ex.ParallelConfig(dp=2, tp=2)
    plain = StepModel(cfg, par, HW, 8, 2048, TrainingParams())
    flash = StepModel(cfg, par, HW, 8, 2048, TrainingParams(flash_attention=True))
    assert flash.layer_act("none") == plain.layer_act("selective") < plain.layer_act("none")
    assert flash.layer_act("full") == plain.layer_act("full")
    sel = par.replace(recompute="selective")
    a = ex.simulate(cfg, par, HW, 8, 2048, TrainingParams(flash_attention=True))
    b = ex.simulate(cfg, sel, HW, 8, 2048, TrainingParams(flash_attention=True))
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.memory.total == pytest.approx(b.memory.total, rel=1e-12)
