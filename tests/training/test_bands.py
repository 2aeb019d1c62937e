"""Prediction bands: percentiles of check-row residuals by stack and chip family, the
fallbacks when a group is small, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from explorer.training.bands import (
    WIDEN,
    Residual,
    band,
    bands_table,
    chip_family,
    write_bands,
)
from explorer.training.errors import TrainingError


def _rows(stack, hardware, ratios, memory=None):
    return [Residual(stack, hardware, r, memory) for r in ratios]


@pytest.fixture
def path(tmp_path):
    rows = _rows("megatron-core", "h100-sxm", [0.9, 0.95, 1.0, 1.05, 1.1, 1.2], 1.1)
    rows += _rows("megatron-core", "a100-80g", [0.8, 1.3])
    rows += _rows("torchtitan", "h100-sxm", [1.0, 1.02])
    return write_bands(rows, "test", tmp_path / "bands.json")


def test_families():
    assert chip_family("h100-sxm") == chip_family("h200") == "hopper"
    assert chip_family("a100-40g") == "ampere"
    assert chip_family("b200") == chip_family("gb200-nvl72") == "blackwell"


def test_a_group_with_enough_rows_has_its_own_percentiles(path):
    b = band("megatron-core", "h100-sxm", path=path)
    ratios = [0.9, 0.95, 1.0, 1.05, 1.1, 1.2]
    assert b.rows == 6 and (b.low, b.high) == pytest.approx(np.percentile(ratios, [10, 90]))
    assert "6 check rows of megatron-core on hopper" in b.basis
    lo, hi = b.around(2.0)
    assert lo == pytest.approx(2 * b.low) and hi == pytest.approx(2 * b.high)


def test_a_small_group_uses_its_stack_on_every_chip(path):
    b = band("megatron-core", "a100-80g", path=path)
    assert b.rows == 8 and "every chip (ampere: fewer than" in b.basis


def test_a_stack_with_too_few_rows_gets_the_pooled_band_widened(path):
    b = band("torchtitan", "h100-sxm", path=path)
    pooled = np.percentile([0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 0.8, 1.3, 1.0, 1.02], [10, 90])
    assert b.rows == 10 and "widened" in b.basis and "torchtitan" in b.basis
    assert b.low == pytest.approx(np.exp(np.log(pooled[0]) * WIDEN))
    assert b.high == pytest.approx(np.exp(np.log(pooled[1]) * WIDEN))
    assert band(None, "h100-sxm", path=path).basis.endswith("hand-set TrainingParams; step times")


def test_memory_bands_only_from_rows_that_published_memory(path):
    table = json.loads(path.read_text())
    assert table["memory"]["*|*"]["rows"] == 6 and table["source"] == "test"
    assert band("torchtitan", "h100-sxm", "memory", path=path).rows == 6


def test_no_file_means_no_band(tmp_path):
    assert band("megatron-core", "h100-sxm", path=tmp_path / "none.json") is None


def test_bad_input_is_named(tmp_path):
    with pytest.raises(TrainingError, match="step_ratio=-1.0"):
        bands_table([Residual("x", "h100-sxm", -1.0)])
    with pytest.raises(TrainingError, match="quantity='speed'"):
        band("x", "h100-sxm", "speed", path=tmp_path / "b.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TrainingError, match="rerun bench/accuracy.py"):
        band("x", "h100-sxm", path=bad)


def test_a_run_knows_its_stack_from_its_params():
    import explorer as ex
    from explorer.training import TrainingParams
    from explorer.training.bands import stack_of

    assert stack_of(ex.stacks.params("torchtitan")) == "torchtitan"
    assert stack_of(TrainingParams()) == "megatron-lm-2021"  # deepspeed's values too
    assert stack_of(ex.stacks.params("torchtitan", flash_attention=False)) is None


def test_every_simulation_carries_the_band_of_its_stack_and_chip():
    import explorer as ex
    from explorer.training import TrainingParams

    par = ex.ParallelConfig(dp=2, tp=4)
    r = ex.simulate("gpt3-1.3b", par, "h100-sxm", 16, 2048, stack="nemo")
    assert r.stack == "nemo" and r.band == band("nemo", "h100-sxm")
    assert r.band is not None and r.band.rows >= 5 and r.band.low < 1 < r.band.high
    lo, hi = r.band.around(r.step_time_s)
    assert lo < r.step_time_s < hi
    assert r.as_dict()["band"]["rows"] == r.band.rows
    own = ex.simulate("gpt3-1.3b", par, "h100-sxm", 16, 2048,
                      params=TrainingParams(flash_attention=True))  # fmt: skip
    assert own.stack is None and "hand-set TrainingParams" in own.band.basis
