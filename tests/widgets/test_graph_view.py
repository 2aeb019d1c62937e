"""GraphView for big models: nested groups, open/close, search, legends, arrows, routed
edges, labels at zoom, and "changed" rings only for material cost changes."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.ir.hierarchy import CHANGE_THRESHOLD, hierarchy
from widgets import GraphView
from widgets.figures.graph import (
    OPEN_PREFIX,
    STRATEGY_PALETTE,
    TRACE_CHANGED,
    TRACE_EDGES,
    TRACE_GROUPS,
    TRACE_NODES,
    TRACE_SELECTED,
    graph_figure,
    strategy_colors,
    unit_labels,
)
from widgets.figures.layout import graph_layout


@pytest.fixture(scope="module")
def llama():
    """A small llama (RMSNorm, gated MLP): the block structure of llama3-405b."""
    cfg = ex.models.load("llama3-405b").replace(
        num_layers=4, hidden_size=64, num_heads=4, vocab_size=256, published_params=None,
        **_small_kv(),
    )  # fmt: skip
    return ex.models.build(cfg, batch=2, seq=16)


def _small_kv() -> dict:
    cfg = ex.models.load("llama3-405b")
    out = {}
    for name, value in (("num_kv_heads", 2), ("ffn_size", 128), ("intermediate_size", 128)):
        if hasattr(cfg, name):
            out[name] = value
    return out


# --- geometry ----------------------------------------------------------------------------


def _unit_rects(lay):
    """What the eye sees as a unit: a box's rectangle, an op's marker (about 0.3 around)."""
    half_w = np.where(lay.is_box, lay.w / 2, 0.3)
    half_h = np.where(lay.is_box, lay.h / 2, 0.3)
    return lay.x - half_w, lay.x + half_w, lay.y - half_h, lay.y + half_h


def _polylines(lay):
    xs, ys = lay.edge_x, lay.edge_y
    cut = np.flatnonzero(np.isnan(xs))
    start = 0
    for end in cut:
        yield xs[start:end], ys[start:end]
        start = end + 1


def _crosses(x0, y0, x1, y1, rect, eps=1e-6) -> bool:
    """An axis-parallel segment meets the open rectangle (touching its side is fine)."""
    rx0, rx1, ry0, ry1 = rect
    if abs(y0 - y1) < eps:  # horizontal
        lo, hi = sorted((x0, x1))
        return ry0 + eps < y0 < ry1 - eps and lo < rx1 - eps and hi > rx0 + eps
    if abs(x0 - x1) < eps:  # vertical
        lo, hi = sorted((y0, y1))
        return rx0 + eps < x0 < rx1 - eps and lo < ry1 - eps and hi > ry0 + eps
    return False  # the short diagonal from a weight to the op under which it sits


@pytest.mark.parametrize("opened", [(), ("layers.1",), None])
def test_edges_do_not_cross_nodes(llama, opened):
    h = hierarchy(llama)
    expanded = None if opened is None else [p for p in h.groups if p.startswith(opened)] \
        if opened else ()  # fmt: skip
    lay = graph_layout(llama, expanded=expanded) if opened is not None else graph_layout(llama)
    rx0, rx1, ry0, ry1 = _unit_rects(lay)
    lines = list(_polylines(lay))
    assert len(lines) == len(lay.edges)
    bad = []
    for (i, j), (xs, ys) in zip(lay.edges, lines, strict=True):
        for k in range(len(xs) - 1):
            for u in range(len(lay.units)):
                if u in (i, j) or lay.kind[u] == "sat":
                    continue
                if _crosses(xs[k], ys[k], xs[k + 1], ys[k + 1], (rx0[u], rx1[u], ry0[u], ry1[u])):
                    bad.append((lay.units[i], lay.units[j], lay.units[u]))
    assert bad == []


def test_every_edge_ends_in_an_arrow_at_its_consumer(llama):
    lay = graph_layout(llama, expanded=("layers.0.attn",))
    tips = np.flatnonzero(lay.edge_tip)
    kinds = lay.kind
    arrowed = [(i, j) for i, j in lay.edges if kinds[i] != "sat"]
    assert len(tips) == len(arrowed) == len(lay.arrow_x)
    for (_, j), t in zip(arrowed, tips, strict=True):
        assert lay.edge_x[t] < lay.x[j] and math.isclose(lay.edge_y[t], lay.y[j])
    edges = graph_figure(llama, layout=lay).data[TRACE_EDGES]
    sizes = np.asarray(edges.marker.size)
    assert edges.marker.symbol == "triangle-right"
    assert (sizes > 0).sum() == len(tips)


def test_children_sit_inside_their_open_groups(llama):
    lay = graph_layout(llama, expanded=("layers.2.attn", "layers.2.mlp"))
    h = hierarchy(llama)
    frames = {f.path: f for f in lay.frames}
    assert set(frames) == {"layers.2", "layers.2.attn", "layers.2.mlp"}
    for u, x, y in zip(lay.units, lay.x, lay.y, strict=True):
        if u.startswith("scope:"):
            continue
        for p in (*h.ancestors(h.group_of(u)), h.group_of(u)):
            if p in frames:
                f = frames[p]
                assert f.x0 < x < f.x1 and f.y0 < y < f.y1, (u, p)
    outer, inner = frames["layers.2"], frames["layers.2.attn"]
    assert outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0


def test_repeated_layers_look_identical(llama):
    lay = graph_layout(llama, expanded=("layers.0.attn", "layers.0.mlp", "layers.3.attn",
                                        "layers.3.mlp"))  # fmt: skip
    f0 = next(f for f in lay.frames if f.path == "layers.0")
    f3 = next(f for f in lay.frames if f.path == "layers.3")
    assert math.isclose(f0.x1 - f0.x0, f3.x1 - f3.x0) and math.isclose(f0.y1 - f0.y0, f3.y1 - f3.y0)
    for u in lay.units:
        if u.startswith("layers.0."):
            v = "layers.3." + u[len("layers.0.") :]
            i, j = lay.index(u), lay.index(v)
            assert math.isclose(lay.x[i] - f0.x0, lay.x[j] - f3.x0)
            assert math.isclose(lay.y[i] - f0.y1, lay.y[j] - f3.y1)


# --- the view ----------------------------------------------------------------------------


def _complete(view) -> None:
    """Every trace's arrays agree in length; the nodes trace holds every drawn unit."""
    data = view.figure.data
    for t in data:
        if t.visible is not False:
            assert len(t.x) == len(t.y), t.name
    nodes = data[TRACE_NODES]
    n = len(view.layout_data.units)
    assert list(nodes.customdata) == list(view.layout_data.units)
    assert len(nodes.x) == len(nodes.text) == len(nodes.hovertext) == n
    assert len(np.atleast_1d(nodes.marker.color)) == n
    assert len(data[TRACE_GROUPS].x) == len(view.layout_data.frames) + 1  # + the model label


