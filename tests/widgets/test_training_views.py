"""PipelineView, MemoryView, ScalingView and the StrategyExplorer dashboard, headless; their
figure builders as pure functions; the bubble breakdown they show; and what a front-end
holds after sequences of control changes (a page that draws from the widget's state, and a
page that applied every update message)."""

from __future__ import annotations

import base64
import copy
import random
import re
import threading
from collections import OrderedDict

import numpy as np
import pytest
from plotly.basedatatypes import Undefined

import explorer as ex
from explorer.training import ParallelConfigError, bubble_fraction
from explorer.training.pipeline.bubble import bubble_breakdown, microbatch_size_for
from widgets import (
    MemoryView,
    PipelineView,
    ScalingView,
    Series,
    StrategyExplorer,
    link,
    strategy_explorer,
)
from widgets.figures import memory_figure, pipeline_figure, scaling_figure
from widgets.figures.errors import ViewError
from widgets.figures.memory import ROW_NAMES, ROWS, TRACE_TOTAL
from widgets.figures.pipeline import (
    CHUNK_PATTERNS,
    CHUNKED_KINDS,
    EVENT_KINDS,
    EVENT_NAMES,
    GROUP_LABEL_PX,
    MAX_CHUNKS,
    OVERVIEW_BINS,
    OVERVIEW_KEYS,
    PLOT_WIDTH_PX,
    TRACE_GROUPS,
    TRACE_KEYS,
    TRACE_OVERVIEW,
    TRACE_SELECTED_MB,
    drawn_range,
    kind_traces,
    label_groups,
    label_mode,
    overview_arrays,
    overview_mode,
    timeline_columns,
    trace_index,
)
from widgets.figures.summary import figure_summary

FWD, BWD, IDLE = (trace_index(k) for k in ("compute-forward", "compute-backward", "idle"))


def arr(v):
    """A to_dict() array: plotly 6+ writes numpy arrays as {"dtype", "bdata"} (base64)."""
    if isinstance(v, dict) and "bdata" in v:
        out = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return out.reshape(v["shape"]) if "shape" in v and isinstance(v["shape"], list) else out
    return np.asarray(v)


class PageModel:
    """What the page's plotly model holds: the widget's synced state when the mirror starts,
    then every update message applied as plotly's front-end applies it (``restyle`` sets or,
    for null, unsets a property per trace; ``relayout`` likewise on the layout)."""

    def __init__(self, fig) -> None:
        self.fig = fig
        self.data = copy.deepcopy(list(fig._widget_data))
        self.layout = copy.deepcopy(dict(fig._widget_layout))
        names = ["_py2js_restyle", "_py2js_update", "_py2js_relayout"]
        fig.observe(self._on_msg, names=names)

    def _on_msg(self, change) -> None:
        msg = change["new"]
        if msg is None:
            return
        if change["name"] == "_py2js_relayout":
            self._relayout(msg["relayout_data"])
            return
        style = msg.get("restyle_data", msg.get("style_data")) or {}
        traces = msg.get("restyle_traces", msg.get("style_traces"))
        traces = list(range(len(self.data))) if traces is None else list(traces)
        for path, values in style.items():
            values = values if isinstance(values, list) else [values]
            for k, t in enumerate(traces):
                v = values[k % len(values)]
                if v is Undefined:  # this trace keeps the property
                    continue
                _set(self.data[t], path, v)
        if change["name"] == "_py2js_update":
            self._relayout(msg.get("layout_data") or {})

    def _relayout(self, data) -> None:
        for path, v in data.items():
            _set(self.layout, path, v)

    def trace(self, k: int) -> dict:
        return self.data[k]


def _set(obj, path: str, value) -> None:
    """lodash ``set`` / ``unset`` on a plotly path (``annotations.0.text``, ``a[0].b``)."""
    keys = [int(i or k) if (i or k).isdigit() else k
            for k, i in re.findall(r"(\w+)|\[(\d+)\]", path)]  # fmt: skip
    for key, nxt in zip(keys[:-1], keys[1:], strict=True):
        if isinstance(obj, list):
            obj = obj[key]
        else:
            obj = obj.setdefault(key, [] if isinstance(nxt, int) else {})
    last = keys[-1]
    if value is None:
        if isinstance(obj, dict):
            obj.pop(last, None)
    else:
        obj[last] = copy.deepcopy(value)


def _same_data(page_trace: dict, py_trace, keys=("x", "y")) -> None:
    for key in keys:
        want = py_trace[key]
        got = page_trace.get(key)
        if want is None:
            assert got is None, (py_trace.name, key)
            continue
        assert got is not None, f"{py_trace.name}: {key} missing in the page"
        np.testing.assert_array_equal(np.asarray(got, dtype=object), np.asarray(want, dtype=object))


def boxes(data, kind: str, key: str = "x") -> np.ndarray:
    """``key`` of every box of ``kind``, all its chunks' traces together, from a figure's
    ``data`` or its ``to_dict()["data"]``."""
    parts = [data[i][key] for i in kind_traces(kind)]
    return np.concatenate([arr(v) for v in parts if v is not None])


def _late_page(fig) -> list[dict]:
    """What a page that connects now draws from: the synced ``_widget_data``."""
    return list(fig._widget_data)


@pytest.fixture(scope="module")
def sim():
    return ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4, microbatch_size=2),
                       global_batch=32, seq=512)  # fmt: skip


@pytest.fixture(scope="module")
def curve():
    return ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512)


# --- the bubble: formula against simulation ----------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "v", "mbs"),
    [("1f1b", 1, 2), ("gpipe", 1, 1), ("interleaved_1f1b", 3, 2), ("1f1b", 1, 8)],
)
def test_bubble_breakdown_starts_at_the_formula_and_ends_at_the_simulation(schedule, v, mbs):
    par = ex.ParallelConfig(dp=2, pp=4, microbatch_size=mbs, schedule=schedule, virtual_stages=v)
    s = ex.simulate("gpt2", par, global_batch=64, seq=512)
    b = bubble_breakdown(s, check_uniform=True)
    c = s.config
    assert b.formula == bubble_fraction(c.schedule, c.pp, c.num_microbatches, v)
    # identical stages, no transfers, no tail: the simulated schedule is the formula
    assert b.uniform == pytest.approx(b.formula, abs=1e-9)
    # the step itself; re-simulated from the per-stage times read back, the same to rounding
    assert b.simulated == pytest.approx(s.bubble_fraction, abs=1e-12)
    assert b.resimulated == pytest.approx(b.simulated, abs=1e-9)
    assert b.step_time_s == pytest.approx(s.step_time_s, rel=1e-12)
    steps = b.steps()
    assert [n for n, *_ in steps] == ["uneven", "with_p2p", "simulated"]
    assert sum(d for _, _, d, _ in steps) == pytest.approx(b.simulated - b.formula, abs=1e-12)
    # gpt2's first and last stages carry the embedding and the head: uneven stages
    assert b.stage_imbalance > 1.0 and b.uneven > b.uniform


def test_bubble_breakdown_needs_a_timeline(sim):
    with pytest.raises(ValueError, match="timeline"):
        bubble_breakdown(ex.training.estimate("gpt2", sim.config, global_batch=32, seq=512))


def test_microbatch_size_keeps_the_global_batch():
    assert microbatch_size_for(1536, 8, 48) == 4 and microbatch_size_for(1536, 8, 192) == 1
    with pytest.raises(ParallelConfigError, match=r"1536 / \(dp 8 x 5\) = 38.4.*divides 192"):
        microbatch_size_for(1536, 8, 5)
    with pytest.raises(ParallelConfigError, match="microbatches=0"):
        microbatch_size_for(1536, 8, 0)


# --- figure builders ---------------------------------------------------------------------


