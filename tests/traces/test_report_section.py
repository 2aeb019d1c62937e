"""The HTML report's measured-trace section (widgets.report.build_report(trace=...), and
``python -m explorer report --trace``): the trace's breakdown and its step next to the
predicted one, as text and figures whose data are the core's."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.traces import breakdown, load_kineto, side_by_side, vendored

pytest.importorskip("plotly")
from widgets.report import build_report  # noqa: E402

CFG = ex.ParallelConfig(dp=2, microbatch_size=4)


def test_a_report_with_a_trace_has_its_section():
    t = load_kineto(vendored("nccl_data.json.gz"))
    rep = build_report("gpt2", 2, "a100-80g", 8, 1024, counts=(2,), trace=t,
                       trace_axes={"dp": 2}, trace_config=CFG)  # fmt: skip
    figs = dict(rep.figures)
    assert {"trace", "trace-vs-predicted"} <= set(figs)
    assert "Measured trace (PyTorch profiler)" in rep.html
    # the text is the core's breakdown and side-by-side of the same trace and layout
    sim = ex.simulate("gpt2", CFG, "a100-80g", 8, 1024, ex.stacks.params(ex.stacks.DEFAULT_STACK))
    sbs = side_by_side(t, sim, axes={"dp": 2})
    assert sbs.text().splitlines()[0] in rep.html
    rows = breakdown(t, {"dp": 2}).rows
    bars = [b for tr in figs["trace"].data for b in (tr.x if tr.x is not None else ())]
    assert len(bars) > 0 and len(rows) == 3


def test_a_bad_trace_path_is_a_named_error(tmp_path):
    with pytest.raises(ex.traces.TracesError, match="no such file"):
        build_report("gpt2", 2, "a100-80g", 8, 1024, counts=(2,), trace=tmp_path / "none.json")


def test_the_report_command_takes_a_trace():
    from explorer.cli import build_parser

    args = build_parser().parse_args(["report", "gpt2", "--devices", "2", "--trace", "run/"])
    assert args.trace == "run/"
    assert build_parser().parse_args(["report", "gpt2", "--devices", "2"]).trace is None
