"""TraceCompare headless: what a user reads on the tracks, the flows, the compile track, the
headline speed-up, the rewrite diff and the Perfetto file, after sequences of control changes."""

from __future__ import annotations

import json
import re

import ipywidgets as ipw
import pytest

import explorer as ex
from explorer.trace import flows, from_chrome
from widgets import TraceCompare
from widgets.colors import CHANGED
from widgets.figures.trace import (
    COMPILE,
    EAGER_ROW,
    FIRST_NAME,
    STATIC_ROW,
    STATUS_COLORS,
    TRACE_COMPILE,
    TRACE_FLOWS,
    TRACE_OTHER,
    TRACE_PICKED,
    rewrite_figure,
    time_unit,
    trace_figure,
)
from widgets.trace_compare import gpt_workload

HUMAN_TIME = re.compile(r"\d (ns|us|ms|s|min|h)\b")


@pytest.fixture
def view():
    return TraceCompare(batch=1, size=16, runs=3)


def _name_traces(fig):
    return [fig.data[k] for k in range(TRACE_OTHER, len(fig.data))]


def _slices(fig):
    """(row, name, start, duration) of every drawn slice, in axis units."""
    out = []
    for t in _name_traces(fig):
        if t.visible is False:
            continue
        for row, name, x, base in zip(t.y, t.text, t.x, t.base, strict=True):
            out.append((row, name, base, x))
    return out


def test_every_slice_is_named_with_a_human_duration_and_starts_at_or_after_zero(view):
    cmp = view.comparison
    slices = _slices(view.figure)
    eager = sorted(n for r, n, _, _ in slices if r == EAGER_ROW)
    static = sorted(n for r, n, _, _ in slices if r == STATIC_ROW)
    assert eager == sorted(e.name for e in cmp.eager.compute_events)
    assert static == sorted(k.name for k in cmp.static.compute_events)
    assert min(b for _, _, b, _ in slices) == 0.0  # each run from 0
    for t in _name_traces(view.figure):
        if t.visible is not False:
            assert all(HUMAN_TIME.search(h) for h in t.hovertext)
            assert list(t.text) == [c[1] for c in t.customdata]  # the op name on the slice
    assert view.figure.layout.uniformtext.mode == "hide"  # names only where they fit
    c = view.figure.data[TRACE_COMPILE]
    assert min(c.base) >= 0.0  # the compilation is never at negative time
    span = max(b + x for _, _, b, x in slices)
    unit, _ = time_unit(span * 1e3 if "ms" in view.figure.layout.xaxis2.title.text else span)
    assert f"({unit})" in view.figure.layout.xaxis2.title.text


def test_one_colour_and_one_legend_entry_per_op_name(view):
    traces = _name_traces(view.figure)[1:]  # after "other"
    assert [t.name for t in traces] == list(view.names)
    assert view.names == tuple(sorted(view.names))
    colours = [t.marker.color for t in traces]
    assert len(set(colours)) == len(colours)  # distinct while there are <= 20 names
    for t in traces:
        assert set(t.text) == {t.name}
    assert view.figure.layout.showlegend is True
    # the same workload again gives the same names, hence the same colours
    again = TraceCompare(batch=2, size=8, runs=1)
    assert again.names == view.names
    assert [t.marker.color for t in _name_traces(again.figure)[1:]] == colours


def test_headline_is_the_median_of_n_runs_with_its_spread(view):
    s = view.runs.speedup
    assert len(s) == 3
    title = view.figure.layout.title.text.replace("<br>", " ")
    assert f"{s.median:.2f}x" in title and "median of 3 runs" in title
    assert f"min-max {s.low:.2f}-{s.high:.2f}x" in title and "IQR" in title
    assert f"{s.median:.2f}x" in view.headline.value
    view.controls["runs"].value = 5
    assert len(view.runs) == 5 and "median of 5 runs" in view.figure.layout.title.text
    first_row = view.summary.value.split("<tbody><tr>")[1].split("</tr>")[0]
    assert "Total time" in first_row and "median" in first_row
    assert f"{view.runs.speedup.median:.2f}x (median of ratios)" in first_row


def test_a_new_shape_is_a_red_recompile_with_its_reason_and_a_seen_one_a_cache_hit(view):
    c = view.figure.data[TRACE_COMPILE]
    assert list(c.marker.color) == [COMPILE] and c.text[0].startswith("<b>compile</b>")
    view.controls["size"].value = 24
    c = view.figure.data[TRACE_COMPILE]
    assert view.recompiles == 1 and list(c.marker.color) == [CHANGED]
    assert "recompile" in c.text[0] and "input signature changed" in c.text[0]
    assert "(1, 24)" in c.text[0] and "recompile" in view.headline.value
    view.controls["size"].value = 16  # compiled before: no compilation at all
    c = view.figure.data[TRACE_COMPILE]
    assert view.recompiles == 1 and "cache hit" in c.text[0] and CHANGED not in c.marker.color
    assert "cache hit" in view.headline.value