def test_pipeline_figure_has_a_bar_per_step_and_the_bubble(sim):
    fig = pipeline_figure(sim, selected_microbatch=1)
    d = fig.to_dict()
    pp, m = 4, sim.config.num_microbatches
    bars = d["data"][:TRACE_SELECTED_MB]
    assert [t["legendgroup"] for t in bars] == [kind for kind, _ in TRACE_KEYS]
    # the legend: one entry per kind (its chunk-0 trace), in EVENT_KINDS order
    legend = [t for t in bars if t.get("showlegend", True)]
    assert [t["name"] for t in legend] == [EVENT_NAMES[k] for k in EVENT_KINDS]
    assert len(boxes(d["data"], "compute-forward")) == pp * m
    assert len(arr(d["data"][FWD]["x"])) == pp * m and len(arr(d["data"][BWD]["x"])) == pp * m
    assert len(arr(d["data"][IDLE]["x"])) > 0  # the bubble is drawn
    assert d["data"][FWD]["texttemplate"] == "F%{text}"
    # each forward box shows its microbatch (text) and carries its stage (customdata)
    cols = timeline_columns(sim.timeline)
    fwd = cols["kind"] == "compute-forward"
    assert sorted(zip(arr(d["data"][FWD]["customdata"]), arr(d["data"][FWD]["text"]),
                      strict=True)) == sorted(zip(cols["stage"][fwd], cols["mb"][fwd],
                                                  strict=True))  # fmt: skip
    assert len(arr(d["data"][TRACE_SELECTED_MB]["x"])) == 2 * pp  # F and B of mb 1 per stage
    assert d["layout"]["yaxis"]["ticktext"] == ["stage 0", "stage 1", "stage 2", "stage 3"]
    assert "bubble" in d["layout"]["title"]["text"] and d["layout"]["title"]["x"] == 0
    assert d["layout"]["xaxis"]["title"]["text"] == "time (ms)"
    with pytest.raises(ValueError, match="timeline"):
        pipeline_figure(ex.training.estimate("gpt2", sim.config, global_batch=32, seq=512))


def test_pipeline_figure_interleaved_rows(sim):
    s = ex.simulate("gpt2", sim.config.replace(schedule="interleaved_1f1b", virtual_stages=3,
                                                num_microbatches=None), global_batch=32, seq=512)  # fmt: skip
    d = pipeline_figure(s).to_dict()
    assert d["layout"]["yaxis"]["ticktext"][0] == "dev 0: st 0,4,8"
    assert len(boxes(d["data"], "compute-forward")) == 4 * 3 * s.config.num_microbatches
    for k in range(3):  # chunk k's boxes, and only they, in the forward trace of chunk k
        t = d["data"][trace_index("compute-forward", k)]
        assert set(arr(t["customdata"]) // 4) == {k}  # stage = chunk x pp + device
        assert len(arr(t["x"])) == 4 * s.config.num_microbatches
        assert f"(chunk {k})" in t["hovertemplate"]
    # a bare Timeline (no config): its chunks are those its events name, drawn apart alike
    bare = pipeline_figure(s.timeline)
    for k in range(3):
        t = bare.data[trace_index("compute-forward", k)]
        assert set(np.asarray(t.customdata) // 4) == {k} and f"(chunk {k})" in t.hovertemplate


def _compute_boxes(cols, window=None):
    m = np.isin(cols["kind"], ("compute-forward", "compute-backward"))
    if window is not None:
        m &= (cols["end"] > window[0]) & (cols["start"] < window[1])
    return m


def test_pipeline_numbers_every_box_or_every_group():
    """8 microbatches: boxes wide enough for their numbers; 128 (GPT-3-like depth): each
    row's boxes are labelled by groups whose ranges contain every box's microbatch, and
    zooming in to 1% of the step brings the per-box numbers back."""
    few = ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4, microbatch_size=2),
                      global_batch=32, seq=512)  # fmt: skip
    cols = timeline_columns(few.timeline)
    assert label_mode(cols) == "boxes"
    assert len(pipeline_figure(few).data[TRACE_GROUPS].x) == 0
    many = ex.simulate("gpt2", ex.ParallelConfig(dp=1, pp=4, microbatch_size=1,
                                                 schedule="interleaved_1f1b", virtual_stages=3),
                       global_batch=128, seq=512)  # fmt: skip
    cols = timeline_columns(many.timeline)
    assert label_mode(cols) == "groups"
    groups = label_groups(cols)
    boxes = _compute_boxes(cols)
    assert sum(g["boxes"] for g in groups) == int(boxes.sum())  # each box in one group
    for g in groups:  # each group's label names the microbatches of the boxes under it
        inside = boxes & (cols["device"] == g["device"])
        inside &= (cols["start"] >= g["x0"]) & (cols["end"] <= g["x1"])
        mbs = cols["mb"][inside & (cols["kind"] == "compute-forward")]
        if len(mbs):
            lo, hi = int(mbs.min()), int(mbs.max())
            assert g["text"].startswith(f"F{lo}" if lo == hi else f"F{lo}–{hi}")
    fig = pipeline_figure(many)
    assert list(fig.data[TRACE_GROUPS].text) == [g["text"] for g in groups]
    span = float(cols["span"])
    # each label whole inside the plot (at PLOT_WIDTH_PX, GROUP_LABEL_PX a character):
    # centred above its group, or moved inwards at either end of the axis
    per_px = span / PLOT_WIDTH_PX
    moved = []
    for k, (g, x) in enumerate(zip(groups, fig.data[TRACE_GROUPS].x, strict=True)):
        half = len(g["text"]) * GROUP_LABEL_PX * per_px / 2
        assert 0 <= x - half and x + half <= span, g
        if x != pytest.approx((g["x0"] + g["x1"]) / 2):
            moved.append(k)
    ends = {k for k, g in enumerate(groups)
            if k == 0 or k == len(groups) - 1 or groups[k - 1]["device"] != g["device"]
            or groups[k + 1]["device"] != g["device"]}  # fmt: skip
    assert moved and set(moved) <= ends  # only a row's first or last label moves
    window = (0.0, span * 0.01)
    assert label_mode(cols, window) == "boxes"
    assert len(pipeline_figure(many, window=window).data[TRACE_GROUPS].x) == 0


def test_memory_figure_stacks_every_row_against_capacity(sim):
    d = memory_figure(sim, selected_stage=2).to_dict()
    assert [t["name"] for t in d["data"][: len(ROWS)]] == [ROW_NAMES[r] for r in ROWS]
    assert [t["legendgroup"] for t in d["data"][: len(ROWS)]] == list(ROWS)
    gib = 2**30
    for dev, m in enumerate(sim.memory_per_device):
        stacked = sum(arr(d["data"][k]["y"])[dev] for k in range(len(ROWS)))
        assert stacked == pytest.approx(m.total / gib)
    assert d["layout"]["shapes"][0]["y0"] == pytest.approx(sim.memory_cap_bytes / gib)
    # the selection box encloses the selected device's bar (bar k sits at x = k) and no other
    box = d["layout"]["shapes"][1]
    assert box["visible"] is True and box["x0"] < 2 < box["x1"] and box["x1"] - box["x0"] < 1
    assert d["layout"]["annotations"][0]["text"] == "capacity 80.0 GiB"
    small = memory_figure(sim.memory_per_device, cap_bytes=1 * gib).to_dict()
    assert small["data"][TRACE_TOTAL]["textfont"]["color"][0] == "#E4002B"  # over capacity
    assert small["data"][TRACE_TOTAL]["text"][0].endswith(("GiB", "MiB"))
    with pytest.raises(ValueError, match="cap_bytes"):
        memory_figure(sim.memory_per_device)


