"""FSDP's prefetch lesson: the event schedule on two streams against closed forms, the memory
it costs, and the figure's bars."""

from __future__ import annotations

import pytest

from explorer.training.errors import ParallelConfigError
from explorer.training.fsdp_overlap import fsdp_overlap_lesson


@pytest.mark.parametrize("n, g, c", [(4, 1.0, 2.0), (4, 3.0, 2.0), (1, 1.0, 1.0), (8, 2.0, 2.0)])
def test_prefetch_hides_every_gather_but_the_first_when_compute_is_longer(n, g, c):
    les = fsdp_overlap_lesson(n, g, c)
    assert les.check_ok
    assert les.serial.step_s == pytest.approx(n * (g + c))
    assert les.serial.exposed_s == pytest.approx(n * g)
    assert les.prefetch.exposed_s == pytest.approx(g + (n - 1) * max(0.0, g - c))
    assert les.prefetch.peak_layers == min(2, n) and les.serial.peak_layers == 1
    # one stream at a time: no two gathers overlap, no two computes overlap
    for run in (les.serial, les.prefetch):
        for stream in ("compute", "comm"):
            ev = sorted((e for e in run.events if e.stream == stream and e.kind != "wait"),
                        key=lambda e: e.start_s)  # fmt: skip
            assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(ev, ev[1:], strict=False))
    text = str(les)
    assert f"takes {les.prefetch.step_s:g}" in text and "(yes)" in text


@pytest.mark.parametrize("kw", [{"layers": 0}, {"gather_s": -1.0}, {"compute_s": True}])
def test_bad_values_are_named(kw):
    with pytest.raises(ParallelConfigError, match=next(iter(kw))):
        fsdp_overlap_lesson(**kw)
