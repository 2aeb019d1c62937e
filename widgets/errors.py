"""``ErrorPane``: errors raised inside widget callbacks land in a visible pane, never vanish.

ipywidgets swallows exceptions raised in ``observe`` callbacks into the kernel log, where a
notebook user never sees them. Every view wraps its callbacks with ``pane.guard``.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import ipywidgets as ipw

__all__ = ["ErrorPane"]

F = TypeVar("F", bound=Callable[..., Any])


class ErrorPane(ipw.VBox):
    """A red message line plus the traceback (an ``ipw.Output``), hidden until an error.

    >>> pane = ErrorPane()
    >>> @pane.guard
    ... def boom():
    ...     raise ValueError("bad value")
    >>> boom(); pane.last
    'ValueError: bad value'
    """

    def __init__(self, max_errors: int = 5) -> None:
        self.message = ipw.HTML()
        self.output = ipw.Output(layout=ipw.Layout(max_height="12em", overflow="auto"))
        self.dismiss = ipw.Button(description="dismiss", layout=ipw.Layout(width="6em"))
        self.dismiss.on_click(lambda _: self.clear())
        self.errors: list[str] = []
        self.max_errors = max_errors
        super().__init__(
            [ipw.HBox([self.message, self.dismiss]), self.output],
            layout=ipw.Layout(display="none", border="1px solid #E4002B", padding="4px"),
        )

    @property
    def last(self) -> str | None:
        """The last error as ``Type: message`` (None when there was none)."""
        return self.errors[-1] if self.errors else None

    def report(self, exc: BaseException, where: str = "") -> None:
        """Show ``exc`` (message on top, traceback below) and keep the last few."""
        text = f"{type(exc).__name__}: {exc}"
        self.errors = (self.errors + [text])[-self.max_errors :]
        prefix = f"{where}: " if where else ""
        self.message.value = f"<b style='color:#E4002B'>error</b> {_escape(prefix + text)}"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.output.outputs = ()
        self.output.append_stderr(tb)
        self.layout.display = "flex"

    def clear(self) -> None:
        self.errors = []
        self.message.value = ""
        self.output.outputs = ()
        self.layout.display = "none"

    def guard(self, fn: F) -> F:
        """Wrap a callback so that an exception is shown here instead of being lost."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001  (shown to the user, see class docstring)
                self.report(e, getattr(fn, "__name__", ""))
                return None

        return wrapper  # type: ignore[return-value]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
