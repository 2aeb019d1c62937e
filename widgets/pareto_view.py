"""``ParetoView``: the Pareto front of a multi-objective `TrainingPlan`, and a click on a
point drives the linked training views.

The scatter (``widgets.figures.pareto``) puts two objectives on the axes and a third in
colour; the dominated configurations are faded behind the front. Choosing a point (a click,
or ``pick``) publishes on the shared selection a copy of the plan whose ``config`` and
``sim`` are that point's (the other fields are the original plan's), so a linked
PipelineView or MemoryView redraws for it, as it does when the dashboard re-plans. A plan
published by another view is adopted (its front drawn) when it carries a front, and marked on
this one when its config is a point of it.
"""

from __future__ import annotations

from dataclasses import replace
from html import escape
from typing import Any

import ipywidgets as ipw
import traitlets as tl

import explorer as ex
from explorer.checks import is_int
from explorer.training import OBJECTIVE_LABELS, ParallelConfig, ParetoFront, TrainingPlan

from .base import View, replace_figure
from .figure_widget import FigureWidget
from .figures.errors import ViewError
from .figures.pareto import AXIS_UNITS, TRACES, axis_title, dominated_by_text, pareto_figure
from .pick_menu import NOTHING, PickMenu
from .selection import Selection
from .training_view import simulate_cached

__all__ = ["ParetoView"]

_NONE = "(none)"