def test_open_and_close_any_group(llama):
    view = GraphView(llama, collapsed=True)
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.2" in units and len(units) < len(llama)
    view.click("scope:layers.2")  # one level: the layer's blocks, closed
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.2.attn" in units and "scope:layers.2.mlp" in units
    assert "layers.2.attn.q" not in units and "scope:layers.3" in units
    view.click("scope:layers.2.attn")
    view.click("scope:layers.2.mlp")  # the next level: their ops
    units = view.figure.data[TRACE_NODES].customdata
    assert "layers.2.attn.q" in units and "layers.2.mlp.down" in units
    _complete(view)
    view.click(OPEN_PREFIX + "layers.2.attn")  # close one block: a box again
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.2.attn" in units and "layers.2.mlp.down" in units
    view.click(OPEN_PREFIX + "layers.2")  # close the layer again
    units = view.figure.data[TRACE_NODES].customdata
    assert "scope:layers.2" in units and not any(u.startswith("layers.2.") for u in units)
    _complete(view)
    view.click("scope:layers.1")
    view.click(OPEN_PREFIX)  # the model's label closes every group
    assert view.expanded == ()
    with pytest.raises(ex.ExplorerError, match="layers.1.attn"):
        view.expand("layers.1.atn")


def test_a_click_on_the_model_box_opens_one_level():
    """Notebook 09's path: a traced model whose ops all sit in ``model.layers.N`` under one
    ``model`` box. A click opened every group inside (all the layers' ops in one strip)."""
    from explorer.ir import GraphBuilder

    b = GraphBuilder("nested")
    x = b.input("x", (2, 4))
    for i in range(6):
        for block in ("attn", "mlp"):
            with b.scope(f"model.layers.{i}.{block}"):
                x = b.op("gelu", b.op("add", x, x))
    view = GraphView(b.build([x]), collapsed=True)
    before = len(view.layout_data.units)
    box = next(u for u in view.layout_data.units if u.startswith("scope:"))
    view.click(box)
    units = list(view.layout_data.units)
    assert sum(u.startswith("scope:model.layers.") and u.count(".") == 2 for u in units) == 6
    assert not any(u.startswith("model.layers.") for u in units)  # no op yet
    assert len(units) == before - 1 + 6
    view.click("scope:model.layers.4")
    units = list(view.layout_data.units)
    assert {"scope:model.layers.4.attn", "scope:model.layers.4.mlp"} <= set(units)


