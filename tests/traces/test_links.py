"""explorer.traces.link_fit: latency and bandwidth per link level from a trace's collectives:
recovered exactly from synthetic timings of the planner's own ring model, closer than the
catalog on the vendored real traces, named errors for what cannot be fitted."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware.collectives import ring_time
from explorer.traces import (
    Activity,
    Collective,
    KinetoTrace,
    RankTrace,
    TracesError,
    link_fit,
    load_kineto,
    vendored,
)
from explorer.traces.cpu_runs import host_cluster

A100 = ex.hardware.load("a100-80g")


def _trace(samples) -> KinetoTrace:
    kernels = tuple(
        Activity("ncclKernel", "kernel", 10.0 * i, secs * 1e6, 7, 7, i, None, "communication",
                 collective=Collective(kind, size // 4, "float32", len(group), group))
        for i, (kind, size, group, secs) in enumerate(samples)
    )  # fmt: skip
    r = RankTrace("synthetic", 0, 16, "nccl", (), "gpu", kernels, (), (), None, len(kernels))
    return KinetoTrace((r,))


def test_latency_and_bandwidth_are_recovered_per_level():
    intra, inter = (8e-6, 150e9), (30e-6, 20e9)
    samples = []
    for kind in ("all-reduce", "all-gather", "reduce-scatter"):
        for size in (1 << 12, 1 << 18, 1 << 24):
            for group, (lat, bw) in (((0, 1, 2, 3), intra), ((0, 8), inter)):
                secs = ring_time(kind, size, len(group), bw, lat)
                samples.append((kind, size, group, secs))
                samples.append((kind, size, group, secs * 3))  # waited for a late peer
    fit = link_fit(_trace(samples), A100)
    by = {f.level: f for f in fit.fits}
    assert set(by) == {"intra-node", "inter-node"}
    for level, (lat, bw) in (("intra-node", intra), ("inter-node", inter)):
        f = by[level]
        assert f.latency_s == pytest.approx(lat, rel=1e-6)
        assert f.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-6)
        assert f.messages == 9 and f.samples == 18 and f.error_after == pytest.approx(0, abs=1e-9)
    c = fit.cluster()
    assert (c.intra_node_latency_s, c.inter_node_bandwidth_bytes_per_s) == pytest.approx(
        (intra[0], inter[1]), rel=1e-6
    )
    assert c.chip == A100.chip and c.name == A100.name


def test_one_message_size_scales_the_cluster_figures_together():
    secs = 3 * ring_time("all-reduce", 1 << 20, 2, A100.intra_node_bandwidth_bytes_per_s,
                         A100.intra_node_latency_s)  # fmt: skip
    (f,) = link_fit(_trace([("all-reduce", 1 << 20, (0, 1), secs)]), A100).fits
    assert "one message size" in f.note
    assert f.latency_s == pytest.approx(3 * A100.intra_node_latency_s)
    assert f.bandwidth_bytes_per_s == pytest.approx(A100.intra_node_bandwidth_bytes_per_s / 3)


@pytest.mark.parametrize(
    "name, cluster",
    [("nccl_data.json.gz", A100), ("cpu_gloo_fsdp", host_cluster(vendored("cpu_gloo_fsdp")))],
)
def test_real_traces_fit_closer_than_the_profile(name, cluster):
    fit = link_fit(load_kineto(vendored(name)), cluster)
    (f,) = fit.fits  # both runs are 2 ranks on one node
    assert f.level == "intra-node" and f.messages >= 4 and not f.note
    assert abs(f.error_after) < abs(f.error_before)
    assert abs(f.error_after) < 0.1


def test_what_cannot_be_fitted_is_named():
    with pytest.raises(TracesError, match="no ring collective"):
        link_fit(load_kineto(vendored("sampled_rank-0.json.gz")), A100)
    with pytest.raises(TracesError, match="expected a KinetoTrace"):
        link_fit("trace.json", A100)
    with pytest.raises(TracesError, match="expected a Cluster"):
        link_fit(load_kineto(vendored("nccl_data.json.gz")), "a100-80g")
