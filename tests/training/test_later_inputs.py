"""Inputs of the wrong type to migration, the offload terms and Megatron's split helpers are
named errors (before: ``TypeError`` / ``AttributeError`` escaped, and ``layout_string(())``
returned an empty layout)."""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.errors import ExplorerError
from explorer.export.errors import ExportError
from explorer.export.megatron_split import layout_string, megatron_stage_layers
from explorer.training.errors import MigrationError, OffloadError
from explorer.training.offload import offload_terms
from explorer.training.pipeline.partition import uniform_partition
from explorer.training.replanning.migration import JobLayout, plan_migration

PARTS = (10.0, 100.0, 100.0, 10.0)


def _job(config=None, devices=(0, 1, 2, 3), parts=PARTS):
    config = ex.ParallelConfig(dp=2, tp=2) if config is None else config
    return JobLayout(config, uniform_partition(2, 1), devices, parts)


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda: _job(devices=4), "devices=4"),
        (lambda: _job(devices=(0, 1, 2, "3")), "physical device ids"),
        (lambda: _job(parts=(1.0, None, 1.0, 1.0)), "part_params"),
        (lambda: _job(config="dp2tp2"), "expected a ParallelConfig"),
        (lambda: plan_migration(_job(), 0, ex.hardware.load("a100-80g")), "new=0"),
        (lambda: plan_migration(_job(), _job(), 0), "cluster=0"),
        (lambda: plan_migration(_job(), _job(), ex.hardware.load("a100-80g"), lost=3),
         "lost=3"),
    ],
)  # fmt: skip
def test_migration_names_a_bad_argument(make, says):
    with pytest.raises(MigrationError, match=says):
        make()


def test_migration_takes_numpy_ids():
    a = _job(devices=tuple(np.arange(4)))
    b = _job(ex.ParallelConfig(tp=4), devices=tuple(np.arange(4)))
    m = plan_migration(a, b, ex.hardware.load("a100-80g"), lost=(np.int64(9),))
    assert m.by_state[0] == ("parameters", 220.0) and a.devices == (0, 1, 2, 3)


@pytest.fixture(scope="module")
def sim():
    return ex.simulate("gpt2", ex.ParallelConfig(dp=8), hardware="a100-80g", global_batch=16,
                       seq=512)  # fmt: skip


@pytest.mark.parametrize("which", ["sim", "cluster", "tparams", "oparams", "kind"])
def test_offload_terms_name_a_bad_argument(sim, which):
    args = {"sim": sim, "kind": "optimizer", "cluster": ex.hardware.load("a100-80g"),
            "tparams": ex.TrainingParams(), "oparams": None} | {which: 0}  # fmt: skip
    with pytest.raises(OffloadError, match=f"{which}=0" if which != "kind" else "offload=0"):
        offload_terms(**args)


def test_megatron_split_helpers_refuse_missing_and_empty_values():
    with pytest.raises(ExportError, match="num_layers=None"):
        megatron_stage_layers(None, 2)
    with pytest.raises(ExportError, match="at least one stage"):
        layout_string(())
    assert megatron_stage_layers(np.int64(8), 2, first=None) == (4, 4)
    assert issubclass(ExportError, ExplorerError)
