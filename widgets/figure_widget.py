"""``FigureWidget``: plotly's FigureWidget whose front-end state is complete after every update.

Plotly 7's FigureWidget is an anywidget: the page imports its 4.9 MB JavaScript module per
widget before the module's ``initialize()`` registers the handlers for plotly's update
messages (``_py2js_update``, ``_py2js_restyle``, ...). An update that reaches the page before
that point changes nothing: the figure is then drawn from the state it was created with. On a
first Run All, with several figures created and updated in quick succession, this drew most of
notebook 01's figures as empty axes until the page was reloaded.

The fix keeps plotly's messages (they redraw a figure already on screen) and, after each one,
sets the synced ``_widget_data`` / ``_widget_layout`` traits to a copy of the figure (plotly
itself does that only when the figure is displayed). The page's model stores that
state without redrawing (plotly's ``do_data`` / ``do_layout`` are no-ops), so whenever the
figure's view renders — now, after the module loads, or after a reload — it draws the current
data.

>>> import plotly.graph_objects as go
>>> fw = FigureWidget(go.Figure(go.Scatter(x=[], y=[])))
>>> with fw.batch_update():
...     fw.data[0].x, fw.data[0].y = [1, 2], [3, 4]
>>> fw.state_syncs, list(fw._widget_data[0]["x"])
(1, [1, 2])
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import plotly.graph_objects as go

__all__ = ["FigureWidget"]


class FigureWidget(go.FigureWidget):
    """``go.FigureWidget`` that re-sends its whole state after each update message."""

    state_syncs = 0  # full-state sends after updates (tests read it); plotly only lets
    # attributes it knows be set, so this one is declared on the class
    _listeners: tuple = ()  # called after each update (the view's text summary follows)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Plotly re-measures a responsive plot on a window resize: widgets.fit.FitWidth sends
        # one when the view gets its width, so the plot fills the column.
        self._config = {**(self._config or {}), "responsive": True}

    def _sync_state(self) -> None:
        # As plotly's own _repr_mimebundle_ does at display time: the synced traits hold a
        # copy of the figure (plotly keeps them at their construction value otherwise).
        self._widget_layout = deepcopy(self._layout_obj._props)
        self._widget_data = deepcopy(self._data)
        self.state_syncs += 1
        for fn in self._listeners:
            fn()

    def listen(self, fn) -> None:
        """Call ``fn()`` after every update sent to the page (once per ``fn``)."""
        if fn not in self._listeners:
            self._listeners = (*self._listeners, fn)

    # Every Python -> page update of plotly goes through one of these.
    def _send_relayout_msg(self, *args: Any, **kwargs: Any) -> None:
        super()._send_relayout_msg(*args, **kwargs)
        self._sync_state()

    def _send_restyle_msg(self, *args: Any, **kwargs: Any) -> None:
        super()._send_restyle_msg(*args, **kwargs)
        self._sync_state()

    def _send_update_msg(self, *args: Any, **kwargs: Any) -> None:
        super()._send_update_msg(*args, **kwargs)
        self._sync_state()

    def _send_addTraces_msg(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        super()._send_addTraces_msg(*args, **kwargs)
        self._sync_state()

    def _send_deleteTraces_msg(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        super()._send_deleteTraces_msg(*args, **kwargs)
        self._sync_state()

    def _send_moveTraces_msg(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        super()._send_moveTraces_msg(*args, **kwargs)
        self._sync_state()

    repairs = 0  # times the page drew this figure without its data and got it re-sent

    def repair(self) -> None:
        """Re-send every trace and the layout to a page that drew this figure empty."""
        self.repairs += 1
        self._send_addTraces_msg(deepcopy(self._data))
        self._send_relayout_msg(deepcopy(self._layout))

    def fit_width(self, width: int) -> None:
        """Tell the page to draw this figure ``width`` px wide (the page measured it; the
        figure's own layout keeps no width, so the next page measures again)."""
        if width > 0:
            self._send_relayout_msg({"width": int(width)})

    def fresh_copy(self) -> FigureWidget:
        """A new FigureWidget (a new model in the page) holding this figure, with the same
        click/hover/select callbacks on its traces: the last resort for a page that drew this
        one empty and ignores its update messages."""
        new = FigureWidget(go.Figure(self.to_dict()))
        for old_trace, new_trace in zip(self.data, new.data, strict=True):
            for name in _CALLBACKS:
                setattr(new_trace, name, list(getattr(old_trace, name, [])))
        return new


_CALLBACKS = ("_click_callbacks", "_hover_callbacks", "_unhover_callbacks",
              "_select_callbacks", "_deselect_callbacks")  # fmt: skip