def test_click_on_a_group_label_through_plotly(llama):
    from plotly.callbacks import Points

    view = GraphView(llama, collapsed=True)
    view.expand("layers.0", inside=True)
    groups = view.figure.data[TRACE_GROUPS]
    k = list(groups.customdata).index(OPEN_PREFIX + "layers.0.mlp")
    view._on_click(groups, Points([k], [0], [0], "groups", TRACE_GROUPS), None)
    assert "scope:layers.0.mlp" in view.layout_data.units


def test_search_opens_the_groups_around_a_match_and_selects_it(llama):
    view = GraphView(llama, collapsed=True)
    view.controls["search"].value = "layers.3.mlp.up_w"
    assert view.selected == "layers.3.mlp.up_w" == view.selection.node
    assert "layers.3.mlp.up_w" in view.layout_data.units
    assert {"layers.3", "layers.3.mlp"} <= set(view.expanded)
    assert len(view.figure.data[TRACE_SELECTED].x) == 1
    assert "1 of 1" in view.match_info.value
    # the view centres on the match at a zoom where the op names show
    lo, hi = view.figure.layout.xaxis.range
    i = view.layout_data.index("layers.3.mlp.up")
    assert lo < view.layout_data.x[i] < hi
    assert view.figure.data[TRACE_NODES].text[i] == "up"
    _complete(view)
    view.controls["search"].value = "LAYERS.1.ATTN"  # a group: it opens and is marked
    assert view.found == "layers.1.attn" and "layers.1.attn" in view.expanded
    sel = view.figure.data[TRACE_SELECTED]
    groups = view.figure.data[TRACE_GROUPS]
    k = list(groups.customdata).index(OPEN_PREFIX + "layers.1.attn")
    assert (sel.x[0], sel.y[0]) == (groups.x[k], groups.y[k])
    view.controls["search"].value = "norm"
    assert not view.controls["next"].disabled
    first = view.selected
    view.controls["next"].click()
    assert view.selected != first or view.found is not None


def test_search_without_match_shows_beside_the_box(llama):
    view = GraphView(llama, collapsed=True)
    before = view.expanded
    view.controls["search"].value = "zzz"
    assert view.search_error.visible and "zzz" in view.search_error.text
    assert view.expanded == before
    view.controls["search"].value = ""
    assert not view.search_error.visible