def test_flows_join_each_eager_op_to_the_middle_of_its_fused_kernel(view):
    fl = [f for f in flows(view.comparison) if f.fused]
    t = view.figure.data[TRACE_FLOWS]
    assert t.visible is True and list(t.x).count(None) == len(fl) > 0
    mids = {(r, round(b + x / 2, 9)) for r, _, b, x in _slices(view.figure)}
    for i in range(0, len(t.x), 3):
        assert (t.y[i], t.y[i + 1]) == (EAGER_ROW, STATIC_ROW)
        assert (EAGER_ROW, round(t.x[i], 9)) in mids and (STATIC_ROW, round(t.x[i + 1], 9)) in mids
    view.controls["all_flows"].value = False
    assert view.figure.data[TRACE_FLOWS].visible is False
    assert len(view.figure.data[TRACE_FLOWS].x) == 3 * len(fl)  # data kept for the toggle


def test_picking_a_kernel_draws_its_flows_bold_by_dropdown_or_click(view):
    kernels = view.comparison.static.compute_events
    i = next(i for i, k in enumerate(kernels) if len(k.replaced) > 1)
    view.controls["kernel"].value = i
    picked = view.figure.data[TRACE_PICKED]
    assert picked.visible is True and list(picked.x).count(None) == len(kernels[i].replaced)
    assert " + ".join(kernels[i].replaced) in view.kernel_info.value
    view.controls["kernel"].value = -1
    assert view.figure.data[TRACE_PICKED].visible is False
    # a click on an eager slice picks the kernel that absorbed it
    f = next(f for f in flows(view.comparison) if f.kernel_index == i)
    trace = next(t for t in _name_traces(view.figure) if t.name == f.eager.name)
    j = next(j for j, c in enumerate(trace.customdata) if c[0] == EAGER_ROW and c[2] == i)

    class Points:
        point_inds = [j]

    view._on_click(trace, Points(), None)
    assert view.kernel == i and view.controls["kernel"].value == i
    with pytest.raises(ValueError, match="does not exist"):
        view.click_kernel(len(kernels))


def test_pass_steps_highlight_what_changed_before_and_after(view):
    assert len(view.steps) >= 2
    for k in range(len(view.steps)):
        view.controls["step"].value = k
        d = view._diffs[k]
        data = view.steps_figure.data
        half = len(data) // 2
        by_side = {}
        for side, traces in (("before", data[:half]), ("after", data[half:])):
            by_side[side] = {
                status: (list(t.customdata) if t.customdata is not None else [])
                for status, t in zip(STATUS_COLORS, traces[1:], strict=True)
            }
            for status, t in zip(STATUS_COLORS, traces[1:], strict=True):
                assert t.marker.color == STATUS_COLORS[status]
                assert (t.visible is not False) == bool(len(t.x))
        assert sorted(by_side["before"]["removed"]) == sorted(d.removed)
        assert sorted(by_side["after"]["added"]) == sorted(d.added)
        assert sorted(by_side["after"]["rewritten"]) == sorted(d.rewritten)
        if d.changed:  # the two panels differ: something is marked removed/added/rewritten
            marked = by_side["before"]["removed"] + by_side["after"]["added"]
            marked += by_side["before"]["rewritten"]
            assert marked
        assert d.pass_name in view.steps_figure.layout.title.text
        assert d.rule in view.step_info.value
    fuse = next(k for k, s in enumerate(view.steps) if s.pass_name == "fuse")
    assert view._diffs[fuse].removed and view._diffs[fuse].rewritten


def test_rewrite_figure_keeps_unchanged_nodes_in_place():
    fn, make_args = gpt_workload()
    step = next(s for s in ex.jit(fn).steps(*make_args(1, 8)) if s.pass_name == "fuse")
    fig = rewrite_figure(step)
    half = len(fig.data) // 2
    where = {}
    for side, traces in (("before", fig.data[:half]), ("after", fig.data[half:])):
        ctx = traces[1 + list(STATUS_COLORS).index("context")]
        where[side] = dict(zip(ctx.customdata, zip(ctx.x, ctx.y, strict=True), strict=True))
    both = where["before"].keys() & where["after"].keys()
    assert both and all(where["before"][n] == where["after"][n] for n in both)
    empty = rewrite_figure(None)
    assert all(t.visible is False for t in empty.data) and "no rewrite" in (empty.layout.title.text)


def test_perfetto_file_and_download_link(view, tmp_path):
    path = view.write_perfetto(tmp_path / "run.trace.json")
    data = json.loads(path.read_text())
    procs = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert procs == {"eager run", "static run (@jit)", "compilation (first call)"}
    assert sum(e["ph"] == "s" for e in data["traceEvents"]) == len(flows(view.comparison))
    back = from_chrome(data)
    assert back.of_kind("compile")  # the compilation travels with the runs
    info = view.perfetto_info.value
    assert str(path) in info and "ui.perfetto.dev" in info and "Open trace file" in info
    assert "download=" in info and "data:application/json;base64," in info
    view.perfetto_button.click()  # the button writes the default file
    assert view.perfetto_path.name in view.perfetto_info.value
    view.perfetto_path.unlink()


