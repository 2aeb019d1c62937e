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

from .figures.errors import ViewError

__all__ = ["ErrorPane", "FieldError", "field", "ViewError"]

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
        self.message = ipw.HTML(layout=ipw.Layout(width="auto", flex="1 1 auto"))
        # The traceback stays folded behind "details": the message line is what people read.
        self.output = ipw.Output(
            layout=ipw.Layout(display="none", max_height="12em", overflow="auto", width="100%")
        )
        self.details_button = ipw.ToggleButton(
            description="details", tooltip="show the traceback",
            layout=ipw.Layout(width="auto", min_width="5.5em"),
        )  # fmt: skip
        self.details_button.observe(self._toggle, names="value")
        self.dismiss = ipw.Button(
            description="dismiss", layout=ipw.Layout(width="auto", min_width="5.5em")
        )
        self.dismiss.on_click(lambda _: self.clear())
        self.errors: list[str] = []
        self.max_errors = max_errors
        super().__init__(
            [
                ipw.HBox(
                    [self.message, self.details_button, self.dismiss],
                    layout=ipw.Layout(flex_flow="row wrap", align_items="center"),
                ),
                self.output,
            ],
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
        self.details_button.value = False
        self.layout.display = "none"

    def _toggle(self, change: dict[str, Any]) -> None:
        self.output.layout.display = "block" if change["new"] else "none"

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


class FieldError(ipw.VBox):
    """The error of one control, shown right beside (under) it: one red line, a "details"
    toggle for the traceback, and "restore" to put back the control's last valid value.

    Use :func:`field` to build a control with its error line, and ``FieldError.run`` to apply
    a value: a failing apply shows its error here and leaves the last valid value recorded.

    >>> import ipywidgets as ipw
    >>> box = ipw.IntText(value=8, description="batch")
    >>> err = FieldError(box)
    >>> def apply(v):
    ...     if v <= 0:
    ...         raise ValueError(f"global batch {v} must be positive")
    >>> err.run(apply, 8), err.last_valid
    (True, 8)
    >>> box.value = -5; err.run(apply, -5), err.text
    (False, 'ValueError: global batch -5 must be positive')
    >>> err.restore(); box.value, err.text
    (8, '')
    """

    def __init__(self, control: ipw.ValueWidget) -> None:
        self.control = control
        self.last_valid: Any = getattr(control, "value", None)
        self.text = ""
        self.message = ipw.HTML(layout=ipw.Layout(width="auto", flex="1 1 auto"))
        self.details_button = ipw.ToggleButton(
            description="details", tooltip="show the traceback",
            layout=ipw.Layout(width="auto", min_width="5.5em"),
        )  # fmt: skip
        self.restore_button = ipw.Button(
            description="restore", tooltip="put back the last valid value",
            layout=ipw.Layout(width="auto", min_width="5.5em"),
        )  # fmt: skip
        self.output = ipw.Output(
            layout=ipw.Layout(display="none", max_height="10em", overflow="auto", width="100%")
        )
        self.details_button.observe(self._toggle, names="value")
        self.restore_button.on_click(lambda _: self.restore())
        super().__init__(
            [
                ipw.HBox(
                    [self.message, self.details_button, self.restore_button],
                    layout=ipw.Layout(flex_flow="row wrap", align_items="center"),
                ),
                self.output,
            ],
            layout=ipw.Layout(display="none", border_left="3px solid #E4002B",
                              padding="0 0 0 6px", margin="2px 0 4px 0"),
        )  # fmt: skip
        self.add_class("explorer-field-error")

    @property
    def visible(self) -> bool:
        return self.layout.display != "none"

    def run(self, apply: Callable[[Any], Any], value: Any) -> bool:
        """``apply(value)``; on success record it as the last valid value and clear the
        error, on an exception show it here. Returns whether it succeeded."""
        try:
            apply(value)
        except Exception as e:  # noqa: BLE001  (shown beside the control)
            self.show(e)
            return False
        self.last_valid = value
        self.clear()
        return True

    def show(self, exc: BaseException) -> None:
        self.text = f"{type(exc).__name__}: {exc}"
        # the line shows the message (the type is in the details); long lines wrap
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        self.message.value = f"<span style='color:#E4002B'>&#9888; {_escape(first)}</span>"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.output.outputs = ()
        self.output.append_stderr(tb)
        self.layout.display = "flex"

    def clear(self) -> None:
        self.text = ""
        self.message.value = ""
        self.output.outputs = ()
        self.details_button.value = False
        self.layout.display = "none"

    def restore(self) -> None:
        """Put the last valid value back into the control (its observers re-apply it)."""
        if self.last_valid is not None and hasattr(self.control, "value"):
            self.control.value = self.last_valid
        self.clear()

    def _toggle(self, change: dict[str, Any]) -> None:
        self.output.layout.display = "block" if change["new"] else "none"


def field(control: ipw.ValueWidget) -> tuple[ipw.VBox, FieldError]:
    """``(box, error)``: the control with its error line directly under it."""
    err = FieldError(control)
    return ipw.VBox([control, err], layout=ipw.Layout(width="auto")), err
