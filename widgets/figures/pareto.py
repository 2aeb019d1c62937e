"""``pareto_figure``: a `ParetoFront` as a scatter of two objectives, a third as colour.

A fixed set of traces (a view updates them and never adds one; added traces are lost when
a page reconnects), addressed by ``TRACES``:

- ``front line``: with exactly two objectives, both on the axes, the front as a staircase
  (every point above and right of it is dominated); empty otherwise (with three, the front
  projected on two axes is no staircase);
- ``dominated``: every fitting configuration some front point dominates, faded grey;
- ``front``: the non-dominated ones, coloured by the colour objective (with its colour bar)
  or blue when there is none;
- ``dominators``: when the picked point is dominated, the front points that dominate it
  (orange squares: "by whom");
- ``plan``: the plan's config (the simulated fastest), a black star outline;
- ``selected``: the point picked in the view, a red ring.

Each marker's ``customdata`` is its index in ``ParetoFront.points`` (front first, then
dominated), so a click maps back to the core's point. Values are drawn in human units:
seconds, GiB of memory per device, GB sent per device per step, US dollars per step.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.training import OBJECTIVE_LABELS, ParetoFront, ParetoPoint

from .errors import ViewError
from .style import base_layout

__all__ = [
    "pareto_figure", "axis_title", "dominated_by_text", "scaled", "hover_text", "TRACES",
    "AXIS_UNITS",
]  # fmt: skip

TRACES = ("front line", "dominated", "front", "dominators", "plan", "selected")
# objective -> (unit shown, divisor from the core's unit)
AXIS_UNITS = {
    "step_time": ("s", 1.0), "memory": ("GiB", float(2**30)),
    "communication": ("GB", 1e9), "cost": ("USD", 1.0),
}  # fmt: skip
FADED, FRONT, PLAN, SELECTED = "#B0B4BA", "#1F77B4", "#111111", "#D62728"
DOMINATORS, LINE = "#FF7F0E", "#7A8CA3"
STAR_SIZE, DOMINATOR_SIZE = 18, 28  # px: the square frames the star with room to spare


def dominated_by_text(n: int) -> str:
    """The words for a point dominated by ``n`` front plans (one: "1 front plan")."""
    return f"dominated by {n} front plan{'' if n == 1 else 's'}"


def axis_title(objective: str) -> str:
    """``"step time (s)"``, ``"peak memory per device (GiB)"``, ..."""
    _check(objective)
    return f"{OBJECTIVE_LABELS[objective]} ({AXIS_UNITS[objective][0]})"


def scaled(point: ParetoPoint, objective: str) -> float:
    """The value of ``objective`` in the unit the axes show."""
    return point.value(objective) / AXIS_UNITS[objective][1]


def _check(objective: str) -> None:
    if objective not in AXIS_UNITS:
        raise ViewError(
            f"objective {objective!r}; expected one of {', '.join(map(repr, AXIS_UNITS))}"
        )


def hover_text(front: ParetoFront, index: int) -> str:
    """The config and every value of point ``index`` of ``front.points``, with units."""
    p = front.points[index]
    lines = [
        f"<b>{p.config}</b>",
        f"step {p.step_time_s:.4g} s, memory {p.memory_bytes / 2**30:.2f} GiB/device",
        f"sends {p.comm_bytes / 1e9:.4g} GB/device/step"
        + (f", ${p.cost_usd:.4g}/step" if p.cost_usd is not None else ""),
        "simulated event by event" if p.simulated else "closed-form estimate",
    ]
    if p.on_front:
        lines.append(f"on the front; dominates {p.dominates}")
    else:
        lines.append(dominated_by_text(len(p.dominated_by)))
    return "<br>".join(lines)


def pareto_figure(
    front: ParetoFront | None, x: str = "step_time", y: str = "memory",
    color: str | None = "communication", plan_index: int | None = None,
    selected: int | None = None, title: str = "",
) -> go.Figure:  # fmt: skip
    """The scatter of ``front`` (None: empty axes, every trace in place).

    Args:
        x, y: the objectives on the axes; ``color``: the one shown as colour (None: none).
        plan_index, selected: indices in ``front.points`` of the plan's config and of the
            picked point (None: not drawn). ``plan_index`` defaults to ``front.chosen``.

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
    ...                         objectives=("step_time", "memory", "communication"))
    >>> fig = pareto_figure(plan.pareto)
    >>> len(fig.data) == len(TRACES), fig.layout.xaxis.title.text
    (True, 'step time (s)')
    """
    for o in (x, y) + ((color,) if color is not None else ()):
        _check(o)
    if x == y:
        raise ViewError(f"x and y are both {x!r}; choose two different objectives")
    n_front = len(front.front) if front else 0
    points = front.points if front else ()
    if plan_index is None and front is not None and front.chosen is not None:
        plan_index = front.chosen

    def column(idx, objective):
        return [scaled(points[i], objective) for i in idx]

    front_idx, dom_idx = list(range(n_front)), list(range(n_front, len(points)))
    hover = [hover_text(front, i) for i in range(len(points))] if front else []
    template = "%{hovertext}<extra></extra>"
    fig = go.Figure()
    stair = []
    if front is not None and set(front.objectives) == {x, y}:
        stair = sorted(front_idx, key=lambda i: (scaled(points[i], x), scaled(points[i], y)))
    fig.add_trace(go.Scatter(
        x=column(stair, x), y=column(stair, y), mode="lines", name="front (staircase)",
        line={"color": LINE, "width": 1.5, "shape": "hv"}, hoverinfo="skip",
        showlegend=bool(stair),
    ))  # fmt: skip
    fig.add_trace(go.Scatter(
        x=column(dom_idx, x), y=column(dom_idx, y), customdata=dom_idx,
        hovertext=[hover[i] for i in dom_idx], hovertemplate=template, mode="markers",
        name=f"dominated ({len(dom_idx)})",
        marker={"color": FADED, "size": 6, "opacity": 0.45, "line": {"width": 0}},
    ))  # fmt: skip
    marker: dict = {"size": 10, "line": {"width": 1, "color": "white"}}
    if color is not None and front_idx:
        marker.update(
            color=column(front_idx, color), colorscale="Viridis", showscale=True,
            colorbar={"title": {"text": axis_title(color).replace(" (", "<br>("),
                                "side": "right"}, "thickness": 14, "len": 0.9},
        )  # fmt: skip
    else:
        marker["color"] = FRONT
    fig.add_trace(go.Scatter(
        x=column(front_idx, x), y=column(front_idx, y), customdata=front_idx,
        hovertext=[hover[i] for i in front_idx], hovertemplate=template, mode="markers",
        name=f"Pareto front ({n_front})", marker=marker,
    ))  # fmt: skip
    picked = points[selected] if selected is not None and 0 <= selected < len(points) else None
    by = list(picked.dominated_by) if picked is not None else []
    fig.add_trace(go.Scatter(
        x=column(by, x), y=column(by, y), customdata=by, mode="markers",
        name=f"dominate the selected ({len(by)})", showlegend=bool(by),
        hovertext=[hover[i] for i in by], hovertemplate=template,
        # drawn around the other marks: a dominator is often the plan itself, whose star
        # (drawn above) hid a square of the star's size
        marker={"symbol": "square-open", "size": DOMINATOR_SIZE, "color": DOMINATORS,
                "line": {"width": 2, "color": DOMINATORS}},
    ))  # fmt: skip
    for name, idx, style in (
        ("plan (fastest)", plan_index, {"symbol": "star-open", "size": STAR_SIZE,
                                        "color": PLAN, "line": {"width": 2, "color": PLAN}}),
        ("selected", selected, {"symbol": "circle-open", "size": 20, "color": SELECTED,
                                "line": {"width": 3, "color": SELECTED}}),
    ):  # fmt: skip
        one = [idx] if idx is not None and 0 <= idx < len(points) else []
        fig.add_trace(go.Scatter(
            x=column(one, x), y=column(one, y), customdata=one, mode="markers", name=name,
            hovertext=[hover[i] for i in one], hovertemplate=template, marker=style,
        ))  # fmt: skip
    if not title and front is not None:
        title = (
            f"Pareto front: {n_front} of {len(points)} fitting plans ({front.n_dominated} "
            f"dominated, faded) over {len(front.objectives)} objectives"
        )
    fig.update_layout(base_layout(title or "Pareto front", height=460))
    fig.update_layout(
        hovermode="closest", plot_bgcolor="white", clickmode="event",
        xaxis={"title": {"text": axis_title(x)}, "gridcolor": "#EEE", "zeroline": False},
        yaxis={"title": {"text": axis_title(y)}, "gridcolor": "#EEE", "zeroline": False},
        margin={"r": 24},
    )  # fmt: skip
    return fig
