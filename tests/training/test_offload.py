"""Host offload of optimizer states and parameters over PCIe."""

from __future__ import annotations

import dataclasses

import pytest

import explorer as ex
from explorer.hardware import HardwareError, load
from explorer.hardware.host import HOST_LINKS, host_link
from explorer.training import OffloadError, TrainingParams
from explorer.training.offload import OffloadParams, apply_offload, offload_link, offload_terms


@pytest.fixture(scope="module")
def too_big():
    """Llama-2-7B on one A100-80GB: 16 bytes per parameter alone are 100 GiB."""
    cfg = ex.models.load("llama2-7b")
    par = ex.ParallelConfig(dp=1, microbatch_size=1, recompute="full")
    sim = ex.simulate(cfg, par, "a100-80g", global_batch=8, seq=2048)
    assert not sim.fits
    return cfg, sim


def test_host_links_cite_their_numbers():
    assert host_link(load("h100-sxm")).bandwidth_bytes_per_s == 64e9  # PCIe Gen5 x16
    assert host_link(load("a100-80g")).bandwidth_bytes_per_s == 32e9  # PCIe Gen4 x16
    for link in HOST_LINKS.values():
        assert "datasheet" in link.source
    assert "assumption" in host_link(load("ascend-910b")).source
    toy = dataclasses.replace(
        load("a100-80g"), chip=dataclasses.replace(load("a100-80g").chip, name="toy")
    )
    # the hardware floor says which link is missing; offload, which cannot be priced
    # without it, raises its own error with the same message
    with pytest.raises(HardwareError, match="no host link known for chip 'toy'.*HOST_LINKS"):
        host_link(toy)
    with pytest.raises(OffloadError, match="no host link known for chip 'toy'.*HOST_LINKS"):
        offload_link(toy)


def test_optimizer_offload_moves_the_states_and_prices_the_transfers(too_big):
    cfg, sim = too_big
    tp = TrainingParams()
    t = offload_terms(sim, "optimizer", load("a100-80g"), tp)
    link = t.link
    n = sim.memory.optimizer_states / tp.state.optimizer_bytes  # parameters updated here
    assert n == pytest.approx(cfg.num_params(), rel=1e-6)  # one device: all of them
    assert t.gradient_copy_s == pytest.approx(link.latency_s + n * 2 / 32e9)
    assert t.weight_copy_s == pytest.approx(link.latency_s + n * 2 / 32e9)
    host_bw = link.host_memory_bandwidth_bytes_per_s * OffloadParams().host_memory_efficiency
    assert t.host_step_s == pytest.approx(n * 28 / host_bw)
    # the gradient copy hides behind the last microbatch's backward, as far as it lasts
    window = dict(sim.time_by_kind)["compute-backward"] / sim.config.num_microbatches
    hidden = max(0.0, t.gradient_copy_s - window)
    assert t.exposed_s == pytest.approx(hidden + t.host_step_s + t.weight_copy_s)
    assert t.host_bytes == sim.memory.optimizer_states and t.fits_host
    moved, _ = apply_offload(sim, "optimizer", load("a100-80g"), tp)
    assert moved.memory.optimizer_states == 0
    saved = sim.memory.total - moved.memory.total
    assert saved == pytest.approx(t.device_bytes_saved)
    assert moved.step_time_s == pytest.approx(sim.step_time_s + t.added_s)
    assert moved.fits
    kinds = dict(moved.time_by_kind)
    assert "host-optimizer" in kinds and "optimizer" not in kinds
    assert sum(kinds.values()) == pytest.approx(moved.step_time_s)  # one device: no average


def test_parameter_offload_keeps_a_prefetch_buffer(too_big):
    _, sim = too_big
    tp = TrainingParams()
    moved, t = apply_offload(sim, "optimizer+params", load("a100-80g"), tp)
    layers = max(sim.partition.layer_counts())
    assert moved.memory.parameters == pytest.approx(sim.memory.parameters * 2 / layers)
    assert t.param_stream_s > 0
    only_opt, _ = apply_offload(sim, "optimizer", load("a100-80g"), tp)
    assert moved.memory.total < only_opt.memory.total
    assert moved.step_time_s >= only_opt.step_time_s


def test_plan_training_offloads_when_nothing_fits_on_the_device():
    args = dict(devices=1, hardware="a100-80g", global_batch=8, seq=2048)
    with pytest.raises(ex.training.TrainingPlanError) as err:
        ex.plan_training("llama2-7b", **args)
    text = str(err.value)
    assert "minimum memory per device" in text  # the device-only diagnosis stays
    assert "With host offload (optimizer in host memory)" in text and "offload=True" in text
    plan = ex.plan_training("llama2-7b", **args, offload=True)
    assert plan.offload is not None and plan.offload.kind == "optimizer"
    assert plan.sim.fits and plan.sim.memory.optimizer_states == 0
    # the plan's step is the device-only step of its configuration plus what offload adds
    alone = ex.simulate("llama2-7b", plan.config, "a100-80g", global_batch=8, seq=2048)
    assert not alone.fits
    assert plan.sim.step_time_s == pytest.approx(alone.step_time_s + plan.offload.added_s)
    assert "offload optimizer over pcie-gen4-x16" in plan.report()


def test_a_plan_that_fits_on_the_devices_does_not_offload():
    plan = ex.plan_training("gpt2", devices=8, hardware="a100-80g", global_batch=64, seq=512)
    assert plan.offload is None


@pytest.mark.parametrize(
    "kwargs", [{"host_memory_efficiency": 0}, {"gradient_overlap_fraction": 1.5}]
)
def test_offload_params_are_checked(kwargs):
    with pytest.raises(OffloadError, match="expected a fraction"):
        OffloadParams(**kwargs)


def test_offload_kind_is_checked(too_big):
    _, sim = too_big
    with pytest.raises(OffloadError, match="offload='none'.*'optimizer'"):
        offload_terms(sim, "none", load("a100-80g"), TrainingParams())
