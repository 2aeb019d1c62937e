"""Views print and keep a context-parallel ParallelConfig (headless; the browser tier is
not run for this)."""

import pytest

import explorer as ex

pytest.importorskip("ipywidgets")


def test_pipeline_view_keeps_cp_when_pp_changes():
    from widgets import PipelineView

    par = ex.ParallelConfig(dp=2, tp=2, pp=4, cp=2)  # 32 devices
    v = PipelineView("llama3-8b", par, global_batch=16, seq=4096)
    assert 2 in v.pp_options() and 8 in v.pp_options() and 16 not in v.pp_options()
    v.controls["pp"].value = 2
    assert (v.config.dp, v.config.pp, v.config.cp, v.config.devices) == (4, 2, 2, 32)
    assert "x cp2" in v.info.value  # the config's printed form, with its cp
