"""explorer.training.kernel_efficiency: GEMM and attention efficiency from a trace's kernels,
fitted with the step model's kernel times: recovered exactly from synthetic timings, real
CPU runs reproduced at the fitted value, named errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

import explorer as ex
from explorer.traces import Activity, KinetoTrace, RankTrace, load_kineto, vendored
from explorer.traces.cpu_runs import host_cluster
from explorer.training import CalibrationError, kernel_efficiency
from explorer.training.step_model.kernels import attention_s, gemm_s

A100 = ex.hardware.load("a100-80g")
P = ex.TrainingParams()
FLASH = "aten::_scaled_dot_product_flash_attention"
GEMMS = ((64, 256, 512), (512, 1024, 2048), (4096, 4096, 1024), (2048, 8192, 8192))
ATT = (2, 8, 1024, 64)  # b, h, s, d


def _trace(mm_eff: float, att_eff: float) -> KinetoTrace:
    p = replace(P, matmul_efficiency_cap=mm_eff, flash_attention_efficiency=att_eff)
    ops, ts = [], 0.0
    for m, k, n in GEMMS:
        secs = gemm_s(1, m, n, k, 2, A100.chip, p, "bf16")
        ops.append(Activity("aten::mm", "cpu_op", ts, secs * 1e6, 1, category="matmul",
                            shapes=((m, k), (k, n))))  # fmt: skip
        ts += 1e4
    b, h, s, d = ATT
    for backward in (False, True):
        secs = attention_s(4.0 * b * h * s * s * d, 2 * b * h * d * 4 * s, s, True, backward,
                           A100.chip, p, "bf16")  # fmt: skip
        name = FLASH + ("_backward" if backward else "")
        ops.append(Activity(name, "cpu_op", ts, secs * 1e6, 1, category="attention",
                            shapes=(ATT, ATT, ATT)))  # fmt: skip
        ts += 1e4
    return KinetoTrace((RankTrace("synthetic", 0, 1, "", (), "cpu", (), tuple(ops), (), 1, 0),))


def test_the_efficiency_that_made_the_times_is_recovered():
    eff = kernel_efficiency(_trace(0.37, 0.45), A100)
    assert eff.value("matmul") == pytest.approx(0.37, rel=1e-6)
    assert eff.value("attention") == pytest.approx(0.45, rel=1e-6)
    rows = {(r.part, r.shape_class): r for r in eff.rows}
    # three shape classes, each at the same value; attention forward and backward apart
    assert {"min dim < 128", "min dim 128-1023", "min dim >= 1024"} <= {c for _, c in rows}
    assert all(r.efficiency == pytest.approx(0.37 if r.part == "matmul" else 0.45, rel=1e-6)
               for r in eff.rows)  # fmt: skip
    assert rows[("attention", "backward")].calls == 1 and rows[("matmul", "all")].calls == 4
    p = eff.params(P)
    assert (p.matmul_efficiency_cap, p.flash_attention_efficiency) == pytest.approx((0.37, 0.45))


def test_times_below_what_the_peak_allows_are_not_fitted():
    t = _trace(1.0, 1.0)
    fast = KinetoTrace((replace(t.ranks[0], ops=tuple(a._replace(dur=a.dur / 2) for a in t.ranks[0].ops)),))  # fmt: skip
    eff = kernel_efficiency(fast, A100)
    assert eff.value("matmul") is None and "faster than the model allows" in eff.rows[0].note
    assert eff.params(P) == P


@pytest.mark.parametrize("name", ["cpu_gloo_ddp", "cpu_gloo_fsdp"])
def test_the_cpu_runs_are_reproduced_at_the_fitted_value(name):
    cluster = host_cluster(vendored(name))
    eff = kernel_efficiency(load_kineto(vendored(name)), cluster, dtype="fp32")
    again = kernel_efficiency(load_kineto(vendored(name)), cluster, eff.params(P), dtype="fp32")
    for r in again.rows:  # the fitted value, as the start, predicts what was measured
        if r.shape_class == "all":
            assert r.before_s == pytest.approx(r.measured_s, rel=1e-6)
            assert 0 < r.efficiency <= 1


def test_what_cannot_be_fitted_is_named():
    with pytest.raises(CalibrationError, match="no GEMM or fused attention shape"):
        kernel_efficiency(load_kineto(vendored("nccl_data.json.gz")), A100)
    with pytest.raises(CalibrationError, match="expected a KinetoTrace"):
        kernel_efficiency("trace.json", A100)
    with pytest.raises(CalibrationError, match="expected a Cluster"):
        kernel_efficiency(_trace(0.5, 0.5), "a100-80g")
    with pytest.raises(CalibrationError, match="dtype='int4'"):
        kernel_efficiency(_trace(0.5, 0.5), A100, dtype="int4")
