"""Each view's caption (info line) says what its figure draws: after a control changes, every
number the caption states is read back from the figure on screen and compared (issue 26:
captions generated from the same values as their figures). Numbers are never typed here:
they come from the figure's traces, title and annotations."""

from __future__ import annotations

import re

import numpy as np
import pytest

import explorer as ex
from widgets import MemoryView, PipelineView, ScalingView
from widgets.figures.memory import ROW_NAMES
from widgets.figures.pipeline import trace_index
from widgets.format import fmt_bytes, fmt_seconds

_GIB = 2**30
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_pipeline_caption_agrees_with_its_figure_after_a_microbatch_change():
    view = PipelineView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=64, seq=512)
    counts = [m for m in view.controls["microbatches"].options if m != view.microbatches]
    for m in counts[:2]:
        view.controls["microbatches"].value = m
        info, fig = _text(view.info.value), view.figure
        title = fig.layout.title.text
        # the microbatches: caption's count and size, the forward boxes' microbatch ids
        got = re.search(r"dp (\d+) × (\d+) microbatches × microbatch size\s+(\d+)", info)
        assert got, info
        dp, count, size = (int(g) for g in got.groups())
        forward = fig.data[trace_index("compute-forward")]  # gpt2 1F1B: one chunk
        assert forward.name == "Forward"
        assert len({int(mb) for mb in forward.text}) == count  # the numbers on the boxes
        stages = len({int(st) for st in forward.customdata})
        assert len(forward.x) == count * stages  # one box per microbatch per stage
        assert f"{count} microbatch{'' if count == 1 else 'es'} of {size}" in title
        assert dp * count * size == int(re.search(r"global batch\s+(\d+)", info).group(1))
        # the step: the caption's, the title's and the end of the last box drawn
        unit = _UNITS[re.search(r"time \((\w+)\)", fig.layout.xaxis.title.text).group(1)]
        end = max(b + x for t in fig.data if t.type == "bar" and t.x is not None and len(t.x)
                  for b, x in zip(t.base, t.x, strict=True)) * unit  # fmt: skip
        step = re.search(r"step (\S+ \S+),", info).group(1)
        assert step == fmt_seconds(end) and f"step {step}" in title
        # the bubble: the caption's simulated and formula numbers are the title's
        sim = re.search(r"simulated\s+([\d.]+%)", info).group(1)
        formula = re.search(r"\)\s+([\d.]+%)\s*,\s+simulated", info).group(1)
        assert f"bubble {sim} simulated / {formula} formula" in title


def test_pipeline_caption_agrees_with_its_overview_zoomed_out():
    """Zoomed out to a whole real-size step (pp 8 x 48 microbatches x 4 chunks), boxes are
    narrower than a pixel and drawn as the overview: the caption's step is where the last
    busy cell ends (to a cell), and its microbatch count is the overview's highest
    microbatch + 1."""
    par = ex.ParallelConfig(dp=1, pp=8, microbatch_size=1, schedule="interleaved_1f1b",
                            virtual_stages=4)  # fmt: skip
    view = PipelineView("gpt3-6.7b", par, global_batch=48, seq=2048)
    view.controls["zoom"].value = (0, 100)
    info, fig = _text(view.info.value), view.figure
    cells = [t for t in fig.data if t.type == "heatmap" and t.z is not None and len(t.z)]
    assert cells, "the whole step should be drawn as the overview"
    unit = _UNITS[re.search(r"time \((\w+)\)", fig.layout.xaxis.title.text).group(1)]
    half = max(t.x[1] - t.x[0] for t in cells) / 2  # the frame lists the columns first
    end = max(float(np.max(np.asarray(t.x)[np.isfinite(np.asarray(t.z, float))])) + half
              for t in cells)  # fmt: skip
    step = float(re.search(r"step (\S+) (\S+),", info).group(1))
    step *= _UNITS[re.search(r"step \S+ (\S+),", info).group(1)] / unit
    assert abs(end - step) <= half * 2 + 1e-3 * step  # last busy cell, or rounding of "3.80 s"
    got = re.search(r"dp (\d+) × (\d+) microbatches", info)
    forward = [t for t in cells if t.legendgroup == "compute-forward"]
    top = max(float(np.nanmax(np.asarray(t.hovertext, float))) for t in forward)
    assert int(got.group(2)) == int(top) + 1