def test_labels_show_when_zoomed_in(llama):
    view = GraphView(llama, collapsed=False)
    lay = view.layout_data
    ops = [i for i, k in enumerate(lay.kind) if k == "op"]
    x0, x1, _, _ = lay.extent
    view.figure.layout.xaxis.range = [x0, x0 + 100 * (x1 - x0)]  # far out: no op names
    assert all(view.figure.data[TRACE_NODES].text[i] == "" for i in ops)
    view.figure.layout.xaxis.range = [x0, x0 + 20]  # close in: every op named
    text = view.figure.data[TRACE_NODES].text
    assert all(text[i] for i in ops)
    i = lay.index("layers.0.attn.q")
    assert text[i] == "q"  # the name inside its group


def test_closed_group_labels_always_there(llama):
    lay = graph_layout(llama, expanded=())
    boxes = [i for i, b in enumerate(lay.is_box) if b]
    text = unit_labels(llama, lay)
    h = hierarchy(llama)
    for i in boxes:  # the name, and the size where it fits (on one or two lines)
        path = lay.units[i][len("scope:") :]
        assert text[i].startswith(path), (text[i], path)
        size = str(h.group(path).num_nodes)
        assert text[i] in (path, f"{path} · {size}", f"{path}<br>{size} nodes"), text[i]
    assert any(str(h.group(lay.units[i][6:]).num_nodes) in text[i] for i in boxes)
    g405 = ex.models.build(ex.models.load("llama3-405b"), batch=1, seq=128)
    lay = graph_layout(g405, expanded=())
    text = unit_labels(g405, lay)
    assert sum(bool(text[i]) for i, b in enumerate(lay.is_box) if b) == 128  # 126 + embed, head
    # the model's top level wraps into rows: every box gets room for its name
    assert len(np.unique(np.round(lay.y[lay.is_box], 6))) > 1


# --- colourings and legends --------------------------------------------------------------


def test_every_colouring_has_a_legend(mlp, mlp_plan):
    view = GraphView(mlp, mlp_plan)
    legend = lambda: view.figure.layout.annotations[0].text  # noqa: E731
    assert "op group" in legend() and "Contraction" in legend()
    view.controls["color_by"].value = "strategy"
    names = {mlp_plan.assignment[n.name].name for n in mlp.ops}
    assert all(n in legend() for n in names)
    view.controls["color_by"].value = "cost"
    nodes = view.figure.to_dict()["data"][TRACE_NODES]
    assert nodes["marker"]["showscale"] is True and "log10" in legend()
    stages = {n.name: (0 if n.name.startswith("layers.0") else 1) for n in mlp.nodes}
    view.stages = stages
    view.controls["color_by"].value = "stage"
    assert "stage 0" in legend() and "stage 1" in legend()
    assert "1.0%" in legend()  # what a red ring means, with its threshold
    _complete(view)


def test_strategy_colours_are_distinct():
    counts = {f"s{i}": 20 - i for i in range(12)}
    colors = strategy_colors(counts)
    named = [c for c in colors.values() if c in STRATEGY_PALETTE]
    assert len(named) == len(set(named)) == len(STRATEGY_PALETTE)
    # the most used strategy keeps its colour when a rarer one appears
    assert strategy_colors({"b=dp": 3})["b=dp"] == strategy_colors({"b=dp": 3, "x": 1})["b=dp"]
    # no two palette hues are near-identical (RGB distance)
    rgb = np.array([[int(c[k : k + 2], 16) for k in (1, 3, 5)] for c in STRATEGY_PALETTE])
    d = np.sqrt(((rgb[:, None] - rgb[None]) ** 2).sum(-1))
    assert d[np.triu_indices(len(rgb), 1)].min() > 60


