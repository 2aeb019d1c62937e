"""``FitWidth``: makes the plots of a view take the width the page gives them.

Plotly's FigureWidget draws its plot as soon as its element exists, before JupyterLab has
attached it to the page: the element has no width yet and plotly falls back to its default of
700 px, so on a laptop every figure filled about 65% of the notebook column until it was
updated. Plotly only measures again on a window ``resize`` event (with the
``responsive`` config our figures carry, see ``widgets.figure_widget``), and nothing sends one.

``FitWidth`` is an invisible anywidget placed in every view. In the page it looks at the
view's plots every 250 ms for 30 s after it is drawn (plots appear when plotly's large module
has loaded), every second after that (a relayout from Python, e.g. a new height, can make
plotly fall back to 700 px), and at once when the view's box changes size (a tab selected, the
file browser opened or closed). When an autosized plot's width differs from its element's, it
sends one ``resize`` event (coalesced to one per animation frame for the whole page) and
plotly re-measures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anywidget

__all__ = ["FitWidth", "figure_box"]

_ESM = """
function kickSoon() {
  if (window.__explorerFitPending) return;
  window.__explorerFitPending = true;
  requestAnimationFrame(() => {
    window.__explorerFitPending = false;
    window.__explorerFitKicks = (window.__explorerFitKicks || 0) + 1;
    window.dispatchEvent(new Event('resize'));
  });
}

// A drawn, visible, autosized plot whose width is not its element's width. A mismatch that
// three resize events did not cure (a plot with a minimum width, say) is left alone, so the
// page is never redrawn in a loop.
// When resize events do not cure it (plotly keeps a width it was given once), the view is
// asked to send that plot its width (twice at most per mismatch).
// The tally of tries starts again when a plot is shown again (a tab selected) and every 5 s,
// so a plot that once could not be fitted is fitted when its box changes later.
// A width the page once pinned (``fit_width`` from Python, or a relayout) stops plotly's
// resize handler for good: it skips plots whose layout has both a width and a height. A
// pinned width that is no longer the element's is dropped before the resize event is sent.
function misfit(box, model) {
  let found = false;
  const now = Date.now();
  Array.from(box.querySelectorAll('.js-plotly-plot')).forEach((gd, index) => {
    const full = gd._fullLayout;
    if (!full || !full.autosize) return;
    if (gd.offsetParent === null) { gd.__explorerFit = null; return; }
    const w = Math.round(gd.getBoundingClientRect().width);
    if (w > 0 && Math.abs(full.width - w) > 2) {
      const key = Math.round(full.width) + '/' + w;
      if (!gd.__explorerFit || now - gd.__explorerFit.since > 5000) {
        gd.__explorerFit = { since: now };
      }
      if (gd.layout && gd.layout.width && Math.abs(gd.layout.width - w) > 2) {
        delete gd.layout.width;
      }
      const n = (gd.__explorerFit[key] = (gd.__explorerFit[key] || 0) + 1);
      if (n <= 3) found = true;
      else if (n <= 5 && !gd.__explorerWidthAsked) {
        gd.__explorerWidthAsked = true;
        setTimeout(() => { gd.__explorerWidthAsked = false; }, 1000);
        model.send({ event: 'width', index, width: w });
      }
    }
  });
  return found;
}

// Plots drawn from an empty model (no trace, no title) although their figure has data: on a
// first Run All a figure's state sometimes never reaches the page before it is drawn (seen
// on about one run in three of notebook 01). Each is reported once, by its index among the
// view's plots, after it looked empty on two checks in a row; Python re-sends the figure.
function reportEmpty(box, model) {
  const plots = Array.from(box.querySelectorAll('.js-plotly-plot'));
  plots.forEach((gd, index) => {
    if (!gd._fullLayout || gd.offsetParent === null || gd.__explorerRepaired) return;
    const empty = (gd.data || []).length === 0;
    if (!empty) { gd.__explorerEmpty = 0; return; }
    gd.__explorerEmpty = (gd.__explorerEmpty || 0) + 1;
    if (gd.__explorerEmpty >= 2) {
      gd.__explorerRepaired = true;
      window.__explorerRepairs = (window.__explorerRepairs || 0) + 1;
      model.send({ event: 'empty', index });
    }
  });
}

export default {
  render({ model, el }) {
    el.style.height = '0px';
    el.style.overflow = 'hidden';
    let box = null;
    const check = () => {
      if (!box) return;
      reportEmpty(box, model);
      if (misfit(box, model)) kickSoon();
    };
    const ro = new ResizeObserver(() => requestAnimationFrame(check));
    // Plots draw when their (large) module has loaded, possibly after this widget, and a
    // relayout from Python (a new height) can make plotly fall back to its 700 px default:
    // look every 250 ms for the first 30 s, then every second (a cheap check).
    let ticks = 0;
    let timer = null;
    const tick = () => {
      if (!box) {
        box = el.closest('.widget-vbox, .widget-box, .jp-OutputArea-output');
        if (box) ro.observe(box);
      }
      check();
      ticks += 1;
      timer = setTimeout(tick, ticks < 120 ? 250 : 1000);
    };
    tick();
    return () => { clearTimeout(timer); ro.disconnect(); };
  },
};
"""


class FitWidth(anywidget.AnyWidget):
    """Invisible: re-fits the responsive plots of the enclosing view to its width, and
    asks ``on_empty(index)`` to re-send a plot the page drew without its data."""

    _esm = _ESM

    def __init__(
        self, on_empty: Callable[[int], None] | None = None,
        on_width: Callable[[int, int], None] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.on_empty, self.on_width = on_empty, on_width
        self.on_msg(self._on_msg)

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        index = int(content.get("index", -1))
        if content.get("event") == "empty" and self.on_empty:
            self.on_empty(index)
        elif content.get("event") == "width" and self.on_width:
            self.on_width(index, int(content.get("width", 0)))


def figure_box(fig: Any):
    """A ``go.Figure`` shown as a live plot that fills the notebook column (a FigureWidget
    with its state kept current, plus a FitWidth): what a notebook cell returns to show a
    one-off figure.

    >>> import plotly.graph_objects as go
    >>> box = figure_box(go.Figure(go.Bar(x=[1, 2], y=[3, 4])))
    >>> type(box.children[0]).__name__, len(box.children)
    ('FigureWidget', 2)
    """
    import ipywidgets as ipw

    from .figure_widget import FigureWidget

    widget = FigureWidget(fig)
    box = ipw.VBox([widget], layout=ipw.Layout(width="100%"))
    box.children = (
        widget,
        FitWidth(
            lambda index: widget.repair() if index == 0 else None,
            lambda index, width: widget.fit_width(width) if index == 0 else None,
        ),
    )
    return box