def test_memory_caption_agrees_with_its_bars_after_a_zero_and_recompute_change():
    view = MemoryView("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=64, seq=512)
    for key, value in (("zero", 3), ("recompute", "full"), ("zero", 1)):
        view.controls[key].value = value
        info, fig = _text(view.info.value), view.figure
        got = re.search(r"worst device: (?:stage|pipeline device) (\d+), (\S+ \S+) of (\S+ \S+)",
                        info)  # fmt: skip
        assert got, info
        k, total, cap = int(got.group(1)), got.group(2), got.group(3)
        totals = next(t for t in fig.data if t.name == "total").y
        assert max(range(len(totals)), key=lambda i: totals[i]) == k  # the tallest bar
        assert fmt_bytes(totals[k] * _GIB) == total
        assert fig.layout.annotations[0].text == f"capacity {cap}"
        assert f"{total} of {cap}" in fig.layout.title.text
        # every row the caption names is that row's bar at the worst device, and back
        rows = info.split("—")[1].split("; step")[0]
        drawn = {t.name: fmt_bytes(t.y[k] * _GIB) for t in fig.data
                 if t.name in ROW_NAMES.values() and t.y[k] > 0}  # fmt: skip
        for name, size in drawn.items():
            assert f"{name} {size}" in rows, (name, size, rows)
        assert len(re.findall(r"\d B|[KMGT]iB", rows)) == len(drawn), rows  # nothing else


@pytest.mark.parametrize("counts", [(8, 32), (16, 32)])
def test_scaling_caption_agrees_with_its_linearity_curves(counts):
    view = ScalingView(model="gpt2", global_batch=64, seq=512, counts=(8, 16, 32))
    view.controls["counts"].value = counts
    info = _text(view.info.value)
    said = re.findall(r"linearity ([\d.]+) at (\d+) devices", info)
    drawn = [t for t in view.figure.data if t.yaxis == "y2" and t.visible is True
             and t.x is not None and len(t.x)]  # fmt: skip
    assert len(said) == len(drawn) == len(view.series)
    for (lin, devices), trace in zip(said, drawn, strict=True):
        ys = [y for y in trace.y if y is not None]
        assert int(devices) == max(x for x, y in zip(trace.x, trace.y, strict=True)
                                   if y is not None)  # fmt: skip
        assert lin == f"{ys[-1]:.2f}"
    assert min(drawn[-1].x) == counts[0] and max(drawn[-1].x) == counts[1]  # the edited one


def test_cost_tuner_title_agrees_with_its_bars_after_a_slider_change():
    from widgets import CostTuner, MeshView, link
    from widgets.figures.cost import fmt_cost

    g = ex.models.build(ex.models.load("gpt2"), batch=8, seq=512)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    tuner = CostTuner(g, mesh)
    mesh_view = MeshView(mesh)
    link(tuner, mesh_view)
    for beta in (5.0, 0.2):
        tuner.controls["beta_communication"].value = beta
        fig, unit = tuner.figure, tuner.plan.cost.unit
        bars = {t.name: dict(zip(t.x, t.y, strict=True)) for t in fig.data[:2]}
        title = fig.layout.title.text
        now, before = bars["current"]["Total"], bars["baseline"]["Total"]
        assert title.startswith(f"total {fmt_cost(now, unit)} (baseline {fmt_cost(before, unit)}")
        # the stacked terms of the current bar add up to its total
        terms = sum(t.y[1] for t in fig.data[2:])
        assert terms == pytest.approx(now, rel=1e-9)
        n = int(re.search(r"(\d+) ops changed", title).group(1))
        assert n == len(tuner.changed)
        # the mesh view's caption counts the collectives its menu offers for the op
        node = next(n for n in tuner.plan.assignment if tuner.plan.graph.node(n).inputs)
        mesh_view.selection.select(node=node)
        menu = [v for _, v in mesh_view.controls["collective"].options if v is not None]
        said = _text(mesh_view.info.value)
        if menu:
            assert f"{len(menu)} collective(s)" in said, said
        else:
            assert "no collective" in said, said
        assert tuner.plan.assignment[node].name in said


def test_pareto_caption_counts_the_points_its_figure_draws_after_a_pick_and_an_axis_change():
    from widgets import ParetoView

    plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
                            objectives=("step_time", "memory", "communication"))  # fmt: skip
    view = ParetoView(plan)
    front = plan.pareto
    dominated = next(i for i, p in enumerate(front.points) if not p.on_front)
    for key, value in (("y", "communication"), ("point", dominated)):
        if key == "point":
            view.pick(value)
        else:
            view.controls[key].value = value
        info = _text(view.info.value)
        n_front, n_all = (int(g) for g in re.search(r"(\d+)\s+of (\d+) fitting", info).groups())
        n_dom = int(re.search(r"(\d+) are dominated", info).group(1))
        traces = {t.name.split(" (")[0]: t for t in view.figure.data}
        assert len(traces["Pareto front"].x) == n_front
        assert len(traces["dominated"].x) == n_dom and n_front + n_dom == n_all
        if key == "point":  # "dominated by k front plans": the orange squares drawn
            k = int(re.search(r"dominated by (\d+) front plans?\b", info).group(1))
            assert len(traces["dominate the selected"].x) == k
            assert len(traces["selected"].x) == 1