def test_scaling_figure_slots(curve):
    fig = scaling_figure([curve, None], slots=3, metric="mfu")
    d = fig.to_dict()
    assert len(d["data"]) == 7 and d["data"][0]["visible"] is True
    assert d["data"][2]["visible"] is False and d["data"][4]["visible"] is False
    assert d["data"][1]["y"][0] == 1.0 and d["data"][0]["y"][0] == pytest.approx(
        curve.points[0].mfu
    )
    assert d["data"][-1]["y"] == [1.0, 1.0] and d["data"][-1]["x"] == [8, 16]
    assert d["layout"]["xaxis"]["type"] == "log"
    with pytest.raises(ValueError, match="metric"):
        scaling_figure([curve], metric="speed")


# --- PipelineView ------------------------------------------------------------------------


@pytest.fixture
def pipeline():
    return PipelineView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=32, seq=512)


def test_pipeline_view_microbatches_keep_the_global_batch(pipeline):
    v = pipeline
    assert v.controls["microbatches"].value == 16 and v.controls["pp"].value == 4
    v.controls["microbatches"].value = 4
    d = v.figure.to_dict()
    assert len(boxes(d["data"], "compute-forward")) == 4 * 4
    assert v.global_batch == 32 and v.config.microbatch_size == 4  # 32 / (dp 2 x 4)
    assert "4 microbatches of 4" in d["layout"]["title"]["text"]
    assert "global batch <b>32</b> (fixed)" in v.info.value
    assert "simulating and drawing the step" in v.progress.shown  # a first redraw shows progress
    v.controls["schedule"].value = "interleaved_1f1b"
    assert v.config.virtual_stages == 3 and not v.controls["virtual_stages"].disabled
    assert v.figure.to_dict()["layout"]["yaxis"]["ticktext"][0] == "dev 0: st 0,4,8"
    v.controls["schedule"].value = "gpipe"
    assert v.config.virtual_stages == 1 and v.controls["virtual_stages"].disabled


def test_pipeline_view_offers_only_counts_that_divide(pipeline):
    """The slider offers the counts that keep the global batch (it offered 1..16, and 5 was
    refused after the fact); a count asked from code is refused with the valid ones."""
    v = pipeline
    assert list(v.controls["microbatches"].options) == [1, 2, 4, 8, 16]
    before = v.figure.to_dict()["data"][FWD]
    with pytest.raises(ViewError, match="choose a count that divides 16: 1, 2, 4, 8, 16"):
        v.set_microbatches(5)  # 32 / (2 x 5) is no whole microbatch
    assert v.global_batch == 32 and v.sim.config.num_microbatches == 16  # nothing changed
    assert arr(v.figure.to_dict()["data"][FWD]["x"]).tolist() == arr(before["x"]).tolist()
    v.set_microbatches(8)
    assert not v.stale and v.config.microbatch_size == 2
    v.controls["schedule"].value = "interleaved_1f1b"  # pp 4: multiples of 4 only
    assert list(v.controls["microbatches"].options) == [4, 8, 16]


def test_pipeline_view_interleaved_refusal_beside_the_schedule(pipeline):
    v = pipeline
    v.controls["microbatches"].value = 2
    v.controls["schedule"].value = "interleaved_1f1b"  # needs m % pp == 0
    assert "multiple of pp=4" in v.fields["schedule"].text and v.fields["schedule"].visible
    assert v.config.schedule == "1f1b" and v.stale


def test_pipeline_view_pp_keeps_devices(pipeline):
    v = pipeline
    v.controls["pp"].value = 2
    assert v.config.dp == 4 and v.config.devices == 8 and v.global_batch == 32
    assert len(boxes(v.figure.data, "compute-forward")) == 2 * v.controls["microbatches"].value
    assert v.figure.layout.yaxis.ticktext == ("stage 0", "stage 1")


def test_pipeline_view_shows_both_bubbles_named(pipeline):
    v = pipeline
    b = v.bubble
    title, info = v.figure.layout.title.text, v.info.value
    assert f"{b.simulated:.1%} simulated" in title and f"{b.formula:.1%} formula" in title
    assert f"formula ((p−1)/(m+p−1), p=4, m=16) <b>{b.formula:.1%}</b>" in info
    assert f"simulated <b>{b.simulated:.1%}</b>" in info
    assert "+ this split's stage times" in info and "slowest stage takes" in info


def test_pipeline_view_zoom_shows_numbers(pipeline):
    v = pipeline
    v.controls["microbatches"].value = 16
    v.controls["pp"].value = 4
    v.set_config(v.config.replace(microbatch_size=1), global_batch=128)  # 64 microbatches
    assert v.sim.config.num_microbatches == 64
    # opens on a readable window: every box there carries its number
    lo, hi = v.window
    assert lo == 0 and hi < v._cols["span"] and len(v.figure.data[TRACE_GROUPS].x) == 0
    assert v.controls["zoom"].value[1] < 100
    v.controls["zoom"].value = (0, 100)
    assert len(v.figure.data[TRACE_GROUPS].x) > 0  # the whole step: groups labelled
    v.controls["zoom"].value = (0, 5)
    lo, hi = v.figure.layout.xaxis.range
    assert hi == pytest.approx(0.05 * v._cols["span"]) and lo == 0
    assert len(v.figure.data[TRACE_GROUPS].x) == 0  # every box holds its number
    v.controls["zoom"].value = (0, 100)
    assert len(v.figure.data[TRACE_GROUPS].x) > 0 and v.window is None


