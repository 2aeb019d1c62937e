"""``View``: what every widget of the package shares (selection link, error pane, progress).

Subclasses build their ``go.Figure`` with a pure builder from ``widgets.figures``, wrap it
once with ``go.FigureWidget`` (see RECIPES: traces added later are lost on page reload),
and afterwards only update it inside ``figure.batch_update()``.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw
import numpy as np
import traitlets as tl

from .errors import ErrorPane
from .figure_widget import FigureWidget
from .fit import FitWidth
from .progress import Progress
from .selection import Selection

__all__ = ["View", "replace_figure"]


class View(ipw.VBox):
    """Base class: ``.figure``, ``.controls``, ``.selection``, ``.errors``, ``.progress``."""

    # --- linking ----------------------------------------------------------------------------
    selection = tl.Instance(Selection)
    selection_traits: tuple[str, ...] = ("node",)
    name = "view"

    def __init__(self, selection: Selection | None = None, **kwargs: Any) -> None:
        self.errors = ErrorPane()
        self.progress = Progress()
        # Shown above the results while they no longer match the controls (a bad value was
        # entered): the last valid results stay visible, marked, until a valid re-plan.
        self.stale_banner = ipw.HTML(layout=ipw.Layout(display="none", width="auto"))
        self.stale_banner.add_class("explorer-stale")
        self.stale = False
        self.controls: dict[str, ipw.Widget] = {}
        self._updating = False  # re-entrancy guard: our own writes to the selection
        # while a view is out of sight (a dashboard tab not shown), the selection changes it
        # would redraw for are kept, the last per trait, and replayed when it is shown
        self._deferred: dict[str, dict[str, Any]] | None = None
        super().__init__(**kwargs)
        self.link(selection or Selection())

    def link(self, selection: Selection) -> None:
        """Follow ``selection`` (and stop following the previous one)."""
        old = self.selection if "selection" in self._trait_values else None
        if old is not None:
            old.unobserve(self._on_selection_guarded, names=list(self.selection_traits))
        self.selection = selection
        selection.observe(self._on_selection_guarded, names=list(self.selection_traits))
        self._on_linked(selection)

    def _on_linked(self, selection: Selection) -> None:
        """Hook: adopt what the selection already holds (a late-linked view catches up)."""

    def _on_selection_guarded(self, change: dict[str, Any]) -> None:
        if self._updating:
            return
        if self._deferred is not None:
            self._deferred.pop(change["name"], None)  # kept in the order they came
            self._deferred[change["name"]] = change
            return
        try:
            self.on_selection(change)
        except Exception as e:  # noqa: BLE001  (shown in the pane, see errors.py)
            self.errors.report(e, f"{self.name} on {change['name']}")

    def on_selection(self, change: dict[str, Any]) -> None:
        """Hook: react to a change of one of ``selection_traits``."""

    @property
    def deferred(self) -> tuple[str, ...]:
        """The selection traits changed while the view was out of sight, not yet drawn."""
        return tuple(self._deferred or ())

    def defer(self, hidden: bool) -> None:
        """``defer(True)``: the view is out of sight (a dashboard tab not shown); a change of
        the selection is kept, not drawn. ``defer(False)``: it is shown again; the changes
        kept are drawn now, the last value of each trait in the order they came (a re-plan
        redraws only the views on screen; the others catch up when opened)."""
        if hidden:
            if self._deferred is None:
                self._deferred = {}
            return
        pending, self._deferred = self._deferred, None
        for change in (pending or {}).values():
            self._on_selection_guarded(change)

    def _select(self, **picked: Any) -> None:
        """Write to the shared selection without reacting to our own write."""
        self._updating = True
        try:
            self.selection.select(source=self.name, **picked)
        finally:
            self._updating = False

    def mark_stale(self, reason: str) -> None:
        """Mark the results shown as stale (they are the last valid ones) and say why."""
        self.stale = True
        self.stale_banner.value = (
            "<div style='background:#FFF4E5;border-left:3px solid #E8A317;padding:2px 8px'>"
            f"<b>stale</b>: showing the last valid result; {_escape(reason)}</div>"
        )
        self.stale_banner.layout.display = "block"

    def clear_stale(self) -> None:
        self.stale = False
        self.stale_banner.value = ""
        self.stale_banner.layout.display = "none"

    def _layout_children(self, *rows: ipw.Widget) -> None:
        # FitWidth: the view's plots take the width the page gives them (see widgets/fit.py).
        # figure_text: every plot in words, hidden from sight, read by screen readers.
        self.figure_text = ipw.HTML(layout=ipw.Layout(width="auto", margin="0"))
        self.children = (
            self.stale_banner, *rows, self.figure_text, self.progress, self.errors,
            FitWidth(self._repair_plot, self._fit_plot),
        )  # fmt: skip
        self.describe_figures()

    def describe_figures(self) -> str:
        """Put every plot of the view in words into ``figure_text`` (visually hidden, for
        screen readers; refreshed after each update of a plot) and return the text."""
        from .figures.summary import figure_summary

        figures = self.figures_in_page_order()
        for f in figures:
            f.listen(self._describe_soon)
        text = " ".join(figure_summary(f) for f in figures)
        if hasattr(self, "figure_text"):
            self.figure_text.value = (
                f"<div role='note' aria-label='figure summary' style='{_SR_ONLY}'>"
                f"{_escape(text)}</div>"
            )  # fmt: skip
        return text

    def _describe_soon(self) -> None:
        self.describe_figures()

    def figures_in_page_order(self) -> list:
        """This view's FigureWidgets in the order the page lays their plots out (depth first
        through the children, nested views included)."""
        out, stack = [], [self]
        while stack:
            w = stack.pop()
            if isinstance(w, FigureWidget):
                out.append(w)
                continue
            stack.extend(reversed(getattr(w, "children", ()) or ()))
        return out

    def _fit_plot(self, index: int, width: int) -> None:
        figures = self.figures_in_page_order()
        if 0 <= index < len(figures):
            figures[index].fit_width(width)

    MAX_REPAIRS = 3  # per view: a page that keeps drawing empty plots is not looped on

    def _repair_plot(self, index: int) -> None:
        """The page drew plot ``index`` without data: re-send it, and put a fresh copy (a new
        model in the page) in its place in case the old model ignores update messages."""
        figures = self.figures_in_page_order()
        self._repairs = getattr(self, "_repairs", 0) + 1
        if not 0 <= index < len(figures) or self._repairs > self.MAX_REPAIRS:
            return
        old = figures[index]
        old.repair()
        self._swap_figure(old, old.fresh_copy())

    def _swap_figure(self, old: FigureWidget, new: FigureWidget) -> None:
        """Replace ``old`` by ``new`` in the children tree and in every attribute of the views
        in it that held ``old``."""
        stack: list = [self]
        while stack:
            w = stack.pop()
            kids = tuple(getattr(w, "children", ()) or ())
            if any(k is old for k in kids):
                w.children = tuple(new if k is old else k for k in kids)
            if isinstance(w, View):
                for name, value in list(vars(w).items()):
                    if value is old:
                        setattr(w, name, new)
            stack.extend(k for k in kids if k is not old)


#: visually hidden but read by screen readers (the usual "sr-only" rules)
_SR_ONLY = ("position:absolute;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;"
            "clip:rect(0,0,0,0);white-space:nowrap;border:0")  # fmt: skip


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _same(a, b) -> bool:
    """Equal plotly property values (numpy arrays compared element by element)."""
    try:
        eq = a == b
        if isinstance(eq, bool):
            return eq
        return np.shape(a) == np.shape(b) and bool(np.all(eq))
    except (ValueError, TypeError):  # nested dicts holding arrays: treat as changed
        return False


def replace_figure(target, source) -> None:
    """Copy every trace and the layout of ``source`` (a fresh ``go.Figure`` of the same
    builder) into ``target`` (the FigureWidget on screen) as one message."""
    with target.batch_update():
        for old, new in zip(target.data, source.data, strict=True):
            # Only changed properties are set: ``update(overwrite=True)`` first clears a
            # property, and when the new value equals the old one plotly sends just the
            # clearing (a front-end then drew the ideal-linearity line with y=null).
            was, now = old.to_plotly_json(), new.to_plotly_json()
            changes = {k: v for k, v in now.items() if k != "type" and not _same(was.get(k), v)}
            changes.update({k: None for k in was if k not in now and k != "type"})
            if changes:
                old.update(changes, overwrite=True)
        layout = source.layout.to_plotly_json()
        # The template is the same default on both sides and the costliest part to
        # validate (~70 ms): copying it again would dominate every update.
        layout.pop("template", None)
        # Arrays of annotations/shapes/images the new figure does not have are emptied: an
        # update only sets the keys it names, so old arrows or boxes stayed on screen.
        for key in ("annotations", "shapes", "images"):
            if key not in layout and len(getattr(target.layout, key, ()) or ()):
                layout[key] = []
        target.layout.update(layout, overwrite=True)
