"""Llama 3 405B at 8K, dp64 tp8 pp16: the worst device's memory, term by term,
against numbers computed by hand from the paper's layout (Table 4, section 3.3.2), and the
fragmentation allowance taken over what the caching allocator holds only."""

import pytest

import explorer as ex
from explorer.training import MemoryAllowances, TrainingParams
from explorer.training.calibration.fit import predict
from explorer.training.calibration.published import published_runs, run_params
from explorer.training.simulate import _in_flight, estimate

GIB = 2**30
H, F, KV, D = 16384, 53248, 8, 128  # Llama 3 405B: hidden, SwiGLU inner, kv heads, head size
SEQ, TP, PP, V, DP = 8192, 8, 16, 8, 64


@pytest.fixture(scope="module")
def dp64():
    run = published_runs("llama3_2024_table4")[0]
    assert (run.config.dp, run.config.tp, run.config.pp, run.config.virtual_stages) == (
        DP, TP, PP, V,
    )  # fmt: skip
    params = run_params("llama3_2024_table4")
    return run, params, predict(run, params)


def test_in_flight_counts_are_megatrons_interleaved_warm_up(dp64):
    """Device d holds (p - d - 1) * 2 + (v - 1) * p + 1 chunk-microbatches at its peak
    (Narayanan et al. 2021's interleaved warm-up plus the first steady-state forward)."""
    run, params, _ = dp64
    step = _step(run, params)
    assert step.m == 2048 // DP  # 32 microbatches of one sequence
    flight = _in_flight(step)
    assert flight[0] == 15 * 2 + 7 * 16 + 1 == 143
    assert flight[1] == 14 * 2 + 7 * 16 + 1 == 141
    assert flight[PP - 1] == 7 * 16 + 1 == 113


def test_worst_device_breakdown_by_hand(dp64):
    """Device 1 holds eight one-layer chunks (126 layers + embedding + head on 128 chunks):
    its weights whole in 16 bits (FSDP keeps them unsharded after the forward), gradients and
    Adam states sharded over dp 64, and 141 layer-microbatches of activations."""
    _, params, sim = dp64
    m = sim.memory
    assert m.stage == 1
    layer = (2 * H * H + 2 * H * KV * D + 3 * H * F + 2 * H) / TP  # q, o; k, v; MLP; norms
    device_params = 8 * layer
    assert m.parameters == pytest.approx(2 * device_params, rel=1e-12)
    assert m.gradients == pytest.approx(2 * device_params / DP, rel=1e-12)
    assert m.optimizer_states == pytest.approx(12 * device_params / DP, rel=1e-12)
    # per token and layer: 8 replicated + 23.75 split bytes over h, all / tp under SP
    per_layer = SEQ * H * (8 + 23.75) / TP
    assert m.activations == pytest.approx(141 * per_layer, rel=1e-12)
    assert m.recompute_working_set == m.zero_gather_buffer == 0.0
    # FSDP reduce-scatters one layer's gradients at a time: one layer's whole bf16 gradients
    assert m.zero_reduce_buffer == pytest.approx(2 * layer, rel=1e-12)
    al = params.allowances
    held = m.parameters + m.gradients + m.optimizer_states + m.activations + m.zero_reduce_buffer
    assert m.fragmentation == pytest.approx(al.fragmentation_fraction * held, rel=1e-12)
    assert m.total == pytest.approx(
        held * (1 + al.fragmentation_fraction) + al.runtime_context_bytes
        + al.communication_buffer_bytes, rel=1e-12,
    )  # fmt: skip
    # the hand numbers: 5.94 GiB of weights, 0.74 GiB of a layer's gradients, 69.95 GiB of
    # activations
    assert 2 * device_params / GIB == pytest.approx(5.937, abs=1e-3)
    assert 2 * layer / GIB == pytest.approx(0.742, abs=1e-3)
    assert 141 * per_layer / GIB == pytest.approx(69.95, abs=1e-2)


def test_fragmentation_leaves_out_context_and_collective_buffers():
    """The CUDA context and NCCL's buffers are allocated outside PyTorch's caching
    allocator: adding X bytes of either adds X to the total, not X * (1 + fraction)."""
    par = ex.ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=2)
    base = TrainingParams()
    more = base.replace(
        allowances=MemoryAllowances(
            runtime_context_bytes=3 * GIB, communication_buffer_bytes=2 * GIB
        )
    )
    a = estimate("gpt2", par, "a100-80g", 16, 1024, base).memory
    b = estimate("gpt2", par, "a100-80g", 16, 1024, more).memory
    assert a.fragmentation == b.fragmentation
    assert b.total - a.total == pytest.approx((3 - 1) * GIB + (2 - 0.5) * GIB, rel=1e-12)
    outside = ("runtime_context", "communication_buffers", "fragmentation")
    held = sum(v for r, v in a.rows() if r not in outside)  # what the allocator holds
    assert a.fragmentation == pytest.approx(0.05 * held, rel=1e-12)


@pytest.mark.parametrize("n_full", [0, 2])
def test_memory_capped_split_fits_the_cap_with_the_corrected_allowance(n_full):
    """The capped split reserves the context and NCCL buffers outside the fragmentation
    fraction, as the breakdown counts them: every device of the split it returns fits."""
    par = ex.ParallelConfig(dp=16, tp=8, pp=8, microbatch_size=2, recompute="per_layer",
                            recompute_num_layers=n_full)  # fmt: skip
    sim = ex.simulate("gpt3-175b", par, "a100-80g", 1536, 2048, TrainingParams())
    assert str(sim.partition_choice).startswith("memory_capped")
    assert all(m.total <= sim.memory_cap_bytes for m in sim.memory_per_device)


def _step(run, params):
    from explorer.training.step_model.model import StepModel

    return StepModel(run.cfg, run.config, run.cluster, run.global_batch, run.seq, params)


@pytest.mark.parametrize(
    "zero, dp, bucket, want",
    [
        (0, 8, 5e8, 0.0),  # the whole gradient buffer is counted as gradients
        (1, 8, 5e8, 0.0),
        (2, 1, 5e8, 0.0),  # one replica: nothing to reduce
        (2, 8, 5e8, "layer"),  # a gpt3-13b layer (3.96e7 parameters on tp 8) < the bucket
        (3, 8, 1e7, 1e7 * 2),  # a bucket smaller than the layer
    ],
)
def test_zero_reduce_buffer_by_hand(zero, dp, bucket, want):
    """One reduce unit of whole 16-bit gradients: min(the device's largest part, bucket)."""
    from explorer.training.step_model.model import StepModel

    cfg = ex.models.load("gpt3-13b")
    par = ex.ParallelConfig(dp=dp, tp=8, zero=zero, sp=True)
    p = TrainingParams(zero_reduce_bucket_params=bucket)
    s = StepModel(cfg, par, ex.hardware.load("a100-80g"), dp, 2048, p)
    h, a, f = cfg.hidden_size, cfg.num_heads * cfg.dim_head, cfg.ffn  # 5140, 5120, 20560
    # q, k, v, o and fc1, fc2 weights; their biases (3a + h + f + h); two LayerNorms (4h)
    layer = (4 * h * a + 2 * h * f + 3 * a + f + 6 * h) / 8
    assert s.layer_params == pytest.approx(layer, rel=1e-12)
    expect = 2 * layer if want == "layer" else want
    mem = estimate(cfg, par, "a100-80g", dp, 2048, p).memory
    assert mem.zero_reduce_buffer == pytest.approx(expect, rel=1e-12)
