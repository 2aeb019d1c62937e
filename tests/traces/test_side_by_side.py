"""explorer.traces.side_by_side, its figure and TraceTimelineView on the vendored traces."""

from __future__ import annotations

import json

import pytest

import explorer as ex
from explorer.traces import TRACKS, TracesError, load_kineto, side_by_side, vendored
from explorer.traces.cpu_runs import host_cluster, tiny_gpt_config
from explorer.traces.intervals import length, merge
from widgets.figures.trace_breakdown import side_by_side_figure
from widgets.trace_timeline import TraceTimelineView

DDP = ex.ParallelConfig(dp=2, microbatch_size=4)


@pytest.fixture(scope="module")
def ddp():
    folder = vendored("cpu_gloo_ddp")
    t = load_kineto(folder)
    sim = ex.simulate(tiny_gpt_config(), DDP, host_cluster(folder), 8, 32)
    return t, sim


def test_lanes_cover_their_step(ddp):
    t, sim = ddp
    s = side_by_side(t, sim, axes={"dp": 2})
    assert s.step == t.ranks[0].steps[-1].number
    measured, predicted = s.lanes_of("measured"), s.lanes_of("predicted")
    assert [lane.index for lane in measured] == [0, 1]
    assert len(predicted) == sim.timeline.devices
    for lane in measured:
        spans = merge((x.start_s, x.start_s + x.dur_s) for x in lane.slices)
        assert length(spans) == pytest.approx(lane.step_s)
        assert {x.track for x in lane.slices} <= set(TRACKS)
        assert lane.track_s("DP comm") > 0  # gloo's all-reduce, on the dp group's track
    for lane in predicted:
        assert sum(x.dur_s for x in lane.slices) == pytest.approx(sim.timeline.step_time_s)


def test_differences_largest_first_and_means_of_the_lanes(ddp):
    t, sim = ddp
    s = side_by_side(t, sim, axes={"dp": 2})
    gaps = [abs(m - p) for _, m, p in s.differences]
    assert gaps == sorted(gaps, reverse=True)
    d = {k: (m, p) for k, m, p in s.differences}
    measured = s.lanes_of("measured")
    assert d["compute"][0] == pytest.approx(sum(x.track_s("compute") for x in measured) / 2)
    assert len(s.text().splitlines()) == 1 + len(s.differences)


def test_chrome_export_has_every_slice(ddp):
    t, sim = ddp
    s = side_by_side(t, sim, axes={"dp": 2})
    doc = json.loads(json.dumps(s.to_chrome()))
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == sum(len(lane.slices) for lane in s.lanes)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {lane.label for lane in s.lanes}


def test_refuses(ddp):
    t, sim = ddp
    with pytest.raises(TracesError, match="no such step"):
        side_by_side(t, sim, step=999)
    with pytest.raises(TracesError, match="expected a step number"):
        side_by_side(t, sim, step=True)
    est = ex.estimate(tiny_gpt_config(), DDP, "a100-80g", 8, 32)
    with pytest.raises(TracesError, match="timeline"):
        side_by_side(t, est)
    with pytest.raises(TracesError, match="expected a KinetoTrace"):
        side_by_side(None, sim)


def test_figure_and_view(ddp):
    t, sim = ddp
    s = side_by_side(t, sim, axes={"dp": 2})
    fig = side_by_side_figure(s)
    assert [tr.name for tr in fig.data] == list(TRACKS)
    compute = fig.data[TRACKS.index("compute")]
    assert sum(compute.x) == pytest.approx(sum(lane.track_s("compute") for lane in s.lanes) * 1e3)
    view = TraceTimelineView(t, sim, axes={"dp": 2})
    first = view.controls["step"].options[0]
    view.controls["step"].value = first
    assert view.sbs.step == first and not view.errors.last
    want = side_by_side_figure(side_by_side(t, sim, step=first, axes={"dp": 2}))
    assert list(view.figure.data[0].x) == pytest.approx(list(want.data[0].x))
