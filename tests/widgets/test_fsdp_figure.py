"""The FSDP prefetch figure: every event of both passes drawn and labelled."""

from __future__ import annotations

from explorer.training.fsdp_overlap import fsdp_overlap_lesson


def test_the_figure_draws_every_event_with_a_label():
    from widgets.figures.fsdp import ROWS, fsdp_overlap_figure

    les = fsdp_overlap_lesson(4, 1.5, 2.0)
    fig = fsdp_overlap_figure(les)
    n_events = len(les.serial.events) + len(les.prefetch.events)
    assert sum(len(t.x) for t in fig.data) == n_events
    assert all(all(t.text) for t in fig.data)
    assert list(fig.layout.yaxis.ticktext) == list(ROWS)
    assert f"prefetch {les.prefetch.step_s:g}" in fig.layout.title.text
