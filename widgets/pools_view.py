"""``PoolsView``: a job over pools of different chips (`HeteroPlan`), drawn.

Two figures from ``widgets.figures.pools``: the pool map (each pool's chips and the stages
or replicas they run, one colour per pool) and the step's Gantt chart with every row on its
pool's colour and labelled with the pool. In data mode (each pool its own replicas) a
dropdown chooses whose pipeline the Gantt shows; in pipeline mode a click on a stage block
of the map (or ``select_stage``) outlines that stage's steps in the Gantt.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as ipw

from explorer.checks import is_int
from explorer.training import HeteroPlan

from .base import View, replace_figure
from .figure_widget import FigureWidget
from .figures.errors import ViewError
from .figures.pools import pools_map_figure, pools_pipeline_figure
from .selection import Selection

__all__ = ["PoolsView"]


class PoolsView(View):
    """The pools of ``plan`` and its simulated step.

    Controls: ``pool`` (data mode: the pool whose pipeline is drawn).

    >>> import explorer as ex
    >>> plan = ex.plan_hetero("gpt2", [ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8)], 64, 512,
    ...                       modes=("pipeline",))
    >>> view = PoolsView(plan)
    >>> view.select_stage(1); view.stage
    1
    """

    name = "pools"

    def __init__(self, plan: HeteroPlan, *, selection: Selection | None = None) -> None:
        if not isinstance(plan, HeteroPlan):
            raise ViewError(
                f"PoolsView needs a HeteroPlan (ex.plan_hetero or ex.plan_training(pools=...)), "
                f"got {type(plan).__name__}"
            )
        super().__init__(selection=selection)
        self.plan = plan
        self.stage: int | None = None
        self.pool = 0
        wide = {"description_width": "initial"}
        self.controls = {}
        if plan.mode == "data":
            self.controls["pool"] = ipw.Dropdown(
                options=[(str(p), i) for i, p in enumerate(plan.pools)], value=0,
                description="pipeline of pool", style=wide, layout=ipw.Layout(width="auto"),
            )  # fmt: skip
            self.controls["pool"].observe(self.errors.guard(self._on_pool), names="value")
        self.map = FigureWidget(pools_map_figure(plan))
        self.figure = FigureWidget(self._gantt())
        if plan.mode == "pipeline":
            for trace in self.map.data:
                trace.on_click(self.errors.guard(self._on_click))
        self.info = ipw.HTML(
            "<pre style='font-size:11px;white-space:pre-wrap'>" + escape(plan.report()) + "</pre>",
            layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        row = ipw.HBox(list(self.controls.values()), layout=ipw.Layout(flex_flow="row wrap"))
        self._layout_children(row, self.map, self.figure, self.info)

    def select_pool(self, pool: int) -> None:
        """Data mode: draw pool ``pool``'s own pipeline."""
        if self.plan.mode != "data":
            raise ViewError(
                "select_pool is for a data-parallel plan; this one is one pipeline across the "
                "pools (select_stage(g) outlines a stage)"
            )
        if not is_int(pool, minimum=0, maximum=len(self.plan.pools) - 1):
            raise ViewError(f"pool={pool!r}; expected an index 0..{len(self.plan.pools) - 1}")
        self.pool = pool
        self.controls["pool"].value = pool
        replace_figure(self.figure, self._gantt())

    def select_stage(self, stage: int | None) -> None:
        """Pipeline mode: outline stage ``stage``'s steps (None clears)."""
        n = self.plan.partition.stages if self.plan.partition is not None else 0
        if stage is not None and not is_int(stage, minimum=0, maximum=n - 1):
            raise ViewError(f"stage={stage!r}; expected a pipeline stage 0..{n - 1} or None")
        self.stage = stage
        replace_figure(self.figure, self._gantt())

    def _gantt(self):
        return pools_pipeline_figure(self.plan, pool=self.pool, selected_stage=self.stage)

    def _on_pool(self, change: dict[str, Any]) -> None:
        if change["new"] != self.pool:
            self.select_pool(change["new"])

    def _on_click(self, trace, points, state) -> None:
        if not points.point_inds:
            return
        label = trace.text[points.point_inds[0]]
        if label.startswith("s") and label[1:].split(":")[0].split("-")[0].isdigit():
            self.select_stage(int(label[1:].split(":")[0].split("-")[0]))
