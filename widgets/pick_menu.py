"""``PickMenu``: the keyboard's way to what a click on a plot does.

A click on a plot has no keyboard equivalent: a person who cannot use a mouse, or a screen
reader, never reaches it. Each view that takes clicks puts a ``PickMenu`` beside its plot: a
dropdown (reachable by Tab, changed with the arrow keys) listing what a click can pick. The
menu and the click share one path:

* choosing an entry calls ``on_pick(value)``, the function the click handler calls, so the
  two give the same state;
* after a click (or a redraw that changes what can be picked) the view calls
  ``show(value, options)``: the menu moves to the picked entry without calling back.

Views that can pick nothing put a first "no ..." entry whose value is ``NOTHING``.

>>> picked = []
>>> menu = PickMenu([("no stage", NOTHING), ("stage 0", 0), ("stage 1", 1)], picked.append,
...                 description="select")
>>> menu.value = 1  # what the keyboard does
>>> menu.show(0)  # after a click on stage 0: the menu follows, nothing is called
>>> picked, menu.value
([1], 0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as ipw

__all__ = ["PickMenu", "NOTHING"]

#: The value of a menu's "no ..." entry (ipywidgets shows a None value as a blank menu).
NOTHING = -1


class PickMenu(ipw.Dropdown):
    """A dropdown whose choice does what a click does (``on_pick``) and that follows the
    clicks (``show``).

    Args:
        options: ``(label, value)`` pairs: what a click can pick.
        on_pick: called with the chosen value when a person (or code) chooses an entry.
        value: the entry shown first (default: the first).
        description, width: the label before the menu and the menu's CSS width.
    """

    def __init__(
        self, options: Sequence[tuple[str, Any]], on_pick: Callable[[Any], None], *,
        value: Any = None, description: str = "", width: str = "auto",
    ) -> None:  # fmt: skip
        options = list(options)
        super().__init__(
            options=options, value=options[0][1] if value is None else value,
            description=description, style={"description_width": "initial"},
            layout=ipw.Layout(width=width),
        )  # fmt: skip
        self._quiet = False
        self._on_pick = on_pick
        self.observe(self._picked, names="value")

    def show(self, value: Any, options: Sequence[tuple[str, Any]] | None = None) -> None:
        """Offer ``options`` (when given and different) and show ``value`` (the first entry
        when ``value`` is not offered), without calling ``on_pick``."""
        self._quiet = True
        try:
            if options is not None and self.options != tuple(map(tuple, options)):
                self.options = list(options)
            values = [v for _, v in self.options]
            self.value = value if value in values else values[0]
        finally:
            self._quiet = False

    def _picked(self, change: dict[str, Any]) -> None:
        if not self._quiet:
            self._on_pick(change["new"])