class ParetoView(View):
    """Scatter of ``plan.pareto``; picking a point publishes its configuration.

    Args:
        plan: a `TrainingPlan` made with ``plan_training(..., objectives=...)``.
        x, y, color: the objectives on the axes and in colour (default: the plan's first
            three objectives; ``color=None`` for none).

    Controls: ``x``, ``y``, ``color`` (dropdowns of the plan's objectives); ``point`` and
    ``dominated`` (the front's plans and the dominated ones, by step time: choosing one is a
    click on it, and a click moves them).

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
    ...                         objectives=("step_time", "memory", "communication"))
    >>> view = ParetoView(plan)
    >>> view.pick(1); view.selection.training.config == plan.pareto.points[1].config
    True
    """

    # --- what is drawn ------------------------------------------------------------------
    plan = tl.Instance(TrainingPlan)
    x = tl.Unicode("step_time")
    y = tl.Unicode("memory")
    color = tl.Unicode(None, allow_none=True)
    # --- what is picked -----------------------------------------------------------------
    picked = tl.Int(None, allow_none=True, help="index in plan.pareto.points")

    selection_traits = ("training",)
    name = "pareto"

    def __init__(
        self, plan: TrainingPlan, *, x: str | None = None, y: str | None = None,
        color: str | None = "", selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=None)
        front = _front_of(plan)
        objs = front.objectives
        self.plan = plan
        self.x = x or objs[0]
        self.y = y or objs[1]
        self.color = (objs[2] if len(objs) > 2 else None) if color == "" else color
        self._check_axes(self.x, self.y, self.color)
        wide = {"description_width": "initial"}
        box = ipw.Layout(width="auto")
        options = _options(front)
        self.controls = {
            "x": ipw.Dropdown(options=options, value=self.x, description="x axis",
                              style=wide, layout=box),
            "y": ipw.Dropdown(options=options, value=self.y, description="y axis",
                              style=wide, layout=box),
            "color": ipw.Dropdown(options=[(_NONE, _NONE), *options],
                                  value=self.color or _NONE, description="colour",
                                  style=wide, layout=box),
        }  # fmt: skip
        # the keyboard's way to a click on a point: the front's plans, and the dominated ones
        pick = self.errors.guard(self._on_point)
        self.controls["point"] = PickMenu(_point_options(front), pick, description="front plan",
                                          width="min(100%, 48em)")  # fmt: skip
        self.controls["dominated"] = PickMenu(_dominated_options(front), pick,
                                              description="dominated plan",
                                              width="min(100%, 60em)")  # fmt: skip
        for key in ("x", "y", "color"):
            self.controls[key].observe(self.errors.guard(self._on_axis), names="value")
        self.figure = FigureWidget(self._build())
        for name in ("dominated", "front", "dominators", "plan"):
            k = TRACES.index(name)
            self.figure.data[k].on_click(self.errors.guard(self._on_click))
        self.info = ipw.HTML(layout=ipw.Layout(width="auto"))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="center", width="100%")
        self._layout_children(
            ipw.HBox([self.controls[k] for k in ("x", "y", "color")], layout=wrap),
            ipw.HBox([self.controls[k] for k in ("point", "dominated")], layout=wrap),
            self.figure, self.info,
        )  # fmt: skip
        self._info()
        self._published: TrainingPlan | None = None
        self.link(selection or Selection())

    # --- public -------------------------------------------------------------------------
    @property
    def front(self) -> ParetoFront:
        return self.plan.pareto

    def set_axes(self, x: str | None = None, y: str | None = None, color: str | None = "") -> None:
        """Draw other objectives (``color=None``: no colour; ``""``: keep it)."""
        x, y = x or self.x, y or self.y
        color = self.color if color == "" else color
        self._check_axes(x, y, color)
        self.x, self.y, self.color = x, y, color
        self._sync_controls()
        self._draw()

    def pick(self, index: int) -> None:
        """Choose point ``index`` of ``plan.pareto.points`` (front first, then dominated):
        mark it, simulate it and publish it as the selection's ``training`` plan."""
        points = self.front.points
        if not is_int(index, minimum=0, maximum=len(points) - 1):
            raise ViewError(
                f"pick({index!r}): expected a point index 0..{len(points) - 1} of the front's "
                f"{len(points)} points (front first, then dominated)"
            )
        config = points[index].config
        p = self.plan
        cfg = p.model_config or ex.models.load(p.model)
        with self.progress.task(f"simulating {config}"):
            sim = p.sim if config == p.config else simulate_cached(
                cfg, config, p.hardware, p.global_batch, p.seq, p.sim.stack
            )  # fmt: skip
        self.picked = index
        self._sync_controls()
        self._draw()
        chosen = replace(p, config=config, sim=sim)
        self._published = chosen
        self._updating = True
        try:
            self.selection.publish(training=chosen)
        finally:
            self._updating = False

    def pick_config(self, config: ParallelConfig) -> None:
        """Choose the point of ``config`` (it must be a fitting configuration of the plan)."""
        index = self._index_of(config)
        if index is None:
            raise ViewError(
                f"{config} is not a fitting configuration of this plan's front; pick one of "
                f"its {len(self.front.points)} points (view.front.points)"
            )
        self.pick(index)

    # --- selection ----------------------------------------------------------------------
    def _on_linked(self, selection: Selection) -> None:
        t = selection.training
        if t is not None and t is not getattr(self, "_published", None):
            self._adopt(t)

    def on_selection(self, change: dict[str, Any]) -> None:
        t = change["new"]
        if t is None or t is self._published:
            return
        self._adopt(t)

    def _adopt(self, t: Any) -> None:
        """A plan published elsewhere: draw its front if it has one; mark its config."""
        pareto = getattr(t, "pareto", None)
        if isinstance(t, TrainingPlan) and pareto is not None and pareto is not self.front:
            self.plan = t  # a picked copy keeps a config and sim that match
            self.picked = None  # an index into the old front
            self._check_options()
        index = self._index_of(getattr(t, "config", None))
        self.picked = index if index is not None and index != self.front.chosen else None
        self._sync_controls()
        self._draw()

    # --- internals ----------------------------------------------------------------------
    def _index_of(self, config: Any) -> int | None:
        if config is None:
            return None
        return next((i for i, p in enumerate(self.front.points) if p.config == config), None)

    def _check_axes(self, x: str, y: str, color: str | None) -> None:
        objs = self.front.objectives
        for name, value in (("x", x), ("y", y), ("color", color)):
            if value is None and name == "color":
                continue
            if value not in objs:
                raise ViewError(
                    f"{name}={value!r} is not an objective of this front; choose among "
                    f"{', '.join(map(repr, objs))} (or re-plan with it in objectives=...)"
                )
        if x == y:
            raise ViewError(f"x and y are both {x!r}; choose two different objectives")

    def _check_options(self) -> None:
        objs = self.front.objectives
        x = self.x if self.x in objs else objs[0]
        y = self.y if self.y in objs and self.y != x else next(o for o in objs if o != x)
        color = self.color if self.color in objs else None
        self.x, self.y, self.color = x, y, color
        options = _options(self.front)
        self._bulk = True
        try:
            self.controls["x"].options = options
            self.controls["y"].options = options
            self.controls["color"].options = [(_NONE, _NONE), *options]
        finally:
            self._bulk = False
        self._sync_controls()

    def _sync_controls(self) -> None:
        self._bulk = True
        try:
            self.controls["x"].value = self.x
            self.controls["y"].value = self.y
            self.controls["color"].value = self.color or _NONE
        finally:
            self._bulk = False
        # the point menus follow the pick (a click, or a plan published elsewhere)
        f, picked = self.front, NOTHING if self.picked is None else self.picked
        self.controls["point"].show(picked, _point_options(f))
        self.controls["dominated"].show(picked, _dominated_options(f))

    def _on_axis(self, change: dict[str, Any]) -> None:
        if getattr(self, "_bulk", False):
            return
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        value = change["new"]
        x, y = self.x, self.y
        color = self.color
        if key == "color":
            color = None if value == _NONE else value
        elif key == "x":
            x, y = value, (x if value == y else y)  # swap when x takes y's objective
        else:
            x, y = (y if value == x else x), value
        self.set_axes(x, y, color)

    def _on_point(self, index: int) -> None:
        if index != NOTHING:
            self.pick(int(index))

    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            self.pick(int(trace.customdata[points.point_inds[0]]))

    def _build(self):
        return pareto_figure(self.front, self.x, self.y, self.color, selected=self.picked)

    def _draw(self) -> None:
        replace_figure(self.figure, self._build())
        self._info()

    def _info(self) -> None:
        f = self.front
        chosen = f.front[f.chosen] if f.chosen is not None else None
        lines = [
            f"<b>{len(f.front)}</b> of {len(f.points)} fitting configurations are on the "
            f"front over {', '.join(OBJECTIVE_LABELS[o] for o in f.objectives)}; "
            f"{f.n_dominated} are dominated (faded)."
        ]
        sims = sum(p.simulated for p in f.points)
        lines.append(
            f"Values: closed-form estimates, except {sims} simulated event by event (the "
            "plan's own ranking); a picked point is simulated for the linked views."
        )
        if f.ties:
            lines.append(f"{len(f.ties)} group(s) of front plans with identical values "
                         "(neither dominates; all kept).")  # fmt: skip
        if chosen is not None:
            lines.append(f"plan (star, the fastest): {escape(chosen.summary())}")
        else:
            lines.append(f"the plan's config {escape(str(self.plan.config))} is not on the "
                         "front (plan.pareto.locate(plan.config) says why)")  # fmt: skip
        if self.picked is not None:
            p = f.points[self.picked]
            where = (f"on the front, dominates {p.dominates}" if p.on_front
                     else dominated_by_text(len(p.dominated_by)))  # fmt: skip
            lines.append(f"selected (ring; linked views show it): {escape(p.summary())}; {where}")
            if not p.on_front:  # by whom: the fastest few of its dominators
                by = sorted(p.dominated_by, key=lambda j: f.front[j].step_time_s)
                more = f" and {len(by) - 3} more" if len(by) > 3 else ""
                names = "; ".join(escape(str(f.front[j].config)) for j in by[:3])
                lines.append(f"dominated (orange squares) by: {names}{more}")
        else:
            lines.append("click a point to show its configuration in the linked views")
        units = ", ".join(f"{axis_title(o)}" for o in f.objectives if o in AXIS_UNITS)
        lines.append(f"<span style='color:#666'>units: {escape(units)}</span>")
        self.info.value = "<br>".join(lines)