def test_pipeline_view_at_real_size_is_readable_and_tells_chunks_apart():
    """pp 8, 48 microbatches, 4 virtual stages (it opened as a stripe of thin slices with no
    number on any forward box and the chunks in one colour)."""
    from widgets.figures.pipeline import BOX_LABEL_PX, BOX_TEXT_MIN_PX, PLOT_WIDTH_PX

    par = ex.ParallelConfig(dp=1, pp=8, microbatch_size=1, schedule="interleaved_1f1b",
                            virtual_stages=4)  # fmt: skip
    v = PipelineView("gpt3-6.7b", par, global_batch=48, seq=2048)
    assert v.sim.config.num_microbatches == 48
    assert 48 in v.controls["microbatches"].options
    assert all(m % 8 == 0 and 48 % m == 0 for m in v.controls["microbatches"].options)
    lo, hi = v.window
    base, x = (
        boxes(v.figure.data, "compute-forward", "base"),
        boxes(v.figure.data, "compute-forward"),
    )
    inside = (base < hi) & (base + x > lo)
    widths = x[inside] * PLOT_WIDTH_PX / (hi - lo)
    assert inside.sum() >= 8 and np.median(widths) >= BOX_LABEL_PX  # numbers fit the boxes
    # the figure holds the boxes around the window only (a browser takes seconds to draw a
    # whole real-size step): every forward box of drawn_range(window), and no other
    lo_d, hi_d = drawn_range(v.window)
    cols = v._cols
    fwd = cols["kind"] == "compute-forward"
    near = fwd & (cols["end"] > lo_d) & (cols["start"] < hi_d)
    assert len(base) == int(near.sum()) < int(fwd.sum())
    assert sorted(base) == sorted(cols["start"][near])
    for kind in EVENT_KINDS:  # each kind of the step keeps its legend entry (plotly shows
        if (cols["kind"] == kind).any():  # none for an empty trace): its chunk-0 trace
            assert len(v.figure.data[trace_index(kind)].x) > 0, kind
    # the toolbar's autoscale spans the step, not the boxes held
    assert list(v.figure.layout.xaxis.autorangeoptions.include) == [0, float(cols["span"])]
    compute = [i for k in ("compute-forward", "compute-backward", "recompute")
               for i in kind_traces(k)]  # fmt: skip
    assert {v.figure.data[i].textposition for i in compute} == {"inside"}  # numbered
    shapes, colors = set(), set()
    for k in range(4):  # one trace per chunk: its boxes, one colour and one pattern
        t = v.figure.data[trace_index("compute-forward", k)]
        assert t.texttemplate == "F%{text}" and len(t.x) > 0
        assert set(np.asarray(t.customdata) // 8) == {k}  # stage = chunk x pp + device
        assert isinstance(t.marker.color, str) and t.marker.pattern.shape == CHUNK_PATTERNS[k]
        shapes.add(t.marker.pattern.shape)
        colors.add(t.marker.color)
    v.zoom(0, 100)  # the whole step: boxes narrower than a pixel, drawn as the overview
    # no box is wide enough for a number here: none is made (the group labels carry them)
    widest = float((cols["end"] - cols["start"])[fwd].max()) * PLOT_WIDTH_PX / cols["span"]
    assert widest < BOX_TEXT_MIN_PX and overview_mode(cols)
    assert {v.figure.data[i].textposition for i in compute} == {"none"}
    # the bars hold one box of zero length per kind (its legend entry) and nothing else
    for kind in EVENT_KINDS:
        if (cols["kind"] == kind).any():
            assert list(v.figure.data[trace_index(kind)].x) == [0.0], kind
    shades = set()
    for k in range(4):  # each chunk's forwards: one heatmap in the chunk's shade
        heat = v.figure.data[TRACE_OVERVIEW + OVERVIEW_KEYS.index(("compute-forward", k))]
        assert np.isfinite(np.asarray(heat.z)).any(), k
        assert heat.meta["boxes"] == int((fwd & (cols["chunk"] == k)).sum()) == 8 * 48
        shades.add(heat.colorscale[0][1])
    assert shades == colors  # the chunks' shades of the boxes (hatching is below a pixel)
    assert len(shapes) == len(colors) == 4  # four chunks, four patterns and shades
    assert all(len(v.figure.data[i].x) == 0 for i in kind_traces("compute-forward")[4:])
    assert "chunk 1 hatched /" in v.info.value
    v.zoom(0, 5)  # zoomed in from the whole step: sliced down again, numbered again
    assert 0 < len(boxes(v.figure.data, "compute-forward")) < int(fwd.sum())
    assert {v.figure.data[i].textposition for i in compute} == {"inside"}
    # the toolbar's zoom (a relayout from the page) to a stretch not held yet: its boxes come
    span = float(cols["span"])
    w = (0.6 * span, 0.62 * span)
    v._on_zoom(v.figure.layout, w)
    held = set(boxes(v.figure.data, "compute-forward", "base"))
    want = fwd & (cols["end"] > w[0]) & (cols["start"] < w[1])
    assert want.any() and set(cols["start"][want]) <= held


def _gpt3_step():
    par = ex.ParallelConfig(dp=8, tp=8, pp=16, microbatch_size=1, schedule="interleaved_1f1b",
                            virtual_stages=2, recompute="full")  # fmt: skip
    return ex.simulate("gpt3-175b", par, global_batch=1536, seq=2048)


def test_pipeline_overview_at_gpt3_size_shows_each_pixel_busy_as_the_boxes_are():
    """The whole step of GPT-3 175B over 1,024 A100s (33,867 boxes, each narrower than a
    pixel) is drawn as the overview: the bars hold no box but a zero-length one per legend
    kind; each cell shows the trace busy longest in it, and only where at least half of it
    is busy, and its hover counts the trace's boxes there and their microbatches: all
    checked against the boxes themselves, cell by cell, on the first and last rows."""
    sim = _gpt3_step()
    fig = pipeline_figure(sim)
    cols = timeline_columns(sim.timeline)
    assert len(cols["start"]) == 33_867 and overview_mode(cols)
    held = [len(t.x) for t in fig.data[:TRACE_SELECTED_MB]]
    drawn = [float(np.sum(t.x)) for t in fig.data[:TRACE_SELECTED_MB]]
    assert sum(held) <= len(EVENT_KINDS) and sum(drawn) == 0  # legend entries only
    heat = fig.data[TRACE_OVERVIEW:]
    assert [(t.type, t.name) for t in heat] == [
        ("heatmap", EVENT_NAMES[k] + (f", chunk {c}" if c else "")) for k, c in OVERVIEW_KEYS
    ]
    cells = sum(int(np.isfinite(np.asarray(t.z)).sum()) for t in heat)
    assert 0 < cells <= 16 * OVERVIEW_BINS  # one trace per cell at most
    span = float(cols["span"])
    width = span / OVERVIEW_BINS
    edges = width * np.arange(OVERVIEW_BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    key = [(k, c % MAX_CHUNKS if k in CHUNKED_KINDS else 0) for k, c in
           zip(cols["kind"], cols["chunk"], strict=True)]  # fmt: skip
    for row in (0, 15):
        m = (cols["device"] == row) & (cols["kind"] != "pp-comm")
        start, end = cols["start"][m][:, None], cols["end"][m][:, None]
        overlap = np.clip(np.minimum(end, edges[1:]) - np.maximum(start, edges[:-1]), 0, None)
        keys = [key[i] for i in np.flatnonzero(m)]
        busy = {k: overlap[[j for j, x in enumerate(keys) if x == k]].sum(axis=0)
                for k in set(keys)}  # fmt: skip
        total = sum(busy.values())
        shown = {}
        for t, k in zip(heat, OVERVIEW_KEYS, strict=True):
            x, y, z = (np.asarray(a, dtype=float) for a in (t.x, t.y, t.z))
            on = (y == row) & np.isfinite(z)
            for cx, n, lo, hi in zip(x[on], z[on], np.asarray(t.text, float)[on],
                                     np.asarray(t.hovertext, float)[on], strict=True):  # fmt: skip
                j = int(np.argmin(np.abs(centres - cx)))
                assert j not in shown and abs(centres[j] - cx) < width * 1e-6
                shown[j] = k
                mine = [i for i, x in enumerate(keys) if x == k and overlap[i, j] > 0]
                mbs = cols["mb"][m][mine]
                assert (n, lo, hi) == (len(mine), mbs.min(), mbs.max()), (row, j, k)
        for j in range(OVERVIEW_BINS):
            if total[j] < 0.5 * width - 1e-9:
                assert j not in shown, (row, j)  # less than half busy: a gap
            elif total[j] > 0.5 * width + 1e-9:
                best = max(busy, key=lambda k, j=j: busy[k][j])
                assert busy[shown[j]][j] == pytest.approx(busy[best][j]), (row, j)
        # the row's busy time, cell by cell: what the overview shows is what is busy
        assert len(shown) * width == pytest.approx(float(total.sum()), rel=0.02)
    summary = figure_summary(fig)
    forwards = int(((cols["kind"] == "compute-forward") & (cols["chunk"] == 0)).sum())
    assert f"Forward: {forwards} boxes drawn as" in summary and "zoom in for each" in summary
    assert "Tensor-parallel communication" not in summary  # never the longest in a pixel


def test_pipeline_overview_leaves_a_cell_less_than_half_busy_as_a_gap():
    """The idle bubble is drawn as a kind of its own, so the GPT-3 step's rows are busy
    almost everywhere; with its idle boxes left out, the cells of the bubble are less than
    half busy and the overview leaves them empty (an idle gap wider than a pixel stays a
    gap), while a cell more than half busy shows a trace."""
    sim = _gpt3_step()
    cols = timeline_columns(sim.timeline)
    keep = cols["kind"] != "idle"
    gapped = {k: (v[keep] if isinstance(v, np.ndarray) and len(v) == len(keep) else v)
              for k, v in cols.items()}  # fmt: skip
    pp = int(cols["device"].max()) + 1
    cells = overview_arrays(gapped, pp, None)
    width = cells[0]["cell"]
    edges = width * np.arange(OVERVIEW_BINS + 1)
    for row in (0, pp - 1):
        m = (gapped["device"] == row) & (gapped["kind"] != "pp-comm")
        start, end = gapped["start"][m][:, None], gapped["end"][m][:, None]
        busy = np.clip(np.minimum(end, edges[1:]) - np.maximum(start, edges[:-1]), 0,
                       None).sum(axis=0)  # fmt: skip
        shown = np.zeros(OVERVIEW_BINS, dtype=bool)
        for t in cells:
            x, y, z = t["x"], t["y"], t["z"]
            on = (y == row) & np.isfinite(z)
            shown[np.floor(x[on] / width).astype(int)] = True
        gaps = busy < 0.5 * width - 1e-9
        assert gaps.sum() > 10, row  # the bubble leaves cells less than half busy
        assert not shown[gaps].any(), row
        assert shown[busy > 0.5 * width + 1e-9].all(), row


def test_pipeline_view_zoomed_out_to_the_overview_and_back_keeps_selection():
    """Zoomed out, the view draws the overview; a microbatch picked there (menu) outlines
    its real boxes; zooming in (control, then the toolbar) brings the boxes back and empties
    the overview."""
    par = ex.ParallelConfig(dp=1, pp=8, microbatch_size=1, schedule="interleaved_1f1b",
                            virtual_stages=4)  # fmt: skip
    v = PipelineView("gpt3-6.7b", par, global_batch=48, seq=2048)
    heat = range(TRACE_OVERVIEW, TRACE_OVERVIEW + len(OVERVIEW_KEYS))
    assert all(len(v.figure.data[i].z) == 0 for i in heat)  # opens on boxes
    v.controls["zoom"].value = (0, 100)
    assert any(len(v.figure.data[i].z) for i in heat) and v.window is None
    assert float(np.sum(boxes(v.figure.data, "compute-forward"))) == 0  # no box drawn
    v.pick["microbatch"].value = 7
    cols = v._cols
    mine = np.isin(cols["kind"], ("compute-forward", "compute-backward", "recompute"))
    mine &= cols["mb"] == 7
    out = v.figure.data[TRACE_SELECTED_MB]
    assert v.microbatch == 7 and len(out.x) == int(mine.sum()) == 2 * 8 * 4
    assert sorted(out.base) == sorted(cols["start"][mine])  # the real boxes, not cells
    # a click on an overview cell (plotly gives its x and y): its trace's box there
    from plotly.callbacks import Points

    k = OVERVIEW_KEYS.index(("compute-backward", 1))
    t = v.figure.data[TRACE_OVERVIEW + k]
    z = np.asarray(t.z, float)
    j = int(np.flatnonzero(np.isfinite(z))[len(np.flatnonzero(np.isfinite(z))) // 2])
    x, d = float(t.x[j]), int(t.y[j])
    v._on_cell(t, Points([j], [x], [d], t.name, TRACE_OVERVIEW + k), None)
    bwd = (cols["kind"] == "compute-backward") & (cols["device"] == d) & (cols["chunk"] == 1)
    hit = bwd & (cols["stage"] == v.stage) & (cols["mb"] == v.microbatch)
    assert hit.sum() == 1 and v.stage == 8 + d  # chunk 1 of device d
    assert t.text[j] <= v.microbatch <= t.hovertext[j]  # one of the cell's boxes
    assert (v.selection.stage, v.selection.microbatch) == (v.stage, v.microbatch)
    with pytest.raises(ViewError, match=r"chunk 5 on pipeline device 0.*chunk in 0\.\.3"):
        v.click_at("compute-forward", 5, 0, 1.0)
    v.controls["zoom"].value = (0, 5)  # zoomed in: boxes again, overview empty
    assert all(len(v.figure.data[i].z) == 0 for i in heat)
    assert float(np.sum(boxes(v.figure.data, "compute-forward"))) > 0
    v._on_zoom(v.figure.layout, (0.0, float(cols["span"])))  # the toolbar's autoscale
    assert any(len(v.figure.data[i].z) for i in heat)
    v._on_zoom(v.figure.layout, (0.3 * cols["span"], 0.32 * cols["span"]))  # its zoom in
    assert all(len(v.figure.data[i].z) == 0 for i in heat)
    w = v.window
    near = (cols["kind"] == "compute-forward") & (cols["end"] > w[0]) & (cols["start"] < w[1])
    assert set(cols["start"][near]) <= set(boxes(v.figure.data, "compute-forward", "base"))
    out = v.figure.data[TRACE_SELECTED_MB]  # still outlined where held
    assert set(out.base) <= set(cols["start"][mine])


def test_pipeline_click_selects_stage_and_microbatch(pipeline):
    from plotly.callbacks import Points

    v = pipeline
    trace = v.figure.data[BWD]
    i = next(i for i, (st, mb) in enumerate(zip(trace.customdata, trace.text, strict=True))
             if (st, mb) == (2, 3))  # fmt: skip
    v._on_click(trace, Points([i], [0], [0], "compute-backward", BWD), None)
    assert (v.selection.stage, v.selection.microbatch) == (2, 3)
    assert len(v.figure.data[TRACE_SELECTED_MB].x) == 2 * 4


def test_pipeline_view_page_holds_every_trace_after_any_sequence(pipeline):
    v = pipeline
    page = PageModel(v.figure)
    rng = random.Random(7)
    moves = [("microbatches", 4), ("microbatches", 8), ("microbatches", 2), ("pp", 2),
             ("pp", 4), ("schedule", "gpipe"), ("schedule", "1f1b"), ("zoom", (0, 20)),
             ("zoom", (0, 100)), ("schedule", "interleaved_1f1b")]  # fmt: skip
    for _ in range(14):
        key, value = rng.choice(moves)
        if key in ("microbatches", "pp") and value not in v.controls[key].options:
            continue  # the menus offer only what runs (the slider: counts that divide)
        v.controls[key].value = value
        for k in range(TRACE_SELECTED_MB + 1):
            _same_data(page.trace(k), v.figure.data[k], ("x", "y", "base"))
            _same_data(_late_page(v.figure)[k], v.figure.data[k], ("x", "y", "base"))
        # every forward box the view holds (those around its window) is in the page
        cols, drawn = v._cols, drawn_range(v.window)
        near = cols["kind"] == "compute-forward"
        if drawn is not None:
            near &= (cols["end"] > drawn[0]) & (cols["start"] < drawn[1])
        assert len(boxes(page.data, "compute-forward")) == int(near.sum()) > 0


# --- MemoryView --------------------------------------------------------------------------


@pytest.fixture
def memory():
    return MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)


def _row(view, row):
    return list(arr(view.figure.to_dict()["data"][ROWS.index(row)]["y"]))


def test_memory_view_zero_recompute_microbatch(memory):
    v = memory
    opt = _row(v, "optimizer_states")
    v.controls["zero"].value = 1
    assert _row(v, "optimizer_states") == pytest.approx([x / 4 for x in opt])
    v.controls["zero"].value = 3
    assert _row(v, "zero_gather_buffer")[0] > 0
    act = _row(v, "activations")
    v.controls["recompute"].value = "full"
    assert all(a < b for a, b in zip(_row(v, "activations"), act, strict=True))
    assert _row(v, "recompute_working_set")[0] > 0
    before = _row(v, "activations")
    v.controls["microbatch_size"].value = 4
    assert _row(v, "activations")[0] > before[0] and v.config.microbatch_size == 4
    assert v.errors.last is None
    assert "zero3" in v.figure.layout.title.text
    assert "GiB" in v.info.value and "Runtime context" in v.info.value


def test_memory_view_every_segment_in_the_page_after_any_sequence():
    """The issue's two sequences (recompute before the view is shown; ZeRO-3 then
    recompute none) and a seeded random walk: every row is a bar trace with one height
    per device in what the page holds, and the stacked heights add up to the totals."""
    v = MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    v.controls["recompute"].value = "full"  # before the view is shown
    page = PageModel(v.figure)
    v.controls["zero"].value = 3
    v.controls["recompute"].value = "none"
    rng = random.Random(3)
    moves = [("zero", z) for z in (0, 1, 2, 3)] + [
        ("recompute", r) for r in ("none", "selective", "full", "per_layer")
    ] + [("microbatch_size", s) for s in (1, 2, 4)]  # fmt: skip
    for step in range(16):
        if step >= 2:
            key, value = rng.choice(moves)
            v.controls[key].value = value
        n = len(v.sim.memory_per_device)
        for holder in (page.data, _late_page(v.figure)):
            for k, r in enumerate(ROWS):
                t = holder[k]
                assert t["name"] == ROW_NAMES[r] and len(t["y"]) == n, (step, r)
                _same_data(t, v.figure.data[k])
            totals = [sum(holder[k]["y"][d] for k in range(len(ROWS))) for d in range(n)]
            assert totals == pytest.approx(list(holder[TRACE_TOTAL]["y"]))
        seg = {r: _row(v, r)[0] for r in ("runtime_context", "communication_buffers")}
        assert all(x > 0 for x in seg.values()), seg
    assert v.errors.last is None


def test_memory_view_click_and_linked_pipeline(memory):
    pipe = PipelineView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    sel = link(pipe, memory)
    memory.click(1)
    assert sel.stage == 1 and pipe.stage == 1
    assert len(pipe.figure.data[TRACE_SELECTED_MB].x) == 2 * pipe.sim.config.num_microbatches
    pipe.click(0, 2)
    box = memory.figure.layout.shapes[1]
    assert memory.stage == 0 and box.x0 < 0 < box.x1 and box.x1 - box.x0 < 1  # around bar 0


# --- ScalingView -------------------------------------------------------------------------


def test_scaling_view_mode_metric_and_series():
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    assert v.computed and [s.mode for s in v.series] == ["weak", "strong"]
    d = v.figure.to_dict()
    assert d["data"][0]["visible"] is True and d["data"][4]["visible"] is False
    v.controls["metric"].value = "mfu"
    assert v.figure.data[0].y[0] == pytest.approx(v.curves[0].points[0].mfu)
    assert v.figure.layout.annotations[0].text == "MFU"
    v.controls["mode"].value = "weak"  # the last series follows the controls
    assert [p.global_batch for p in v.curves[-1].points] == [64, 128]
    v.add_series(Series("gpt2", "h100-sxm", "weak", 64, 512, (8, 16)))
    d = v.figure.to_dict()
    assert d["data"][4]["visible"] is True and "h100-sxm" in d["data"][4]["name"]
    assert v.progress.updates > 0
    v.clear()
    assert len(v.series) == 1 and v.figure.data[2].visible is False


def test_scaling_view_add_keeps_a_series_and_never_draws_one_twice():
    """Notebook 06's path: "add series" copied the last series (the same curve twice) and a
    change of the model menu then replaced a series without a word."""
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    assert "edit series 2" in v.editing.value
    v.controls["add"].click()
    assert len(v.series) == 2 and "adds series 3" in v.editing.value  # nothing drawn twice
    v.controls["model"].value = "gpt2-medium"
    assert [s.model for s in v.series] == ["gpt2", "gpt2", "gpt2-medium"]
    assert v.curves[-1].model == "gpt2-medium" and v.figure.data[4].visible is True
    assert "edit series 3" in v.editing.value
    v.controls["model"].value = "gpt3-125m"  # the controls now edit series 3
    assert [s.model for s in v.series] == ["gpt2", "gpt2", "gpt3-125m"]
    with pytest.raises(ViewError, match="drawn already"):
        v.add_series(v.series[0])


def test_scaling_view_refuses_a_chip_beside_its_control_and_keeps_the_curves():
    """A chip without the model's precision (Ascend 910 has only fp16 and int8) is refused beside
    the hardware menu with a stale banner; the curves drawn stay (it was an error pane
    titled "_on_control: HardwareError")."""
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    before = (list(v.series), list(v.curves))
    v.controls["hardware"].value = "ascend-910"
    err = v.field_errors["hardware"]
    assert err.visible and "no peak FLOP/s" in err.text and v.stale
    assert (v.series, v.curves) == before and v.errors.last is None
    err.restore()
    assert v.controls["hardware"].value == "a100-80g" and not err.visible and not v.stale


def test_scaling_view_in_the_background_draws_each_point_as_it_is_planned(monkeypatch):
    """The dashboard's scaling tab planned ten counts for GPT-3 175B before drawing anything
    (16 s on this machine): in the background the axes show at once and each point is drawn
    as it is planned."""
    from widgets import scaling_view

    monkeypatch.setattr(scaling_view, "_CURVES", OrderedDict())  # planned, not from a cache
    drawn: list[tuple[int, ...]] = []
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16, 32), lazy=True,
                    background=True)  # fmt: skip
    real = v._draw

    def spy() -> None:
        real()
        drawn.append(tuple(len(c.points) if c else 0 for c in v._shown()))

    monkeypatch.setattr(v, "_draw", spy)
    v.compute()
    v.wait(600)
    assert v.computed and v.errors.last is None
    assert [len(c.points) for c in v.curves] == [3, 3]
    # the weak curve grew one point at a time before the strong one started
    assert (1, 0) in drawn and (2, 0) in drawn and (3, 1) in drawn, drawn
    assert len(v.figure.data[0].x) == 3 and "so far" not in v.info.value


def test_scaling_view_in_the_background_drops_a_replaced_series():
    """A change of the series while the old ones are planned stops them: nothing of the old
    model is drawn after the change, and the new one is computed."""
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16, 32, 64), lazy=True,
                    background=True)  # fmt: skip
    v.compute()
    v.controls["model"].value = "gpt3-125m"  # set_last: while the gpt2 curves are planned
    v.wait(600)
    assert v.series[-1].model == "gpt3-125m" and v.curves[-1].model == "gpt3-125m"
    assert v.computed and v.errors.last is None
    assert v.figure.data[2].name.startswith("gpt3-125m")