def test_changed_rings_only_for_material_cost_changes(mlp, mesh, mlp_plan):
    view = GraphView(mlp, mlp_plan)
    ops = tuple(n.name for n in mlp.ops)
    tiny = ex.search(mlp, mesh, params=mlp_plan.params.replace(
        beta_communication=mlp_plan.params.beta_communication * (1 + 1e-4)))  # fmt: skip
    view.selection.publish(plan=tiny, highlight=ops)
    assert view.changed == () and len(view.figure.data[TRACE_CHANGED].x) == 0
    big = ex.search(mlp, mesh, params=mlp_plan.params.replace(
        beta_communication=mlp_plan.params.beta_communication * 50))  # fmt: skip
    view.selection.publish(plan=big, highlight=ops)
    for n in ops:
        b, a = mlp_plan.node_cost(n).total, big.node_cost(n).total
        assert (n in view.changed) == (abs(a - b) >= CHANGE_THRESHOLD * abs(b) and a != b)
    assert len(view.figure.data[TRACE_CHANGED].x) == len(view.changed)
    view.change_threshold = 1e9  # nothing moves that much
    assert view.changed == () and len(view.figure.data[TRACE_CHANGED].x) == 0


def test_big_model_opens_collapsed_and_expands_one_layer():
    g = ex.models.build(ex.models.load("llama3-405b"), batch=1, seq=128)
    view = GraphView(g)
    assert view.controls["collapsed"].value is True
    assert len(view.figure.data[TRACE_NODES].x) == 130  # tokens, labels, embed, 126, head
    view.click("scope:layers.77")  # one level per click: the layer's blocks, then their ops
    boxes = [u for u in view.figure.data[TRACE_NODES].customdata
             if u.startswith("scope:layers.77.")]  # fmt: skip
    assert boxes and len(view.figure.data[TRACE_NODES].x) < 130 + 43
    for box in boxes:
        view.click(box)
    units = view.figure.data[TRACE_NODES].customdata
    # 43 per layer: with the rope ops, their cos/sin inputs and the repeated KV heads
    assert sum(u.startswith("layers.77.") for u in units) == 43
    _complete(view)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["", "a", "a.b", "a.0.x", "a.1.x", "c.2", "c.2.y.z"]),
                min_size=1, max_size=14), st.data())  # fmt: skip
def test_any_scopes_lay_out_every_node_once(scopes, data):
    """Interleaved scopes (a group used, left and used again) still give one unit per
    node or closed group, and every edge a polyline."""
    import contextlib

    from explorer.ir import GraphBuilder

    b = GraphBuilder("random")
    x = b.input("x", (2, 4))
    y = x
    for s in scopes:
        with b.scope(s) if s else contextlib.nullcontext():
            x = b.op("add", x, y) if data.draw(st.booleans()) else b.op("gelu", x)
    g = b.build([x])
    groups = [p for p in hierarchy(g).groups if p]
    opened = data.draw(st.lists(st.sampled_from(groups), unique=True)) if groups else []
    lay = graph_layout(g, expanded=opened)
    assert sorted(m for u in lay.units for m in lay.members[u]) == sorted(n.name for n in g.nodes)
    assert len(list(_polylines(lay))) == len(lay.edges)
    assert np.isfinite(lay.x).all() and np.isfinite(lay.y).all()


def test_opening_groups_keeps_the_height_and_the_responsive_width(llama):
    """A relayout of the height from Python ends plotly's autosized width in the page (the
    plot falls back to 700 px): the view keeps its first height."""
    view = GraphView(llama, collapsed=True)
    height = view.figure.layout.height
    view.click("scope:layers.0")
    view.click("scope:layers.3")
    assert view.figure.layout.height == height
    assert view.figure.layout.width is None and view.figure.layout.autosize is True
    assert view.figure._config.get("responsive") is True


def test_a_long_strategy_legend_wraps_into_lines_the_plot_holds():
    from widgets.figures.graph import LEGEND_LINE_CHARS, _wrap

    parts = [f"<span style='color:#123456'>■</span> a=node,b=gpu+{k} ({k})" for k in range(20)]
    lines = _wrap("<b>strategy (boxes: most ops)</b>:", parts)
    visible = [re.sub(r"<[^>]+>", "", line) for line in lines]
    assert len(lines) > 1 and all(len(v) <= LEGEND_LINE_CHARS for v in visible)
    assert "".join(lines).count("■") == 20  # every swatch kept


