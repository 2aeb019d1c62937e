"""widgets/figures/trace_breakdown: the figure draws the breakdown's own numbers."""

from __future__ import annotations

import pytest

from explorer.traces import breakdown, load_kineto, vendored
from widgets.figures.errors import ViewError
from widgets.figures.trace_breakdown import breakdown_figure, row_label


def test_bars_are_the_breakdown_in_ms():
    b = breakdown(load_kineto(vendored("nccl_data.json.gz")))
    fig = breakdown_figure(b)
    by_name = {t.name: t for t in fig.data}
    labels = [row_label(r.rank, r.step) for r in b.rows]
    assert list(by_name["compute"].y) == labels
    assert list(by_name["compute"].x) == pytest.approx([r.compute_s * 1e3 for r in b.rows])
    assert list(by_name["idle"].x) == pytest.approx([r.idle_s * 1e3 for r in b.rows])
    over = [x for x in by_name["overlapped communication"].x if x not in (None, 0.0)]
    assert over == pytest.approx([r.overlapped_comm_s * 1e3 for r in b.rows if r.overlapped_comm_s])
    assert list(by_name["matmul"].x) == pytest.approx([r.category("matmul") * 1e3 for r in b.rows])
    assert "attention" not in by_name  # a ResNet-like trace: no attention kernel, no bar


def test_refuses_other_input():
    with pytest.raises(ViewError, match="expected an explorer.traces.Breakdown"):
        breakdown_figure([1, 2])