def test_scaling_view_in_the_background_refuses_a_chip_beside_its_control_later():
    """In the background (the dashboard's tab) a control change returns at once and the new
    series is planned in the thread; one that cannot be planned (Ascend 910 has no bf16) is
    undone when it fails: the series drawn before come back and the error shows beside the
    hardware menu, whose "restore" puts back the chip that was planned."""
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16), background=True)
    v.wait(600)
    before = (list(v.series), list(v.curves))
    v.controls["hardware"].value = "ascend-910"
    v.wait(600)
    err = v.field_errors["hardware"]
    assert err.visible and "no peak FLOP/s" in err.text and v.stale, err.text
    assert (v.series, v.curves) == before and v.computed
    err.restore()
    v.wait(600)
    assert v.controls["hardware"].value == "a100-80g" and not err.visible and not v.stale
    v.controls["model"].value = "gpt3-125m"  # a valid change: planned in the background
    v.wait(600)
    assert v.curves[-1].model == "gpt3-125m" and v.computed and v.errors.last is None


def test_scaling_view_ideal_line_stays_flat_in_the_page():
    """The ideal linearity line is y = 1 from the fewest to the most devices drawn in what
    the page holds after every update (a cleared y draws as a diagonal 0 -> 1)."""
    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    page = PageModel(v.figure)
    for key, value in [("metric", "mfu"), ("counts", (8, 32)), ("mode", "weak"),
                       ("metric", "tflops_per_device"), ("counts", (16, 32))]:  # fmt: skip
        v.controls[key].value = value
        xs = [p.devices for c in v.curves for p in c.points]  # every series drawn
        lo, hi = min(xs), max(xs)
        for holder in (page.data, _late_page(v.figure)):
            ideal = holder[-1]
            assert list(ideal["y"]) == [1.0, 1.0], (key, value)
            assert list(ideal["x"]) == [lo, hi]
            for k in range(len(v.series) * 2):
                _same_data(holder[k], v.figure.data[k])


