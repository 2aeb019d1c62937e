"""Figures of a plan diff (``ex.diff``): the difference ``b - a`` by term as horizontal
bars, largest first, and the two layouts of one op on the mesh side by side.

Pure builders: the core's ``PlanDiff`` / ``TrainingDiff`` in, a ``go.Figure`` out.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .mesh import mesh_figure
from .style import base_layout

__all__ = ["terms_figure", "layouts_figure", "MORE", "LESS"]

#: bars of a term that b spends more on, and less (Okabe-Ito vermillion and blue)
MORE = "#D55E00"
LESS = "#0072B2"


def _unit(d) -> tuple[str, float]:
    if getattr(d, "unit", "seconds") == "seconds":
        return "s", 1.0
    return "B", 1.0


def terms_figure(d) -> go.Figure:
    """``d.terms`` as horizontal bars (b - a per term, largest on top); the title gives the
    total. Trace: ``terms`` (``customdata`` = the term's name).

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    >>> fig = terms_figure(ex.diff(plan, "dp4 tp2"))
    >>> fig.data[0].name, len(fig.data[0].x) == len(ex.diff(plan, "dp4 tp2").terms)
    ('terms', True)
    """
    unit, _ = _unit(d)
    terms = [(k, v) for k, v in d.terms]
    names = [k for k, _ in terms][::-1]
    values = [v for _, v in terms][::-1]
    colors = [MORE if v > 0 else LESS for v in values]
    text = [f"{v:+.3g} {unit}" for v in values]
    fig = go.Figure(go.Bar(
        x=values, y=names, orientation="h", name="terms", marker={"color": colors},
        text=text, textposition="auto", customdata=names,
        hovertemplate="%{y}: %{x:.4g} " + unit + "<extra></extra>",
    ))  # fmt: skip
    height = max(220, 60 + 26 * len(names))
    title = f"b - a = {d.total:+.4g} {unit}, by term (red: b spends more; blue: less)"
    layout = base_layout(title, height=height, legend=False)
    layout["xaxis"] = {"title": {"text": f"b - a ({unit})"}, "zeroline": True,
                       "zerolinecolor": "#444", "automargin": True}  # fmt: skip
    layout["yaxis"] = {"automargin": True}
    fig.update_layout(layout)
    return fig


def layouts_figure(a, b, node: str) -> go.Figure:
    """The output layout of ``node`` in sharding plans ``a`` and ``b`` on their mesh, side
    by side (the mesh view's cells: each device's block, replicas share a colour).

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware="a100-80g")
    >>> a, b = ex.search(g, mesh, "ilp", top_k=2).top_k(2)
    >>> [t.name for t in layouts_figure(a, b, "layers.0.fc1").data]
    ['a', 'b']
    """
    ttype = a.graph.node(node).type
    sa, sb = a.assignment[node], b.assignment[node]
    fa = mesh_figure(a.mesh, sa.out_layout, ttype, tensor=node)
    fb = mesh_figure(b.mesh, sb.out_layout, ttype, tensor=node)
    titles = (f"a: {sa.name} -> {sa.out_layout.format(ttype)}",
              f"b: {sb.name} -> {sb.out_layout.format(ttype)}")  # fmt: skip
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.06)
    for col, (name, src) in enumerate((("a", fa), ("b", fb)), start=1):
        cells = src.data[0]
        cells.name = name
        cells.showscale = False
        fig.add_trace(cells, row=1, col=col)
    nrows = len(fa.data[0].z)
    layout = base_layout(f"%{node}: where each device's block of its output lies",
                         height=max(240, 140 + 60 * nrows), legend=False)  # fmt: skip
    layout.pop("xaxis", None)
    layout.pop("yaxis", None)
    fig.update_layout(layout)
    for ax in ("yaxis", "yaxis2"):
        fig.layout[ax].autorange = "reversed"
        fig.layout[ax].showticklabels = False
    for ax in ("xaxis", "xaxis2"):
        fig.layout[ax].showticklabels = False
    fig.update_annotations(font_size=11)
    return fig