@pytest.mark.parametrize("px", [400, 700, 1000, 3000])
def test_op_labels_never_overlap_on_a_line(llama, px):
    """At any width, the labels shown under units of one line do not touch (they ran
    together: "tokens" over "tokens", "scores scale mask probs")."""
    from widgets.figures.graph import CHAR_PX

    lay = graph_layout(llama, expanded=[p for p in hierarchy(llama).groups if p])
    text = unit_labels(llama, lay, px=px)
    scale = px / (lay.extent[1] - lay.extent[0])
    shown = sorted((round(float(lay.y[i]), 3), float(lay.x[i]) * scale, len(t) * CHAR_PX)
                   for i, t in enumerate(text) if t and lay.kind[i] != "box")  # fmt: skip
    assert shown
    for (y0, c0, w0), (y1, c1, w1) in zip(shown, shown[1:], strict=False):
        if y0 == y1:
            assert c0 + w0 / 2 <= c1 - w1 / 2 + 1e-6, (px, c0, c1)
    if px >= 3000:  # wide enough: most ops are named
        assert sum(bool(t) for t in text) > len(lay.units) / 2


def test_opening_or_closing_a_group_keeps_every_other_unit_in_its_row_and_place():
    """The top level wraps into rows; the breaks used to follow the open groups' widths, so
    opening layers.0 of GPT-2 sent layers.10 from the end of the first row to the second
    (it jumped 58 units left and 4 down). Now every unit keeps its row and its place: those
    left of the opened group and in rows above stay put, those right of it in its row shift
    right together, those in rows below shift down together."""
    g = ex.models.build(ex.models.load("gpt2"), batch=8)
    view = GraphView(g)

    def where():
        lay = view.layout_data
        return {u: (float(x), float(y)) for u, x, y in zip(lay.units, lay.x, lay.y, strict=True)}

    for unit in ("scope:layers.0", "scope:layers.6", "scope:embed", "scope:layers.10"):
        before = where()
        if unit not in before:
            continue
        ux, uy = before[unit]
        view.click(unit)
        after = where()
        row = {u for u, (_, y) in before.items() if abs(y - uy) < 1e-9}
        right = {(round(after[u][0] - x, 6), round(after[u][1] - y, 6))
                 for u, (x, y) in before.items() if u in row and x > ux and u in after}  # fmt: skip
        assert len(right) <= 1 and all(dy == 0 for _, dy in right), (unit, right)
        for u, (x, y) in before.items():
            if u == unit or u not in after:
                continue
            dx, dy = after[u][0] - x, after[u][1] - y
            if y > uy + 1e-9 or (u in row and x < ux):  # rows above, or left in its row
                assert (dx, dy) == (0.0, 0.0), (unit, u, dx, dy)
            elif u not in row and y < uy - 1e-9:  # rows below: down, never sideways
                assert dx == 0.0 and dy <= 0.0, (unit, u, dx, dy)