# --- StrategyExplorer --------------------------------------------------------------------


@pytest.fixture(scope="module")
def dash():
    strategy_explorer._PLANS.clear()  # planned here (with progress), not from another test
    return StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2)


def test_dashboard_plans_with_progress_and_links_views(dash):
    assert dash.errors.last is None and dash.plan.config.devices == 8
    assert dash.progress.shown and dash.progress.updates >= 2
    assert dash.selection.training is dash.plan and dash.selection.plan is dash.sharding
    graph, pipe, mem = dash.views["graph"], dash.views["pipeline"], dash.views["memory"]
    # colour by stage with several stages; one stage colours every op alike: by strategy
    assert graph.color_by == ("stage" if dash.plan.config.stages > 1 else "strategy")
    assert graph.plan is dash.sharding
    assert pipe.config == dash.plan.config.replace(num_microbatches=None)
    assert "2 of its 12 layers" in dash.note.value
    graph.click("layers.1.mlp.fc1")
    assert dash.selection.node == "layers.1.mlp.fc1"
    assert "chose" in dash.explain.value and "pipeline stage" in dash.explain.value
    stage = dash.stages["layers.1.mlp.fc1"]
    # the pipeline and memory tabs are out of sight: they keep the stage and draw it when
    # opened (a re-plan redraws only the tab on screen)
    assert "stage" in pipe.deferred and "stage" in mem.deferred
    assert dash.open_tab("pipeline") is pipe and pipe.stage == stage and not pipe.deferred
    assert "stage" in mem.deferred
    assert dash.open_tab("memory") is mem and mem.stage == stage and not mem.deferred
    mesh = dash.open_tab("mesh")
    assert mesh.tensor == "layers.1.mlp.fc1" and mesh.plan is dash.sharding


