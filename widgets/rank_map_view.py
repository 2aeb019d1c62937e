"""``RankMapView``: which global ranks form each parallel group for a layout and a launcher's
rank order, drawn on the node x GPU grid, with the rank lists to pass to
``torch.distributed.new_group`` and the ``DeviceMesh`` arguments.

>>> view = RankMapView(dp=2, tp=4, pp=2)
>>> view.controls["axis"].value = "pp"; view.map.groups["pp"][0]
(0, 8)
"""

from __future__ import annotations

from html import escape

import ipywidgets as ipw

from explorer.teach import GROUP_AXES, LAUNCHERS, RankLayout, RankMap, rank_map

from .base import View, replace_figure
from .errors import field
from .figure_widget import FigureWidget
from .figures.rank_map import rank_map_caption, rank_map_figure
from .selection import Selection

__all__ = ["RankMapView"]

_SIZES = ("dp", "tp", "pp", "cp", "ep", "dp_replicate")
_WIDE = {"description_width": "initial"}
# JupyterLab sets <code> to white-space: pre; long rank lists must wrap, not scroll sideways
_CODE = "<code style='white-space:pre-wrap;overflow-wrap:anywhere'>"


class RankMapView(View):
    """The rank map of one layout: a menu per parallel size, the launcher's rank order, the
    GPUs per node, the group axis drawn and a rank whose groups are outlined.

    Controls: ``dp``, ``tp``, ``pp``, ``cp``, ``ep``, ``dp_replicate``, ``gpus_per_node``,
    ``launcher``, ``axis``, ``rank``. A layout the launcher refuses (ep not dividing dp x cp, a
    pipeline order Megatron-Core refuses) is reported beside the control that was changed, the
    last valid map stays drawn and is marked stale.
    """

    name = "rank map"

    def __init__(
        self, dp: int = 2, tp: int = 4, pp: int = 2, cp: int = 1, ep: int = 1,
        dp_replicate: int = 1, *,
        launcher: str = "megatron", gpus_per_node: int = 8, axis: str = "tp", rank: int = 0,
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=None)
        sizes = (dp, tp, pp, cp, ep, dp_replicate)
        self.map: RankMap = rank_map(RankLayout(*sizes), launcher, gpus_per_node)
        size = ipw.Layout(width="8.5em")
        c: dict[str, ipw.Widget] = {
            k: ipw.BoundedIntText(value=v, min=1, max=1024, description=k, style=_WIDE,
                                  layout=size)
            for k, v in zip(_SIZES[:-1], sizes[:-1], strict=True)
        }  # fmt: skip
        c["dp_replicate"] = ipw.BoundedIntText(
            value=dp_replicate, min=1, max=1024, description="dp replicas (HSDP)", style=_WIDE,
            layout=ipw.Layout(width="14em"),
        )  # fmt: skip
        c["gpus_per_node"] = ipw.BoundedIntText(value=gpus_per_node, min=1, max=64,
                                                description="GPUs per node", style=_WIDE,
                                                layout=ipw.Layout(width="12em"))  # fmt: skip
        c["launcher"] = ipw.Dropdown(
            options=[(f"{k} ({v})", k) for k, v in LAUNCHERS.items()], value=launcher,
            description="rank order", style=_WIDE, layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        c["axis"] = ipw.ToggleButtons(options=GROUP_AXES, value=axis, description="groups",
                                      style={"button_width": "auto", **_WIDE})  # fmt: skip
        c["rank"] = ipw.BoundedIntText(value=rank, min=0, max=self.map.world_size - 1,
                                       description="outline rank", style=_WIDE,
                                       layout=ipw.Layout(width="11em"))  # fmt: skip
        self.controls = c
        self.field_errors = {}
        boxes = {}
        for k in (*_SIZES, "gpus_per_node", "launcher"):
            boxes[k], self.field_errors[k] = field(c[k])
            c[k].observe(lambda ch, k=k: self._on_layout(k, ch["new"]), names="value")
        c["axis"].observe(lambda _: self._draw(), names="value")
        c["rank"].observe(lambda _: self._draw(), names="value")
        self.figure = FigureWidget(rank_map_figure(self.map, axis, rank))
        self.summary = ipw.HTML(layout=ipw.Layout(width="auto"))  # 100% + margins overflows
        self.summary.add_class("explorer-rank-map-summary")
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            ipw.HBox([boxes[k] for k in (*_SIZES, "gpus_per_node", "launcher")], layout=wrap),
            ipw.HBox([c["axis"], c["rank"]], layout=wrap),
            self.figure, self.summary,
        )  # fmt: skip
        self._draw()
        self.link(selection or Selection())

    def _on_layout(self, key: str, value: object) -> None:
        self.field_errors[key].run(lambda _v: self._remap(), value)
        if not self.field_errors[key].visible:
            for other in self.field_errors.values():  # one valid map clears the others too
                other.clear()

    def _remap(self) -> None:
        c = self.controls
        try:
            m = rank_map(RankLayout(**{k: c[k].value for k in _SIZES}), c["launcher"].value,
                         c["gpus_per_node"].value)  # fmt: skip
        except Exception as e:
            self.mark_stale(str(e))
            raise
        self.clear_stale()
        self.map = m
        c["rank"].max = m.world_size - 1
        self._draw()

    def _draw(self) -> None:
        axis, rank = self.controls["axis"].value, self.controls["rank"].value
        rank = min(rank, self.map.world_size - 1)
        replace_figure(self.figure, rank_map_figure(self.map, axis, rank))
        self.summary.value = _summary_html(self.map, axis, rank)


def _short(ranks: list[int]) -> str:
    if len(ranks) <= 12:
        return str(ranks)
    return "[" + ", ".join(map(str, ranks[:8])) + f", ..., {ranks[-1]}]"


def _summary_html(m: RankMap, axis: str, rank: int) -> str:
    alone = [a for a in GROUP_AXES if len(m.groups[a][0]) == 1]
    lines = "".join(f"<li>{_CODE}{escape(m.describe(a))}</code></li>" for a in GROUP_AXES
                    if a not in alone)  # fmt: skip
    if alone:
        lines += f"<li>size 1 (each rank alone): {escape(', '.join(alone))}</li>"
    shape, names, _ = m.device_mesh()
    groups = m.new_group_ranks(axis)
    listed = ", ".join(_short(g) for g in groups[:8]) + (", ..." if len(groups) > 8 else "")
    listed = f"[{listed}] ({len(groups)} lists of {len(groups[0])}; all: map.new_group_ranks)"
    return (
        f"<div aria-label='rank map summary'><p>{escape(rank_map_caption(m, axis, rank))}.</p>"
        f"<ul style='margin:2px 0'>{lines}</ul>"
        f"<p><b>new_group</b> rank lists for {escape(axis)} (every process makes every call): "
        f"{_CODE}{escape(str(listed))}</code></p>"
        f"<p><b>DeviceMesh</b>: {_CODE}init_device_mesh('cuda', {shape}, "
        f"mesh_dim_names={names})</code></p></div>"
    )