def test_any_sequence_of_changes_keeps_every_visible_trace_complete(view):
    n_traces = len(view.figure.data)
    sequence = [("size", 24), ("batch", 2), ("all_flows", False), ("kernel", 3),
                ("runs", 1), ("size", 16), ("all_flows", True), ("step", 1), ("batch", 1)]  # fmt: skip
    for key, value in sequence:
        view.controls[key].value = value
        view.flush()
        for fig in (view.figure, view.steps_figure):
            for t in fig.to_dict()["data"]:
                if t.get("visible", True) is not False:
                    assert len(t.get("x", [])) > 0, (key, value, t["name"])
                    if t["type"] == "bar":
                        n = len(t["x"])
                        assert len(t["base"]) == len(t["y"]) == len(t["text"]) == n
        assert len(view.figure.data) == n_traces
        assert view.summary.value.count("<tr>") == 9  # header + 8 rows
        # what a page that draws the figure later receives: the synced state, not the first
        assert view.figure._widget_data == view.figure._data
    assert view.errors.last is None


def test_a_bad_value_shows_beside_its_control_and_keeps_the_last_result():
    fn, make = gpt_workload()

    def make_args(batch, size):
        if batch > 3:
            raise ValueError(f"batch={batch} is over this workload's limit of 3; pick 1-3")
        return make(batch, size)

    view = TraceCompare(fn, make_args, batch=1, size=16, runs=1)
    before = view.comparison
    view.controls["batch"].value = 5
    err = view.field_errors["batch"]
    assert err.visible and "limit of 3" in err.text and view.stale
    assert view.comparison is before and view.batch == 1  # last valid result kept
    assert "batch = 5" in view.stale_banner.value
    err.restore()
    assert view.controls["batch"].value == 1 and not err.visible and not view.stale
    with pytest.raises(ValueError, match="both fn and make_args"):
        TraceCompare(fn)


def test_laptop_layout_controls_wrap_and_readouts_fit(view):
    for key in ("batch", "size", "runs", "step"):
        w = view.controls[key]
        assert w.style.description_width == "initial" and w.readout_format == "d"
    rows = [c for c in view.children if isinstance(c, ipw.HBox) and c is not view.progress]
    assert rows and all(r.layout.flex_flow == "row wrap" for r in rows)
    assert view.perfetto_button.layout.width == "auto"
    assert view.summary.layout.width == "auto"  # 100% + its margins scrolled sideways
    for fig in (view.figure, view.steps_figure):
        assert fig.layout.width is None and fig.layout.autosize is True


def test_trace_figure_needs_no_view():
    fn, make_args = gpt_workload()
    args = make_args(1, 8)
    jitted = ex.jit(fn)
    with ex.trace.record("first") as first:
        jitted(*args)
    runs = ex.trace.repeat_runs(fn, jitted, args, n=1)
    cmp = runs.comparison()
    names = ex.trace.slice_names(cmp.eager, cmp.static)
    fig = trace_figure(cmp, names, runs=runs, compile_events=first.trace.events)
    assert len(fig.data) == FIRST_NAME + len(names)
    assert "one run" in fig.layout.title.text


@pytest.mark.skipif(not ex.compiler.codegen.numba_available(), reason="numba is not installed")
def test_numba_backend_steps_show_their_generated_source(monkeypatch):
    from explorer.compiler.codegen import cost

    monkeypatch.setattr(cost, "MIN_WORK", 0)  # the small default GPT gets kernels too
    view = TraceCompare(batch=1, size=16, runs=3, backend="numba")
    k = next(k for k, s in enumerate(view.steps) if s.rule == "numba_kernel")
    view.controls["step"].value = k
    assert "<pre" in view.step_info.value and "@njit(" in view.step_info.value
    plain = next(k for k, s in enumerate(view.steps) if not s.source)
    view.controls["step"].value = plain
    assert "<pre" not in view.step_info.value


def test_a_shape_measured_before_shows_its_runs_again_and_a_new_shape_measures():
    view = TraceCompare(batch=1, size=16, runs=2)
    calls, eager = [], view.fn

    def counted(*args):  # the eager side, counted (the jitted side was compiled from it)
        calls.append(len(args))
        return eager(*args)

    view.fn = counted
    first_runs, first_steps = view.runs, view.steps
    view.controls["size"].value = 24  # new: compiled and run 2 x 2 times (+ warm-ups)
    view.flush()
    assert view.runs is not first_runs and len(view.runs) == 2
    assert view.compile_events and view.recompiles == 1
    new_calls = len(calls)
    view.controls["size"].value = 16  # back: the runs measured at 16, nothing run again
    view.flush()
    assert len(calls) == new_calls and view.runs is first_runs and view.steps is first_steps
    assert view.compile_events == () and view.recompiles == 1  # the cache-hit compile track
    assert "cache hit" in view.figure.data[TRACE_COMPILE].text[0]
    assert view._diffs and len(view._diffs) == len(view.steps)
    view.controls["runs"].value = 3  # another run count at 16 is a new measurement
    view.flush()
    assert len(calls) > new_calls and len(view.runs) == 3