def test_dashboard_control_replans_every_view(dash):
    old = dash.sharding
    dash.open_tab("graph")
    dash.controls["devices"].value = 16
    assert dash.errors.last is None, dash.errors.last
    assert dash.plan.devices == 16 and dash.sharding is not old
    assert dash.views["graph"].graph is dash.sharding.graph  # the tab on screen: redrawn
    pipe, mem = dash.views["pipeline"], dash.views["memory"]
    assert pipe.config.devices == 8 and "training" in pipe.deferred  # out of sight: later
    for name in ("pipeline", "memory", "mesh"):
        dash.open_tab(name)
    assert pipe.config.devices == 16 and mem.devices == 16 and not pipe.deferred
    assert pipe.sim.config == dash.plan.sim.config  # what it draws is the new plan's
    assert dash.views["mesh"].mesh == dash.sharding.mesh
    assert str(dash.plan.config).split(",")[0] in dash.summary.value
    tuner = dash.open_tab("cost tuner")
    assert tuner.graph is dash.sharding.graph
    dash.controls["devices"].value = 8  # a new graph: the open tuner is rebuilt
    assert dash.views["cost tuner"] is not tuner
    assert dash.views["cost tuner"].graph is dash.sharding.graph


def test_dashboard_errors_show_beside_their_control(dash):
    dash.controls["model"].value = "mlp-small"  # plan_training refuses MLPs
    err = dash.field_errors["model"]
    assert "MLP" in err.text and err.visible and dash.stale
    dash.controls["model"].value = "gpt2"
    assert not err.visible and not dash.stale and dash.plan.model == "gpt2"


def test_dashboard_progress_callback_error_is_shown_not_fatal(dash, monkeypatch):
    def broken(name="", min_interval_s=0.0):
        def cb(done, total):
            raise RuntimeError("progress bar broke")

        return cb

    monkeypatch.setattr(dash.progress, "callback", broken)
    monkeypatch.setattr(strategy_explorer, "_PLANS", OrderedDict())  # plan, not a cache hit
    dash.replan()
    assert "progress bar broke" in dash.errors.last
    assert dash.plan.model == "gpt2"  # the plan still finished
    dash.errors.clear()


def test_dashboard_scaling_tab_follows_the_model(dash):
    scaling = dash.open_tab("scaling")
    assert scaling.background  # the tab shows its axes at once and plans in a thread
    scaling.wait(600)
    assert scaling.computed and scaling.series[-1].model == dash.plan.model
    assert scaling.figure.data[0].visible is True


def test_dashboard_tabs_say_what_they_build_and_traces_follow_the_model(dash):
    """Tabs were empty for seconds on first open, and the traces tab ran a toy GPT whatever
    model was chosen."""

    for name in ("cost tuner", "scaling", "traces"):
        if name not in dash.views:
            shown = dash.tab_content(name)
            assert "building when opened" in shown.value, name
    traces = dash.open_tab("traces")
    assert "miniature of <b>gpt2</b>" in traces.note.value and traces.runs.eager
    assert any(t.startswith("building the traces tab") for t in dash.progress.shown)
    dash.controls["model"].value = "llama2-7b"
    dash.flush()
    assert dash.plan.model == "llama2-7b", dash.errors.last
    rebuilt = dash.views["traces"]  # the tab is open: rebuilt at once for the new model
    assert rebuilt is not traces and "miniature of <b>llama2-7b</b>" in rebuilt.note.value
    assert (
        "rmsnorm" in rebuilt.note.value and "rope positions drawn as learned" in rebuilt.note.value
    )
    pp1 = dash.plan.config.stages == 1
    assert ("one pipeline stage" in dash.note.value) == pp1
    dash.controls["model"].value = "gpt2"
    dash.flush()


def test_dashboard_stack_control_replans_with_that_stack():
    import explorer as ex
    from widgets import StrategyExplorer

    dash = StrategyExplorer("gpt2", devices=8, global_batch=16, seq=512, coalesce_s=0)
    assert dash.controls["stack"].value == ex.stacks.DEFAULT_STACK
    assert f"(stack {ex.stacks.DEFAULT_STACK})" in dash.summary.value
    dash.controls["stack"].value = "megatron-lm-2021"
    dash.flush()
    want = ex.plan_training("gpt2", devices=8, global_batch=16, seq=512, stack="megatron-lm-2021")
    assert dash.plan.sim.step_time_s == want.sim.step_time_s
    assert "(stack megatron-lm-2021)" in dash.summary.value


def test_dashboard_summary_shows_where_a_measured_step_is_expected():
    from widgets import StrategyExplorer

    dash = StrategyExplorer("gpt2", hardware="h100-sxm", devices=8, global_batch=16, seq=512,
                            coalesce_s=0)  # fmt: skip
    b = dash.plan.sim.band
    lo, hi = b.around(dash.plan.sim.step_time_s)
    assert f"measured step expected {lo:.3f} s-{hi:.3f} s" in dash.summary.value
    assert f"{b.rows} check rows" in dash.summary.value
    assert "expected measured step" in dash.plan.report()  # the full report and the CLI


def test_training_views_price_with_their_stack_and_follow_the_dashboards():
    import explorer as ex
    from widgets import PipelineView, StrategyExplorer

    par = ex.ParallelConfig(dp=2, pp=2)
    v = PipelineView("gpt2", par, global_batch=16, seq=512, stack="megatron-lm-2021")
    want = ex.simulate("gpt2", par.replace(num_microbatches=None), global_batch=16, seq=512,
                       stack="megatron-lm-2021")  # fmt: skip
    assert v.sim.step_time_s == want.step_time_s
    dash = StrategyExplorer("gpt2", devices=8, global_batch=16, seq=512, coalesce_s=0,
                            stack="torchtitan")  # fmt: skip
    assert dash.views["pipeline"].stack == dash.views["memory"].stack == "torchtitan"
    dash.controls["stack"].value = "megatron-lm-2021"
    dash.flush()
    dash.open_tab("memory")  # a tab out of sight draws the new plan when opened
    dash.open_tab("pipeline")
    assert dash.views["pipeline"].stack == "megatron-lm-2021"
    assert dash.views["memory"].sim.step_time_s == dash.plan.sim.step_time_s