def _front_of(plan: Any) -> ParetoFront:
    pareto = getattr(plan, "pareto", None)
    if not isinstance(plan, TrainingPlan) or pareto is None:
        raise ViewError(
            f"ParetoView needs a TrainingPlan with a Pareto front, got {type(plan).__name__}"
            " without one; plan with plan_training(..., objectives=('step_time', 'memory', "
            "'communication'))"
        )
    if not pareto.front:
        raise ViewError("the plan's Pareto front is empty (no configuration fits)")
    if len(pareto.objectives) < 2:
        raise ViewError(
            f"the plan's front has one objective ({pareto.objectives[0]!r}): nothing to plot "
            "against; plan with two or more objectives, e.g. ('step_time', 'memory')"
        )
    return pareto


def _point_label(p) -> str:
    return f"{p.step_time_s:.3g} s, {p.memory_bytes / 2**30:.1f} GiB: {p.config}"


def _point_options(front: ParetoFront) -> list[tuple[str, int]]:
    """The front's points by step time, for the "front plan" menu (index in points; the
    first entry, ``NOTHING``, is no choice)."""
    order = sorted(range(len(front.front)), key=lambda i: front.front[i].step_time_s)
    return [("choose one (or click a point)", NOTHING)] + [
        (_point_label(front.front[i]), i) for i in order
    ]


def _dominated_options(front: ParetoFront) -> list[tuple[str, int]]:
    """The dominated points by step time, for the "dominated plan" menu (index in points:
    after the front's)."""
    n = len(front.front)
    order = sorted(range(len(front.dominated)), key=lambda j: front.dominated[j].step_time_s)
    return [(f"choose one of {len(order)} (or click a faded point)", NOTHING)] + [
        (f"{_point_label(front.dominated[j])} (dominated by "
         f"{len(front.dominated[j].dominated_by)})", n + j)
        for j in order
    ]  # fmt: skip


def _options(front: ParetoFront) -> list[tuple[str, str]]:
    return [(axis_title(o), o) for o in front.objectives]