def test_graph_title_counts_the_closed_boxes_drawn_after_each_click():
    from widgets import GraphView

    g = ex.models.build(ex.models.load("gpt2"), batch=8, seq=512)
    view = GraphView(g)
    for unit in ("scope:layers.0", "scope:layers.0.attn", "open:layers.0"):
        view.click(unit)
        title = view.figure.layout.title.text
        nodes, closed = re.search(r": ([\d,]+) nodes in \d+ groups, (\d+) closed", title).groups()
        boxes = next(t for t in view.figure.data if t.name == "boxes")
        assert int(closed) == len(boxes.x) and int(nodes.replace(",", "")) == len(g)


@pytest.mark.parametrize(("axis", "rank"), [("dp", 5), ("tp", 6), ("pp", 3)])
def test_rank_map_caption_agrees_with_its_squares(axis, rank):
    from collections import Counter

    from widgets import RankMapView

    view = RankMapView(dp=2, tp=4, pp=2)
    view.controls["axis"].value, view.controls["rank"].value = axis, rank
    title = _text(view.figure.layout.title.text)
    n, size = (
        int(g) for g in re.search(rf"{axis} groups, .*?: (\d+) of (\d+) ranks", title).groups()
    )
    squares = view.figure.data[0]
    labels = [re.match(rf"r(\d+)<br>{axis} (\d+)", t).groups() for t in squares.text]
    counts = Counter(g for _, g in labels)
    assert len(counts) == n and set(counts.values()) == {size}  # n groups of size drawn
    summary = _text(view.summary.value)
    said = [int(r) for r in re.search(rf"rank {rank}'s {axis} group: \[([\d, ]+)\]",
                                       summary.replace("&#x27;", "'")).group(1).split(",")]  # fmt: skip
    outlined = [int(r) for (r, _), w in zip(labels, squares.marker.line.width, strict=True)
                if w > 1]  # fmt: skip
    assert sorted(said) == outlined and rank in outlined


def test_plan_diff_caption_agrees_with_its_bars_and_rings():
    from widgets import PlanDiffView

    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=4), batch=8, seq=256)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    a = ex.search(g, mesh, "dynamic_programming")
    for beta in (8.0, 0.25):
        b = ex.search(g, mesh, "dynamic_programming",
                      params=ex.CostParams(beta_communication=beta))  # fmt: skip
        view = PlanDiffView(a, b)
        said = _text(view.summary.value)
        total = re.search(r"b - a\s+([+-][\d.e+-]+) s", said).group(1)
        assert total == f"{sum(view.figure.data[0].x):+.4g}"  # the term bars add up to it
        assert f"b - a = {total} s" in view.figure.layout.title.text
        n = int(re.search(r"(\d+) ops change strategy \(ringed in red\)", said).group(1))
        rings = next(t for t in view.graph_figure.data if t.name == "changed")
        assert len(rings.x) == n


def test_trace_compare_summary_agrees_with_the_slices_drawn_after_a_rerun():
    from collections import Counter

    from widgets import TraceCompare

    view = TraceCompare(batch=1, size=16, runs=3)
    for size in (16, 24):
        view.controls["size"].value = size
        view.flush()
        assert view.size == size and not view.stale  # re-run on the new length
        summary, headline = _text(view.summary.value), _text(view.headline.value)
        ops, kernels = (int(g) for g in re.search(
            r"Ops \(eager\) / kernels \(static\)\s+(\d+)\s+(\d+)", summary).groups())  # fmt: skip
        slices = Counter(y for t in view.figure.data if t.y is not None
                         and t.name not in ("compilation",) and not t.name.startswith("flow")
                         and t.name != "picked kernel's flows" for y in t.y)  # fmt: skip
        assert (slices["eager"], slices["static (@jit)"]) == (ops, kernels)
        speedup = re.search(r"speed-up ([\d.]+x) \(median of (\d+) runs", headline).groups()
        assert f"{speedup[0]} (median of {speedup[1]} runs" in view.figure.layout.title.text