def test_dashboard_replans_in_the_background_and_draws_the_new_plan():
    """In a kernel a device-count change returned after plan_training and every view's redraw
    (0.9-1.6 s for GPT-3 175B on 512 devices): in the background the control returns at once,
    the views keep the last plan under a "planning" banner, and the plan drawn afterwards is
    the one the core computes for the new job; a job planned before comes from the cache."""
    strategy_explorer._PLANS.clear()
    dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2,
                            coalesce_s=0, background=True)  # fmt: skip
    started = threading.Event()
    release = threading.Event()
    real = ex.plan_training

    def slow(*args, **kwargs):
        started.set()
        release.wait(60)
        return real(*args, **kwargs)

    strategy_explorer.ex.plan_training, old = slow, strategy_explorer.ex.plan_training
    try:
        dash.controls["devices"].value = 16
        assert started.wait(60)
        # the control returned while the plan is computed: the last plan stays, marked
        assert dash.planning and dash.plan.devices == 8
        assert dash.stale and "planning gpt2 on 16 x a100-80g" in dash.stale_banner.value
        release.set()
        dash.wait(600)
    finally:
        strategy_explorer.ex.plan_training = old
    want = ex.plan_training("gpt2", devices=16, hardware="a100-80g", global_batch=64, seq=512)
    assert not dash.planning and not dash.stale and dash.errors.last is None
    assert dash.plan.config == want.config and dash.plan.devices == 16
    assert dash.plan.sim.step_time_s == want.sim.step_time_s
    assert f"{want.sim.step_time_s:.3f} s" in dash.summary.value
    assert dash.views["graph"].plan is dash.sharding
    pipe = dash.open_tab("pipeline")
    assert pipe.sim.config == want.sim.config and pipe.sim.step_time_s == want.sim.step_time_s
    dash.controls["devices"].value = 8  # planned before: from the cache
    dash.wait(600)
    assert dash.plan.devices == 8 and dash.plan_cached and "plan cache" in dash.summary.value


def test_dashboard_background_plan_refused_beside_its_control_and_a_newer_change_wins():
    dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2,
                            coalesce_s=0, background=True)  # fmt: skip
    dash.controls["model"].value = "mlp-small"  # plan_training refuses MLPs, in the thread
    dash.wait(600)
    err = dash.field_errors["model"]
    assert "MLP" in err.text and err.visible and dash.stale and dash.plan.model == "gpt2"
    err.restore()
    dash.wait(600)
    assert not err.visible and not dash.stale and dash.plan.model == "gpt2"
    dash.controls["devices"].value = 32
    dash.controls["devices"].value = 16  # before the first finished: only this one is drawn
    dash.wait(600)
    assert dash.plan.devices == 16 and not dash.planning and dash.errors.last is None


def test_scaling_view_in_a_kernel_plans_a_control_change_in_the_background():
    """A standalone ScalingView computed a weak/strong change before the control returned
    (0.9-4.5 s for GPT-3 175B): in a kernel (a running event loop) the first curves are
    still computed by the constructor, and a change returns at once and is planned in a
    thread; what is drawn after it is the core's curve for the new mode."""
    import asyncio

    v = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16))
    assert v.background is None and v.computed  # the constructor computed the curves

    async def change() -> None:
        v.controls["mode"].value = "weak"

    asyncio.run(change())
    v.wait(600)
    want = ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512, mode="weak")
    assert v.computed and v.errors.last is None and v.series[-1].mode == "weak"
    assert [p.tokens_per_s_per_device for p in v.curves[-1].points] == [
        p.tokens_per_s_per_device for p in want.points
    ]
    assert list(v.figure.data[2].y) == [p.tokens_per_s_per_device for p in want.points]


def test_dashboard_graph_out_of_sight_catches_up_with_another_model():
    """A re-plan for another model while the graph tab is out of sight: the graph keeps the
    plan for when it is opened, then draws the new model's graph and plan without error."""
    dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2)
    dash.open_tab("pipeline")
    dash.controls["model"].value = "gpt3-125m"
    graph = dash.views["graph"]
    assert "plan" in graph.deferred and graph.graph is not dash.sharding.graph
    assert dash.open_tab("graph") is graph and not graph.deferred
    assert graph.graph is dash.sharding.graph and graph.plan is dash.sharding
    assert dash.errors.last is None and graph.errors.last is None
    assert len(graph.figure.data[1].x) > 0  # the new graph's units are drawn


def test_dashboard_constraints_set_while_a_background_plan_runs_are_not_overwritten():
    """The steering row re-plans at once; a background plan started before for the old job
    finishes later and must not replace the constrained plan."""
    dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512, draw_layers=2,
                            coalesce_s=0, background=True)  # fmt: skip
    started, release = threading.Event(), threading.Event()
    real = ex.plan_training

    def slow(*args, **kwargs):
        if kwargs.get("devices") == 16 and not kwargs.get("constraints"):
            started.set()
            release.wait(60)
        return real(*args, **kwargs)

    strategy_explorer.ex.plan_training, old = slow, strategy_explorer.ex.plan_training
    try:
        strategy_explorer._PLANS.clear()
        dash.controls["devices"].value = 16  # planned in the thread, held
        assert started.wait(60)
        worker = dash._worker
        dash.set_constraints((ex.Fix("pp", 2),))  # the steering row plans at once
        assert dash.plan.config.pp == 2
        release.set()  # the older plan (no constraint) finishes after it: dropped
        worker.join(60)
    finally:
        strategy_explorer.ex.plan_training = old
    assert dash.plan.devices == 16 and dash.plan.config.pp == 2
    assert dash.constraints == (ex.Fix("pp", 2),)


def test_pipeline_redraw_sends_numbers_only_and_pauses_the_collector(pipeline):
    """A redraw's per-box data are flat numeric arrays (plotly sends them as binary
    buffers; per-box colour strings and a two-column customdata went as JSON lists), each
    trace one colour; the cyclic collector is off while the step is simulated and drawn
    and is back as it was afterwards (also when it was off)."""
    import gc

    v = pipeline
    seen = []
    draw = v._draw
    v._draw = lambda: (seen.append(gc.isenabled()), draw())
    v.controls["schedule"].value = "interleaved_1f1b"
    assert seen == [False] and gc.isenabled()
    for t in v.figure._widget_data[:TRACE_SELECTED_MB]:
        assert isinstance(t["marker"]["color"], str), t["name"]
        # (not base: plotly validates it as "any" and keeps it as an object array)
        for key in ("x", "y", "text", "customdata", "hovertext"):
            if key in t:
                a = t[key]
                assert isinstance(a, np.ndarray) and a.ndim == 1, (t["name"], key)
                assert a.dtype.kind in "if" and a.dtype != np.int64, (t["name"], key)
    gc.disable()
    try:
        v.controls["schedule"].value = "1f1b"
        assert seen == [False, False] and not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_pipeline_summary_reads_the_box_numbers(pipeline):
    """The screen-reader text names each trace with the first numbers its boxes show
    (numeric per-box labels: microbatch 0 included, written as integers)."""
    text = pipeline.describe_figures()
    first = [int(m) for m in pipeline.figure.data[FWD].text[:6]]
    assert f"Forward: {len(pipeline.figure.data[FWD].x)} bars" in text
    assert "labelled " + ", ".join(map(str, first)) + ", ..." in text and first[0] == 0
