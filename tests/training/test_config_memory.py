"""ParallelConfig validation and the memory formulas (Korthikanti et al. 2022, ZeRO)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from explorer.training import (
    MemoryAllowances,
    MemoryBreakdown,
    ParallelConfig,
    ParallelConfigError,
    activation_bytes_per_layer,
    model_state_bytes,
)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"schedule": "pipedream"}, ["'pipedream'", "'1f1b'"]),
        ({"zero": 4}, ["zero=4", "0, 1, 2 or 3"]),
        ({"recompute": "most"}, ["'most'", "'selective'"]),
        ({"virtual_stages": 2}, ["virtual_stages=2", "interleaved_1f1b"]),
        ({"schedule": "interleaved_1f1b"}, ["pp=1", "pp > 1"]),
        ({"sp": True}, ["sp=True", "tp=1"]),
        ({"dp": 4, "ep": 3}, ["ep=3", "dp=4", "divisors"]),
        ({"tp": 0}, ["tp=0", ">= 1"]),
        ({"recompute_num_layers": 2}, ["recompute_num_layers=2", "per_layer"]),
    ],
)
def test_bad_config_names_value_reason_fix(kwargs, words):
    with pytest.raises(ParallelConfigError) as e:
        ParallelConfig(**kwargs)
    for w in words:
        assert w in str(e.value)


def test_microbatches_and_batch_errors():
    par = ParallelConfig(dp=4, pp=2, microbatch_size=2, schedule="interleaved_1f1b",
                         virtual_stages=2)  # fmt: skip
    assert par.microbatches(64) == 8 and par.devices == 8 and par.stages == 4
    with pytest.raises(ParallelConfigError, match="not divisible by dp=4"):
        par.microbatches(30)
    with pytest.raises(ParallelConfigError, match="microbatch_size=2"):
        par.microbatches(4 * 3)
    with pytest.raises(ParallelConfigError, match="multiple of pp=2"):
        par.microbatches(4 * 2 * 3)
    assert str(par) == "dp4 x tp1 x pp2, mb2, interleaved_1f1b(v2), zero0, recompute none"
    assert ParallelConfig(pp=2, schedule="interleaved_1f1b").virtual_stages == 2  # default
    assert ParallelConfig(pp=2).virtual_stages == 1


SIZES = st.tuples(
    st.sampled_from([512, 1024, 2048, 4096]), st.integers(1, 8),
    st.sampled_from([(1024, 16), (4096, 32), (12288, 96)]), st.sampled_from([1, 2, 4, 8]),
)  # fmt: skip


@given(SIZES)
def test_activation_formulas_exactly_as_korthikanti(sizes):
    s, b, (h, a), t = sizes
    sbh = s * b * h
    f = activation_bytes_per_layer
    assert f(s, b, h, a) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert f(s, b, h, a, tp=t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    if t > 1:
        assert f(s, b, h, a, tp=t, sp=True) == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert f(s, b, h, a, tp=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert f(s, b, h, a, tp=t, sp=True, recompute="selective") == pytest.approx(sbh * 34 / t)
    assert f(s, b, h, a, tp=t, recompute="full") == 2 * sbh


@given(st.integers(1, 10**11), st.sampled_from([1, 2, 8, 64, 1024]), st.sampled_from([0, 1, 2, 3]))
def test_zero_stage_divisions(params, dp, zero):
    w, g, o = model_state_bytes(params, dp, zero)
    assert w == pytest.approx(2 * params / (dp if zero >= 3 else 1))
    assert g == pytest.approx(2 * params / (dp if zero >= 2 else 1))
    assert o == pytest.approx(12 * params / (dp if zero >= 1 else 1))
    if zero == 0:
        assert w + g + o == pytest.approx(16 * params)


def test_allowances_are_rows_never_folded():
    m = MemoryBreakdown(parameters=1.0, runtime_context=2.0, communication_buffers=3.0,
                        fragmentation=4.0)  # fmt: skip
    rows = dict(m.rows())
    assert rows["runtime_context"] == 2.0 and rows["communication_buffers"] == 3.0
    assert rows["fragmentation"] == 4.0 and m.total == 10.0
    assert "runtime_context" in m.table() and "fragmentation" in m.table()
    with pytest.raises(ValueError, match="fragmentation_fraction"):
        MemoryAllowances(fragmentation_fraction=1.5)