def test_labels_follow_the_width_the_page_measured():
    """Labels were placed for a 1000 px plot whatever the page gave it: in the dashboard's
    tab (about 880 px) "tokens" ran into "tokens" and "scores scale mask probs" ran
    together. The width FitWidth measures now places them."""
    from widgets.figures.graph import CHAR_PX, PLOT_PX, label_px

    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=2, published_params=None),
                        batch=8, seq=128)  # fmt: skip
    view = GraphView(g, collapsed=False)
    wide = list(view.figure.data[TRACE_NODES].text)
    assert view.px == PLOT_PX
    view._fit_plot(0, 560)
    assert view.px == 560
    narrow = list(view.figure.data[TRACE_NODES].text)
    assert sum(map(bool, narrow)) < sum(map(bool, wide))  # fewer names fit
    lay = view.layout_data
    fl = view.figure.layout
    drawn = label_px(lay, 560, fl.height, fl.margin.t + fl.margin.b)  # the 1:1 aspect binds?
    assert drawn <= 560 - 20
    scale = drawn / (lay.extent[1] - lay.extent[0])
    shown = sorted((round(float(lay.y[i]), 3), float(lay.x[i]) * scale, len(t) * CHAR_PX)
                   for i, t in enumerate(narrow) if t and lay.kind[i] != "box")  # fmt: skip
    for (y0, c0, w0), (y1, c1, w1) in zip(shown, shown[1:], strict=False):
        if y0 == y1:
            assert c0 + w0 / 2 <= c1 - w1 / 2 + 1e-6, (c0, c1)
    view.controls["color_by"].value = "strategy" if view.plan else "group"
    view._redraw()  # a redraw keeps the measured width
    assert list(view.figure.data[TRACE_NODES].text) == narrow


def test_a_tall_graph_drawn_narrower_than_its_plot_gets_labels_for_the_width_drawn():
    """With the 1:1 aspect, the open layers of GPT-2 stacked in rows in an 860 px high plot
    are drawn narrower than the plot (the dashboard's tab in the browser: about 680 of
    972 px): labels placed for 972 px ran together ("tokens" over "tokens", "scoresscale
    maskprobs"). Eight layers: about 540 px."""
    from widgets.figures.graph import CHAR_PX, label_px

    g = ex.models.build(ex.models.load("gpt2").replace(num_layers=8, published_params=None),
                        batch=8, seq=128)  # fmt: skip
    view = GraphView(g, collapsed=False)
    view._fit_plot(0, 972)
    fl, lay = view.figure.layout, view.layout_data
    drawn = label_px(lay, 972, fl.height, fl.margin.t + fl.margin.b)
    assert drawn < 972 - 20 - 50  # the height binds: drawn well narrower than the plot
    scale = drawn / (lay.extent[1] - lay.extent[0])
    text = view.figure.data[TRACE_NODES].text
    shown = sorted((round(float(lay.y[i]), 3), float(lay.x[i]) * scale, len(t) * CHAR_PX)
                   for i, t in enumerate(text) if t and lay.kind[i] != "box")  # fmt: skip
    assert shown
    for (y0, c0, w0), (y1, c1, w1) in zip(shown, shown[1:], strict=False):
        if y0 == y1:
            assert c0 + w0 / 2 <= c1 - w1 / 2 + 1e-6, (c0, c1)


@pytest.mark.parametrize("model", ["gpt2", "gpt3-175b", "llama3-8b"])
def test_graph_plot_height_follows_the_content(model):
    """The plots kept ~100 px empty under the legend (the height was the graph's at a fixed
    150 px of margins, the extra split above and below the 1:1 graph): the plot area is now
    the graph's own height at the width it is drawn, before and after the page measures the
    width, and a plot held taller by its floor keeps the graph under the legend."""
    from widgets.figures.graph import graph_height

    g = ex.models.build(ex.models.load(model), batch=8, seq=512)
    view = GraphView(g)
    for px in (None, 880.0, 640.0):
        if px is not None:
            view._fit_plot(0, int(px))
        lay, (x0, x1, y0, y1) = view.figure.layout, view._layout.extent
        m = lay.margin
        plot_h = lay.height - m.t - m.b
        scale = min((view.px - 20) / (x1 - x0 + 1.0), 48.0)  # 1:1, the width binds
        need = (y1 - y0 + 1.5) * scale
        if 200 < lay.height < 860:
            assert abs(plot_h - need) <= 25, (px, plot_h, need)  # no empty band
        else:
            assert lay.height == graph_height(view._layout, view.px, m.t + m.b)
        assert lay.yaxis.constrain == "domain" and lay.yaxis.constraintoward == "top"
